"""Recall of a store's band table against its storage cost: how many bands of each width
(``band_keys(..., per_width=P)``) a document must keep for a query to still find its
near-duplicates, on the real-text corpora of ``benchmarks/suite/realtext_corpora.py``.

A default store (k = 5, min_similarity = t) reports a pair when the fingerprints are
within 5 bits or the sketches share a band key (both banded with the same ``per_width``),
and the sketches estimate J >= t: modelled here without a store, from the
``Fingerprinter(seed=s)`` fingerprints and sketches, every pair within 5 bits
(``realtext_quality.pairs_within``) and every pair sharing a key
(``simstore.index.shared_keys.pairs_sharing_keys``). At P = 2, 4, 8, 16 and all bands
(``--per-widths``), t = 0.75 and 0.8, and feature-hash seeds 0..``--seeds``-1, it reports the recall of the
true pairs (exact Jaccard of word 3-shingles, ``realtext_truth``) at 0.97 <= J < 1,
0.9 <= J < 1 and 0.8 <= J < 1 (exact copies apart, as the suite does), long pairs (both
texts >= 20 tokens) and short ones apart, at the worst seed; the pairs reported with
J < 0.5 (false pairs, most over the seeds); and the band keys a document, of all
documents and of the long ones (the band table's cost, ~8 bytes a key). "k=5 only" is
the store without bands; with all bands the model's pairs are those of the store's
``near_duplicate_pairs(min_similarity=t, bands=True)``, which bands all of them.
Pooled over the corpora (worst seed of the pooled counts), then per corpus.

Needs the cached corpora (``realtext_corpora.py --build``) and scipy. Run (2-core VM)::

    nice python benchmarks/experiments/band_table_recall.py --seeds 5 \\
        --output benchmarks/results/band_table_recall.md
"""

from __future__ import annotations

import argparse
import datetime
import functools
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite"))

import realtext_corpora
import realtext_quality
from _common import command_line, load_average, machine, markdown_table

from simstore import Fingerprinter
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import Sketch
from simstore.index.shared_keys import pairs_sharing_keys

PER_WIDTHS: tuple[int | None, ...] = (2, 4, 8, 16, None)
BASELINE = "k=5 only"
THRESHOLDS = (0.8, 0.75)
RANGES = (("0.97<=J<1", 0.97), ("0.9<=J<1", 0.9), ("0.8<=J<1", 0.8))
KINDS = ("long", "short")
K = realtext_quality.STORE_K

#: Per kind, per range: true pairs (or those found); plus "fp" and "reported".
Counts = dict[str, int]
#: One corpus (or the pooled corpora) under one seed: counts per (system, t), and
#: band keys per system (of all documents, and "SYSTEM long" of the long ones) with
#: "docs" and "long docs".
Run = tuple[dict[tuple[str, float], Counts], Counts]


def banded(per_widths: Sequence[int | None]) -> dict[str, int | None]:
    """The store with bands, each banded with ``per_width`` (None: every band), by label."""
    return {f"k=5 + bands, per_width={p or 'all'}": p for p in per_widths}


def tally(jaccard: npt.NDArray[np.float64], short: npt.NDArray[np.bool_]) -> Counts:
    """Pairs per kind and range of J (exact copies apart) among pairs of exact J
    ``jaccard`` (-1 below 0.5), and the false and reported pairs."""
    out = {"fp": int((jaccard < 0).sum()), "reported": len(jaccard)}
    for kind, chosen in zip(KINDS, (~short, short), strict=True):
        j = jaccard[chosen]
        out.update({f"{kind} {name}": int(((j >= low) & (j < 1.0)).sum()) for name, low in RANGES})
    return out


def measure(
    corpus: realtext_quality.Corpus,
    seed: int,
    sketch: Sketch,
    systems: dict[str, int | None],
    thresholds: Sequence[float] = THRESHOLDS,
) -> Run:
    """Counts of every (system, t) on one corpus and seed, and the band keys of each system."""
    n = len(corpus.texts)
    long_docs = corpus.sizes >= realtext_quality.SHORT_TOKENS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ShortTextWarning: short texts are the point
        fingerprints, rows = Fingerprinter(seed=seed).fingerprints_and_sketches(corpus.texts)
    fingerprints, rows = np.asarray(fingerprints, dtype=np.uint64), np.asarray(rows, dtype=np.uint8)
    first, second, _ = realtext_quality.pairs_within(fingerprints, K)
    found = {BASELINE: first * n + second}
    keys_of = {"docs": n, "long docs": int(long_docs.sum()), BASELINE: 0, f"{BASELINE} long": 0}
    for label, per_width in systems.items():
        keys = band_keys(rows, sketch, per_width)
        keys_of[label] = len(keys.keys)
        keys_of[f"{label} long"] = int(long_docs[keys.rows].sum())
        a, b = pairs_sharing_keys(keys.rows, keys.keys)
        found[label] = np.union1d(found[BASELINE], a * n + b)
    # Estimate and look up every candidate once.
    candidates = np.unique(np.concatenate(list(found.values())))
    a, b = candidates // n, candidates % n
    estimates = realtext_quality.estimate(rows, a, b, sketch)
    jaccard = realtext_quality.checked_lookup(corpus, a, b)
    short = corpus.short(a, b)
    out = {}
    for label, pairs in found.items():
        chosen = np.isin(candidates, pairs, assume_unique=True)
        for threshold in thresholds:
            kept = chosen & (estimates >= threshold)
            out[(label, threshold)] = tally(jaccard[kept], short[kept])
    return out, keys_of


