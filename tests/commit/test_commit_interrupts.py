"""An interrupt (``KeyboardInterrupt``) at chosen points of the group commit
(simstore/commit/group.py), of the writers' mailbox, of a read and of a merge's sorts.

Each case raises the interrupt once, at one point, in one thread, and checks that
the interrupted call alone sees it: the other threads' writes are committed (by a
new leader if theirs was interrupted before its commit), or get their outcome, or,
where the fate of their write cannot be told, ``CommitInterruptedError``; nothing
waits for ever; and the store holds what the callers were told, its delta in step
with the file. Groups are formed as in ``tests/commit/test_commit.py``: the test holds the
store's lock until every caller has joined the queue. ``tests/reliability/
test_interrupts.py`` sends real signals at random moments.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import simstore
import simstore.store.writes
from simstore.commit import group as commit
from simstore.commit import mailbox, queue
from simstore.commit.queue import CommitQueue
from simstore.engine import _lmdb, builder, wal
from simstore.engine.delta import Delta
from simstore.engine.format import GROUP_KEY, State
from simstore.keys import pack_key
from simstore.store.facade import Store

PATIENCE = 60.0  # bounds a hang on a busy machine; nothing here waits that long when it works


def fp_of(index: int) -> int:
    return (index * 0x9E3779B97F4A7C15 + 0x1234567) % (1 << 64)


Outcome = tuple[str, Any]


class Callers:
    """One thread per call, named after its key; each outcome is ``("ok", result)``,
    ``("error", exception)`` or ``("interrupted", KeyboardInterrupt)``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.threads: dict[str, threading.Thread] = {}
        self.outcomes: dict[str, Outcome] = {}

    def queued(self) -> int:
        queue = self.store._engine.commit.queue
        with queue.mutex:
            return len(queue.waiting)

    def start(self, name: str, call: Callable[[], Any], *, queued: int | None = None) -> None:
        """Start ``call`` in thread ``name``; wait until ``queued`` requests wait (if given)."""

        def run() -> None:
            try:
                self.outcomes[name] = ("ok", call())
            except Exception as exc:
                self.outcomes[name] = ("error", exc)
            except KeyboardInterrupt as exc:
                self.outcomes[name] = ("interrupted", exc)

        thread = threading.Thread(target=run, name=name)
        self.threads[name] = thread
        thread.start()
        deadline = time.monotonic() + PATIENCE
        while queued is not None and self.queued() < queued:
            assert thread.is_alive(), self.outcomes.get(name)
            assert time.monotonic() < deadline
            time.sleep(0.0005)

    def group(self, calls: dict[str, Callable[[], Any]]) -> None:
        """Start ``calls`` so that they join one group, in order."""
        with self.store._engine.lock:
            for index, (name, call) in enumerate(calls.items()):
                self.start(name, call, queued=index + 1)

    def join(self) -> dict[str, Outcome]:
        for thread in self.threads.values():
            thread.join(timeout=PATIENCE)
            assert not thread.is_alive(), f"{thread.name} hangs"
        return self.outcomes


def adds(store: Store, *names: str) -> dict[str, Callable[[], Any]]:
    return {name: lambda name=name: store.add(name, fingerprint=fp_of(ord(name[0]))) for name in names}


def in_thread(name: str) -> bool:
    return threading.current_thread().name == name


def once(condition: Callable[[], bool]) -> Callable[[], bool]:
    """A condition that holds the first time ``condition`` does, and never again."""
    fired = [False]

    def check() -> bool:
        if fired[0] or not condition():
            return False
        fired[0] = True
        return True

    return check


def settled(store: Store) -> None:
    """Nobody leads and nothing waits; the store still takes writes, and every
    document the file holds is found by a query (the delta is in step with it)."""
    queue = store._engine.commit.queue
    with queue.mutex:
        assert queue.waiting == []
        assert queue.leader is None
    store.add("after", fingerprint=fp_of(999))
    for key, fingerprint in store.items():
        assert key in [match.key for match in store.query(fingerprint, k=0)]
    assert store.check() == []


@pytest.fixture
def no_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wal.LogWriter, "open_file", staticmethod(lambda _path: None))


SYNCS = ["False", "interval", "True", "True without log"]


