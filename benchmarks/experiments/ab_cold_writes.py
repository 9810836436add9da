"""Single adds into a big store right after a cold restart, three ways of
mapping it, alternating in fresh processes: what mapping without readahead
costs the writer, and what the ways around it cost durable writes.

    python benchmarks/experiments/ab_cold_writes.py --base /data/base30M.simstore --docs 30M --adds 300K

The base store (built at k=3 with ``--docs`` random fingerprints in 10M
``add_many`` batches if missing, and kept) is copied for every run, and the
copy's cached pages are dropped. Then ``--adds`` single adds (``sync=False``)
report documents per second, p50/p99, the longest add, the adds over 0.1 s
and the time of each merge; then 2,000 single adds with ``sync=True`` report
their speed and the bytes the process dirtied per commit (``write_bytes`` of
``/proc/self/io``, counted by the page-cache folio: a large folio counts whole).

The ways:

- ``random``: simstore as it is (MADV_RANDOM on the map: each page fault reads
  one page);
- ``readahead``: LMDB's default mapping (faults read ahead, into large folios);
- ``warm``: as ``random``, after reading the whole file once with ``pread``
  (POSIX_FADV_RANDOM on the descriptor) before the first add.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import drop_page_cache, load_average, parse_count

import simstore

WAYS = ("random", "readahead", "warm")
BATCH = 10_000_000


def build(path: str, docs: int) -> None:
    fingerprints = np.random.default_rng(5).integers(0, 2**64, docs, dtype=np.uint64)
    with simstore.open(path, "c", k=3, sync=False) as store:
        for first in range(0, docs, BATCH):
            part = fingerprints[first : first + BATCH]
            store.add_many(np.arange(first, first + len(part)), fingerprints=part)


def written_bytes() -> int:
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("write_bytes"):
                return int(line.split()[1])
    return 0


def warm(path: str) -> float:
    started = time.perf_counter()
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_RANDOM)
        offset = 0
        while chunk := os.pread(descriptor, 1 << 20, offset):
            offset += len(chunk)
    finally:
        os.close(descriptor)
    return time.perf_counter() - started


def run(way: str, base: str, adds: int) -> None:
    """One process: one way, on a fresh copy of the base store."""
    import lmdb

    from simstore.store import maintenance

    if way == "readahead":
        opened = lmdb.open

        def with_readahead(*args: object, **kwargs: object) -> lmdb.Environment:
            kwargs["readahead"] = True
            return opened(*args, **kwargs)

        lmdb.open = with_readahead
    merges: list[float] = []
    merge = maintenance.merge

    def timed_merge(engine: object) -> int:
        started = time.perf_counter()
        try:
            return merge(engine)  # type: ignore[arg-type]
        finally:
            merges.append(time.perf_counter() - started)

    maintenance.merge = timed_merge
    copy = f"{base}.{way}.copy"
    shutil.copy(base, copy)
    try:
        drop_page_cache(copy)
        warmed = warm(copy) if way == "warm" else 0.0
        fingerprints = np.random.default_rng(7).integers(0, 2**64, adds, dtype=np.uint64).tolist()
        latencies = np.empty(adds)
        with simstore.open(copy, "w", sync=False) as store:
            started = time.perf_counter()
            for index, fingerprint in enumerate(fingerprints):
                before = time.perf_counter()
                store.add(10**12 + index, fingerprint=fingerprint)
                latencies[index] = time.perf_counter() - before
            elapsed = time.perf_counter() - started
        durable = 2000
        with simstore.open(copy, "w", sync=True) as store:
            dirtied = written_bytes()
            started = time.perf_counter()
            for index in range(durable):
                store.add(2 * 10**12 + index, fingerprint=fingerprints[index] ^ 0xFFFF)
            durable_rate = durable / (time.perf_counter() - started)
            dirtied = written_bytes() - dirtied
    finally:
        for leftover in (copy, f"{copy}-lock"):
            if os.path.exists(leftover):
                os.remove(leftover)
    merge_ms = np.array(merges) * 1e3
    print(
        f"| {way} | {warmed:.1f} | {adds / elapsed:,.0f} | {np.percentile(latencies, 50) * 1e6:.0f} | "
        f"{np.percentile(latencies, 99) * 1e6:.0f} | {latencies.max():.3f} | "
        f"{int((latencies > 0.1).sum())} | {len(merge_ms)} | "
        f"{np.median(merge_ms):.0f} / {merge_ms.max():.0f} | {int((merge_ms > 100).sum())} | "
        f"{durable_rate:,.0f} | {dirtied / durable / 1024:,.0f} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True)
    parser.add_argument("--docs", default="30M")
    parser.add_argument("--adds", default="300K")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--way", help=argparse.SUPPRESS)  # a child process's one way
    args = parser.parse_args()
    adds = parse_count(args.adds)
    if args.way:
        run(args.way, args.base, adds)
        return
    if not os.path.exists(args.base):
        build(args.base, parse_count(args.docs))
    print(f"{' '.join(sys.argv)}; load average {load_average()}\n")
    print(
        "| way | warm-up s | adds/s | p50 µs | p99 µs | longest s | adds > 0.1 s | merges | "
        "merge p50 / max ms | merges > 0.1 s | sync=True adds/s | KiB dirtied a durable add |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        for way in args.ways.split(","):
            command = [sys.executable, __file__, "--base", args.base, "--adds", args.adds, "--way", way]
            subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
