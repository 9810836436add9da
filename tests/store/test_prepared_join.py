"""Joins prepared a step at a time across store calls (simstore.engine.prepared_join):
the state machine of format 3 with every join prepared in steps, interleaved with
writes, removals, reopens, compactions, other processes' joins and lost processes;
and the publish, the clean-up of a join left behind, and the record's refusals."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from test_multi_index_state_machine import MultiIndexStoreMachine
from test_multi_index_store import MULTI_INDEX
from test_state_machine import TEXTS

import simstore
from simstore.engine import prepared_join
from simstore.engine.column_index import ColumnIndex
from simstore.engine.column_tableset import ColumnTableSet
from simstore.engine.prepared_join import JOINING_KEY, Joining, PreparedJoin, sources_at
from simstore.errors import CorruptStoreError
from simstore.store import maintenance, stepped_joins


def _tableset(store: simstore.Store) -> ColumnTableSet:
    tableset = store._engine.tableset
    assert isinstance(tableset, ColumnTableSet)
    return tableset


def _record(store: simstore.Store) -> Joining | None:
    engine = store._engine
    with engine.read() as txn:
        raw = txn.get(JOINING_KEY, db=engine.handles.meta)
        return None if raw is None else Joining.decode(bytes(raw))


def _run_ids_in_tables(store: simstore.Store) -> set[int]:
    engine = store._engine
    held: set[int] = set()
    with engine.read() as txn:
        for database in _tableset(store).databases:
            for key in txn.cursor(database).iternext(keys=True, values=False):
                held.add(int.from_bytes(bytes(key)[:4], "big"))
    return held


def _prepared(store: simstore.Store) -> PreparedJoin | None:
    return _tableset(store).prepared


@pytest.fixture
def stepped() -> Iterator[None]:
    """Every join prepared in steps, of 5 entries a stretch, none taken by writes."""
    with (
        mock.patch.object(prepared_join, "STEPPED_JOIN_ENTRIES", 1),
        mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0),
        mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", 5),
    ):
        yield


def _store(path: Path, **options: Any) -> simstore.Store:
    return simstore.open(str(path), "n", layout=MULTI_INDEX, sync=False, merge_threshold=20, **options)


def _fill(store: simstore.Store, start: int, count: int, seed: int) -> dict[int, int]:
    """``count`` documents keyed ``start..``, random fingerprints, one batch of 20 at a time."""
    rng = np.random.default_rng(seed)
    added: dict[int, int] = {}
    for first in range(start, start + count, 20):
        keys = list(range(first, min(first + 20, start + count)))
        fps = rng.integers(0, 2**64, len(keys), dtype=np.uint64)
        store.add_many(keys, fps)
        added.update(zip(keys, fps.tolist(), strict=True))
    return added


def _begin(store: simstore.Store) -> PreparedJoin:
    """Runs enough for a join, and the join begun (no step taken yet)."""
    with mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0):
        _fill(store, 0, 80, seed=1)
    prepared = _prepared(store)
    assert prepared is not None
    assert prepared.steps == 0
    return prepared


def _assert_nothing_left_of(store: simstore.Store, run_id: int) -> None:
    """No join prepared, recorded, or left in the tables under ``run_id``; the store checks clean."""
    assert _prepared(store) is None
    assert _record(store) is None
    assert run_id not in _run_ids_in_tables(store)
    assert store.check() == []


def _steps(store: simstore.Store, count: int) -> None:
    """``count`` steps of the join being prepared (fewer if it is published first)."""
    stepped_joins.join_steps(store._engine, count)


def test_a_prepared_join_publishes_the_values_a_whole_join_writes(tmp_path: Path) -> None:
    """The same store joined whole and prepared in steps (4-entry stretches)
    holds the same run values byte for byte: same run ids, same columns."""
    held: list[dict[bytes, bytes]] = []
    for stepped_join in (False, True):
        with (
            mock.patch.object(prepared_join, "STEPPED_JOIN_ENTRIES", 1 if stepped_join else 1 << 40),
            mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0),
            mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", 4),
        ):
            store = _store(tmp_path / f"{stepped_join}.simstore")
            _fill(store, 0, 80, seed=7)
            if stepped_join:
                assert _prepared(store) is not None
                _steps(store, 1 << 20)  # every step left
            assert _prepared(store) is None
            assert store.stats().runs == 1
            engine = store._engine
            values: dict[bytes, bytes] = {}
            with engine.read() as txn:
                for index, database in enumerate(_tableset(store).databases):
                    for key, value in txn.cursor(database):
                        values[bytes([index]) + bytes(key)] = bytes(value)
            held.append(values)
            assert store.check() == []
            store.close()
    assert held[0] == held[1]


def test_queries_read_the_old_runs_until_the_join_is_published(tmp_path: Path, stepped: None) -> None:
    store = _store(tmp_path / "s.simstore")
    prepared = _begin(store)
    model = dict(store.items())
    runs = store.stats().runs
    _steps(store, 4)  # (puts of finished values are calls of their own)
    assert 2 <= prepared.steps <= 4
    assert not prepared.done
    assert store.stats().runs == runs  # nothing published
    assert store.stats().compacting
    assert prepared.joining.run_id in _run_ids_in_tables(store)  # (the band values are put: table 0's)
    for key, fingerprint in list(model.items())[::7]:
        assert {match.key for match in store.query(fingerprint=fingerprint, k=3)} >= {key}
    assert store.check() == []
    _steps(store, 1 << 20)
    assert _prepared(store) is None
    assert _record(store) is None
    assert store.stats().runs == runs - len(prepared.sources) + 1
    assert not store.stats().compacting
    assert store.check() == []
    store.close()


def test_entries_removed_before_the_join_began_are_dropped_and_later_ones_wait(
    tmp_path: Path, stepped: None
) -> None:
    """The join keeps what the graves said when it began: the entries of
    documents removed (or given new fingerprints) before it are dropped from
    the joined run; those removed while it was prepared stay, stamped stale,
    out of every answer until the next join."""
    store = _store(tmp_path / "s.simstore")
    with mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0):
        model = _fill(store, 0, 60, seed=8)
        for key in range(0, 60, 6):
            store.remove(key)
            del model[key]
        store.add(1, fingerprint=12345)  # its entry of the old fingerprint turns stale
        model[1] = 12345
        model.update(_fill(store, 60, 20, seed=9))  # the fourth run: the join begins
    prepared = _prepared(store)
    assert prepared is not None
    tabled = len(model) - store.stats().delta_docs  # (every run but the join's is joined)
    assert len(_tableset(store).catalog.runs) == len(prepared.sources)
    _steps(store, 2)
    late = [key for key in list(model)[:20:4] if key != 1]
    for key in late:
        store.remove(key)
    _steps(store, 1 << 20)
    joined = _tableset(store).catalog.runs
    assert joined[0].run_id == prepared.joining.run_id
    assert joined[0].entries == tabled  # none of the 10 removed, nor the replaced fingerprint
    for key in late:
        fingerprint = model.pop(key)
        assert key not in {match.key for match in store.query(fingerprint=fingerprint, k=3)}
    assert dict(store.items()) == model
    assert store.check() == []
    model.update(_fill(store, 200, 20, seed=10))  # a second run: compact() joins the two
    store.compact()
    assert [run.entries for run in _tableset(store).catalog.runs] == [len(model)]
    store.close()


def test_a_join_of_runs_whose_documents_were_all_removed_publishes_no_run(
    tmp_path: Path, stepped: None
) -> None:
    """Every document of the joined runs removed before the join began: it
    keeps nothing, and its publish drops the runs without putting one in
    their place (seen in CI, where the state machine expected a run)."""
    store = _store(tmp_path / "s.simstore")
    with (
        mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0),
        mock.patch.object(ColumnIndex, "plan", return_value=None),
    ):
        model = _fill(store, 0, 80, seed=11)  # four runs, no join planned yet
        store.remove_many(list(model))
    maintenance.compaction_step(store._engine)  # the join of the four begins
    prepared = _prepared(store)
    assert prepared is not None
    assert len(prepared.sources) == 4
    _steps(store, 1 << 20)
    assert prepared.entries == 0
    assert _tableset(store).catalog.runs == ()
    _assert_nothing_left_of(store, prepared.joining.run_id)
    assert dict(store.items()) == {}
    store.close()


def test_writes_pay_for_steps_and_take_one_each_once_runs_pile_up(tmp_path: Path, stepped: None) -> None:
    store = _store(tmp_path / "s.simstore")
    prepared = _begin(store)
    with mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 1e-9):
        store.add(10_000, fingerprint=1)  # pays a little: one step, whatever it costs
    assert prepared.steps == 1
    with mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 1e-9):
        store.add(10_001, fingerprint=2)  # the step's overrun is repaid first
    assert prepared.steps == 1
    model = dict(store.items())
    first = 20_000
    urgent_writes = 0
    # The writes pay nothing now, until runs pile up; newer runs are joined whole.
    later_joins_whole = mock.patch.object(prepared_join, "STEPPED_JOIN_ENTRIES", 1 << 40)
    later_joins_whole.start()
    while _prepared(store) is not None:
        assert first < 20_000 + 20 * 500, "the join was never finished"
        steps = prepared.steps
        model.update(_fill(store, first, 20, seed=first))  # one add_many of 20: a merge
        first += 20
        assert prepared.steps - steps <= 1  # one step a write, no more
        if prepared.steps > steps:
            urgent_writes += 1
            assert len(_tableset(store).catalog.runs) > stepped_joins.URGENT_RUNS or prepared.done
    later_joins_whole.stop()
    assert urgent_writes > 1  # spread over writes
    assert len(_tableset(store).catalog.runs) <= stepped_joins.URGENT_RUNS
    assert _record(store) is None
    assert dict(store.items()) == model
    assert store.check() == []
    store.close()


def test_close_drops_the_join_being_prepared(tmp_path: Path, stepped: None) -> None:
    store = _store(tmp_path / "s.simstore")
    prepared = _begin(store)
    _steps(store, 3)
    store.close()
    with simstore.open(str(tmp_path / "s.simstore"), "r") as reopened:
        assert _record(reopened) is None
        assert prepared.joining.run_id not in _run_ids_in_tables(reopened)
        assert reopened.check() == []


def _prepare_and_die(path: str, steps: int) -> None:
    """In a child process: begin a join, take ``steps`` steps, and die without closing."""
    with (
        mock.patch.object(prepared_join, "STEPPED_JOIN_ENTRIES", 1),
        mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0),
        mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", 5),
    ):
        store = simstore.open(path, sync=False, merge_threshold=20)
        _fill(store, 1000, 80, seed=3)
        assert _prepared(store) is not None
        _steps(store, steps)
    os._exit(0)


def test_a_join_left_by_a_process_that_died_is_dropped_by_the_next_join_begun(
    tmp_path: Path, stepped: None
) -> None:
    path = tmp_path / "s.simstore"
    _store(path).close()
    child = multiprocessing.get_context("fork").Process(target=_prepare_and_die, args=(str(path), 4))
    child.start()
    child.join()
    assert child.exitcode == 0
    store = simstore.open(str(path), sync=False, merge_threshold=20)
    left = _record(store)
    assert left is not None
    assert left.pid == child.pid
    assert left.run_id in _run_ids_in_tables(store)
    assert store.check() == []  # a prepared run outside the catalog is allowed
    assert left.abandoned(None)
    model = dict(store.items())
    model.update(_fill(store, 0, 80, seed=4))  # runs enough for another join: it drops the one left
    prepared = _prepared(store)
    assert prepared is not None
    assert prepared.joining.pid == os.getpid()
    assert left.run_id not in _run_ids_in_tables(store)
    _steps(store, 1 << 20)
    assert store.check() == []
    assert dict(store.items()) == model
    for key, fingerprint in list(model.items())[::5]:
        assert key in {match.key for match in store.query(fingerprint=fingerprint, k=0)}
    store.close()


def test_compact_drops_a_join_left_by_a_process_that_died(tmp_path: Path, stepped: None) -> None:
    path = tmp_path / "s.simstore"
    _store(path).close()
    child = multiprocessing.get_context("fork").Process(target=_prepare_and_die, args=(str(path), 4))
    child.start()
    child.join()
    store = simstore.open(str(path), sync=False, merge_threshold=20)
    left = _record(store)
    assert left is not None
    store.compact()
    _assert_nothing_left_of(store, left.run_id)
    store.close()


_COMPACT = """
import sys, simstore
with simstore.open(sys.argv[1], sync=False) as store:
    store.compact()
