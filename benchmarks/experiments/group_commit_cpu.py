"""Where the CPU of ``sync=True`` group commits goes: docs/s, group sizes, and
user and system CPU an add, for one or more writer threads of one process.

    python benchmarks/experiments/group_commit_cpu.py --base 100K --threads 1,8 --adds 40K

Each configuration adds ``--adds`` fingerprints, spread over its threads, into a
fresh store of ``--base`` random fingerprints (built with ``sync=False``, not
timed). Groups are counted by wrapping ``GroupCommit._lead``; the bytes
written to storage are the process's ``write_bytes`` (``/proc/self/io``),
which counts the pages its flushes sent to the disk.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import load_average, parse_count

import simstore
from simstore.commit import group as commit


def written_bytes() -> int:
    """What this process has sent to storage so far (Linux)."""
    with open("/proc/self/io") as counters:
        for line in counters:
            if line.startswith("write_bytes:"):
                return int(line.split(":")[1])
    return 0


def measure(base: int, threads: int, adds: int, directory: str) -> dict[str, float]:
    folder = tempfile.mkdtemp(dir=directory)
    path = os.path.join(folder, "writers.simstore")
    rng = np.random.default_rng(threads)
    try:
        with simstore.open(path, "c", k=3, sync=False) as store:
            store.add_many(range(base), rng.integers(0, 2**63, base, dtype=np.uint64))
        per_thread = adds // threads
        fingerprints = rng.integers(0, 2**63, threads * per_thread, dtype=np.uint64).tolist()
        group_sizes: list[int] = []
        lead = commit.GroupCommit._lead

        def counting_lead(self: commit.GroupCommit, engine: object, queue: object) -> object:
            outcome = lead(self, engine, queue)  # type: ignore[arg-type]
            group_sizes.append(len(outcome[0]))
            return outcome

        commit.GroupCommit._lead = counting_lead  # type: ignore[assignment,method-assign]
        try:
            with simstore.open(path, "w", sync=True) as store:

                def write(thread: int) -> None:
                    for index in range(per_thread):
                        store.add(f"t{thread}-{index}", fingerprint=fingerprints[thread * per_thread + index])

                workers = [threading.Thread(target=write, args=(thread,)) for thread in range(threads)]
                before = resource.getrusage(resource.RUSAGE_SELF)
                written_before = written_bytes()
                started = time.perf_counter()
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join()
                elapsed = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_SELF)
                written = written_bytes() - written_before
        finally:
            commit.GroupCommit._lead = lead  # type: ignore[method-assign]
    finally:
        shutil.rmtree(folder)
    done = threads * per_thread
    return {
        "docs_per_s": done / elapsed,
        "groups": len(group_sizes),
        "mean_group": float(np.mean(group_sizes)),
        "user_us": (after.ru_utime - before.ru_utime) / done * 1e6,
        "system_us": (after.ru_stime - before.ru_stime) / done * 1e6,
        "written_kib": written / done / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=parse_count, default=100_000)
    parser.add_argument("--threads", default="1,8")
    parser.add_argument("--adds", type=parse_count, default=40_000)
    parser.add_argument("--dir", default=None, help="where the stores go (default: the temp folder)")
    args = parser.parse_args()
    print(f"load average {load_average()}")
    print("| threads | docs/s | groups | adds a group | an add: user µs | system µs | KiB written |")
    print("|---|---|---|---|---|---|---|")
    for threads in (int(part) for part in args.threads.split(",")):
        found = measure(args.base, threads, args.adds, args.dir or tempfile.gettempdir())
        print(
            f"| {threads} | {found['docs_per_s']:,.0f} | {found['groups']:,.0f} | {found['mean_group']:.2f} "
            f"| {found['user_us']:.0f} | {found['system_us']:.0f} | {found['written_kib']:.0f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
