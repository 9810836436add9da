"""A/B of the group commit's fast path: ``--threads`` writer threads (1 and 8 by
default) of one process add ``--adds`` documents, one single ``add`` call each, into a
small new store, for each ``--sync`` mode, in fresh runs alternating between two source
trees (each first on ``sys.path``, run from ``/``, so neither the current directory nor
an editable install shadows it).

    mkdir -p /tmp/ab-old && git archive bc30d50 simstore | tar -x -C /tmp/ab-old
    python benchmarks/experiments/ab_group_commit.py --trees /tmp/ab-old,. --pairs 7

Prints, per sync mode and thread count, each tree's median docs/s over its runs (and
the spread), and the ratio of the second tree's median to the first's. Every run
checks that every add was stored.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import simstore

folder, sync, threads, adds = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sync = {"True": True, "False": False, "interval": "interval"}[sync]
path = os.path.join(folder, "s.simstore")
failures = []
with simstore.open(path, "c", k=3, sync=sync) as store:
    store.add("warm", fingerprint=1)

    def adder(thread):
        try:
            for number in range(thread, adds, threads):
                store.add(number, fingerprint=(number * 0x9E3779B97F4A7C15) % (1 << 64))
        except BaseException as exc:
            failures.append(repr(exc))

    workers = [threading.Thread(target=adder, args=(thread,)) for thread in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    stored = len(store)
if failures or stored != adds + 1:
    sys.exit(f"failed: {failures[:1]}, {stored} stored")
print(json.dumps({"docs/s": adds / elapsed, "module": simstore.__file__}))
"""


def run(tree: str, sync: str, threads: int, adds: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, os.path.abspath(tree), folder, sync, str(threads), str(adds)],
            cwd="/",
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    found = json.loads(out.splitlines()[-1])
    assert Path(found["module"]).is_relative_to(Path(tree).resolve()), found["module"]
    return float(found["docs/s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", required=True, help="OLD,NEW: two source trees holding simstore/")
    parser.add_argument("--sync", default="False,True", help="sync modes, comma-separated")
    parser.add_argument("--threads", default="1,8", help="thread counts, comma-separated")
    parser.add_argument("--adds", type=int, default=4000, help="adds per run (sync=True: a quarter)")
    parser.add_argument("--pairs", type=int, default=5, help="alternating runs of each tree")
    args = parser.parse_args()
    trees = args.trees.split(",")
    assert len(trees) == 2, "--trees takes two trees"
    rows = []
    for sync in args.sync.split(","):
        for threads in [int(count) for count in args.threads.split(",")]:
            adds = args.adds // 4 if sync == "True" else args.adds
            rates: list[list[float]] = [[], []]
            for pair in range(args.pairs):
                order = (0, 1) if pair % 2 == 0 else (1, 0)
                for index in order:
                    rates[index].append(run(trees[index], sync, threads, adds))
            medians = [statistics.median(found) for found in rates]
            rows.append(
                f"| {sync} | {threads} | {adds} | "
                + " | ".join(
                    f"{median:,.0f} ({min(found):,.0f}-{max(found):,.0f})"
                    for median, found in zip(medians, rates, strict=True)
                )
                + f" | {medians[1] / medians[0]:.3f} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    heads = " | ".join(f"{tree} docs/s median (range)" for tree in trees)
    print(f"| sync | threads | adds a run | {heads} | ratio |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