"""


def test_a_join_whose_runs_another_process_joined_is_dropped(tmp_path: Path, stepped: None) -> None:
    path = tmp_path / "s.simstore"
    store = _store(path)
    prepared = _begin(store)
    _steps(store, 2)
    subprocess.run([sys.executable, "-c", _COMPACT, str(path)], check=True)
    model = dict(store.items())
    assert store.stats().runs == 1
    _steps(store, 1)  # finds its runs gone
    _assert_nothing_left_of(store, prepared.joining.run_id)
    assert dict(store.items()) == model
    store.close()


def test_a_compact_finishes_what_a_prepared_join_began(tmp_path: Path, stepped: None) -> None:
    store = _store(tmp_path / "s.simstore")
    prepared = _begin(store)
    _steps(store, 2)
    store.compact()
    _assert_nothing_left_of(store, prepared.joining.run_id)
    assert store.stats().runs == 1
    store.close()


def test_a_relayout_drops_the_join_being_prepared(tmp_path: Path, stepped: None) -> None:
    store = _store(tmp_path / "s.simstore")
    _begin(store)
    _steps(store, 2)
    model = dict(store.items())
    store.relayout(MULTI_INDEX, k=6)
    assert _record(store) is None
    assert _prepared(store) is None
    assert dict(store.items()) == model
    assert store.check() == []
    store.close()


def test_joins_of_newer_runs_go_on_while_one_is_prepared(tmp_path: Path, stepped: None) -> None:
    """Joins of runs newer than the one being prepared are planned among those
    runs alone (and made whole when small), never of its runs again."""
    store = _store(tmp_path / "s.simstore")
    prepared = _begin(store)
    model = dict(store.items())
    with (
        mock.patch.object(prepared_join, "STEPPED_JOIN_ENTRIES", 1 << 40),
        mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0),
    ):
        model.update(_fill(store, 80, 80, seed=6))
    assert _prepared(store) is prepared
    sources = [run.entries for run in prepared.sources]
    assert [run.entries for run in _tableset(store).catalog.runs] == [*sources, 80]
    _steps(store, 1 << 20)
    assert _prepared(store) is None
    assert [run.entries for run in _tableset(store).catalog.runs] == [sum(sources), 80]
    assert dict(store.items()) == model
    assert store.check() == []
    store.close()


def test_the_record_refuses_damage() -> None:
    record = Joining(5, 1234, (1, 2, 3))
    assert Joining.decode(record.encode()) == record
    for raw in (b"", b"\xc1", b"\x93\x01\x02\x03", Joining(5, 1234, ()).encode()):
        with pytest.raises(CorruptStoreError):
            Joining.decode(raw)
    assert not Joining(5, os.getpid(), (1,)).abandoned(Joining(5, os.getpid(), (1,)))
    assert Joining(5, os.getpid(), (1,)).abandoned(None)
    assert not Joining(5, 1, (1,)).abandoned(None)  # init: alive (another user's)


def test_check_reports_a_record_that_names_a_run_of_the_catalog(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.simstore")
    _fill(store, 0, 40, seed=2)
    store.merge()
    run = _tableset(store).catalog.runs[0]
    engine = store._engine

    def body(txn: Any, state: Any) -> Any:
        txn.put(JOINING_KEY, Joining(run.run_id, 1, (run.run_id,)).encode(), db=engine.handles.meta)
        return None, state, maintenance.Change([], [])

    engine.write(body)
    assert any("cannot own" in problem for problem in store.check())
    store.close()


# -- the state machine ------------------------------------------------------------------


class SteppedJoinMachine(MultiIndexStoreMachine):
    """Format 3's state machine with every join prepared in steps of 4-entry
    stretches (taken by a rule, or all at once when runs pile up), with steps taken at random,
    documents added as text (their band keys joined too), the preparing
    process lost (its join left behind for the next one begun to drop), and
    another process compacting the store under the join."""

    def __init__(self) -> None:
        self._patches = [
            mock.patch.object(prepared_join, "STEPPED_JOIN_ENTRIES", 1),
            mock.patch.object(stepped_joins, "JOIN_SECONDS_PER_DOCUMENT", 0.0),
            mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", 4),
        ]
        for patch in self._patches:
            patch.start()
        super().__init__()
        self.text_keys = 0

    @initialize(k=st.integers(2, 8), threshold=st.integers(1, 6), merge_on_close=st.booleans())
    def open_store(self, k: int, threshold: int, merge_on_close: bool) -> None:
        """Small merges: runs enough for joins within a few writes."""
        super().open_store(k, threshold, merge_on_close)

    @rule(texts=st.lists(st.integers(0, len(TEXTS) - 1), min_size=1, max_size=8))
    def add_texts(self, texts: list[int]) -> None:
        keys = [f"text-{self.text_keys + index}" for index in range(len(texts))]
        self.text_keys += len(texts)
        returned = self.live.add_many(keys, texts=[TEXTS[text] for text in texts])
        for key, fingerprint in zip(keys, returned.tolist(), strict=True):
            self._stored(key, fingerprint, None)

    @rule(steps=st.integers(1, 40))
    def join_steps(self, steps: int) -> None:
        _steps(self.live, steps)

    @precondition(lambda self: self.store is not None and _prepared(self.live) is not None)
    @rule()
    def join_published(self) -> None:
        prepared = _prepared(self.live)
        assert prepared is not None
        runs = _tableset(self.live).catalog.runs
        in_place = sources_at(runs, prepared.sources) is not None
        _steps(self.live, 1 << 20)
        assert _prepared(self.live) is None
        assert _record(self.live) is None
        if in_place:  # (else another process joined its runs: it was dropped)
            run_ids = {run.run_id for run in _tableset(self.live).catalog.runs}
            # Published in the sources' place: a run, unless every entry was removed.
            assert (prepared.joining.run_id in run_ids) == bool(prepared.entries)
            assert not run_ids & {run.run_id for run in prepared.sources}

    @precondition(lambda self: self.store is not None and _prepared(self.live) is not None)
    @rule()
    def preparing_process_lost(self) -> None:
        """The join's state is lost as a dead process loses it: its values and
        record stay in the file, for the next join begun to drop."""
        _tableset(self.live).forget_join()
        assert self.live.check() == []

    @precondition(lambda self: self.store is not None and _prepared(self.live) is not None)
    @rule()
    def another_process_compacts(self) -> None:
        subprocess.run([sys.executable, "-c", _COMPACT, self.path], check=True)
        assert self.live.stats().runs <= 1

    @invariant()
    def the_prepared_join_is_recorded(self) -> None:
        if self.store is None or self.store.closed:
            return
        prepared = _prepared(self.store)
        if prepared is not None:
            record = _record(self.store)
            # (None, or another's: another process's compact took its runs; its next step drops it.)
            if record == prepared.joining:
                assert prepared.joining.run_id < _tableset(self.store).catalog.next_run_id

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            for patch in self._patches:
                patch.stop()


SteppedJoinMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSteppedJoinMachine = SteppedJoinMachine.TestCase