@pytest.fixture(params=SYNCS)
def any_store(request: pytest.FixtureRequest, store_path: str) -> Iterator[Store]:
    """A store of each sync mode (``sync=True`` with the write-ahead log and without)."""
    if request.param == "True without log":
        request.getfixturevalue("no_log")
    sync = {"False": False, "interval": "interval"}.get(request.param, True)
    with simstore.open(store_path, k=3, sync=sync) as opened:
        assert (opened._engine.env.log_writer is not None) == (request.param == "True")
        yield opened


# ------------------------------------------------------------------- the leader


def test_a_leader_interrupted_in_a_body_leaves_its_group_to_a_new_leader(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_put_one = simstore.store.writes.put_one
    at_b = once(lambda: in_thread("a"))

    def put_one(engine: Any, txn: Any, state: Any, packed: bytes, *args: Any) -> Any:
        if packed == pack_key("b") and at_b():
            raise KeyboardInterrupt  # in the leader, running b's body
        return real_put_one(engine, txn, state, packed, *args)

    monkeypatch.setattr(simstore.store.writes, "put_one", put_one)
    callers = Callers(any_store)
    callers.group(adds(any_store, "a", "b", "c"))
    outcomes = callers.join()
    assert outcomes["a"][0] == "interrupted"
    assert outcomes["b"] == ("ok", fp_of(ord("b")))
    assert outcomes["c"] == ("ok", fp_of(ord("c")))
    assert sorted(any_store.keys()) == ["b", "c"]  # the leader's own write did not commit
    settled(any_store)


def test_a_leader_interrupted_between_its_bodies_and_the_commit_runs_them_again(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = _lmdb.Environment._write
    in_a = once(lambda: in_thread("a"))

    def _write(env: _lmdb.Environment, body: Any, *args: Any, **kwargs: Any) -> Any:
        def then_interrupted(txn: Any) -> Any:
            result = body(txn)
            if in_a():
                raise KeyboardInterrupt  # the bodies ran; the transaction aborts
            return result

        return real_write(env, then_interrupted, *args, **kwargs)

    monkeypatch.setattr(_lmdb.Environment, "_write", _write)
    callers = Callers(any_store)
    callers.group(adds(any_store, "a", "b", "c"))
    outcomes = callers.join()
    assert outcomes["a"][0] == "interrupted"
    assert outcomes["b"][0] == outcomes["c"][0] == "ok"
    assert sorted(any_store.keys()) == ["b", "c"]
    settled(any_store)


@pytest.mark.parametrize("point", ["after the commit", "after the delta took it"])
def test_a_leader_interrupted_after_its_commit_gives_its_group_their_outcomes(
    any_store: Store, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    any_store.add("x", fingerprint=fp_of(1))
    in_a = once(lambda: in_thread("a"))
    if point == "after the commit":
        real_write = _lmdb.Environment.write

        def write(env: _lmdb.Environment, body: Any, record: Any = None) -> Any:
            result = real_write(env, body, record)
            if in_a():
                raise KeyboardInterrupt  # committed; Engine.write has not seen it
            return result

        monkeypatch.setattr(_lmdb.Environment, "write", write)
    else:
        real_committed = commit.GroupCommit.committed

        def committed(self: commit.GroupCommit, engine: Any) -> None:
            if in_a():
                raise KeyboardInterrupt  # the delta has the commit's state
            real_committed(self, engine)

        monkeypatch.setattr(commit.GroupCommit, "committed", committed)
    callers = Callers(any_store)
    callers.group(
        {
            "a": lambda: any_store.add("a", fingerprint=fp_of(2)),
            "b": lambda: any_store.add_if_new("b", fingerprint=fp_of(1) ^ 0b101),  # near x
            "c": lambda: any_store.add_if_new("c", fingerprint=fp_of(3)),
            "d": lambda: any_store.remove("x"),
        }
    )
    outcomes = callers.join()
    assert outcomes["a"][0] == "interrupted"
    assert outcomes["b"][0] == "ok"
    assert [(match.key, match.distance) for match in outcomes["b"][1]] == [("x", 2)]
    assert outcomes["c"] == ("ok", [])
    assert outcomes["d"] == ("ok", None)
    assert sorted(any_store.keys()) == ["a", "c"]  # the leader's own write committed too
    assert any_store.query(fp_of(1), k=3) == []  # x is gone from the delta as from the file
    settled(any_store)


def test_a_leader_that_cannot_tell_whether_it_committed_says_so(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process committed a group of its own right after this one: the
    token this group's commit left is gone, so the leader cannot tell."""
    real_write = _lmdb.Environment.write
    in_a = once(lambda: in_thread("a"))

    def write(env: _lmdb.Environment, body: Any, record: Any = None) -> Any:
        result = real_write(env, body, record)
        if in_a():
            meta = any_store._engine.handles.meta
            real_write(env, lambda txn: txn.put(GROUP_KEY, b"another!", db=meta))
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(_lmdb.Environment, "write", write)
    callers = Callers(any_store)
    callers.group(adds(any_store, "a", "b", "c"))
    outcomes = callers.join()
    assert outcomes["a"][0] == "interrupted"
    for name in "bc":
        kind, error = outcomes[name]
        assert kind == "error"
        assert isinstance(error, simstore.CommitInterruptedError)
        assert isinstance(error, simstore.SimstoreError)
    assert sorted(any_store.keys()) == ["a", "b", "c"]  # (they had committed)
    settled(any_store)


def _commit_blocked_in(monkeypatch: pytest.MonkeyPatch, key: str, until: threading.Event) -> threading.Event:
    """Make the body writing ``key`` wait for ``until``; returns an event set once it waits."""
    real_put_one = simstore.store.writes.put_one
    waiting = threading.Event()

    def put_one(engine: Any, txn: Any, state: Any, packed: bytes, *args: Any) -> Any:
        if packed == pack_key(key) and not until.is_set():
            waiting.set()
            assert until.wait(PATIENCE)
        return real_put_one(engine, txn, state, packed, *args)

    monkeypatch.setattr(simstore.store.writes, "put_one", put_one)
    return waiting


def test_a_leader_interrupted_as_it_hands_on_the_lead(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt as the leader begins to hand on the lead (before it did anything)."""
    # a leads a group (a lone write without sync commits past the queue)
    any_store._engine.commit.lone_commits = False
    go = threading.Event()
    committing = _commit_blocked_in(monkeypatch, "a", go)
    real_pass_lead = CommitQueue.pass_lead
    in_a = once(lambda: in_thread("a"))

    def pass_lead(queue: CommitQueue, request: queue.Request) -> None:
        if in_a():
            raise KeyboardInterrupt  # before it handed anything on
        real_pass_lead(queue, request)

    monkeypatch.setattr(CommitQueue, "pass_lead", pass_lead)
    callers = Callers(any_store)
    calls = adds(any_store, "a", "b", "c")
    callers.start("a", calls["a"])
    assert committing.wait(PATIENCE)  # a leads a group of its own, committing
    callers.start("b", calls["b"], queued=1)
    callers.start("c", calls["c"], queued=2)
    go.set()
    outcomes = callers.join()
    assert outcomes["a"][0] == "interrupted"
    assert outcomes["b"][0] == outcomes["c"][0] == "ok"
    assert sorted(any_store.keys()) == ["a", "b", "c"]
    settled(any_store)


class InterruptingWake:
    """A request's wake-up lock that interrupts its waiter (``waiter``: ``"before"``
    it is woken, once ``before`` is set, or just ``"after"``), or the thread
    ``waker`` just after it woke it."""

    def __init__(
        self,
        real: Any,
        waiter: str | None = None,
        waker: str | None = None,
        before: threading.Event | None = None,
    ) -> None:
        self.real = real
        self.waiter = waiter
        self.waker = waker
        self.before = before

    def acquire(self) -> bool:
        if self.waiter == "before":
            assert self.before is not None
            assert self.before.wait(PATIENCE)
            raise KeyboardInterrupt
        woken = bool(self.real.acquire())
        if self.waiter == "after":
            raise KeyboardInterrupt
        return woken

    def release(self) -> None:
        self.real.release()
        if self.waker is not None and in_thread(self.waker):
            raise KeyboardInterrupt


def wakes_of(monkeypatch: pytest.MonkeyPatch, name: str, **how: Any) -> threading.Event:
    """Give the requests thread ``name`` makes an :class:`InterruptingWake`;
    returns the event a ``"before"`` waiter waits for."""
    before = threading.Event()
    real_init = queue.Request.__init__

    def init(request: queue.Request, *args: Any, **kwargs: Any) -> None:
        real_init(request, *args, **kwargs)
        if in_thread(name):
            request.wake = InterruptingWake(request.wake, before=before, **how)  # type: ignore[assignment]

    monkeypatch.setattr(queue.Request, "__init__", init)
    return before


def test_a_leader_interrupted_just_after_it_handed_on_the_lead(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = threading.Event()
    committing = _commit_blocked_in(monkeypatch, "a", go)
    wakes_of(monkeypatch, "b", waker="a")
    callers = Callers(any_store)
    calls = adds(any_store, "a", "x", "b", "c")
    with any_store._engine.lock:  # a and x form one group
        callers.start("a", calls["a"], queued=1)
        callers.start("x", calls["x"], queued=2)
    assert committing.wait(PATIENCE)
    callers.start("b", calls["b"], queued=1)
    callers.start("c", calls["c"], queued=2)
    go.set()
    outcomes = callers.join()
    assert outcomes["a"][0] == "interrupted"
    assert outcomes["x"][0] == outcomes["b"][0] == outcomes["c"][0] == "ok"
    assert sorted(any_store.keys()) == ["a", "b", "c", "x"]
    settled(any_store)


def test_a_leader_interrupted_between_two_wake_ups_wakes_the_rest(any_store: Store) -> None:
    callers = Callers(any_store)
    calls = adds(any_store, "a", "b", "c")
    with any_store._engine.lock:
        for index, name in enumerate("abc"):
            callers.start(name, calls[name], queued=index + 1)
        second = any_store._engine.commit.queue.waiting[1]
        second.wake = InterruptingWake(second.wake, waker="a")  # type: ignore[assignment]
    outcomes = callers.join()
    assert outcomes["a"][0] == "interrupted"
    assert outcomes["b"][0] == outcomes["c"][0] == "ok"
    assert sorted(any_store.keys()) == ["a", "b", "c"]
    settled(any_store)


def test_followers_of_a_leader_interrupted_before_its_commit_was_durable_make_it_so(
    no_log: None, store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sync=True`` without the log: a group's leader flushes its commit (its meta
    page) before the members return; interrupted there, each member does."""
    covered: list[int] = []
    real_flush_file = _lmdb.Environment.flush_file

    def flush_file(env: _lmdb.Environment) -> None:
        target = env.last_txn_id()
        real_flush_file(env)
        covered.append(target)

    written: dict[bytes, int] = {}
    real_put_one = simstore.store.writes.put_one

    def put_one(engine: Any, txn: Any, state: Any, packed: bytes, *args: Any) -> Any:
        written[packed] = int(txn.id())
        return real_put_one(engine, txn, state, packed, *args)

    real_make_durable = commit.GroupCommit._make_durable
    in_a = once(lambda: in_thread("a"))

    def make_durable(self: commit.GroupCommit, engine: Any, txn_id: int | None) -> None:
        if in_a():
            raise KeyboardInterrupt  # before its flush
        real_make_durable(self, engine, txn_id)

    monkeypatch.setattr(_lmdb.Environment, "flush_file", flush_file)
    monkeypatch.setattr(simstore.store.writes, "put_one", put_one)
    monkeypatch.setattr(commit.GroupCommit, "_make_durable", make_durable)
    with simstore.open(store_path, k=3, sync=True) as store:
        assert store._engine.env.defer_meta_sync
        late: list[str] = []

        def add(name: str) -> Callable[[], Any]:
            def call() -> Any:
                result = store.add(name, fingerprint=fp_of(ord(name)))
                if max(covered, default=-1) < written[pack_key(name)]:
                    late.append(name)
                return result

            return call

        callers = Callers(store)
        callers.group({name: add(name) for name in "abc"})
        outcomes = callers.join()
        assert outcomes["a"][0] == "interrupted"
        assert outcomes["b"][0] == outcomes["c"][0] == "ok"
        assert late == []  # b and c returned once their commit was on the disk
        settled(store)


# ----------------------------------------------------------------- a follower


def test_a_follower_interrupted_while_it_waits_leaves_the_queue(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    b_interrupted = wakes_of(monkeypatch, "b", waiter="before")
    callers = Callers(any_store)
    calls = adds(any_store, "a", "b", "c")
    with any_store._engine.lock:
        callers.start("a", calls["a"], queued=1)
        callers.start("b", calls["b"], queued=2)
        b_interrupted.set()
        callers.threads["b"].join(PATIENCE)
        assert callers.outcomes["b"][0] == "interrupted"
        callers.start("c", calls["c"], queued=2)
    outcomes = callers.join()
    assert outcomes["a"][0] == outcomes["c"][0] == "ok"
    assert sorted(any_store.keys()) == ["a", "c"]  # b's write left with its caller
    settled(any_store)


def test_a_follower_interrupted_as_it_is_handed_the_lead_hands_it_on(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a leads a group (a lone write without sync commits past the queue)
    any_store._engine.commit.lone_commits = False
    go = threading.Event()
    committing = _commit_blocked_in(monkeypatch, "a", go)
    wakes_of(monkeypatch, "b", waiter="after")  # woken to lead, and interrupted before it could
    callers = Callers(any_store)
    calls = adds(any_store, "a", "b", "c")
    callers.start("a", calls["a"])
    assert committing.wait(PATIENCE)
    callers.start("b", calls["b"], queued=1)
    callers.start("c", calls["c"], queued=2)
    go.set()
    outcomes = callers.join()
    assert outcomes["a"][0] == outcomes["c"][0] == "ok"
    assert outcomes["b"][0] == "interrupted"
    assert sorted(any_store.keys()) == ["a", "c"]
    settled(any_store)


@pytest.mark.parametrize("leader_interrupted", [False, True])
def test_a_follower_interrupted_while_its_group_commits(
    any_store: Store, monkeypatch: pytest.MonkeyPatch, leader_interrupted: bool
) -> None:
    """b's caller leaves while the group holding b commits. If that commit goes
    on, b is stored (its caller was told nothing); if the leader is interrupted
    before it, b is dropped, not run again, and never handed the lead."""
    b_interrupted = wakes_of(monkeypatch, "b", waiter="before")
    callers = Callers(any_store)
    real_put_one = simstore.store.writes.put_one
    at_c = once(lambda: in_thread("a"))

    def put_one(engine: Any, txn: Any, state: Any, packed: bytes, *args: Any) -> Any:
        if packed == pack_key("a") and in_thread("a"):
            b_interrupted.set()  # a took its group and commits: b's caller leaves now
        if packed == pack_key("c") and at_c():
            callers.threads["b"].join(PATIENCE)
            assert callers.outcomes["b"][0] == "interrupted"
            if leader_interrupted:
                raise KeyboardInterrupt
        return real_put_one(engine, txn, state, packed, *args)

    monkeypatch.setattr(simstore.store.writes, "put_one", put_one)
    callers.group(adds(any_store, "a", "b", "c"))
    outcomes = callers.join()
    assert outcomes["b"][0] == "interrupted"
    assert outcomes["c"][0] == "ok"
    if leader_interrupted:
        assert outcomes["a"][0] == "interrupted"
        assert sorted(any_store.keys()) == ["c"]
    else:
        assert outcomes["a"][0] == "ok"
        assert sorted(any_store.keys()) == ["a", "b", "c"]
    settled(any_store)


# ------------------------------------------------------- the rest of the store


def test_an_interrupted_commit_is_flushed_within_the_interval(
    store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed = threading.Event()
    real_flush_file = _lmdb.Environment.flush_file

    def flush_file(env: _lmdb.Environment) -> None:
        real_flush_file(env)
        flushed.set()

    real_committed = commit.GroupCommit.committed
    first = once(lambda: True)

    def committed(self: commit.GroupCommit, engine: Any) -> None:
        if first():
            raise KeyboardInterrupt  # after the commit, before it was counted
        real_committed(self, engine)

    with simstore.open(store_path, k=3, sync="interval", sync_interval=0.05) as store:
        monkeypatch.setattr(_lmdb.Environment, "flush_file", flush_file)
        monkeypatch.setattr(commit.GroupCommit, "committed", committed)
        with pytest.raises(KeyboardInterrupt):
            store.add("a", fingerprint=1)
        assert flushed.wait(PATIENCE)  # by the interval timer
        assert list(store.keys()) == ["a"]


def test_an_interrupt_as_the_stores_lock_is_granted_leaves_it_free(store: Store) -> None:
    """A signal that arrives while a thread waits for the store's lock is handled
    once the wait returns: the lock is held by then, and must be let go."""

    class InterruptedWhenGranted(threading._PyRLock):  # type: ignore[name-defined,misc]
        armed = True

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            granted = bool(super().acquire(blocking, timeout))
            if self.armed:
                self.armed = False
                raise KeyboardInterrupt
            return granted

    store.add("a", fingerprint=1)
    lock = InterruptedWhenGranted()
    store._engine.lock = lock
    with pytest.raises(KeyboardInterrupt):
        _ = "a" in store
    assert not lock._is_owned()
    done = threading.Event()
    writer = threading.Thread(target=lambda: (store.add("b", fingerprint=2), done.set()))
    writer.start()
    assert done.wait(PATIENCE)
    writer.join()
    assert sorted(store.keys()) == ["a", "b"]


@pytest.mark.parametrize(
    "point",
    [
        "as the lock is granted",
        "in the body",
        "between the body and the commit",
        "as the delta takes the commit",
        "after the commit",
    ],
)
@pytest.mark.parametrize("sync", [False, "interval"])
def test_a_lone_write_without_a_flush_interrupted_leaves_the_store_as_it_says(
    store_path: str, monkeypatch: pytest.MonkeyPatch, point: str, sync: bool | str
) -> None:
    """Without a flush at each commit (``sync=False`` or ``"interval"``), a
    write that finds the store's lock free commits past the queue. Interrupted
    before its commit, nothing of it is stored; from its commit on, it is
    stored and a query finds it (the delta is in step with the file). Either
    way the lock is let go, nobody leads, and the other threads' writes go on."""

    class InterruptedWhenGranted(threading._PyRLock):  # type: ignore[name-defined,misc]
        armed = point == "as the lock is granted"

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            granted = bool(super().acquire(blocking, timeout))
            if self.armed and not blocking:
                self.armed = False
                raise KeyboardInterrupt
            return granted

    in_x = once(lambda: in_thread("x"))
    real_put_one = simstore.store.writes.put_one
    real_committed = commit.GroupCommit.committed
    real_encode = State.encode
    real_delta_put = Delta.put

    def put_one(engine: Any, txn: Any, state: Any, packed: bytes, *args: Any) -> Any:
        if point == "in the body" and in_x():
            raise KeyboardInterrupt
        return real_put_one(engine, txn, state, packed, *args)

    def committed(self: commit.GroupCommit, engine: Any) -> None:
        if point == "after the commit" and in_x():
            raise KeyboardInterrupt
        real_committed(self, engine)

    def encode(state: State) -> bytes:  # the new state, put after the body ran
        if point == "between the body and the commit" and in_x():
            raise KeyboardInterrupt
        return real_encode(state)

    def delta_put(delta: Delta, doc_id: int, fingerprint: int) -> None:
        if point == "as the delta takes the commit" and in_x():
            raise KeyboardInterrupt
        real_delta_put(delta, doc_id, fingerprint)

    monkeypatch.setattr(simstore.store.writes, "put_one", put_one)
    monkeypatch.setattr(State, "encode", encode)
    monkeypatch.setattr(Delta, "put", delta_put)
    monkeypatch.setattr(commit.GroupCommit, "committed", committed)
    with simstore.open(store_path, k=3, sync=sync) as store:
        store.add("a", fingerprint=fp_of(1))
        lock = store._engine.lock = InterruptedWhenGranted()
        callers = Callers(store)
        callers.start("x", lambda: store.add("x", fingerprint=fp_of(2)))
        outcomes = callers.join()
        assert outcomes["x"][0] == "interrupted"
        free = lock.acquire(blocking=False)
        if free:
            lock.release()
        else:
            store._engine.lock = threading.RLock()  # (so that close does not wait for ever)
        assert free, "the interrupted write left the store's lock held"
        stored = point in ("as the delta takes the commit", "after the commit")
        expected = ["a", "x"] if stored else ["a"]
        assert sorted(store.keys()) == expected
        assert [match.key for match in store.query(fp_of(2), k=0)] == expected[1:]
        callers.start("b", lambda: store.add("b", fingerprint=fp_of(3)))
        assert callers.join()["b"][0] == "ok"
        settled(store)


def test_an_interrupted_merge_does_not_wait_for_the_sort_queued(store: Store) -> None:
    """A merge sorts the next table's entries while it writes this one's: an
    interrupt waiting for a sort cancels the one queued behind it."""
    tables = store._engine.tables
    started = threading.Event()
    release = threading.Event()
    sorted_tables: list[int] = []
    real_sorted_entries = builder.sorted_entries

    def sorted_entries(table: Any, *args: Any) -> Any:
        index = tables.index(table)
        if index == 0:
            started.set()
            assert release.wait(PATIENCE)
        sorted_tables.append(index)
        return real_sorted_entries(table, *args)

    main = threading.main_thread().ident
    assert main is not None
    assert threading.current_thread().ident == main

    interrupted = threading.Event()

    def interrupt_when_sorting() -> None:
        # Sent again until handled: a signal that lands just before the main
        # thread blocks in its lock wait does not wake that wait (CPython runs
        # the handler only once the wait returns, here after the sort).
        assert started.wait(PATIENCE)
        deadline = time.monotonic() + PATIENCE
        while not interrupted.is_set():
            assert time.monotonic() < deadline
            signal.pthread_kill(main, signal.SIGUSR1)
            interrupted.wait(0.05)

    def handler(_signum: int, _frame: Any) -> None:
        if not interrupted.is_set():  # once: the repeats that crossed it are no-ops
            interrupted.set()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        fingerprints = np.arange(1, 101, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(builder, "sorted_entries", sorted_entries)
            with ThreadPoolExecutor(max_workers=1) as sorter:
                sorter.submit(int).result()  # its thread started (an interrupt then would lose it)
                writes = builder.TableWrites(
                    np.arange(100, dtype=np.uint64), fingerprints, tables, sorter, [64] * len(tables)
                )
                sender = threading.Thread(target=interrupt_when_sorting)
                sender.start()
                with pytest.raises(KeyboardInterrupt):
                    writes.entries(0)
                sender.join()
                release.set()
    finally:
        release.set()
        signal.signal(signal.SIGUSR1, previous)
    assert sorted_tables == [0]  # table 1's sort, queued, never ran


# ------------------------------------------------------- the writers' mailbox

needs_mailbox = pytest.mark.skipif(not mailbox._OFD, reason="no open-file-description locks here")


@pytest.fixture
def shared_store(store_path: str) -> Iterator[tuple[Store, mailbox.Mailbox]]:
    """A ``sync=True`` store, and another holder of its mailbox (to the kernel,
    another process), so that its single writes go through the mailbox."""
    with simstore.open(store_path, k=3, sync=True) as opened:
        other = mailbox.Mailbox.open(store_path)
        assert other is not None
        try:
            yield opened, other
        finally:
            other.close()


@needs_mailbox
def test_an_interrupt_as_the_lead_is_granted_lets_it_go(
    shared_store: tuple[Store, mailbox.Mailbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, other = shared_store
    real_try_lead = mailbox.Mailbox.try_lead

    def try_lead(box: mailbox.Mailbox) -> bool:
        granted = real_try_lead(box)
        if box is not other:
            raise KeyboardInterrupt
        return granted

    monkeypatch.setattr(mailbox.Mailbox, "try_lead", try_lead)
    with pytest.raises(KeyboardInterrupt):
        store.add("a", fingerprint=1)
    assert other.try_lead()  # no lead left held by the interrupted process
    other.release_lead()
    monkeypatch.setattr(mailbox.Mailbox, "try_lead", real_try_lead)
    store.add("b", fingerprint=2)
    assert sorted(store.keys()) == ["b"]
    assert set(other.states()) == {mailbox.FREE}


@needs_mailbox
def test_a_process_interrupted_waiting_for_the_lead_takes_its_writes_back(
    shared_store: tuple[Store, mailbox.Mailbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its group is posted and nobody took it: the group's other writes go back
    to the queue, and the next leader of this process posts them again."""
    store, other = shared_store
    assert other.try_lead()  # another process leads: this one's writes wait in their slot
    real_wait_lead = mailbox.Mailbox.wait_lead
    in_a = once(lambda: in_thread("a"))

    def wait_lead(box: mailbox.Mailbox) -> None:
        if in_a():
            raise KeyboardInterrupt
        real_wait_lead(box)

    real_alone = mailbox.Mailbox.alone
    callers = Callers(store)

    def alone(box: mailbox.Mailbox) -> bool:
        deadline = time.monotonic() + PATIENCE
        while in_thread("a") and callers.queued() < 2:  # b joins a's group
            assert time.monotonic() < deadline
            time.sleep(0.0005)
        return real_alone(box)

    monkeypatch.setattr(mailbox.Mailbox, "wait_lead", wait_lead)
    monkeypatch.setattr(mailbox.Mailbox, "alone", alone)
    calls = adds(store, "a", "b")
    callers.start("a", calls["a"], queued=1)
    callers.start("b", calls["b"])
    deadline = time.monotonic() + PATIENCE
    while "a" not in callers.outcomes or mailbox.POSTED not in other.states():
        assert time.monotonic() < deadline, other.states()
        time.sleep(0.001)
    assert callers.outcomes["a"][0] == "interrupted"
    other.release_lead()  # b's new group, posted again, gets the lead
    outcomes = callers.join()
    assert outcomes["b"][0] == "ok"
    assert sorted(store.keys()) == ["b"]
    assert set(other.states()) == {mailbox.FREE}
    assert other.try_lead()
    other.release_lead()


_POSTER = r"""
import json, os, sys, time
import simstore
from simstore.commit import mailbox
path, key, go = sys.argv[1], sys.argv[2], sys.argv[3]
real_wait_lead = mailbox.Mailbox.wait_lead

def wait_lead(box):
    # Not a contender for the lead until the test says so: the lead then
    # goes to the test's process, the one the test interrupts.
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        assert time.monotonic() < deadline
        time.sleep(0.002)
    real_wait_lead(box)

mailbox.Mailbox.wait_lead = wait_lead
with simstore.open(path, "w", sync=True) as store:
    print("open", flush=True)
    try:
        print(json.dumps({"result": store.add(key, fingerprint=7)}), flush=True)
    except BaseException as exc:
        print(json.dumps({"error": [type(exc).__name__, str(exc)]}), flush=True)
"""


@needs_mailbox
@pytest.mark.parametrize("point", ["before the commit", "after the commit"])
def test_another_processs_write_taken_by_an_interrupted_leader_is_settled_by_the_next(
    shared_store: tuple[Store, mailbox.Mailbox], monkeypatch: pytest.MonkeyPatch, store_path: str, point: str
) -> None:
    """This process leads a commit holding another process's write and is
    interrupted: that process never hears of the interrupt; its write is
    committed once (by the next leader, if this commit did not happen)."""
    store, other = shared_store
    assert other.try_lead()
    go = f"{store_path}.go"
    poster = subprocess.Popen(
        [sys.executable, "-c", _POSTER, store_path, "k", go], stdout=subprocess.PIPE, text=True
    )
    assert poster.stdout is not None
    assert poster.stdout.readline() == "open\n"
    deadline = time.monotonic() + PATIENCE
    while mailbox.POSTED not in other.states():
        assert time.monotonic() < deadline
        time.sleep(0.002)
    other.release_lead()
    other.close()  # this process's store leads next (the poster waits for `go`)

    real_write = _lmdb.Environment._write
    first = once(lambda: True)

    def _write(env: _lmdb.Environment, body: Any, *args: Any, **kwargs: Any) -> Any:
        def interrupted(txn: Any) -> Any:
            result = body(txn)
            if point == "before the commit" and first():
                raise KeyboardInterrupt
            return result

        result = real_write(env, interrupted, *args, **kwargs)
        if point == "after the commit" and first():
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(_lmdb.Environment, "_write", _write)
    with pytest.raises(KeyboardInterrupt):
        store.add("a", fingerprint=1)
    assert store._engine.commit.others_committed == 0  # it never answered
    with open(go, "w"):
        pass
    out, _ = poster.communicate(timeout=PATIENCE)
    assert poster.returncode == 0
    assert json.loads(out.splitlines()[-1]) == {"result": 7}
    assert store.get("k").fingerprint == 7
    assert sorted(store.keys()) == (["a", "k"] if point == "after the commit" else ["k"])
    assert store.check() == []
