"""Group commit, write batches and flushing (simstore/commit/group.py).

A group is formed deterministically: the test holds the store's lock, starts
one thread per call and waits until each has joined the queue (the first one
leads and waits for the lock), then lets go, so the leader takes them all as
one transaction. Nothing here depends on timing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simstore
import simstore.store.writes
from simstore.engine import _lmdb, wal, writelog
from simstore.keys import pack_key
from simstore.store.facade import Store

Call = Callable[[], Any]


def _queued(store: Store) -> int:
    with store._engine.commit.queue.mutex:
        return len(store._engine.commit.queue.waiting)


def run_as_group(store: Store, calls: list[Call]) -> list[tuple[str, Any]]:
    """Run ``calls`` in threads that all join one group commit, in list
    order; each outcome is ``("ok", result)`` or ``("error", exception)``."""
    outcomes: list[tuple[str, Any]] = [("missing", None)] * len(calls)

    def run(index: int, call: Call) -> None:
        try:
            outcomes[index] = ("ok", call())
        except Exception as exc:
            outcomes[index] = ("error", exc)

    threads = []
    store._engine.lock.acquire()
    try:
        for index, call in enumerate(calls):
            thread = threading.Thread(target=run, args=(index, call))
            thread.start()
            threads.append(thread)
            while _queued(store) < index + 1:  # joined the queue, in this order
                assert thread.is_alive(), outcomes[index]
                time.sleep(0.0005)
    finally:
        store._engine.lock.release()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    return outcomes


class Flushes:
    """Counts the flushes and records what is on the disk.

    Without a write-ahead log (LMDB's own flushes): ``count`` is every
    ``fdatasync``; each flush that returned covers every commit up to the
    latest at its start, and each commit that returned covers every commit
    before it (LMDB flushes the file before it writes the commit's meta page).
    With the log: ``records`` counts the flushes of records, each covering its
    transaction and every one before (records are written in commit order);
    ``checkpoints`` counts wal, each covering every commit up to the
    latest at its start. The checkpoints' thread is held off. One process
    writes, so the latest commit is this one's."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.records = 0
        self.checkpoints = 0
        self.covered: list[int] = []
        self.lock = threading.Lock()
        self.appended = -1
        monkeypatch.setattr(wal, "CHECKPOINT_INTERVAL", 3600.0)
        real_write = _lmdb.Environment.write
        real_flush_file = _lmdb.Environment.flush_file
        real_append = writelog.WriteLog.append
        real_log_flush = writelog.WriteLog.flush
        real_checkpoint = wal.LogWriter._checkpoint
        flushes = self

        def write(env: _lmdb.Environment, body: Any, record: Any = None) -> Any:
            result = real_write(env, body, record)
            if env._sync and env.log_writer is None:
                with flushes.lock:
                    flushes.covered.append(env.last_txn_id() - 1)
            return result

        def flush_file(env: _lmdb.Environment) -> None:
            target = env.last_txn_id()
            real_flush_file(env)
            with flushes.lock:
                flushes.covered.append(target)

        def append(log: writelog.WriteLog, position: int, txn_id: int, payload: bytes, salt: int) -> int:
            with flushes.lock:
                flushes.appended = txn_id
            return real_append(log, position, txn_id, payload, salt)

        def log_flush(log: writelog.WriteLog) -> None:
            with flushes.lock:
                target = flushes.appended
            real_log_flush(log)
            with flushes.lock:
                flushes.records += 1
                flushes.covered.append(target)

        def checkpoint(writer: wal.LogWriter) -> None:
            real_checkpoint(writer)
            with flushes.lock:
                flushes.checkpoints += 1

        real_fdatasync = os.fdatasync

        def fdatasync(descriptor: int) -> None:
            with flushes.lock:
                flushes.count += 1
            real_fdatasync(descriptor)

        monkeypatch.setattr(_lmdb.Environment, "write", write)
        monkeypatch.setattr(_lmdb.Environment, "flush_file", flush_file)
        monkeypatch.setattr(writelog.WriteLog, "append", append)
        monkeypatch.setattr(writelog.WriteLog, "flush", log_flush)
        monkeypatch.setattr(wal.LogWriter, "_checkpoint", checkpoint)
        monkeypatch.setattr(os, "fdatasync", fdatasync)

    def durable_up_to(self) -> int:
        with self.lock:
            return max(self.covered, default=-1)


def logged(store: Store) -> bool:
    """Whether the store writes through the write-ahead log."""
    return store._engine.env.log_writer is not None


@pytest.fixture
def txn_of(monkeypatch: pytest.MonkeyPatch) -> dict[bytes, int]:
    """The id of the (last) write transaction that wrote each packed key."""
    written: dict[bytes, int] = {}
    real_put_one = simstore.store.writes.put_one

    def put_one(engine: Any, txn: Any, state: Any, packed: bytes, *args: Any) -> Any:
        written[packed] = int(txn.id())
        return real_put_one(engine, txn, state, packed, *args)

    monkeypatch.setattr(simstore.store.writes, "put_one", put_one)
    return written


@pytest.fixture
def no_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened from now on have no write-ahead log (as where none can be
    made): ``sync=True`` commits pay LMDB's own flushes."""
    monkeypatch.setattr(wal.LogWriter, "open_file", staticmethod(lambda _path: None))


@pytest.fixture(params=["log", "no log"])
def sync_store(request: pytest.FixtureRequest, store_path: str) -> Iterator[Store]:
    """A ``sync=True`` store, with the write-ahead log and without."""
    if request.param == "no log":
        request.getfixturevalue("no_log")
    with simstore.open(store_path, k=3, sync=True) as opened:
        assert logged(opened) == (request.param == "log")
        yield opened


@pytest.fixture
def lmdb_sync_store(no_log: None, store_path: str) -> Iterator[Store]:
    """A ``sync=True`` store without the write-ahead log."""
    with simstore.open(store_path, k=3, sync=True) as opened:
        yield opened


def fp_of(index: int) -> int:
    return (index * 0x9E3779B97F4A7C15 + 0x1234567) % (1 << 64)


# ---------------------------------------------------------------- group commit


def test_concurrent_adds_from_threads_all_land(sync_store: Store) -> None:
    threads, per_thread = 8, 60

    def work(thread: int) -> None:
        for index in range(per_thread):
            number = thread * per_thread + index
            sync_store.add(f"doc-{number}", fingerprint=fp_of(number), meta={"n": number})

    workers = [threading.Thread(target=work, args=(thread,)) for thread in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(sync_store) == threads * per_thread
    for number in range(threads * per_thread):
        assert sync_store[f"doc-{number}"] == simstore.Record(f"doc-{number}", fp_of(number), {"n": number})
    assert sync_store.check() == []


def test_a_group_is_one_transaction_and_one_flush(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch, txn_of: dict[bytes, int]
) -> None:
    flushes = Flushes(monkeypatch)
    calls = [lambda n=n: sync_store.add(f"k{n}", fingerprint=fp_of(n)) for n in range(6)]
    outcomes = run_as_group(sync_store, calls)
    assert outcomes == [("ok", fp_of(n)) for n in range(6)]
    assert len({txn_of[pack_key(f"k{n}")] for n in range(6)}) == 1
    if logged(sync_store):
        assert flushes.records == 1  # (the store's first checkpoint came before it)
    else:
        assert flushes.count == 1
    assert flushes.durable_up_to() >= txn_of[pack_key("k0")]


def test_a_returned_sync_add_has_been_flushed(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch, txn_of: dict[bytes, int]
) -> None:
    flags = sync_store._engine.env.env.flags()
    if logged(sync_store):
        # LMDB never flushes the file: each commit's record in the log is
        # flushed before it commits.
        assert flags["sync"] is False
    else:
        # LMDB flushes the file at every commit (MDB_NOSYNC is off) before it
        # writes the commit's meta page, which is left unflushed: a flush or a
        # later commit must have covered the commit by the time the call returns.
        assert flags["sync"] is True
        assert flags["metasync"] is False
    flushes = Flushes(monkeypatch)
    late: list[str] = []

    def work(thread: int) -> None:
        for index in range(40):
            key = f"t{thread}-{index}"
            sync_store.add(key, fingerprint=fp_of(thread * 1000 + index))
            if flushes.durable_up_to() < txn_of[pack_key(key)]:
                late.append(key)

    workers = [threading.Thread(target=work, args=(thread,)) for thread in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert late == []
    assert 1 <= (flushes.records if logged(sync_store) else flushes.count) <= 160
    # A bulk add (a checkpoint makes it durable, with the log).
    sync_store.add_many(["bulk-1", "bulk-2"], np.array([1, 2], dtype=np.uint64))
    assert flushes.durable_up_to() >= sync_store._engine.env.last_txn_id()


def test_bad_input_in_one_caller_fails_that_caller_only(sync_store: Store) -> None:
    sync_store.add("present", fingerprint=fp_of(99))
    calls: list[Call] = [
        lambda: sync_store.add("a", fingerprint=fp_of(1)),
        lambda: sync_store.remove("missing"),  # fails inside the shared transaction
        lambda: sync_store.add("b", fingerprint=fp_of(2)),
        lambda: sync_store.remove("present"),
        lambda: sync_store.remove("missing-too"),
        lambda: sync_store.add("c", fingerprint=fp_of(3)),
    ]
    outcomes = run_as_group(sync_store, calls)
    assert [kind for kind, _ in outcomes] == ["ok", "error", "ok", "ok", "error", "ok"]
    assert isinstance(outcomes[1][1], simstore.KeyNotFoundError)
    assert isinstance(outcomes[4][1], simstore.KeyNotFoundError)
    assert sorted(sync_store.keys()) == ["a", "b", "c"]
    assert sync_store.check() == []
    # Input a caller can get wrong is refused before it joins anything.
    with pytest.raises(simstore.InvalidValueError):
        sync_store.add("d", fingerprint=-1)
    with pytest.raises(simstore.InvalidTypeError):
        sync_store.add(3.5, fingerprint=1)  # type: ignore[arg-type]
    assert _queued(sync_store) == 0


def test_add_if_new_sees_earlier_members_of_its_group(sync_store: Store) -> None:
    base = fp_of(7)
    calls: list[Call] = [
        lambda: sync_store.add_if_new("first", fingerprint=base),
        lambda: sync_store.add_if_new("second", fingerprint=base ^ 0b11),  # within k of the first
        lambda: sync_store.add_if_new("far", fingerprint=~base % (1 << 64)),
    ]
    outcomes = run_as_group(sync_store, calls)
    assert outcomes[0] == ("ok", [])
    assert [match.key for match in outcomes[1][1]] == ["first"]
    assert outcomes[2] == ("ok", [])
    assert sorted(sync_store.keys()) == ["far", "first"]


def test_a_group_replaces_and_removes_documents_the_delta_and_tables_hold(store_path: str) -> None:
    with simstore.open(store_path, k=3, merge_threshold=16) as store:
        store.add_many([f"tabled-{n}" for n in range(20)], np.array([fp_of(n) for n in range(20)], np.uint64))
        store.add("in-delta", fingerprint=fp_of(100))
        calls: list[Call] = [
            lambda: store.add("tabled-1", fingerprint=fp_of(201)),
            lambda: store.remove("tabled-1"),
            lambda: store.add("in-delta", fingerprint=fp_of(202)),
            lambda: store.add("new", fingerprint=fp_of(203)),
            lambda: store.remove("new"),
            lambda: store.add("new", fingerprint=fp_of(204)),
            lambda: store.remove("tabled-2"),
        ]
        outcomes = run_as_group(store, calls)
        assert all(kind == "ok" for kind, _ in outcomes), outcomes
        assert "tabled-1" not in store
        assert "tabled-2" not in store
        assert store["in-delta"].fingerprint == fp_of(202)
        assert store["new"].fingerprint == fp_of(204)
        assert [match.key for match in store.query(fingerprint=fp_of(204))] == ["new"]
        assert store.query(fingerprint=fp_of(201)) == []
        assert store.check() == []
    with simstore.open(store_path) as reopened:
        assert reopened.check() == []
        assert len(reopened) == 20


def test_a_failed_body_leaves_the_delta_as_the_file_says(store_path: str) -> None:
    with simstore.open(store_path, k=3) as store:
        calls: list[Call] = [
            lambda: store.add("x", fingerprint=fp_of(1)),
            lambda: store.remove("nothing"),
        ]
        run_as_group(store, calls)
        assert store._engine.delta.as_dict() == {0: fp_of(1)}
        assert [match.key for match in store.query(fingerprint=fp_of(1))] == ["x"]


ops = st.lists(
    st.tuples(st.sampled_from(["add", "add_if_new", "remove"]), st.integers(0, 5), st.integers(0, 3)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=ops, grouped=ops)
def test_a_group_equals_its_members_one_after_another(tmp_path: Path, before: list, grouped: list) -> None:
    """Property: whatever a group holds (replacements, removals, near-duplicate
    checks, missing keys), the store ends as if its calls ran in queue order."""
    centres = [fp_of(n) for n in range(6)]

    def call(store: Store, op: tuple[str, int, int]) -> Call:
        verb, key, variant = op
        fingerprint = centres[key] ^ (1 << variant)
        if verb == "add":
            return lambda: store.add(f"k{key}", fingerprint=fingerprint)
        if verb == "add_if_new":
            return lambda: [match.key for match in store.add_if_new(f"k{key}", fingerprint=fingerprint)]
        return lambda: store.remove(f"k{key}")

    def outcome(run: Call) -> tuple[str, Any]:
        try:
            return ("ok", run())
        except simstore.KeyNotFoundError:
            return ("error", "missing")

    folder = tmp_path / f"case-{os.urandom(6).hex()}"
    folder.mkdir()
    results = []
    for grouping in (False, True):
        with simstore.open(str(folder / f"{grouping}.simstore"), k=3, sync=False) as store:
            for op in before:
                outcome(call(store, op))
            calls = [call(store, op) for op in grouped]
            if grouping:
                grouped_outcomes = run_as_group(store, calls)
                got = [(kind, "missing" if kind == "error" else value) for kind, value in grouped_outcomes]
            else:
                got = [outcome(run) for run in calls]
            results.append((got, sorted(store.items(), key=str), store.check()))
    assert results[0] == results[1]
    assert results[1][2] == []


# ---------------------------------------------------------------------- batch


def test_a_batch_is_one_transaction_and_one_flush(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch, txn_of: dict[bytes, int]
) -> None:
    sync_store.add("before", fingerprint=1)  # (the store's first checkpoint, with the log)
    flushes = Flushes(monkeypatch)
    with sync_store.batch() as batch:
        for number in range(50):
            batch.add(f"page-{number}", fingerprint=fp_of(number), meta={"n": number})
        sync_store.add("through-the-store", fingerprint=fp_of(77))  # same thread: in the batch
        assert len(batch) == 51
        assert "page-0" not in sync_store  # nothing written before the block ends
    if logged(sync_store):
        # A batch's record is a marker (the log holds single writes), and a
        # checkpoint makes the commit durable before the block ends.
        assert (flushes.records, flushes.checkpoints) == (1, 1)
    else:
        assert flushes.count == 1
    assert len({txn_of[pack_key(f"page-{number}")] for number in range(50)}) == 1
    assert flushes.durable_up_to() >= txn_of[pack_key("page-0")]
    assert len(sync_store) == 52
    assert sync_store["page-3"].meta == {"n": 3}
    assert sync_store.check() == []


def test_a_batch_that_raises_keeps_nothing(sync_store: Store) -> None:
    sync_store.add("kept", fingerprint=fp_of(1))

    def raising_block() -> None:
        with sync_store.batch() as batch:
            batch.add("a", fingerprint=fp_of(2))
            batch.remove("kept")
            raise RuntimeError("the crawler's own error")

    def failing_remove() -> None:
        with sync_store.batch() as batch:
            batch.add("b", fingerprint=fp_of(3))
            batch.remove("missing")  # fails at the end: the whole batch with it

    def bad_input() -> None:
        with sync_store.batch() as batch:
            batch.add("c", fingerprint=fp_of(4))
            batch.add("d", fingerprint=2**64)  # refused at once

    for block, error in (
        (raising_block, RuntimeError),
        (failing_remove, simstore.KeyNotFoundError),
        (bad_input, simstore.InvalidValueError),
    ):
        with pytest.raises(error):
            block()
        assert sync_store.keys() == ["kept"]
        assert sync_store._engine.delta.as_dict() == {0: fp_of(1)}
    assert sync_store.check() == []


def test_batches_do_not_nest_and_other_threads_are_not_in_them(sync_store: Store) -> None:
    with sync_store.batch() as batch:
        with pytest.raises(simstore.InvalidValueError), sync_store.batch():
            pass
        batch.add("mine", fingerprint=fp_of(1))
        other = threading.Thread(target=lambda: sync_store.add("theirs", fingerprint=fp_of(2)))
        other.start()
        other.join()
        assert "theirs" in sync_store
        assert "mine" not in sync_store
    assert sorted(sync_store.keys()) == ["mine", "theirs"]
    with sync_store.batch():
        pass  # an empty batch writes nothing


def test_batch_add_if_new_checks_against_earlier_writes_of_the_batch(sync_store: Store) -> None:
    """batch.add_if_new sees the batch's earlier writes, and says once the block has ended
    whether it inserted: no matches, or the near-duplicates that kept it out."""
    with sync_store.batch() as batch:
        one = batch.add_if_new("one", fingerprint=fp_of(5))
        two = batch.add_if_new("two", fingerprint=fp_of(5) ^ 1)
        with pytest.raises(simstore.InvalidValueError, match="has not committed"):
            one.result()
    assert sync_store.keys() == ["one"]
    assert one.result() == []
    assert [(match.key, match.distance) for match in two.result()] == [("one", 1)]


def test_store_add_if_new_inside_a_batch_is_refused(sync_store: Store) -> None:
    """store.add_if_new in a batch could not return its matches (the batch commits at the
    end): it is refused, and writes nothing, rather than answer None (read as "new")."""
    sync_store.add("kept", fingerprint=fp_of(5))
    with sync_store.batch() as batch:
        batch.add("first", fingerprint=fp_of(9))
        with pytest.raises(simstore.InvalidValueError, match=r"batch\.add_if_new"):
            sync_store.add_if_new("copy", fingerprint=fp_of(5) ^ 1)
        assert len(batch) == 1
    assert sorted(sync_store.keys()) == ["first", "kept"]


def test_a_failed_batch_leaves_its_pending_results_unknown(sync_store: Store) -> None:
    pending: list[Any] = []

    def block() -> None:
        with sync_store.batch() as batch:
            pending.append(batch.add_if_new("a", fingerprint=fp_of(3)))
            batch.remove("missing")  # fails at the end: the whole batch with it

    with pytest.raises(simstore.KeyNotFoundError):
        block()
    with pytest.raises(simstore.InvalidValueError):
        pending[0].result()
    assert "a" not in sync_store


# ------------------------------------------------------------- sync options


def test_interval_mode_flushes_every_n_commits_and_on_close(
    store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes = Flushes(monkeypatch)
    store = simstore.open(store_path, k=3, sync="interval", sync_every=3, sync_interval=3600)
    flags = store._engine.env.env.flags()
    assert flags["sync"] is False
    assert flags["metasync"] is False
    for number in range(7):
        store.add(f"k{number}", fingerprint=fp_of(number))
    assert flushes.count == 2  # after the 3rd and the 6th commit
    store.close()
    assert flushes.count == 3  # the 7th, at close
    with simstore.open(store_path) as reopened:
        assert len(reopened) == 7


def test_interval_mode_flushes_an_idle_store(store_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    flushes = Flushes(monkeypatch)
    with simstore.open(store_path, k=3, sync="interval", sync_interval=0.01, merge_on_close=False) as store:
        store.add("k", fingerprint=1)
        deadline = time.monotonic() + 30
        while flushes.count == 0:  # the timer's flush, not a later write's
            assert time.monotonic() < deadline
            time.sleep(0.01)
        store.flush()  # nothing left to flush: still fine
    assert flushes.count >= 1


def test_sync_false_never_flushes(store_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    flushes = Flushes(monkeypatch)
    with simstore.open(store_path, k=3, sync=False) as store:
        store.add("k", fingerprint=1)
        store.add_many([1, 2], np.array([5, 6], dtype=np.uint64))
    assert flushes.count == 0


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"sync": "always"}, simstore.InvalidTypeError),
        ({"sync": 1}, simstore.InvalidTypeError),
        ({"sync": "interval", "sync_interval": 0}, simstore.InvalidValueError),
        ({"sync_interval": "fast"}, simstore.InvalidTypeError),
        ({"sync_every": 0}, simstore.InvalidValueError),
        ({"sync_every": 2.5}, simstore.InvalidTypeError),
    ],
)
def test_sync_options_are_checked(store_path: str, options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        simstore.open(store_path, k=3, **options)
    assert not os.path.exists(store_path)


def test_sync_is_not_stored(store_path: str) -> None:
    with simstore.open(store_path, k=3, sync="interval") as store:
        store.add("k", fingerprint=1)
    with simstore.open(store_path, sync=True) as store:
        assert store._engine.options.sync is True
        assert store._engine.env.shares_commits


def test_flush_on_a_read_only_store_does_nothing(store_path: str) -> None:
    with simstore.open(store_path, k=3) as store:
        store.add("k", fingerprint=1)
    with simstore.open(store_path, "r") as store:
        store.flush()


def two_groups(
    store: Store, monkeypatch: pytest.MonkeyPatch, first: list[Call], second: list[Call]
) -> list[tuple[str, Any]]:
    """Run ``first`` as one group and ``second`` as the group queued behind it
    while the first one's transaction is open."""
    real_write = _lmdb.Environment.write
    opened = threading.Event()
    go_on = threading.Event()

    def write(env: _lmdb.Environment, body: Any, record: Any = None) -> Any:
        if not opened.is_set():
            opened.set()
            assert go_on.wait(60)
        return real_write(env, body, record)

    monkeypatch.setattr(_lmdb.Environment, "write", write)
    outcomes: list[tuple[str, Any]] = [("missing", None)] * (len(first) + len(second))
    threads: list[threading.Thread] = []

    def start(index: int, call: Call) -> None:
        def run() -> None:
            try:
                outcomes[index] = ("ok", call())
            except Exception as exc:
                outcomes[index] = ("error", exc)

        thread = threading.Thread(target=run)
        thread.start()
        threads.append(thread)

    store._engine.lock.acquire()
    for index, call in enumerate(first):
        start(index, call)
        while _queued(store) < index + 1:
            time.sleep(0.0005)
    store._engine.lock.release()
    assert opened.wait(60)  # the first group's transaction is open
    for index, call in enumerate(second, start=len(first)):
        start(index, call)
        while _queued(store) < index - len(first) + 1:
            time.sleep(0.0005)
    go_on.set()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    return outcomes


def test_the_next_groups_commit_makes_the_one_before_durable(
    lmdb_sync_store: Store, monkeypatch: pytest.MonkeyPatch, txn_of: dict[bytes, int]
) -> None:
    flushes = Flushes(monkeypatch)
    first = [lambda n=n: lmdb_sync_store.add(f"a{n}", fingerprint=fp_of(n)) for n in range(3)]
    second = [lambda n=n: lmdb_sync_store.add(f"b{n}", fingerprint=fp_of(100 + n)) for n in range(3)]
    outcomes = two_groups(lmdb_sync_store, monkeypatch, first, second)
    assert all(kind == "ok" for kind, _ in outcomes)
    assert txn_of[pack_key("b0")] == txn_of[pack_key("a0")] + 1
    # The first group's leader waited for the second group's commit (LMDB
    # flushed the file before writing its meta page); the second flushed.
    assert flushes.count == 1
    assert flushes.durable_up_to() >= txn_of[pack_key("b0")]


def test_a_following_group_that_writes_nothing_still_releases_the_one_before(
    lmdb_sync_store: Store, monkeypatch: pytest.MonkeyPatch, txn_of: dict[bytes, int]
) -> None:
    lmdb_sync_store.add("seen", fingerprint=fp_of(1))
    flushes = Flushes(monkeypatch)
    first = [lambda n=n: lmdb_sync_store.add(f"a{n}", fingerprint=fp_of(10 + n)) for n in range(3)]
    second: list[Call] = [
        lambda: [match.key for match in lmdb_sync_store.add_if_new("again", fingerprint=fp_of(1))],
        lambda: lmdb_sync_store.remove("never-stored"),
    ]
    outcomes = two_groups(lmdb_sync_store, monkeypatch, first, second)
    assert [kind for kind, _ in outcomes] == ["ok", "ok", "ok", "ok", "error"]
    assert outcomes[3][1] == ["seen"]
    assert flushes.count == 1  # the second group's leader flushed for the first
    assert flushes.durable_up_to() >= txn_of[pack_key("a0")]


def _gathering(store: Store) -> bool:
    with store._engine.commit.queue.mutex:
        return store._engine.commit.queue.gathering


def test_a_leader_waits_for_as_many_writers_as_the_last_group_held(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch, txn_of: dict[bytes, int]
) -> None:
    monkeypatch.setattr(simstore.commit.group, "GATHER_GAP_SECONDS", 30.0)
    run_as_group(sync_store, [lambda n=n: sync_store.add(f"a{n}", fingerprint=fp_of(n)) for n in range(3)])
    assert len({txn_of[pack_key(f"a{n}")] for n in range(3)}) == 1
    threads = []
    for n in range(3):
        add = lambda n=n: sync_store.add(f"b{n}", fingerprint=fp_of(10 + n))  # noqa: E731
        thread = threading.Thread(target=add)
        thread.start()
        threads.append(thread)
        if n == 2:
            break  # the group is whole: the leader commits it at once
        deadline = time.monotonic() + 60
        while not (_queued(sync_store) == n + 1 and _gathering(sync_store)):
            assert time.monotonic() < deadline
            time.sleep(0.0005)
        # The leader still waits for the third writer: nothing committed.
        assert pack_key("b0") not in txn_of
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert len({txn_of[pack_key(f"b{n}")] for n in range(3)}) == 1
    assert len(sync_store) == 6


def test_a_leader_stops_waiting_when_no_writer_comes(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as_group(sync_store, [lambda n=n: sync_store.add(f"a{n}", fingerprint=fp_of(n)) for n in range(4)])
    monkeypatch.setattr(simstore.commit.group, "GATHER_GAP_SECONDS", 0.2)
    started = time.monotonic()
    sync_store.add("alone-1", fingerprint=fp_of(20))  # waits once for the other three
    # A lone writer's groups hold one write: it waits no more.
    monkeypatch.setattr(simstore.commit.group, "GATHER_GAP_SECONDS", 30.0)
    for n in range(2, 5):
        sync_store.add(f"alone-{n}", fingerprint=fp_of(20 + n))
    assert time.monotonic() - started < 15
    assert len(sync_store) == 8


def test_a_transaction_that_fails_fails_its_whole_group_and_writes_nothing(store_path: str) -> None:
    with simstore.open(store_path, k=3, max_map_size=1 << 20) as store:
        big = {"text": "x" * 60_000}
        calls = [lambda n=n: store.add(f"big-{n}", fingerprint=fp_of(n), meta=big) for n in range(40)]
        outcomes = run_as_group(store, calls)
        assert all(kind == "error" and isinstance(value, simstore.StoreFullError) for kind, value in outcomes)
        assert len(store) == 0
        assert store._engine.delta.as_dict() == {}
        store.add("small", fingerprint=1)
        assert store.check() == []


def test_a_group_that_writes_without_changing_the_state_is_flushed(
    lmdb_sync_store: Store, monkeypatch: pytest.MonkeyPatch, txn_of: dict[bytes, int]
) -> None:
    lmdb_sync_store.add("page", fingerprint=fp_of(1), meta={"version": 1})
    flushes = Flushes(monkeypatch)
    outcomes = run_as_group(
        lmdb_sync_store, [lambda: lmdb_sync_store.add("page", fingerprint=fp_of(1), meta={"version": 2})]
    )
    assert outcomes == [("ok", fp_of(1))]
    assert flushes.durable_up_to() >= txn_of[pack_key("page")]
    assert lmdb_sync_store["page"].meta == {"version": 2}
    before = flushes.count
    # A group that writes nothing at all needs no flush of its own.
    found = run_as_group(lmdb_sync_store, [lambda: lmdb_sync_store.add_if_new("again", fingerprint=fp_of(1))])
    assert [match.key for match in found[0][1]] == ["page"]
    assert flushes.count == before


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=ops, batched=ops)
def test_a_batch_equals_its_writes_one_after_another_or_nothing(
    tmp_path: Path, before: list, batched: list
) -> None:
    """Property: a batch leaves the store as its writes run in order would,
    or, if one of them fails, exactly as it was."""
    centres = [fp_of(n) for n in range(6)]

    def apply(store: Any, op: tuple[str, int, int]) -> None:
        verb, key, variant = op
        fingerprint = centres[key] ^ (1 << variant)
        if verb == "add":
            store.add(f"k{key}", fingerprint=fingerprint)
        elif verb == "add_if_new":
            store.add_if_new(f"k{key}", fingerprint=fingerprint)
        else:
            store.remove(f"k{key}")

    folder = tmp_path / f"case-{os.urandom(6).hex()}"
    folder.mkdir()
    states = []
    for batching in (False, True):
        with simstore.open(str(folder / f"{batching}.simstore"), k=3, sync=False) as store:
            for op in before:
                with contextlib.suppress(simstore.KeyNotFoundError):
                    apply(store, op)
            start = sorted(store.items(), key=str)
            failed = False
            try:
                if batching:
                    with store.batch() as batch:
                        for op in batched:
                            apply(batch, op)
                else:
                    for op in batched:
                        apply(store, op)
            except simstore.KeyNotFoundError:
                failed = True
            end = sorted(store.items(), key=str)
            assert store.check() == []
            states.append((start, failed, end))
    (start, failed, sequential), (_, batch_failed, batched_end) = states
    assert batch_failed == failed
    assert batched_end == (start if failed else sequential)


@pytest.mark.parametrize("sync", [True, False, "interval"])
def test_every_map_is_opened_without_readahead(store_path: str, sync: bool | str) -> None:
    """Writers and readers map the file with MADV_RANDOM (LMDB's MDB_NORDAHEAD): with
    readahead, pages faulted in order become large page-cache folios that the kernel
    writes back whole, and a durable single add after a bulk load flushed 529 pages
    instead of 13 (benchmarks/experiments/group_commit_cpu.py)."""
    with simstore.open(store_path, "c", k=3, sync=sync) as store:  # type: ignore[arg-type]
        store.add_many(range(100), fingerprints=np.arange(100, dtype=np.uint64) * 0x9E3779B97F4A7C15)
        assert store._engine.env.env.flags()["readahead"] is False
    with simstore.open(store_path, "r") as reader:
        assert reader._engine.env.env.flags()["readahead"] is False


def test_calls_that_commit_on_their_own_are_refused_in_a_batch(sync_store: Store) -> None:
    """add_many, merge, compact and relayout would commit at once, ahead of the batch and
    outside its all or nothing: refused, and the block's own writes still go together."""
    sync_store.add("kept", fingerprint=fp_of(1))

    def block() -> None:
        with sync_store.batch() as batch:
            batch.add("batched", fingerprint=fp_of(2))
            for call in (
                lambda: sync_store.add_many(["bulk"], [fp_of(3)]),
                sync_store.merge,
                sync_store.compact,
                lambda: sync_store.relayout(blocks=5),
            ):
                with pytest.raises(simstore.InvalidValueError, match="commits on its own"):
                    call()
            raise RuntimeError("the block fails: nothing of it is written")

    with pytest.raises(RuntimeError):
        block()
    assert sync_store.keys() == ["kept"]


def test_a_batch_is_not_usable_after_its_block(sync_store: Store) -> None:
    with sync_store.batch() as batch:
        batch.add("inside", fingerprint=fp_of(1))
    for call in (
        lambda: batch.add("after", fingerprint=fp_of(2)),
        lambda: batch.add_if_new("after", fingerprint=fp_of(2)),
        lambda: batch.remove("inside"),
    ):
        with pytest.raises(simstore.InvalidValueError, match="has ended"):
            call()
    assert sync_store.keys() == ["inside"]
