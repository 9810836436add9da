"""A/B in one process: a crowded prefix's entries tested one at a time or
with numpy (``simstore.runs.VECTOR_PROBE``), at the default k = 5 layout
(21 tables, 18-19-bit prefixes), passes alternating.

One store of ``--docs`` random fingerprints is grown in 10M ``add_many``
batches (each a run of its own unless compaction joins them) and, with
``--compact``, compacted to one run. Queries: stored fingerprints with two
bits flipped ("near") and random ones, 2,000 of each a pass; the p50 of each
pass is printed.

Run (2-core x86-64 VM, Python 3.11)::

    python benchmarks/ab_probe.py --docs 30e6 --compact   # one run: 114 entries a prefix
    python benchmarks/ab_probe.py --docs 30e6             # three 10M runs: 38 a prefix each
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import simstore
from simstore import runs

BATCH = 10_000_000
WAYS = {"numpy from 48 a prefix": runs.VECTOR_PROBE, "one at a time": 1 << 62}


def query_p50_us(store: simstore.Store, queries: list[int]) -> float:
    latencies = []
    for query in queries:
        started = time.perf_counter()
        store.query(query)
        latencies.append(time.perf_counter() - started)
    return float(np.percentile(latencies, 50) * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=float, default=30e6)
    parser.add_argument("--compact", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    docs = int(args.docs)
    folder = tempfile.mkdtemp(prefix="ab-probe-")
    rng = np.random.default_rng(0)
    try:
        with simstore.open(os.path.join(folder, "s"), "n", sync=False) as store:
            started = time.time()
            sample = []
            for first in range(0, docs, BATCH):
                fingerprints = rng.integers(0, 2**64, min(BATCH, docs - first), dtype=np.uint64)
                store.add_many(np.arange(first, first + len(fingerprints)), fingerprints=fingerprints)
                sample.append(fingerprints[:2000])
            store.merge()
            if args.compact:
                store.compact()
            seconds = time.time() - started
            print(f"{docs:,} documents in {seconds:.0f} s, {store.stats().runs} runs", flush=True)
            flips = np.uint64(0b101) << rng.integers(0, 62, 2000).astype(np.uint64)
            near = (np.concatenate(sample)[rng.integers(0, 2000 * len(sample), 2000)] ^ flips).tolist()
            random = rng.integers(0, 2**64, 2000, dtype=np.uint64).tolist()
            query_p50_us(store, near[:500])  # warm the cache
            p50s: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.rounds):
                for way, threshold in WAYS.items():
                    runs.VECTOR_PROBE = threshold
                    for kind, queries in (("near", near), ("random", random)):
                        p50s.setdefault((way, kind), []).append(query_p50_us(store, queries))
            for (way, kind), values in p50s.items():
                print(f"{way:24} {kind:7} p50 µs by round: {', '.join(f'{value:.0f}' for value in values)}")
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
