"""A/B of durable writer processes: ``--processes`` processes (of
``--threads`` writer threads each) add ``--adds`` documents in all, one
call each (``--sync``, ``True`` by default), into copies of one
store, in fresh runs alternating between two source trees.

    git worktree add ../wt-old c1b5d0a
    python benchmarks/experiments/ab_writers.py --store /tmp/k3-10M.simstore --trees ../wt-old,. --processes 8
    python benchmarks/experiments/ab_writers.py --store /tmp/k3-1M.simstore --n 1e6 --trees ../wt-old,. \\
        --processes 1 --adds 30000 --sync False

``--store`` is made (``--n`` random fingerprints) if it does not exist. Each
run copies it, starts the writers together (``fork``) and reports docs/s over
the wall time, every call's p50 and p99, how many processes a commit took on
average (from the count each leader records in the mailbox, where the tree has
one), and the store's pages in use after the run (``Stats.bytes_used``). Each
run puts its tree first on ``sys.path`` and runs from ``/``, so neither the
current directory nor an editable install shadows it.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import simstore  # the parent's: it only makes and counts the store

CHILD = r"""
import json, multiprocessing, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import simstore
from simstore.commit import mailbox

path, processes, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
adds, first = int(sys.argv[5]), int(sys.argv[6])
sync = {"True": True, "False": False, "interval": "interval"}[sys.argv[7]]

def writer(index, start_at, queue):
    groups = []
    record = getattr(mailbox.Mailbox, "set_last_group", None)
    if record is not None:
        def counted(self, size):
            groups.append(size)
            return record(self, size)
        mailbox.Mailbox.set_last_group = counted
    share = adds // processes
    keys = range(first + index * share, first + (index + 1) * share)
    fingerprints = np.random.default_rng(first + index).integers(0, 2**64, share, dtype=np.uint64).tolist()
    latencies = np.empty(share)

    failures = []

    def adds_of(store, thread):
        try:
            for position in range(thread, share, threads):
                before = time.perf_counter()
                store.add(keys[position], fingerprint=fingerprints[position])
                latencies[position] = time.perf_counter() - before
        except BaseException as exc:
            failures.append(exc)

    with simstore.open(path, "w", sync=sync) as store:
        workers = [threading.Thread(target=adds_of, args=(store, thread)) for thread in range(threads)]
        time.sleep(max(0.0, start_at - time.time()))
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    if failures:
        queue.put((None, repr(failures[0]), groups))
        return
    queue.put((time.time(), latencies.tolist(), groups))

context = multiprocessing.get_context("fork")
queue = context.Queue()
start_at = time.time() + 0.5
workers = [context.Process(target=writer, args=(index, start_at, queue)) for index in range(processes)]
for worker in workers:
    worker.start()
found = [queue.get() for _ in workers]
for worker in workers:
    worker.join()
for run in found:
    if run[0] is None:
        sys.exit(f"a writer failed: {run[1]}")
latencies = np.concatenate([np.array(run[1]) for run in found])
groups = [size for run in found for size in run[2]]
with simstore.open(path, "r") as store:
    stored = len(store)
    used_mb = store.stats().bytes_used / 2**20
print(json.dumps({
    "docs/s": len(latencies) / (max(run[0] for run in found) - start_at),
    "p50 ms": float(np.percentile(latencies, 50) * 1e3),
    "p99 ms": float(np.percentile(latencies, 99) * 1e3),
    "processes a commit": float(np.mean(groups)) if groups else None,
    "stored": stored,
    "MB in use": used_mb,
    "module": simstore.__file__,
}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the store to add into (copied for each run)")
    parser.add_argument("--n", type=lambda value: int(float(value.replace("_", ""))), default=1_000_000)
    parser.add_argument("--sync", choices=["True", "False", "interval"], default="True")
    parser.add_argument("--trees", required=True, help="two source trees, comma-separated")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="writer threads in each process")
    parser.add_argument("--adds", type=int, default=10_000, help="adds in all, per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the copies go (default: beside --store)")
    args = parser.parse_args()
    trees = [str(Path(tree).resolve()) for tree in args.trees.split(",")]
    if not os.path.exists(args.store):
        with simstore.open(args.store, "c", k=3, sync=False) as store:
            rng = np.random.default_rng(0)
            for start in range(0, args.n, 1_000_000):
                count = min(1_000_000, args.n - start)
                store.add_many(range(start, start + count), rng.integers(0, 2**64, count, dtype=np.uint64))
    with simstore.open(args.store, "r") as store:
        before = len(store)
    work = tempfile.mkdtemp(dir=args.dir or os.path.dirname(os.path.abspath(args.store)))
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    try:
        for round_index in range(args.rounds):
            for tree in trees:
                copy = os.path.join(work, "copy.simstore")
                shutil.copyfile(args.store, copy)
                os.sync()  # the copy's write-back stays out of the timed adds
                first = 10**12 + round_index * args.adds
                child = [sys.executable, "-c", CHILD, tree, copy]
                found = subprocess.run(
                    [*child, str(args.processes), str(args.threads), str(args.adds), str(first), args.sync],
                    capture_output=True,
                    text=True,
                    cwd="/",
                    check=False,
                )
                for leftover in Path(work).iterdir():
                    leftover.unlink()
                if found.returncode != 0:
                    print(found.stderr[-2000:], file=sys.stderr)
                    return 1
                run = json.loads(found.stdout.splitlines()[-1])
                if not run["module"].startswith(tree + os.sep):
                    print(f"{tree}: the run imported {run['module']}", file=sys.stderr)
                    return 1
                if run["stored"] != before + args.adds // args.processes * args.processes:
                    print(f"{tree}: {run['stored']} documents stored, expected more", file=sys.stderr)
                    return 1
                runs[tree].append(run)
                group = run["processes a commit"]
                groups = "" if group is None else f", {group:.2f} processes a commit"
                print(
                    f"round {round_index} {tree}: {run['docs/s']:,.0f} docs/s, p50 {run['p50 ms']:.3f} ms, "
                    f"p99 {run['p99 ms']:.2f} ms{groups}, {run['MB in use']:,.0f} MB in use after",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for tree, found_runs in runs.items():
        rates = sorted(run["docs/s"] for run in found_runs)
        p99s = sorted(run["p99 ms"] for run in found_runs)
        print(f"{tree}: docs/s {rates[0]:,.0f}-{rates[-1]:,.0f}, p99 {p99s[0]:.2f}-{p99s[-1]:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
