"""How many 4 KiB ``fdatasync`` calls a second this disk takes, from 1-8
threads flushing at once: one shared file, or a file each.

    python benchmarks/experiments/flush_rate.py --dir /work/bench-tmp

Each thread overwrites one page of a file written and flushed beforehand (so
no flush changes the file's length or allocates a block), then flushes it, for
``--seconds``. A durable write can return no sooner than one such flush; the
rate with many threads says whether flushes of different writers overlap on
the device (they do on the 2-core VM: see ``results/writers_notes.md``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

FILE_BYTES = 16 << 20
PAGE = b"x" * 4096


def _prepared(path: str) -> int:
    with open(path, "wb") as out:
        out.write(bytes(FILE_BYTES))
        out.flush()
        os.fsync(out.fileno())
    return os.open(path, os.O_WRONLY)


def flushes_per_second(folder: str, threads: int, shared: bool, seconds: float) -> float:
    files = 1 if shared else threads
    descriptors = [_prepared(os.path.join(folder, f"flush-{index}")) for index in range(files)]
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def flush_pages(thread: int) -> None:
        descriptor = descriptors[0 if shared else thread]
        position = thread * len(PAGE)
        while time.monotonic() < stop:
            os.pwrite(descriptor, PAGE, position % FILE_BYTES)
            os.fdatasync(descriptor)
            position += threads * len(PAGE)
            counts[thread] += 1

    workers = [threading.Thread(target=flush_pages, args=(thread,)) for thread in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for descriptor in descriptors:
        os.close(descriptor)
    return sum(counts) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=None, help="a folder on the disk to measure")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        print("| threads | one shared file: flushes/s | a file each: flushes/s |")
        print("|---|---|---|")
        for threads in (1, 2, 4, 8):
            shared = flushes_per_second(folder, threads, True, args.seconds)
            own = flushes_per_second(folder, threads, False, args.seconds)
            print(f"| {threads} | {shared:,.0f} | {own:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