def table(
    truth: Counts, runs: Sequence[Run], systems: Sequence[str], thresholds: Sequence[float] = THRESHOLDS
) -> str:
    """One markdown table: each (system, t) at its worst seed of ``runs`` (one per seed)."""
    headers = ["system", "t", "keys/doc", "keys/long doc"]
    headers += [f"{kind} {name} ({truth[f'{kind} {name}']:,})" for kind in KINDS for name, _ in RANGES]
    headers += ["false pairs (J<0.5)", "reported"]
    keys = functools.reduce(added, (run[1] for run in runs))  # over the seeds: the mean
    lines = []
    for threshold in thresholds:
        for label in systems:
            counts = [run[0][(label, threshold)] for run in runs]
            long_keys = keys[f"{label} long"] / keys["long docs"] if keys["long docs"] else None
            cells: list[object] = [label, threshold, keys[label] / keys["docs"], long_keys]
            for kind in KINDS:
                for name, _ in RANGES:
                    total = truth[f"{kind} {name}"]
                    worst = min(c[f"{kind} {name}"] for c in counts)
                    cells.append(f"{worst / total:.2%}" if total else "-")
            cells += [max(c["fp"] for c in counts), max(c["reported"] for c in counts)]
            lines.append(cells)
    return markdown_table(headers, lines)


def added(first: Counts, second: Counts) -> Counts:
    return {key: first.get(key, 0) + second.get(key, 0) for key in first.keys() | second.keys()}


def per_width(value: str) -> int | None:
    return None if value == "all" else int(value)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5, help="feature-hash seeds 0..N-1 (default 5)")
    parser.add_argument("--corpora", nargs="*", default=list(realtext_corpora.CORPUS_NAMES))
    parser.add_argument(
        "--per-widths", nargs="*", type=per_width, default=PER_WIDTHS, help="bands kept a width ('all')"
    )
    parser.add_argument(
        "--thresholds", nargs="*", type=float, default=THRESHOLDS, help="verification thresholds t"
    )
    parser.add_argument("--output", type=Path, default=None, help="write the markdown report here")
    args = parser.parse_args()
    sketch = Sketch()
    systems = banded(args.per_widths)
    labels = [BASELINE, *systems]
    started = time.perf_counter()
    sections = []
    pooled_truth: Counts = {}
    pooled: list[Run] = [({}, {}) for _ in range(args.seeds)]
    for name in args.corpora:
        corpus = realtext_quality.prepare(name)
        pairs = corpus.pairs
        truth = tally(pairs.jaccard, corpus.short(pairs.first, pairs.second))
        runs = [measure(corpus, seed, sketch, systems, args.thresholds) for seed in range(args.seeds)]
        for (counts, keys), (into_counts, into_keys) in zip(runs, pooled, strict=True):
            for system, value in counts.items():
                into_counts[system] = added(into_counts.get(system, {}), value)
            into_keys.update(added(into_keys, keys))
        pooled_truth = added(pooled_truth, truth)
        n, long_docs = runs[0][1]["docs"], runs[0][1]["long docs"]
        section = table(truth, runs, labels, args.thresholds)
        sections.append(f"### {name}: {n:,} docs ({n - long_docs:,} short)\n\n{section}\n")
        print(f"{name}: {n} docs, {time.perf_counter() - started:.0f} s", flush=True)
    info = machine()
    header = [
        "# Band table recall: bands kept a width against recall",
        "",
        f"Command: `{command_line()}`",
        "",
        f"Machine: 2-core VM, {info['cpu']}, {info['python']}, numpy {info['numpy']}; "
        f"{datetime.date.today().isoformat()}; load average at the end {load_average()}; "
        f"{time.perf_counter() - started:.0f} s.",
        "",
        f"Recall is the worst of seeds 0..{args.seeds - 1} in each cell (the true pairs of each "
        "range in its header; long: both texts >= 20 tokens); false pairs and reported pairs the "
        "most over the seeds; keys a document (of all, and of the long ones) the mean over the seeds.",
        "",
        f"## Pooled: {pooled[0][1]['docs']:,} docs ({', '.join(args.corpora)})",
        "",
        table(pooled_truth, pooled, labels, args.thresholds),
        "",
        "## Per corpus",
        "",
    ]
    text = "\n".join(header + sections)
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
