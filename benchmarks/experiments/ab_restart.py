"""A/B of a cold restart: open a store read-only after dropping its cached pages,
answer 100 random queries, and time the first answer and the hundredth, in
fresh processes alternating between two source trees.

    python benchmarks/experiments/ab_restart.py --store /tmp/k3-10M.simstore --trees ../wt-old,. --rounds 3

Each tree is put first on ``PYTHONPATH`` of its process (a git worktree of the
revision to compare, or ``.``). The cache is dropped with
``POSIX_FADV_DONTNEED`` (Linux), so the first queries read the file: bucket
pages, records and, one (table, run) pair a query, the occupancy bitmaps.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = str(Path(__file__).resolve().parents[1])
CHILD = r"""
import sys, time
import numpy as np

path, seed = sys.argv[1], int(sys.argv[2])
sys.path.append(sys.argv[3])  # benchmarks/, after PYTHONPATH's tree
from _common import drop_page_cache
import simstore

drop_page_cache(path)
queries = np.random.default_rng(seed).integers(0, 2**64, 100, dtype=np.uint64).tolist()
started = time.perf_counter()
store = simstore.open(path, "r")
store.query(fingerprint=queries[0])
first = time.perf_counter() - started
for query in queries[1:]:
    store.query(fingerprint=query)
hundredth = time.perf_counter() - started
readahead = store._engine.env.env.flags()["readahead"]
store.close()
print(f"first answer {first * 1e3:.1f} ms, hundredth {hundredth * 1e3:.0f} ms (readahead {readahead})")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--trees", required=True, help="two source trees, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = [str(Path(tree).resolve()) for tree in args.trees.split(",")]
    for round_index in range(args.rounds):
        for tree in trees:
            found = subprocess.run(
                [sys.executable, "-c", CHILD, args.store, str(round_index), BENCHMARKS],
                env=dict(os.environ, PYTHONPATH=tree),
                capture_output=True,
                text=True,
                cwd="/",  # not a source tree: simstore comes from PYTHONPATH
                check=False,
            )
            print(f"round {round_index} {tree}: {found.stdout.strip()} {found.stderr[-300:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
