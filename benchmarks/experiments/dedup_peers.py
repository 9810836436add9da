"""Dedup at J >= 0.8 side by side (issue 36, part 5): simstore's pairs at the defaults
(k = 5, sketch bands, threshold 0.8) and without bands, datasketch
``MinHashLSH(0.8, 128)`` and rensa's ``RMinHashLSH`` (128 permutations, 16 bands),
each from the texts to the verified pairs, on the real-text corpora of
``benchmarks/suite/realtext_corpora.py`` pooled into one English and one Chinese set.

The peers get the same word 3-shingles as the ground truth (simstore's tokeniser,
jieba's words for Chinese, cut by rjieba: ``SIMSTORE_SEGMENTER=rjieba``, but for
"simstore, jieba"; tokenising is timed as theirs) and keep a candidate pair when
their MinHash estimates J >= 0.8, as simstore's sketch does. Each system runs in a
fresh process, one core (simstore fingerprints with ``processes=1``), so its peak
RSS (VmHWM) is its own: texts, tokens and index together. Recall is per
exact-Jaccard band, precision counts a reported pair with J < 0.5 as false
(``realtext_truth``'s exact pairs).

    python benchmarks/experiments/dedup_peers.py
    python benchmarks/experiments/dedup_peers.py --languages Chinese --warm 2000

(``--warm N``: each system first runs untimed on the set's first N texts, so that
what a process pays once is not in the rate: a long run's rate. The first Han block
that sends rjieba's path to jieba, whose dictionary takes 0.8-1 s to load, comes
between the 500th and the 2,000th text of the Chinese set.)

Needs datasketch, rensa, rjieba and scipy (the bench extra and ``pip install rensa``)
and the cached corpora.

Measured on the 2-core Xeon VM, 2026-11-29, load about 1, one round, Chinese cut by
rjieba (``benchmarks/results/dedup_peers.md``). Per core, ``min_similarity=0.8`` (what
``simstore dedup --min-similarity 0.8`` builds): 1,510 docs/s on English against
datasketch's 627 (2.4x) and rensa's 1,344 (1.12x); 3,537 on Chinese against 1,098
(3.2x) and 2,993 (1.18x). Recall at 0.8 <= J < 1: 99.7 % and 93.3 % (datasketch 68.3 %
and 77.6 %, rensa 90.8 % and 92.4 %); no false pair anywhere. With jieba rather than
rjieba simstore's Chinese rate was 1,023. Peak RSS 190-211 MiB for simstore, 566-1,425
MiB for the peers. Since plain non-ASCII text is no longer cut into token strings
(2026-11-30, two runs): English 3,036-3,265 docs/s against datasketch's 737-740
(4.1-4.4x), Chinese 3,495-3,812 against 1,230-1,400 (2.7-2.8x), the same pairs; twice
more after Han runs were split rather than cut by the token pattern: 2.0x and 2.4x
(this machine's noise is larger than either change). Chinese with ``--warm 2000``, four
alternating rounds of the two children (2026-11-30): 2.66-3.60x datasketch's rate, 2.75x
in the median round; 2.43-2.70x cold.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "suite"))

from _common import load_average  # noqa: E402

SETS = {
    "English": ("docs_en", "licence_en", "licence_en_para", "templated_en", "negative_en"),
    "Chinese": ("docs_zh", "docs_zh_para"),
}
SYSTEMS = (
    "simstore",
    "simstore min_similarity=0.8",
    "simstore --no-bands",
    "simstore, jieba",
    "datasketch",
    "rensa",
)
THRESHOLD = 0.8
PERMUTATIONS = 128


def texts_of(language: str) -> list[str]:
    import realtext_corpora

    realtext_corpora.build(list(SETS[language]))
    return [row["text"] for name in SETS[language] for row in realtext_corpora.load_corpus(name)]


def run_system(system: str, texts: list[str]) -> np.ndarray:
    """The system's pairs (rows ``(first, second)``, ``first < second``)."""
    if system.startswith("simstore"):
        import simstore

        # The preset's store verifies from its own lowered threshold (0.75).
        preset = {"min_similarity": THRESHOLD} if "min_similarity" in system else {}
        with (
            tempfile.TemporaryDirectory(dir=".") as tmp,
            simstore.open(Path(tmp, "s.simstore"), "n", **preset) as store,
        ):
            store.add_many(range(len(texts)), texts=texts, processes=1)
            bands = system != "simstore --no-bands"
            found = [(p.key_a, p.key_b) for p in store.near_duplicate_pairs(bands=bands)]
            store.close()
        return np.array(found, dtype=np.int64).reshape(-1, 2)
    import realtext_truth

    shingle_sets = [realtext_truth.shingles(tokens) for tokens in realtext_truth.tokens_of(texts)]
    if system == "datasketch":
        from datasketch import MinHash, MinHashLSH

        def datasketch_hash(shingles: set[str]) -> Any:
            minhash = MinHash(num_perm=PERMUTATIONS, seed=1)
            minhash.update_batch([shingle.encode() for shingle in shingles])
            return minhash

        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=PERMUTATIONS)
        return verified_pairs(
            shingle_sets, datasketch_hash, lambda row, h: lsh.insert(row, h, False), lsh.query
        )
    from rensa import RMinHash, RMinHashLSH

    def rensa_hash(shingles: set[str]) -> Any:
        minhash = RMinHash(num_perm=PERMUTATIONS, seed=1)
        minhash.update(list(shingles))
        return minhash

    lsh = RMinHashLSH(threshold=THRESHOLD, num_perm=PERMUTATIONS, num_bands=16)
    return verified_pairs(shingle_sets, rensa_hash, lsh.insert, lsh.query)


