"""The parts of a group commit (:mod:`simstore.commit.group`): a caller's write
waiting for a transaction, the queue it waits in, and what a group's writes
did to the in-memory delta, to undo it if their transaction does not commit.

An interrupt (``KeyboardInterrupt``, or any exception raised into a thread)
may stop a caller anywhere in :mod:`simstore.commit.group`, so every step that other
threads rely on (joining the queue, taking a group, handing on the lead) is
one change of these objects under the queue's mutex, and what the caller
holds is found from them, not from its local variables, when it leaves."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from simstore.engine import _lmdb
from simstore.engine.delta import Change
from simstore.engine.format import State

if TYPE_CHECKING:
    from simstore.engine.core import Engine
    from simstore.engine.delta import Delta

T = TypeVar("T")
#: A single write's body, as :meth:`simstore.engine.core.Engine.write` takes it: its
#: result, the new state and what it did to the delta.
Body = Callable[["_lmdb.Txn", State], tuple[T, State, Change]]
#: A single write described in msgpack-able values (:func:`simstore.store.writes.body_of`).
Spec = list[Any]
#: Makes the body of a single write from its spec, for the engine it runs in
#: (``None``: it must run in the process that posted it); see
#: :func:`simstore.store.writes.body_of`.
BodyOf = Callable[["Engine", Spec], "Body[Any] | None"]


class Request:
    """One caller's write waiting in the queue: its body, and its outcome once run."""

    __slots__ = (
        "abandoned",
        "body",
        "done",
        "error",
        "flush_first",
        "group",
        "result",
        "retry",
        "spec",
        "wake",
    )

    def __init__(self, body: Body[Any], spec: Spec | None = None) -> None:
        self.body = body
        # The write as another process can run it (simstore.store.writes.body_of), if it can.
        self.spec = spec
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        # Released by the leader when this request is done, or when it is to
        # lead the next group: a plain lock is the cheapest thread wake-up.
        self.wake = threading.Lock()
        self.wake.acquire()
        # While this request's caller leads: the requests it took (its own first).
        self.group: list[Request] = _NO_GROUP
        # Set by a leader that was interrupted (see simstore.commit.group):
        # ``retry``, the write surely did not commit and goes back to the
        # queue; ``flush_first``, it committed but its caller makes it durable.
        self.retry = False
        self.flush_first = False
        # Its caller left (interrupted) while another thread's group held it.
        self.abandoned = False

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


_NO_GROUP: list[Request] = []  # (shared, never changed: a group is replaced, not extended)


class CommitQueue:
    """The single writes of one process waiting for a transaction, and the
    request whose caller leads (``waiting`` is empty whenever none does)."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.waiting: list[Request] = []
        self.leader: Request | None = None
        # Notified as a request arrives while a leader gathers its group.
        self.arrived = threading.Condition(self.mutex)
        self.gathering = False

    def take(self, most: int) -> list[Request]:
        """The leader takes up to ``most`` waiting requests as its group
        (kept on its request, so that an interrupt cannot lose them)."""
        with self.mutex:
            group = self.waiting[:most]
            del self.waiting[:most]
            if self.leader is not None:
                self.leader.group = group
        return group

    def pass_lead(self, request: Request) -> None:
        """With the mutex held: if ``request``'s caller leads, hand the lead
        to the first waiting request (its caller wakes to lead), or to none."""
        if self.leader is request:
            following = self.waiting[0] if self.waiting else None
            self.leader = following
            if following is not None:
                following.wake.release()


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
        # Whether the bodies (and the group's own writes after them) ran to
        # the end in the latest attempt, and their results: until then a
        # failure surely aborted the transaction.
        self.ran = False
        self.results: list[Any] = []
        # ``(meta key, value)`` the transaction puts to be recognised by,
        # for a group of several writes (see simstore.commit.group's _fate).
        self.token: tuple[bytes, bytes] | None = None

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
