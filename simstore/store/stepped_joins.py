"""Large format-3 joins prepared a step at a time across writes
(:mod:`simstore.engine.prepared_join`): begun when the plan names one, paced
by the documents written, published once prepared, dropped when the store
closes or a ``compact()`` joins everything."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from simstore.engine import _lmdb
from simstore.engine.column_tableset import ColumnTableSet
from simstore.engine.delta import Change
from simstore.engine.format import State
from simstore.store.room import reserve_for

if TYPE_CHECKING:
    from simstore.engine.core import Engine

# With more runs than this (compaction fell behind the merges), every write
# takes a compaction step, credit or not (queries probe every run); a join
# being prepared then takes a step at every write, and writes pay
# URGENT_PACE times their credit.
URGENT_RUNS = 8
URGENT_PACE = 4
# Seconds of steps of a join prepared in steps (simstore.engine.prepared_join)
# that each document written pays for: a 10M add_many (about 13 s of its own
# on the 2-core test machine) pays 2.5 s, 0.84x its speed without a join. The
# joins a growth by 10M batches owes cost some 0.38 µs a document there
# (each document is joined about twice, at 0.18 µs), so they fall behind
# until more than URGENT_RUNS runs wait (benchmarks/results/scale_k5_stepped_100M.md).
JOIN_SECONDS_PER_DOCUMENT = 0.25e-6


def begin_join(engine: Engine) -> int | None:
    """Begin preparing the join the plan names (a large one) in steps,
    unless this process prepares one already or another process does:
    ``0`` (no entry moved yet) if begun, else ``None``."""
    tableset = engine.tableset
    if not isinstance(tableset, ColumnTableSet) or tableset.prepared is not None:
        return None

    def body(txn: _lmdb.Txn, state: State) -> tuple[Any, State, Change]:
        current = engine.tableset
        assert isinstance(current, ColumnTableSet)
        span = current.plan_span(current.catalog)
        begun = None if span is None else current.begin_join(txn, current.catalog, span)
        if begun is None:
            return None, state, Change([], [])
        catalog, prepared = begun
        return prepared, state, Change([], [], catalog=catalog)

    prepared = engine.write(body)
    if prepared is None:
        return None
    current = engine.tableset
    assert isinstance(current, ColumnTableSet)
    current.prepared = prepared
    engine.join_step_credit = 0.0
    return 0


def step_join(engine: Engine, documents: int) -> None:
    """Take the steps of the join being prepared that ``documents`` written
    pay for (:data:`JOIN_SECONDS_PER_DOCUMENT` each, a step's overrun repaid
    by the next writes; at least one, and :data:`URGENT_PACE` times as many,
    while more than :data:`URGENT_RUNS` runs wait), publishing it once
    prepared. No call takes every step left at once: a single add waits for
    one step (up to about a second at 100M: putting a finished column)."""
    tableset = engine.tableset
    if not isinstance(tableset, ColumnTableSet) or tableset.prepared is None:
        engine.join_step_credit = 0.0
        return
    urgent = len(tableset.catalog.runs) > URGENT_RUNS
    engine.join_step_credit += documents * JOIN_SECONDS_PER_DOCUMENT * (URGENT_PACE if urgent else 1)
    taken = 0
    while True:
        tableset = engine.tableset
        if not isinstance(tableset, ColumnTableSet) or tableset.prepared is None:
            return
        if engine.join_step_credit <= 0 and not (urgent and not taken):
            return
        started = time.monotonic()
        _join_step(engine, tableset)
        engine.join_step_credit -= time.monotonic() - started
        taken += 1


def join_steps(engine: Engine, steps: int) -> None:
    """Take ``steps`` steps of the join being prepared (fewer if it is
    published first), whatever the writes paid for."""
    for _ in range(steps):
        tableset = engine.tableset
        if not isinstance(tableset, ColumnTableSet) or tableset.prepared is None:
            return
        _join_step(engine, tableset)


def _join_step(engine: Engine, tableset: ColumnTableSet) -> None:
    """One step of ``tableset``'s prepared join: a stretch merged (the values
    it finished kept for the next step), or the values the last one finished
    put, or the join published once every value is put. Putting a finished
    column (up to 800 MB at 100M) is a step of its own, so that no call waits
    for the merge that finished it and its put together."""
    with engine.lock:
        engine.check_usable()
        prepared = tableset.prepared
        if prepared is None or tableset is not engine.tableset:
            return
        try:
            if prepared.finished:
                puts = prepared.finished
                size = sum(len(value) for _table, _kind, value in puts)
                reserve_for(engine, 0, 0, run_entries=0, extra_values=(len(puts), size))

                def put(txn: _lmdb.Txn, state: State) -> tuple[bool, State, Change]:
                    return tableset.put_prepared(txn, puts), state, Change([], [])

                if not engine.write(put):
                    tableset.forget_join()
                    return
                prepared.finished = []
                del puts
            elif not prepared.done:
                finished = tableset.join_step()
                if finished is None:  # its runs were joined by another process
                    let_go_of_join(engine)
                    return
                prepared.finished = finished
            else:

                def publish(txn: _lmdb.Txn, state: State) -> tuple[None, State, Change]:
                    joined = tableset.publish_join(txn, tableset.catalog)
                    return None, state, Change([], [], catalog=joined)

                engine.write(publish)
                tableset.forget_join()
        except BaseException:
            let_go_of_join(engine)
            raise


def drop_abandoned_join(engine: Engine) -> None:
    """Drop the values and record of a join a process left behind (it died,
    or this process let go of it unrecorded), if any."""
    tableset = engine.tableset
    if not isinstance(tableset, ColumnTableSet) or engine.readonly:
        return

    def drop(txn: _lmdb.Txn, state: State) -> tuple[None, State, Change]:
        tableset.drop_abandoned(txn)
        return None, state, Change([], [])

    engine.write(drop)


def let_go_of_join(engine: Engine) -> None:
    """Drop the join this process prepares, if any: its values and record
    from the file (best effort: left behind, the next join begun drops
    them), its buffers from memory."""
    tableset = engine.tableset
    if not isinstance(tableset, ColumnTableSet) or tableset.prepared is None:
        return
    try:
        if not engine.readonly and not engine.closed and engine.owns_file():

            def abandon(txn: _lmdb.Txn, state: State) -> tuple[None, State, Change]:
                tableset.abandon_join(txn)
                return None, state, Change([], [])

            engine.write(abandon)
    except Exception:  # (left behind, the record is dropped by the next join begun)
        pass
    finally:
        tableset.forget_join()
