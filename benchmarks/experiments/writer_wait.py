"""How long another process's writer waits while a bulk load pays its joins
(issue 35: "no writer waiting > 0.1 s").

One process grows a store with ``add_many`` in batches of ``--batch`` random
fingerprints up to ``--docs``. A second process, started by this script, adds
one document at a time (``sync=False``) for as long as the first runs, timing
every ``add``. For each batch the report gives its docs/s, whether it paid a
join (the store held fewer runs after it than before it plus one), and the
second writer's adds that ended during it: how many, p50, p99, the longest,
and how many took more than 0.1 s.

A format-3 join is one write transaction today, and LMDB lets one writer in
at a time, so the second writer waits for all of it: this measures what a
join prepared outside the write transaction (``docs/format3.md``, "What
format 3 still needs") would have to bring down.

    python benchmarks/experiments/writer_wait.py --docs 10M --batch 1M --dir /tmp/ww

Both processes time with ``CLOCK_MONOTONIC``, which Linux keeps one for the
whole machine, so an add is put in the batch whose span it ended in.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from _common import command_line, load_average, machine, parse_count  # noqa: E402

import simstore  # noqa: E402

# The second writer: single adds until the stop file appears; (end, seconds) of each.
CHILD = r"""
import os, sys, time
import numpy as np
import simstore
path, stop, out = sys.argv[1:4]
rng = np.random.default_rng(7)
fingerprints = rng.integers(0, 2**64, 1 << 20, dtype=np.uint64).tolist()
rows = []
with simstore.open(path, "w", sync=False) as store:
    index = 0
    while not os.path.exists(stop):
        began = time.monotonic()
        store.add(f"c{index}", fingerprint=fingerprints[index % len(fingerprints)])
        ended = time.monotonic()
        rows.append((ended, ended - began))
        index += 1
np.save(out, np.array(rows, dtype=np.float64).reshape(-1, 2))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=parse_count, default=parse_count("10M"))
    parser.add_argument("--batch", type=parse_count, default=parse_count("1M"))
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--dir", default="/tmp/writer_wait")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wait.simstore"
    stop, out = folder / "stop", folder / "adds.npy"
    for leftover in (path, Path(f"{path}-lock"), Path(f"{path}-log"), stop, out):
        leftover.unlink(missing_ok=True)
    lines = [
        "# Writer wait: single adds in a second process while `add_many` pays its joins",
        "",
        f"Command: `{command_line()}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  ",
        f"Machine: {machine(str(folder))['cpu']}, load {load_average()}",
        "",
    ]
    simstore.open(path, "n", k=args.k, sync=False).close()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(stop), str(out)])
    rng = np.random.default_rng(1)
    batches: list[tuple[float, float, int, int, int, int]] = []
    try:
        with simstore.open(path, "w", sync=False) as store:
            time.sleep(1.0)  # the second writer under way
            for start in range(0, args.docs, args.batch):
                count = min(args.batch, args.docs - start)
                fingerprints = rng.integers(0, 2**64, count, dtype=np.uint64)
                runs_before = len(store._engine.tableset.catalog.runs)  # (private: a benchmark's look)
                began = time.monotonic()
                store.add_many(range(start, start + count), fingerprints)
                ended = time.monotonic()
                runs_after = len(store._engine.tableset.catalog.runs)
                batches.append((began, ended, count, start + count, runs_before, runs_after))
    finally:
        stop.touch()
        child.wait(timeout=600)
    adds = np.load(out)
    lines += [
        f"Layout: k = {args.k}, {args.batch:,}-document batches to {args.docs:,}; "
        f"second writer: {len(adds):,} single adds (`sync=False`)",
        "",
        "| docs after | add_many docs/s | runs before / after | paid a join | second writer's adds "
        "| p50 ms | p99 ms | longest s | adds > 0.1 s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for began, ended, count, docs, runs_before, runs_after in batches:
        inside = adds[(adds[:, 0] >= began) & (adds[:, 0] <= ended), 1]
        joined = runs_after < runs_before + 1
        if len(inside):
            p50, p99 = np.percentile(inside, [50, 99]) * 1000
            longest, slow = float(inside.max()), int(np.count_nonzero(inside > 0.1))
            waits = f"{len(inside):,} | {p50:.2f} | {p99:.1f} | {longest:.2f} | {slow}"
        else:
            waits = "0 | - | - | - | -"
        lines.append(
            f"| {docs:,} | {count / (ended - began):,.0f} | {runs_before} / {runs_after} "
            f"| {'yes' if joined else 'no'} | {waits} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.output:
        Path(args.output).write_text(report, encoding="utf-8")
    shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
