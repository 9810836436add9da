"""The parts of a group commit (:mod:`simstore.commit`): a caller's write
waiting for a transaction, the queue it waits in, and what a group's writes
did to the in-memory delta, to undo it if their transaction does not commit."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from simstore import _lmdb
from simstore.delta import Change
from simstore.format import State

if TYPE_CHECKING:
    from simstore.delta import Delta

T = TypeVar("T")
#: A single write's body, as :meth:`simstore.engine.Engine.write` takes it: its
#: result, the new state and what it did to the delta.
Body = Callable[["_lmdb.Txn", State], tuple[T, State, Change]]
#: A single write described in msgpack-able values (:func:`simstore.writes.body_of`).
Spec = list[Any]


class Request:
    """One caller's write waiting in the queue: its body, and its outcome once run."""

    __slots__ = ("body", "done", "error", "result", "spec", "wake")

    def __init__(self, body: Body[Any], spec: Spec | None = None) -> None:
        self.body = body
        # The write as another process can run it (simstore.writes.body_of), if it can.
        self.spec = spec
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        # Released by the leader when this request is done, or when it is to
        # lead the next group: a plain lock is the cheapest thread wake-up.
        self.wake = threading.Lock()
        self.wake.acquire()

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class CommitQueue:
    """The single writes of one process waiting for a transaction, and
    whether a leader is at work (``waiting`` is empty whenever none is)."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.waiting: list[Request] = []
        self.leading = False
        # Notified as a request arrives while a leader gathers its group.
        self.arrived = threading.Condition(self.mutex)
        self.gathering = False


class BodyFailedError(Exception):
    """Internal: body ``index`` of a group raised ``error``."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(index)
        self.index = index
        self.error = error


class Applied:
    """What a group's bodies did to the in-memory delta so far, to undo it
    if the transaction does not commit: each document touched, with the
    fingerprint the delta held for it before (``None``: none)."""

    def __init__(self, delta: Delta) -> None:
        self.delta = delta
        self.before: dict[int, int | None] = {}
        # The id of the transaction, and whether the bodies changed the
        # stored state (then its commit surely writes pages, flushes the file
        # and writes a meta page; a replacement with the same fingerprint
        # writes without changing it).
        self.txn_id = -1
        self.changed_state = False

    def apply(self, change: Change) -> None:
        delta, before = self.delta, self.before
        for doc_id in change.removed:
            if doc_id not in before:
                before[doc_id] = delta.get(doc_id)
            delta.discard(doc_id)
        for doc_id, fingerprint in change.puts:
            if doc_id not in before:
                before[doc_id] = delta.get(doc_id)
            delta.put(doc_id, fingerprint)

    def undo(self) -> None:
        delta = self.delta
        for doc_id, fingerprint in self.before.items():
            if fingerprint is None:
                delta.discard(doc_id)
            else:
                delta.put(doc_id, fingerprint)
        self.before.clear()
