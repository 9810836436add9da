"""Single-query p50 of one code tree on one store: run it once per tree to A/B
a change to the query path (how the occupancy bitmaps were measured).

Run (from the repository root; ``OLD`` is a checkout of the code to compare)::

    PYTHONPATH=. python benchmarks/experiments/ab_occupancy.py build /tmp/ab.simstore 1000000
    PYTHONPATH=$OLD python benchmarks/experiments/ab_occupancy.py old /tmp/ab.simstore
    PYTHONPATH=. python benchmarks/experiments/ab_occupancy.py new /tmp/ab.simstore

``build`` makes the store with the current code from ``bench_store.base_fingerprints``
(the peers benchmarks' data), ``add_many`` of N in one call, ``sync=False``.

Alternate the two a few times: on a shared machine only back-to-back runs compare.
Queries: 3,000 stored fingerprints with 1-3 random bits flipped (cycling), and 3,000
random fingerprints; each set is run once to warm up, then timed 3 times.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import simstore


def main(label: str, path: str) -> None:
    rng = np.random.default_rng(7)
    with simstore.open(path, "r") as store:
        stored = store.fingerprints()  # any document: the first 100K ones sat in cache-warm records
        near = stored[rng.integers(0, len(stored), 3000)].copy()
        for index in range(len(near)):
            for bit in rng.choice(64, size=1 + index % 3, replace=False):
                near[index] ^= np.uint64(1) << np.uint64(bit)
        random_queries = rng.integers(0, 2**64, 3000, dtype=np.uint64)
        report = []
        for name, queries in (("near (1-3 bits from a stored doc)", near), ("random", random_queries)):
            query_list = queries.tolist()
            for query in query_list:
                store.query(fingerprint=query)
            latencies = []
            for _ in range(3):
                for query in query_list:
                    started = time.perf_counter_ns()
                    store.query(fingerprint=query)
                    latencies.append(time.perf_counter_ns() - started)
            report.append(f"{name}: p50 {np.percentile(np.array(latencies) / 1000, 50):.1f} us")
    print(label, "|", "; ".join(report), "| load", os.getloadavg()[0])


def build(path: str, count: int) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "suite"))
    from bench_store import base_fingerprints

    fingerprints = base_fingerprints(count)
    with simstore.open(path, "n", sync=False) as store:
        store.add_many(range(count), fingerprints)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], int(sys.argv[3]))
    else:
        main(sys.argv[1], sys.argv[2])
