"""Queries by text at J >= 0.8 side by side (issue 36's goal for the 0.8 preset:
queries faster than datasketch's, at <= 1/3 of MinHashLSH's bytes a document): a
store opened with ``min_similarity=0.8`` (k = 5, 16 bands a width, verifying from
0.75), datasketch ``MinHashLSH(0.8, 128)`` and rensa's ``RMinHashLSH`` (128
permutations, 16 bands), on a real-text set of ``benchmarks/suite/realtext_corpora.py``.

Each system indexes nine tenths of the set (every tenth document is held out, in
order) and is then asked, for every held-out document, which indexed documents are
near-duplicates of it, one query at a time:

- **end to end**: from the text. simstore's ``Store.query(text=...)`` tokenises,
  fingerprints, sketches, looks up and verifies. The peers get simstore's tokens
  (as in ``dedup_peers.py``: tokenising is timed as theirs), build the MinHash of the
  word 3-shingles, query, and keep the candidates whose MinHashes estimate J >= 0.8.
- **look-up only**: from a fingerprint and sketch (simstore, a one-query
  ``query_many``) or a MinHash (peers) made beforehand.

Recall: of the held-out documents' true neighbours in the index (exact Jaccard of word
3-shingles, ``realtext_truth``) at 0.8 <= J < 1, those found; a reported match with
J < 0.5 is false. After an untimed first pass (the answers), ``--rounds`` timed
passes of each system alternate, the order reversed every round, all in one process;
reported: the median (min-max) over the passes of each pass's p50 and p99. Bytes a
document: simstore's live bytes in the file (``stats()``: records, tables, band table
and the 128-byte sketch); a peer's, the Python memory its index and MinHashes of 2,000
of the documents hold once built (``tracemalloc``: Python's allocations; rensa's Rust
allocations are not seen, so its figure is a floor).

    SIMSTORE_SEGMENTER=rjieba python benchmarks/experiments/preset_queries.py --set English

(``SIMSTORE_SEGMENTER=rjieba`` cuts Chinese with rjieba, for simstore and for the peers,
who take simstore's tokens.) Measured on the 2-core Xeon VM (KVM, CPython 3.11.7, numpy
2.4.6), 2026-11-29, 3 alternating passes (``benchmarks/results/preset_queries.md``):
recall 99.7 % / 94.1 % (English / Chinese) against datasketch's 67.3 % / 80.4 % and
rensa's 92.0 % / 94.1 %; a median query by text 545 / 471 µs against datasketch's 431 / 430
(1.26x / 1.10x; 1.16-1.23x in two earlier runs) and rensa's 61, a lower p99 than
datasketch's; the look-up alone 197 / 251 µs against 14 / 22 and 2; 291-323 bytes a
document against datasketch's 4-5 KB.

Needs datasketch, rensa and scipy (the bench extra, ``pip install rensa``) and the
cached corpora.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "suite"))

import realtext_truth  # noqa: E402
from _common import command_line, load_average, machine  # noqa: E402
from dedup_peers import PERMUTATIONS, SETS, THRESHOLD, texts_of  # noqa: E402

import simstore  # noqa: E402

HELD_OUT = 10  # every tenth document is a query


def truth_of(texts: list[str], queries: np.ndarray, indexed: np.ndarray) -> dict[int, dict[int, float]]:
    """For each query (a text's number), its indexed neighbours at J >= 0.5 and their J."""
    tokens = realtext_truth.tokens_of(texts)
    pairs = realtext_truth.similar_pairs(realtext_truth.shingle_matrix(tokens), 0.5)
    is_query = np.zeros(len(texts), dtype=bool)
    is_query[queries] = True
    is_indexed = np.zeros(len(texts), dtype=bool)
    is_indexed[indexed] = True
    out: dict[int, dict[int, float]] = {int(q): {} for q in queries}
    for a, b, j in zip(pairs.first.tolist(), pairs.second.tolist(), pairs.jaccard.tolist(), strict=True):
        if is_query[a] and is_indexed[b]:
            out[a][b] = j
        if is_query[b] and is_indexed[a]:
            out[b][a] = j
    return out


def score(found: dict[int, list[int]], truth: dict[int, dict[int, float]]) -> tuple[float, int, int]:
    """Recall at 0.8 <= J < 1, false matches (J < 0.5), matches reported."""
    wanted = hit = false = reported = 0
    for query, matches in found.items():
        near = truth[query]
        for doc, j in near.items():
            if THRESHOLD <= j < 1:
                wanted += 1
                hit += doc in matches
        false += sum(doc not in near for doc in matches)
        reported += len(matches)
    return (hit / wanted if wanted else float("nan")), false, reported


def timed(calls: list[Callable[[], list[int]]]) -> tuple[list[list[int]], np.ndarray]:
    """Each call's answer and its time in µs."""
    answers, times = [], []
    for call in calls:
        began = time.perf_counter()
        answers.append(call())
        times.append(time.perf_counter() - began)
    return answers, np.array(times) * 1e6


def run_simstore(texts: list[str], indexed: np.ndarray, queries: np.ndarray, tmp: str) -> dict[str, Any]:
    store = simstore.open(Path(tmp, "preset.simstore"), "n", min_similarity=THRESHOLD)
    began = time.perf_counter()
    store.add_many(indexed.tolist(), texts=[texts[i] for i in indexed], processes=1)
    store.compact()
    build = time.perf_counter() - began
    stats = store.stats()
    query_texts = [texts[i] for i in queries]
    store.query(text=query_texts[0])  # warm: the segmenter, the pin
    fingerprints, sketches = store.fingerprinter.fingerprints_and_sketches(query_texts)
    fingerprints = np.asarray(fingerprints, dtype=np.uint64)
    sketches = np.asarray(sketches, dtype=np.uint8)
    return {
        "system": (
            f"simstore min_similarity=0.8 (k={store.k}, {store.bands} bands a width, "
            f"verifying from {store.min_similarity})"
        ),
        "e2e": [lambda t=t: [m.key for m in store.query(text=t)] for t in query_texts],
        "lookup": [
            lambda i=i: [
                m.key for m in store.query_many(fingerprints[i : i + 1], sketches=sketches[i : i + 1])[0]
            ]
            for i in range(len(query_texts))
        ],
        "build": len(indexed) / build,
        "bytes": stats.bytes_live / len(indexed),
        "close": store.close,
    }


def run_minhash(
    name: str, texts: list[str], indexed: np.ndarray, queries: np.ndarray
) -> dict[str, Any] | None:
    try:
        if name == "datasketch":
            from datasketch import MinHash, MinHashLSH

            def make(shingles: set[str]) -> Any:
                minhash = MinHash(num_perm=PERMUTATIONS, seed=1)
                minhash.update_batch([shingle.encode() for shingle in shingles])
                return minhash

            lsh: Any = MinHashLSH(threshold=THRESHOLD, num_perm=PERMUTATIONS)
            insert: Callable[[int, Any], Any] = lambda row, h: lsh.insert(row, h, False)  # noqa: E731
        else:
            from rensa import RMinHash, RMinHashLSH

            def make(shingles: set[str]) -> Any:
                minhash = RMinHash(num_perm=PERMUTATIONS, seed=1)
                minhash.update(list(shingles))
                return minhash

            lsh = RMinHashLSH(threshold=THRESHOLD, num_perm=PERMUTATIONS, num_bands=16)
            insert = lsh.insert
    except ImportError as exc:
        print(f"{name}: skipped ({exc})", flush=True)
        return None
    began = time.perf_counter()
    hashes: dict[int, Any] = {}
    for row, tokens in zip(
        indexed.tolist(), realtext_truth.tokens_of([texts[i] for i in indexed]), strict=True
    ):
        hashes[row] = make(realtext_truth.shingles(tokens))
        insert(row, hashes[row])
    build = time.perf_counter() - began
    bytes_per_doc = _index_bytes(make, name, [texts[i] for i in indexed[:BYTES_SAMPLE]])

    def end_to_end(text: str) -> list[int]:
        minhash = make(realtext_truth.shingles(realtext_truth.tokens_of([text])[0]))
        return [doc for doc in lsh.query(minhash) if minhash.jaccard(hashes[doc]) >= THRESHOLD]

    def lookup(minhash: Any) -> list[int]:
        return [doc for doc in lsh.query(minhash) if minhash.jaccard(hashes[doc]) >= THRESHOLD]

    query_texts = [texts[i] for i in queries]
    ready = [make(realtext_truth.shingles(tokens)) for tokens in realtext_truth.tokens_of(query_texts)]
    return {
        "system": f"{name} MinHashLSH(0.8, {PERMUTATIONS})",
        "e2e": [lambda t=t: end_to_end(t) for t in query_texts],
        "lookup": [lambda m=m: lookup(m) for m in ready],
        "build": len(indexed) / build,
        "bytes": bytes_per_doc,
        "close": lambda: None,
    }


#: Documents a peer's bytes a document are measured on (a separate index).
BYTES_SAMPLE = 2000


def _index_bytes(make: Callable[[set[str]], Any], name: str, sample: list[str]) -> float:
    """A peer's bytes a document: the Python memory an index of ``sample``
    and its MinHashes hold once built (``tracemalloc``; the texts, tokens and
    shingle sets made beforehand are not counted)."""
    shingle_sets = [realtext_truth.shingles(tokens) for tokens in realtext_truth.tokens_of(sample)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    if name == "datasketch":
        from datasketch import MinHashLSH

        lsh: Any = MinHashLSH(threshold=THRESHOLD, num_perm=PERMUTATIONS)
        kept = {row: make(shingles) for row, shingles in enumerate(shingle_sets)}
        for row, minhash in kept.items():
            lsh.insert(row, minhash, False)
    else:
        from rensa import RMinHashLSH

        lsh = RMinHashLSH(threshold=THRESHOLD, num_perm=PERMUTATIONS, num_bands=16)
        kept = {row: make(shingles) for row, shingles in enumerate(shingle_sets)}
        for row, minhash in kept.items():
            lsh.insert(row, minhash)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del lsh, kept
    return held / len(sample)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=list(SETS), default="English")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes a system (default 3)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # ShortTextWarning: short texts are part of the sets
    texts = texts_of(args.set)
    numbers = np.arange(len(texts))
    queries, indexed = numbers[::HELD_OUT], numbers[numbers % HELD_OUT != 0]
    truth = truth_of(texts, queries, indexed)
    started = load_average()
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        systems = [
            result
            for result in (
                run_simstore(texts, indexed, queries, tmp),
                run_minhash("datasketch", texts, indexed, queries),
                run_minhash("rensa", texts, indexed, queries),
            )
            if result is not None
        ]
        try:
            scores = []
            for system in systems:  # a first pass: the answers (and a warm-up)
                found = dict(zip(queries.tolist(), [call() for call in system["e2e"]], strict=True))
                scores.append(score(found, truth))
                print(system["system"], f"{scores[-1][0]:.2%}", flush=True)
            # Timed passes, the systems alternating (the order reversed every round).
            timings: list[dict[str, list[np.ndarray]]] = [{"e2e": [], "lookup": []} for _ in systems]
            for round_number in range(args.rounds):
                order = list(enumerate(systems))
                for index, system in order if round_number % 2 == 0 else order[::-1]:
                    for kind in ("e2e", "lookup"):
                        timings[index][kind].append(timed(system[kind])[1])
        finally:
            for system in systems:
                system["close"]()
    info = machine()
    lines = [
        f"# Queries by text at J >= 0.8: the 0.8 preset beside MinHash LSH ({args.set})",
        "",
        f"Command: `{command_line()}`",
        "",
        f"Machine: 2-core VM, {info['cpu']}, {info['python']}, numpy {info['numpy']}; "
        f"load {started} -> {load_average()}; {len(indexed):,} documents indexed, "
        f"{len(queries):,} held-out queries ({', '.join(SETS[args.set])}); {args.rounds} timed passes "
        "a system, alternating: the median (min-max) over the passes of each pass's p50 and p99.",
        "",
        "| system | end to end p50 µs | p99 | look-up only p50 µs | p99 | recall 0.8 <= J < 1 "
        "| false (J < 0.5) / reported | build docs/s | bytes a document |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for system, (recall, false, reported), timing in zip(systems, scores, timings, strict=True):
        cells = []
        for kind in ("e2e", "lookup"):
            for percentile in (50, 99):
                values = [float(np.percentile(times, percentile)) for times in timing[kind]]
                cells.append(f"{np.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})")
        lines.append(
            f"| {system['system']} | {' | '.join(cells)} | {recall:.1%} | {false} / {reported} "
            f"| {system['build']:,.0f} | {system['bytes']:,.0f} |"
        )
    lines += [
        "",
        "Bytes a document: simstore's live bytes in its file (the 128-byte sketch included); a "
        "peer's Python allocations held by an index of 2,000 of the documents and their MinHashes "
        "(`tracemalloc`; rensa's Rust allocations are not seen by it, so its figure is a floor). "
        "Recall and false matches count each held-out query's indexed neighbours.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
