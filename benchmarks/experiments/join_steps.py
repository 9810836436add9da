"""A large join made whole against the same join prepared in steps (issue 35:
"builds that keep their speed"), alternating in one process on one store.

The store gets ``--runs`` runs of ``--entries`` random fingerprints each (k = 5,
the default multi-index layout). Each round then joins them both ways and
leaves them as they were:

- **whole**: the join in one write transaction (what a write paid before
  joins were prepared in steps), rolled back at its end;
- **stepped**: the join begun, then every step timed one by one (each step
  merges a stretch of about 4M entries; a step that finishes a column puts it
  in a write of its own), then dropped instead of published (the publish is
  one small write: the catalog swapped, the runs dropped).

It reports each round's total seconds both ways, and the steps' count, p50
and longest (the longest a writer of another process would wait for one).

    python benchmarks/experiments/join_steps.py --runs 4 --entries 5M --rounds 3 --dir /tmp/js

Measured on the project's 2-core Xeon VM (shared, noisy: hence the alternation),
``benchmarks/results/join_steps_20M.md``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from _common import command_line, machine, parse_count  # noqa: E402

import simstore  # noqa: E402
from simstore.engine import prepared_join  # noqa: E402
from simstore.engine.column_tableset import ColumnTableSet  # noqa: E402
from simstore.store import stepped_joins  # noqa: E402


class _RolledBackError(Exception):
    """Raised at the end of the whole join, so that its transaction is aborted."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def _whole(store: simstore.Store) -> float:
    engine = store._engine
    tableset = engine.tableset
    assert isinstance(tableset, ColumnTableSet)

    def body(txn: Any, state: Any) -> Any:
        planned = tableset.start_compaction(tableset.catalog, (0, len(tableset.catalog.runs)))
        began = time.perf_counter()
        tableset.compaction_step(txn, planned)
        raise _RolledBackError(time.perf_counter() - began)

    try:
        engine.write(body)
    except _RolledBackError as done:
        return done.seconds
    raise AssertionError("the whole join was not rolled back")


def _stepped(store: simstore.Store) -> list[float]:
    engine = store._engine
    tableset = engine.tableset
    assert isinstance(tableset, ColumnTableSet)

    def dropped(self: ColumnTableSet, txn: Any, catalog: Any) -> None:
        self.abandon_join(txn)  # instead of publishing: the runs stay for the next round

    with mock.patch.object(prepared_join, "STEPPED_JOIN_ENTRIES", 1):
        began = time.perf_counter()
        assert stepped_joins.begin_join(engine) == 0
        steps = [time.perf_counter() - began]
    with mock.patch.object(ColumnTableSet, "publish_join", dropped):
        while tableset.prepared is not None:
            began = time.perf_counter()
            stepped_joins.join_steps(engine, 1)
            steps.append(time.perf_counter() - began)
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--entries", type=parse_count, default=parse_count("5M"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/join_steps")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    folder = Path(args.dir)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(20_261_129)
    store = simstore.open(str(folder / "join.simstore"), "n", k=5, layout="multi-index", sync=False)
    # No join while the runs are written: the last run only begins one, dropped below.
    with (
        mock.patch.object(prepared_join, "STEPPED_JOIN_ENTRIES", 1),
        mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0),
    ):
        for run in range(args.runs):
            first = run * args.entries
            fingerprints = rng.integers(0, 2**64, args.entries, dtype=np.uint64)
            store.add_many(np.arange(first, first + args.entries), fingerprints)
    stepped_joins.let_go_of_join(store._engine)
    runs = [run.entries for run in store._engine.tableset.catalog.runs]
    lines = [
        "# A large join made whole, and prepared in steps",
        "",
        f"Command: `{command_line()}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  ",
        f"Machine: {', '.join(f'{name} {value}' for name, value in machine(str(folder)).items())}  ",
        f"Runs joined: {runs} (bare fingerprints: no band keys)",
        "",
        "| round | whole s | stepped s | stepped / whole | steps | step p50 ms | longest step ms |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    ratios = []
    for round_number in range(args.rounds):
        if round_number % 2:
            steps = _stepped(store)
            whole = _whole(store)
        else:
            whole = _whole(store)
            steps = _stepped(store)
        total = sum(steps)
        ratios.append(total / whole)
        line = (
            f"| {round_number + 1} | {whole:.2f} | {total:.2f} | {total / whole:.2f} | {len(steps)} "
            f"| {1000 * float(np.median(steps)):.0f} | {1000 * max(steps):.0f} |"
        )
        lines.append(line)
        print(line, flush=True)
    assert [run.entries for run in store._engine.tableset.catalog.runs] == runs
    store.close()
    shutil.rmtree(folder, ignore_errors=True)
    lines += ["", f"Stepped / whole, median of the rounds: {float(np.median(ratios)):.2f}."]
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
