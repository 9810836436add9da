"""Other processes' writes in a commit this process leads, through the
writers' mailbox (:mod:`simstore.commit.mailbox`): taken from their slots, run in
this process's transaction, and answered once it is durable; and the slots
a leader that died left taken."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simstore.commit import wire
from simstore.commit.mailbox import DONE, POSTED, TAKEN, Mailbox
from simstore.commit.queue import Applied, BodyFailedError, BodyOf, Request
from simstore.engine import _lmdb
from simstore.engine.delta import Change
from simstore.engine.format import WRITERS_KEY, State
from simstore.errors import SimstoreError

if TYPE_CHECKING:
    from simstore.engine.core import Engine


class Others:
    """Other processes' writes in the commit this process leads: their slots
    in the mailbox, the requests made of them, and the group's number (put in
    the store by the same transaction, so that the next leader can tell, if
    this one dies, whether the group committed)."""

    def __init__(self, engine: Engine, mailbox: Mailbox, group: int, body_of: BodyOf) -> None:
        self.engine = engine
        self.body_of = body_of
        self.mailbox = mailbox
        self.group = group
        self.slots: list[tuple[int, list[Request]]] = []
        self.requests: list[Request] = []  # the ones to run here, in slot order

    def take_posted(self) -> None:
        """Take every request posted in the mailbox into this group."""
        for slot, raw in self.mailbox.posted():
            try:
                specs = wire.unpack_request(raw)
            except Exception as exc:  # another version's or a damaged request: refused, not run
                self.mailbox.respond(slot, wire.pack_outcomes([]), self.group, state=DONE)
                message = f"{self.engine.path}: a writer's request was refused ({exc})"
                warnings.warn(message, RuntimeWarning, stacklevel=1)
                continue
            requests = []
            for spec in specs:
                body = self.body_of(self.engine, spec)
                request = Request(_run_here if body is None else body, spec)
                if body is None:
                    request.error = wire.LeftToPosterError()
                    request.done = True
                else:
                    self.requests.append(request)
                requests.append(request)
            self.slots.append((slot, requests))

    def finisher(self, pending: list[Request], applied: Applied) -> Callable[[_lmdb.Txn, list[Any]], None]:
        """What runs in the transaction after ``pending``'s bodies: the
        group's number, and each slot's outcomes marked ``TAKEN``."""

        def finish(txn: _lmdb.Txn, results: list[Any]) -> None:
            txn.put(WRITERS_KEY, self.group.to_bytes(8, "big"), db=self.engine.handles.meta)
            outcomes = {id(request): result for request, result in zip(pending, results, strict=True)}
            for slot, requests in self.slots:
                packed = wire.pack_outcomes([_outcome(request, outcomes) for request in requests])
                if not self.mailbox.respond(slot, packed, self.group, state=TAKEN):
                    # Too big for the slot: its first write still in the
                    # group is left to its process, and the group runs again.
                    first = next(request for request in requests if id(request) in outcomes)
                    raise BodyFailedError(pending.index(first), wire.LeftToPosterError())

        return finish

    def answer(self) -> None:
        """After the commit is durable: every slot's final outcomes, ``DONE``."""
        for slot, requests in self.slots:
            packed = wire.pack_outcomes([_outcome(request, {}) for request in requests])
            if not self.mailbox.respond(slot, packed, self.group, state=DONE):
                # Only errors can be bigger than what fitted in the transaction.
                short = [wire.outcome_of(None, SimstoreError("the commit failed"))] * len(requests)
                self.mailbox.respond(slot, wire.pack_outcomes(short), self.group, state=DONE)

    def fail(self, error: BaseException) -> None:
        """The group's commit failed (or is not known to be on the disk)."""
        for _, requests in self.slots:
            for request in requests:
                if not request.done or request.error is None:
                    request.error = error
                    request.done = True
        self.answer()

    @staticmethod
    def resolve_orphans(engine: Engine, mailbox: Mailbox) -> None:
        """With the lead held: settle the slots a leader took and died before
        it said done. Its group's number in the store means it committed:
        make that durable and say ``DONE``; otherwise post them again."""
        orphans = mailbox.taken()
        if not orphans:
            return
        with engine.read() as txn:
            raw = txn.get(WRITERS_KEY, db=engine.handles.meta)
        committed_group = int.from_bytes(raw, "big") if raw else 0
        if any(group == committed_group for _, group in orphans):
            engine.env.flush()
        for slot, group in orphans:
            mailbox.set_state(slot, DONE if group == committed_group else POSTED)


def _outcome(request: Request, results: dict[int, Any]) -> list[Any]:
    """A request's outcome for the mailbox: from ``results`` (by the
    request's id) while its transaction runs, else what it was given."""
    if id(request) in results:
        return wire.outcome_of(results[id(request)], None)
    return wire.outcome_of(request.result, request.error if request.done else wire.LeftToPosterError())


def _run_here(txn: _lmdb.Txn, state: State) -> tuple[Any, State, Change]:
    raise AssertionError("a write left to its own process was run")
