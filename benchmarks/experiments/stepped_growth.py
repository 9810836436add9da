"""Where a growing store's batches spend their time on joins prepared in steps
(issue 35): each ``add_many`` of ``--batch`` random fingerprints, with the
time it spent taking join steps (and, inside them, merging stretches and
putting finished columns), the runs after it, and its longest step.

The bench_scale growth says how fast each batch was; on this shared machine
batches that pay no join at all differ by 30 %, so this says how much of a
batch was the join's. It wraps simstore's internal functions to time them.

    python benchmarks/experiments/stepped_growth.py --batch 10M --batches 10 --dir /tmp/sg

Measured on the project's 2-core Xeon VM, ``benchmarks/results/stepped_growth_100M.md``.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from _common import command_line, machine, parse_count  # noqa: E402

import simstore  # noqa: E402
from simstore.engine.column_tableset import ColumnTableSet  # noqa: E402
from simstore.store import stepped_joins  # noqa: E402

#: ``(what, seconds)`` of every timed call since the batch began.
TIMED: list[tuple[str, float]] = []


def _timed(owner: Any, name: str, what: str) -> None:
    real: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            TIMED.append((what, time.perf_counter() - began))

    setattr(owner, name, timed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=parse_count, default=parse_count("10M"))
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--dir", default="/tmp/stepped_growth")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    _timed(stepped_joins, "_join_step", "steps")
    _timed(ColumnTableSet, "join_step", "merging")
    _timed(ColumnTableSet, "put_prepared", "putting")
    folder = Path(args.dir)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    lines = [
        "# Join steps inside each batch of a growth",
        "",
        f"Command: `{command_line()}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  ",
        f"Machine: {', '.join(f'{name} {value}' for name, value in machine(str(folder)).items())}",
        "",
        "| docs | add_many s | of which steps s | merging s | putting s | steps | longest step s | runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    rng = np.random.default_rng(20_261_129)
    store = simstore.open(str(folder / "growth.simstore"), "n", k=5, layout="multi-index", sync=False)
    for batch in range(args.batches):
        fingerprints = rng.integers(0, 2**64, args.batch, dtype=np.uint64)
        TIMED.clear()
        began = time.perf_counter()
        store.add_many(np.arange(batch * args.batch, (batch + 1) * args.batch), fingerprints)
        seconds = time.perf_counter() - began
        spent: dict[str, float] = collections.defaultdict(float)
        for what, taken in TIMED:
            spent[what] += taken
        steps = [taken for what, taken in TIMED if what == "steps"]
        runs = store.stats()
        line = (
            f"| {(batch + 1) * args.batch / 1e6:g}M | {seconds:.1f} | {spent['steps']:.2f} "
            f"| {spent['merging']:.2f} | {spent['putting']:.2f} | {len(steps)} "
            f"| {max(steps, default=0.0):.2f} | {runs.runs}{' +' if runs.compacting else ''} |"
        )
        lines.append(line)
        print(line, flush=True)
    store.close()
    shutil.rmtree(folder, ignore_errors=True)
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
