"""Single queries that find nothing, and queries that find a copy, in Manku's tables
(format 2, ``blocks=k + 2``) and a multi-index store (format 3, a new store's
default), side by side: a crawler's queries mostly find nothing, and
``bench_query_engine.py`` asks only queries that find something.

Both stores hold the same ``--docs`` seeded random fingerprints (``add_many`` and
``compact``, ``sync=False``), reopened read-only. In ``--rounds`` alternating rounds
(the order reversed every round, one process), each store answers 2,000 single
queries of random fingerprints (a miss: none is within k of a stored one at these
sizes) and 2,000 of stored fingerprints with 0 to k bits flipped (a hit). Reported:
the median over rounds of each round's p50 (and its range), the format 3 / format 2
ratio of each round's p50, and the file's used bytes a document.

    python benchmarks/experiments/miss_queries.py --docs 1M -k 3

Measured on the 2-core Xeon VM (KVM, CPython 3.11.7, numpy 2.4.6, py-lmdb 3.0.0),
2026-11-30, 4 rounds, ``--docs 1M 10M -k 3`` (``benchmarks/results/miss_queries_k3.md``):
a miss took 16.9 / 28.9 µs p50 at 1M (format 2 / 3; 1.69x per round) and 25.0 / 32.3
at 10M (1.28x), a hit 35.1 / 45.1 (1.30x) and 47.7 / 50.2 (1.05x), in 135 / 81 and
129 / 83 bytes a document. Manku's occupancy bitmaps let a miss skip most of its 10
tables; a multi-index query reads every probe's slot. At the default k = 5 (``-k 5``,
``miss_queries_k5.md``) Manku's 21 tables lose everywhere: a miss 135.7 / 31.6 µs at 1M
(0.23x) and 137.6 / 35.5 at 10M, a hit 166.0 / 49.3 and 171.3 / 65.3, in 224 / 88-91
bytes a document.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from _common import Report, load_average, parse_count  # noqa: E402

import simstore  # noqa: E402

QUERIES = 2000
WARM = 100


def p50_us(store: simstore.Store, queries: list[int]) -> float:
    for query in queries[:WARM]:
        store.query(query)
    times = []
    for query in queries:
        began = time.perf_counter()
        store.query(query)
        times.append(time.perf_counter() - began)
    return float(np.median(times)) * 1e6


P50s = dict[tuple[str, str], list[float]]


def cell(p50: P50s, name: str, kind: str) -> str:
    values = p50[(name, kind)]
    return f"{np.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def ratio(p50: P50s, kind: str) -> str:
    pairs = zip(p50[("format 3", kind)], p50[("format 2", kind)], strict=True)
    values = [three / two for three, two in pairs]
    return f"{np.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=parse_count, nargs="+", default=[1_000_000])
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    report = Report()
    report.header("Single queries that miss and that hit, format 2 beside format 3", tempfile.gettempdir())
    report.add(f"Load average before: {load_average()}\n")
    report.add(
        f"k = {args.k}; {QUERIES} single queries of each kind a round; {args.rounds} alternating rounds; "
        "p50 µs: median (min-max) over rounds; ratio: format 3 / format 2 per round, median (min-max)\n"
    )
    report.add(
        "| N | format 2 miss | format 3 miss | ratio | format 2 hit | format 3 hit | ratio | "
        "used B/doc format 2 / 3 |"
    )
    report.add("|---|---|---|---|---|---|---|---|")
    for docs in args.docs:
        rng = np.random.default_rng(5)
        fingerprints = rng.integers(0, 2**64 - 1, docs, dtype=np.uint64)
        misses = rng.integers(0, 2**64 - 1, QUERIES, dtype=np.uint64).tolist()
        hits = fingerprints[rng.integers(0, docs, QUERIES)].copy()
        for row in range(QUERIES):
            for bit in rng.choice(64, int(rng.integers(0, args.k + 1)), replace=False).tolist():
                hits[row] ^= np.uint64(1 << bit)
        folder = Path(tempfile.mkdtemp(prefix="miss-queries-"))
        try:
            stores: dict[str, tuple[simstore.Store, float]] = {}
            for name, options in (("format 2", {"blocks": args.k + 2}), ("format 3", {})):
                path = folder / f"{name.replace(' ', '')}.simstore"
                with simstore.open(path, "n", k=args.k, sync=False, **options) as store:
                    store.add_many(np.arange(docs), fingerprints)
                    store.compact()
                reader = simstore.open(path, "r")
                assert (reader.stats().format_version == 2) == (name == "format 2")  # (4: a band table)
                stores[name] = (reader, reader.stats().bytes_used / docs)
            assert not any(stores["format 3"][0].query_many(np.array(misses[:200], dtype=np.uint64)))
            p50: P50s = {}
            for number in range(args.rounds):
                for name in list(stores) if number % 2 == 0 else list(stores)[::-1]:
                    for kind, queries in (("miss", misses), ("hit", hits.tolist())):
                        p50.setdefault((name, kind), []).append(p50_us(stores[name][0], queries))

            report.add(
                f"| {docs:,} | {cell(p50, 'format 2', 'miss')} | {cell(p50, 'format 3', 'miss')} | "
                f"{ratio(p50, 'miss')} | {cell(p50, 'format 2', 'hit')} | {cell(p50, 'format 3', 'hit')} | "
                f"{ratio(p50, 'hit')} | "
                f"{stores['format 2'][1]:.1f} / {stores['format 3'][1]:.1f} |"
            )
            for reader, _used in stores.values():
                reader.close()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    report.add(f"\nLoad average after: {load_average()}")
    if args.output is not None:
        report.write(args.output)


if __name__ == "__main__":
    main()