def verified_pairs(
    shingle_sets: list[set[str]],
    make_hash: Callable[[set[str]], Any],
    insert: Callable[[int, Any], Any],
    query: Callable[[Any], Any],
) -> np.ndarray:
    """A MinHash LSH's pairs: every set hashed and inserted, then queried,
    and a candidate kept when the MinHashes estimate J >= THRESHOLD."""
    hashes = []
    for row, shingles in enumerate(shingle_sets):
        minhash = make_hash(shingles)
        insert(row, minhash)
        hashes.append(minhash)
    pairs = set()
    for row, minhash in enumerate(hashes):
        for other in query(minhash):
            if other > row and minhash.jaccard(hashes[other]) >= THRESHOLD:
                pairs.add((row, other))
    return np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)


def child(system: str, language: str, output: str, warm: int = 0) -> None:
    texts = texts_of(language)
    if warm:
        # What a long run pays once (imports, jieba's dictionary for the Han
        # blocks rjieba leaves to it, compiled patterns) paid first; what the
        # warm-up's texts taught simstore's tokeniser (the segments and token
        # hashes it remembers) forgotten, for every system alike.
        run_system(system, texts[:warm])
        _forget_texts()
    began = time.perf_counter()
    pairs = run_system(system, texts)
    seconds = time.perf_counter() - began
    np.save(output, pairs)
    print(json.dumps({"seconds": seconds, "peak_mib": _peak_mib(), "docs": len(texts)}))


def _forget_texts() -> None:
    """Empty what simstore's tokeniser remembers of the texts it has seen."""
    from simstore.fingerprinting import text, tokens

    for hmm in (True, False):
        text._segment_cache(hmm).clear()
    tokens._token_cache.cache_clear()
    text._replacement.cache_clear()


def _peak_mib() -> float:
    """This process's peak RSS: VmHWM, which starts afresh at exec (``ru_maxrss``
    keeps the parent's high-water mark across it on Linux)."""
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def score(language: str, pairs: np.ndarray) -> dict[str, float]:
    import realtext_quality

    texts = texts_of(language)
    tokens = realtext_quality.truth.tokens_of(texts)
    truth = realtext_quality.truth.similar_pairs(realtext_quality.truth.shingle_matrix(tokens), 0.5)
    keys = truth.first * len(texts) + truth.second
    found = pairs[:, 0] * len(texts) + pairs[:, 1]
    out = {}
    for label, low in (("J>=0.9", 0.9), ("J>=0.8", 0.8)):
        wanted = keys[(truth.jaccard >= low) & (truth.jaccard < 1)]
        out[label] = float(np.isin(wanted, found).mean()) if len(wanted) else float("nan")
    out["false"] = int((~np.isin(found, keys)).sum())
    out["reported"] = len(found)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("SYSTEM", "LANGUAGE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--languages", nargs="*", default=list(SETS))
    parser.add_argument(
        "--warm",
        type=int,
        default=0,
        metavar="N",
        help="each system first runs untimed on the set's first N texts: the rate of a long run, "
        "whose start-up is paid once (default 0: timed from a cold process)",
    )
    args = parser.parse_args()
    if args.child:
        child(*args.child, warm=args.warm)
        return
    print(f"load {load_average()}; warm-up: {args.warm} texts a system, untimed", flush=True)
    print(
        "| set | system | docs/s (one core) | seconds | peak RSS MiB | recall 0.9 <= J < 1 | "
        "recall 0.8 <= J < 1 | false pairs (J < 0.5) / reported |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for language in args.languages:
            for system in SYSTEMS:
                out = str(Path(tmp, "pairs.npy"))
                command = [
                    sys.executable,
                    __file__,
                    "--child",
                    system,
                    language,
                    out,
                    "--warm",
                    str(args.warm),
                ]
                # "simstore, jieba" cuts Chinese with jieba itself; every other
                # system (the peers take simstore's tokens) with rjieba.
                segmenter = "jieba" if system.endswith("jieba") else "rjieba"
                environment = {**os.environ, "SIMSTORE_SEGMENTER": segmenter}
                result = json.loads(
                    subprocess.run(
                        command, check=True, capture_output=True, text=True, env=environment
                    ).stdout
                )
                scores = score(language, np.load(out))
                print(
                    f"| {language} | {system} | {result['docs'] / result['seconds']:,.0f} | "
                    f"{result['seconds']:.1f} | {result['peak_mib']:.0f} | {100 * scores['J>=0.9']:.1f} % | "
                    f"{100 * scores['J>=0.8']:.1f} % | {scores['false']} / {scores['reported']} |",
                    flush=True,
                )
    print(f"load {load_average()}")


if __name__ == "__main__":
    main()
