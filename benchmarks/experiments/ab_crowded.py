"""A/B in one process: single queries into crowded prefixes, probed a run
and a table at a time, or with every bucket read first and searched together
(``TableSet.crowded``, see ``TableSet.find``), passes alternating.

One store of ``--docs`` random fingerprints at ``--k`` (5: the default
layout, 21 tables of 18-19-bit prefixes) is grown in 10M ``add_many``
batches (each a run until compaction joins them) and, with ``--compact``,
compacted to one run. Queries: 2,000 stored fingerprints with two bits
flipped ("near") and 2,000 random ones a pass; each pass's p50 is printed,
and ``query_many`` of the near ones (µs a query).

Run (2-core x86-64 VM, Python 3.11)::

    python benchmarks/experiments/ab_crowded.py --docs 10e6      # one run: 38 entries a prefix
    python benchmarks/experiments/ab_crowded.py --docs 30e6      # three 10M runs
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import simstore

BATCH = 10_000_000
WAYS = {"read first, searched together": True, "a run and a table at a time": False}


def query_p50_us(store: simstore.Store, queries: list[int]) -> float:
    latencies = []
    for query in queries:
        started = time.perf_counter()
        store.query(query)
        latencies.append(time.perf_counter() - started)
    return float(np.percentile(latencies, 50) * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=float, default=10e6)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--compact", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    docs = int(args.docs)
    folder = tempfile.mkdtemp(prefix="ab-crowded-")
    rng = np.random.default_rng(0)
    try:
        with simstore.open(os.path.join(folder, "s"), "n", k=args.k, sync=False) as store:
            sample = []
            for first in range(0, docs, BATCH):
                fingerprints = rng.integers(0, 2**64, min(BATCH, docs - first), dtype=np.uint64)
                store.add_many(np.arange(first, first + len(fingerprints)), fingerprints=fingerprints)
                sample.append(fingerprints[:2000])
            store.merge()
            if args.compact:
                store.compact()
            tableset = store._engine.tableset
            print(f"{docs:,} documents, k={args.k}, {store.stats().runs} runs, crowded: {tableset.crowded}")
            flips = np.uint64(0b101) << rng.integers(0, 62, 2000).astype(np.uint64)
            near = np.concatenate(sample)[rng.integers(0, 2000 * len(sample), 2000)] ^ flips
            random = rng.integers(0, 2**64, 2000, dtype=np.uint64).tolist()
            query_p50_us(store, near[:300].tolist())  # warm the cache
            figures: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.rounds):
                for way, together in WAYS.items():
                    tableset.crowded = together  # until the next write adopts a catalog
                    figures.setdefault((way, "near p50"), []).append(query_p50_us(store, near.tolist()))
                    figures.setdefault((way, "random p50"), []).append(query_p50_us(store, random))
                    started = time.perf_counter()
                    store.query_many(near)
                    per_query = (time.perf_counter() - started) / len(near) * 1e6
                    figures.setdefault((way, "query_many"), []).append(per_query)
            for (way, what), values in figures.items():
                print(f"{way:30} {what:11} µs by round: {', '.join(f'{value:.0f}' for value in values)}")
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
