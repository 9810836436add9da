"""A/B of the two ways a single query permutes its fingerprint for every table,
inside one process, alternating per query.

Run (from the repository root; any store, e.g. the one ``ab_occupancy.py build``
makes, or the 10M store ``bench_peers.py --dir /tmp/bench`` leaves behind)::

    PYTHONPATH=. python benchmarks/experiments/ab_permute.py /tmp/ab.simstore

One process runs every query twice in a row, once with the lane permuter (every
table's key from one Python integer holding a 64-bit lane per table, what
``tables_permuter`` picks for layouts of up to a few dozen tables) and once with
the numpy ``TablesPermuter`` (what it picks for larger layouts, and what every
query used before), the order alternating from query to query (see
``_ab_queries.py`` for why in one process). Queries and passes as in
``ab_crowded.py``; also prints the permutation alone, per fingerprint.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _ab_queries import alternate, near_and_random_queries, warm_up

import simstore
from simstore.index.permute import PermuteAll, TablesPermuter, lane_permuter


def main(path: str) -> None:
    with simstore.open(path, "r") as store:
        queries = near_and_random_queries(store)
        warm_up(store, queries)
        variants: dict[str, PermuteAll] = {
            "lanes (Python integers)": lane_permuter(store.tables),
            "numpy TablesPermuter": TablesPermuter(store.tables),
        }
        alternate(store, variants, queries, owner=store._engine, attribute="permute_all")
        fingerprints = [query for query, _ in queries]
        for name, permute_all in variants.items():
            started = time.perf_counter_ns()
            for fingerprint in fingerprints:
                permute_all(fingerprint)
            per_call = (time.perf_counter_ns() - started) / len(fingerprints) / 1000
            print(f"  {name:28} permutation alone {per_call:.2f} us")


if __name__ == "__main__":
    main(sys.argv[1])
