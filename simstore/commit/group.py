"""Group commit, write batches and interval flushing: how single writes reach the disk.

Single writes (``add``, ``add_if_new``, ``remove``) from threads of one
process share write transactions: the first caller leads, every caller that
arrives before the leader holds the store's lock joins its group, and the
group is one LMDB transaction and one flush. Each call returns once the
commit holding its own write has returned, so with ``sync=True`` once that
write is on the disk. Later bodies of a group see the earlier ones' writes
(the in-memory delta is brought along as each body runs), so two
``add_if_new`` calls of one group never both insert one near-duplicate.

A body that raises inside the shared transaction fails its own caller only:
LMDB has no savepoints, so the transaction is aborted, the delta's changes are
undone, and the group runs again without that body. Everything a caller can
get wrong (the key, the fingerprint, the metadata) is checked before it joins,
so this only happens for what the snapshot decides (``remove`` of a missing
key) or a damaged store.

An interrupt (``KeyboardInterrupt``, or any exception raised into a thread)
ends the interrupted call only. A leader interrupted around its commit puts the
writes that surely did not commit back in the queue for the next leader, gives
those that did their outcome (a group of several writes puts a random token in
the store to be recognised by), and tells the rest that their fate is unknown
(:class:`~simstore.errors.CommitInterruptedError`); the lead is always handed
on, and no other thread or process ever gets the interrupt.

``store.batch()`` gathers single writes of one thread and commits them at the
end of the ``with`` block, in one transaction: all of them or none.

``sync="interval"`` commits without a flush and flushes once ``sync_interval``
seconds have passed since the first unflushed commit, or ``sync_every``
commits have gathered, whichever comes first; a timer flushes a store that
stopped writing. See ``docs/durability.md`` for what each mode keeps.

One :class:`GroupCommit` per open engine (:mod:`simstore.engine.core`) does all this.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from simstore.commit import wire
from simstore.commit.batch import Batching, Pending
from simstore.commit.mailbox import Mailbox
from simstore.commit.posted import Others
from simstore.commit.queue import Applied, Body, BodyFailedError, BodyOf, CommitQueue, Request, Spec
from simstore.engine import _lmdb
from simstore.engine.delta import Change
from simstore.engine.format import GROUP_KEY, WRITERS_KEY, State
from simstore.errors import CommitInterruptedError, CorruptStoreError, InvalidValueError, SimstoreError

if TYPE_CHECKING:
    from simstore.engine.core import Engine

T = TypeVar("T")

#: Most single writes one transaction takes; the rest wait for the next.
MAX_GROUP = 1024
#: How long a group's leader waits for the next group's commit to make its
#: own durable before it flushes itself (a safety net: that group's leader
#: always commits or flushes).
AWAIT_FLUSH_SECONDS = 1.0
#: How long a leader gathering its group waits for the next writer to arrive
#: (see :meth:`GroupCommit._gather`): about what a Python thread takes from
#: its last write's return to its next call, well under a commit's flush.
GATHER_GAP_SECONDS = 0.0001
#: How long a process whose writes are posted waits, at most, for the others
#: the last group held before it commits with those that came.
GATHER_PROCESSES_SECONDS = 0.001


def _record_of(pending: list[Request], others: Others | None) -> Callable[[], bytes | None]:
    """What the write-ahead log keeps of a group's commit: its writes' specs
    (``None`` if one has none: then a checkpoint makes the commit durable)."""
    return _record_of_specs([request.spec for request in pending], others.group if others is not None else 0)


def _record_of_specs(specs: list[Spec | None], group: int) -> Callable[[], bytes | None]:
    return lambda: None if any(spec is None for spec in specs) else wire.pack_record(group, specs)


def _wake(request: Request) -> None:
    """Wake every member of ``request``'s group but itself; an interrupt
    between two wake-ups still wakes the rest."""
    members = request.group
    woken = 0
    try:
        for member in members:
            woken += 1  # (counted before: nothing can interrupt between the two)
            if member is not request:
                member.wake.release()
    finally:
        for member in members[woken:]:
            if member is not request:
                member.wake.release()


def group_commit(engine: Engine) -> GroupCommit:
    """The group commit of ``engine``, which the opener built (the engine
    itself knows it only as :class:`simstore.engine.core.CommitHooks`)."""
    commit = engine.commit
    assert isinstance(commit, GroupCommit)
    return commit


class GroupCommit:
    """Group commit, write batches and interval flushing for one engine."""

    def __init__(self, body_of: BodyOf) -> None:
        """Set up the queue and the flush bookkeeping (anew after ``fork()``).
        ``body_of`` makes the body of a write another process posted (or the
        log holds) from its spec (:func:`simstore.store.writes.body_of`)."""
        self.body_of = body_of
        self.queue = CommitQueue()
        self.batching = Batching()
        self._unflushed = 0  # commits since the last flush (sync="interval")
        self._unflushed_since = 0.0
        self._flush_timer: threading.Timer | None = None
        # sync=True: commits leave their meta page unflushed (see
        # _lmdb.Environment's defer_meta_sync). LMDB flushes the whole file
        # before it writes a commit's meta page, so the next commit makes the
        # one before it durable: a group's leader hands the store to the next
        # group and waits for its commit, and flushes itself (_make_durable)
        # only when no group follows.
        self._flushing = threading.Lock()
        self._durability = threading.Condition(threading.Lock())
        self._durable_txn = -1  # every commit up to this id is on the disk
        self._last_group_txn = -1  # the latest commit of a group of this process
        self._in_group = False  # a group's write is running: its leader makes it durable
        # How many writers the next group may expect (see _gather): the
        # last group's size, and the members of groups waiting for a later
        # commit to make theirs durable.
        self._last_group_size = 0
        self._awaiting = 0
        # The writers' mailbox (sync=True), opened at the first group that may use it.
        self._mailbox: Mailbox | None = None
        self._mailbox_refused = False
        self.others_committed = 0  # other processes' writes this process committed
        # Without a flush at each commit, a write that finds the store's lock
        # free commits alone, past the queue (see write); tests of the queue
        # turn it off.
        self.lone_commits = True

    # ------------------------------------------------------------ group commit

    def write(
        self,
        engine: Engine,
        body: Body[T],
        spec: Spec | None = None,
    ) -> T:
        """Run one single write's ``body`` in a transaction shared with the
        other threads' single writes (and, given its ``spec``, with other
        processes' through the mailbox); its result once that commit is as
        durable as ``sync`` makes it.

        An interrupt in this thread (``KeyboardInterrupt``, or any exception
        raised into it) ends this call only: the write was committed whole or
        not at all, and the other threads' writes go on (see
        ``docs/durability.md``).
        """
        bodies, pending = self.batching.bodies, self.batching.pending
        if bodies is not None and pending is not None:
            bodies.append(body)  # the batch open in this thread commits it
            pending.append(Pending())
            return cast(T, pending[-1])
        lock = engine.lock
        if lock._is_owned():  # type: ignore[attr-defined]  # (C RLock's, not in the stubs)
            # Called with the store's lock held (from a callback inside a
            # store call): a group's leader would wait for that lock for ever.
            return self._commit_here(engine, body, spec)
        queue = self.queue
        if queue.leader is None and self.lone_commits and not engine.env.shares_commits:
            # No group forming and no flush at each commit to share
            # (sync=False or "interval"): a writer that gets the lock at once
            # commits alone, without the queue and the lead (a third of a
            # lone add's time). Under contention writers queue and share
            # commits as before. Released in the finally, so that an
            # interrupt as the lock is granted cannot leave it held.
            try:
                if lock.acquire(blocking=False):
                    return self._commit_here(engine, body, spec)
            finally:
                if lock._is_owned():  # type: ignore[attr-defined]
                    lock.release()
        request = Request(body, spec)
        try:
            with queue.mutex:
                queue.waiting.append(request)
                if queue.leader is None:
                    queue.leader = request
                elif queue.gathering:
                    queue.arrived.notify()
                leads = queue.leader is request
            if leads or self._follow(engine, request):
                self._lead_group(engine, queue, request)
        except BaseException:
            # Interrupted here, or this thread's own failure (a flush): leave
            # nothing another thread waits for.
            self._leave(queue, request)
            raise
        return cast(T, request.outcome())

    def _commit_here(self, engine: Engine, body: Body[T], spec: Spec | None) -> T:
        """Run one single write in a transaction of its own, in this thread,
        without the queue: its caller alone waits for it, and gets any
        interrupt. The body leaves the delta alone (Engine.write applies its
        change after the commit), so a failure before the commit needs no
        undoing; after an interrupt, which may have come after the commit,
        the next read reloads the delta from the file."""
        try:
            return engine.write(body, _record_of_specs([spec], 0))
        except BaseException as exc:
            if not isinstance(exc, Exception):
                engine.forget_delta()
                self._count_interrupted_commit(engine)
            raise

    def _follow(self, engine: Engine, request: Request) -> bool:
        """Wait for the leader to commit ``request``: ``False`` once it has
        its outcome, ``True`` when it is asked to lead the next group instead."""
        request.wake.acquire()
        if not request.done:
            return True
        if request.flush_first:
            # The leader was interrupted before its commit was on the disk.
            self._make_durable(engine, None)
        return False

    @staticmethod
    def _leave(queue: CommitQueue, request: Request) -> None:
        """``request``'s caller leaves :meth:`write` by an exception: take the
        request out of the queue (or, if a group holds it, let that group's
        leader know nobody waits for it), and hand on the lead if it holds it."""
        with queue.mutex:
            if request in queue.waiting:
                queue.waiting.remove(request)
            elif not request.done:
                request.abandoned = True
            queue.pass_lead(request)

    def _lead_group(self, engine: Engine, queue: CommitQueue, request: Request) -> None:
        """Lead one group, ``request`` (this caller's) first: on return every
        member has its outcome, or is back in the queue for the next leader."""
        committed: int | None = None
        unsure = False
        stopped = True  # until _lead returns: then the members see to durability themselves
        try:
            if engine.env.shares_commits:
                self._gather(engine, queue)
            committed, unsure = self._lead(engine, queue, request)
            stopped = False
        finally:
            self._finish_group(engine, queue, request, committed, unsure, stopped=stopped)
        self._last_group_size = len(request.group)

    def _finish_group(
        self,
        engine: Engine,
        queue: CommitQueue,
        request: Request,
        committed: int | None,
        unsure: bool,
        *,
        stopped: bool,
    ) -> None:
        """After a group's commit, or its leader stopped by an interrupt:
        settle the members left without an outcome, hand on the lead, make
        the commit durable and wake the members. An interrupt in one step
        does not skip the next."""
        followed = False
        try:
            with queue.mutex:
                if request in queue.waiting:  # stopped before it took a group
                    queue.waiting.remove(request)
                self._settle(queue, request)
                queue.pass_lead(request)
                followed = bool(queue.waiting)
        finally:
            try:
                if stopped:
                    self._leave_durability(engine, request)
                else:
                    self._make_group_durable(engine, request, committed, unsure, followed)
            finally:
                _wake(request)

    @staticmethod
    def _settle(queue: CommitQueue, request: Request) -> None:
        """With the mutex held, once ``request``'s caller stops leading: put
        the members whose write surely did not commit back at the head of
        the queue, in order, and tell the others without an outcome that
        theirs is unknown (members whose caller left are dropped)."""
        group = request.group
        for member in group:
            if not member.done and member is not request:
                break
        else:
            return  # the common case: every member has its outcome
        kept: list[Request] = []
        again: list[Request] = []
        for member in group:
            if member.done or member is request:
                kept.append(member)
            elif member.abandoned:
                continue
            elif member.retry:
                member.retry = False
                again.append(member)
            else:
                member.error = CommitInterruptedError(
                    "the thread committing this write with its own was interrupted at its commit; "
                    "the write was stored whole or not at all: look its key up"
                )
                member.done = True
                kept.append(member)
        queue.waiting[:0] = again
        request.group = kept

    def _make_group_durable(
        self, engine: Engine, request: Request, committed: int | None, unsure: bool, followed: bool
    ) -> None:
        """Make the group's commit durable before its members hear of it
        (``sync=True`` without the write-ahead log; see ``_flushing``)."""
        if not engine.env.defer_meta_sync:
            return  # the commit was as durable as sync makes it when it returned
        try:
            if unsure:
                self._make_durable(engine, None)
            elif committed is None:
                # Nothing committed: release the groups waiting for this
                # one's commit to make theirs durable.
                self._make_durable(engine, self._last_group_txn)
            elif followed:
                self._await_durable(engine, committed, len(request.group))
            else:
                self._make_durable(engine, committed)
        except Exception as exc:
            # Committed but not known to be on the disk: not acknowledged.
            for member in request.group:
                if member.error is None:
                    member.error = exc
        except BaseException:
            self._leave_durability(engine, request)
            raise

    @staticmethod
    def _leave_durability(engine: Engine, request: Request) -> None:
        """The leader stopped before its group's commit was known to be on
        the disk: each member with a result makes it so before it returns."""
        if engine.env.defer_meta_sync:
            for member in request.group:
                if member.error is None:
                    member.flush_first = True

    def _lead(self, engine: Engine, queue: CommitQueue, request: Request) -> tuple[int | None, bool]:
        """Take the waiting requests (the leader's ``request`` first) and
        commit them together; every request of the group has its outcome on
        return (an interrupt leaves the ones it stopped marked for
        :meth:`_settle`).

        Returns the commit to make durable before any of the group is
        acknowledged (``None``: it committed nothing, or made its commit
        durable already); and whether it may have written without changing
        the stored state, so that only a flush from now on makes sure of it.
        """
        mailbox = self._mailbox_of(engine)
        if mailbox is None:
            return self._commit_alone(engine, queue)
        with mailbox.using() as usable:
            try:
                if not usable or mailbox.alone():
                    return self._commit_alone(engine, queue)
                if mailbox.try_lead():
                    if not self._expects_more(mailbox):
                        try:
                            with mailbox.answering():
                                Others.resolve_orphans(engine, mailbox)
                                return self._lead_others(engine, mailbox, queue=queue)
                        finally:
                            mailbox.release_lead()
                    # Fewer processes posted than the last group held: post
                    # too, and let the others come (see _commit_posted).
                    mailbox.release_lead()
                group = queue.take(MAX_GROUP)
                if any(member.spec is None for member in group):
                    with engine.lock:
                        return self._commit(engine, group)
                return self._commit_posted(engine, group, mailbox)
            except Exception as exc:
                mailbox.let_go_of_locks()
                for member in request.group or queue.take(MAX_GROUP):  # (failed before it took them)
                    if not member.done:
                        member.error = exc
                        member.done = True
            except BaseException:
                # Interrupted, perhaps right after a lock was granted: no
                # other process may wait for a lead or an answers lock this
                # thread no longer uses.
                mailbox.let_go_of_locks()
                raise
            return None, False

    def _commit_alone(self, engine: Engine, queue: CommitQueue) -> tuple[int | None, bool]:
        """Take the waiting requests once the store's lock is held (those
        arriving meanwhile join) and commit them, without other processes'."""
        with engine.lock:
            return self._commit(engine, queue.take(MAX_GROUP))

    def _commit(
        self, engine: Engine, group: list[Request], others: Others | None = None
    ) -> tuple[int | None, bool]:
        """Commit ``group`` (with the store's lock held) in one transaction,
        and ``others``' writes with it; every request has its outcome on
        return. Returns what :meth:`_lead` returns after the group.

        An interrupt of this thread is raised again once each request it
        stopped has what the commit did for it (see :meth:`_interrupted`).
        """
        pending = list(group) if others is None else [*group, *others.requests]
        committed = None
        unsure = False
        applied: Applied | None = None
        try:
            while pending:
                applied = Applied(engine.delta)
                bodies = self._bodies_in_order(
                    engine,
                    [request.body for request in pending],
                    applied,
                    isolate=True,
                    finish=self._finisher(engine, pending, others, applied),
                )
                self._in_group = True
                try:
                    results = engine.write(bodies, _record_of(pending, others))
                except BodyFailedError as failed:
                    # Aborted: that body fails alone, the others run again.
                    failing = pending[failed.index]
                    failing.error = failed.error
                    failing.done = True
                    del pending[failed.index]
                    continue
                finally:
                    self._in_group = False
                if applied.changed_state:
                    committed = self._last_group_txn = applied.txn_id
                    if engine.env.defer_meta_sync:
                        # LMDB flushed the file before this commit's meta
                        # page: every commit before it is on the disk.
                        self._durable_up_to(committed - 1)
                else:
                    # Written without a change of state (a replacement
                    # with the same fingerprint), or nothing written: the
                    # id is taken in the first case, or if another
                    # process committed since; then flush to be sure.
                    unsure = engine.env.last_txn_id() >= applied.txn_id
                for request, result in zip(pending, results, strict=True):
                    request.result = result
                    request.done = True
                pending = []
        except BaseException as exc:
            if applied is not None:
                self._recover_delta(engine, applied, exc)
            if not isinstance(exc, Exception):
                self._interrupted(engine, pending, applied)
                raise
            # The transaction itself failed (a full disk, a closed or
            # read-only store): nothing of it was written, every caller
            # of the group gets the error.
            for request in pending:
                request.error = exc
                request.done = True
        return committed, unsure

    @staticmethod
    def _finisher(
        engine: Engine, pending: list[Request], others: Others | None, applied: Applied
    ) -> Callable[[_lmdb.Txn, list[Any]], None] | None:
        """What a group's transaction writes after its bodies: other
        processes' outcomes and the group's number (:meth:`Others.finisher`),
        or, for several writes of this process, a random token; either is
        what :meth:`_fate` looks for after an interrupt."""
        if others is not None:
            applied.token = (WRITERS_KEY, others.group.to_bytes(8, "big"))
            return others.finisher(pending, applied)
        if len(pending) < 2:
            return None  # a lone write's caller gets the interrupt, and nobody else waits
        token = random.getrandbits(64).to_bytes(8, "big")
        applied.token = (GROUP_KEY, token)

        def finish(txn: _lmdb.Txn, _results: list[Any]) -> None:
            txn.put(GROUP_KEY, token, db=engine.handles.meta)  # (read here: a re-layout replaces it)

        return finish

    def _interrupted(self, engine: Engine, pending: list[Request], applied: Applied | None) -> None:
        """This thread was interrupted while it committed ``pending``: give
        each the outcome the transaction gave it if it committed, mark it to
        run again (:meth:`_settle`) if it surely did not, and say so if that
        is unknown. (Its own request's caller gets the interrupt anyway.)"""
        fate = self._fate(engine, applied)
        if fate is not False:
            if fate and applied is not None:
                self._last_group_txn = max(self._last_group_txn, applied.txn_id)
            self._count_interrupted_commit(engine)
        for index, request in enumerate(pending):
            if fate is False:
                request.retry = True
            elif fate and applied is not None:
                request.result = applied.results[index]
                request.done = True
            else:
                request.error = CommitInterruptedError(
                    "the thread committing this write with its own was interrupted at its commit; "
                    "the write was stored whole or not at all: look its key up"
                )
                request.done = True

    @staticmethod
    def _fate(engine: Engine, applied: Applied | None) -> bool | None:
        """After an interrupt: whether the transaction of ``applied``
        committed. Surely not if its bodies had not run to the end, or no
        commit has taken its id, or the commit that did lacks its token;
        surely so if the store holds its token; ``None`` when that cannot
        be told (a lone write has no token, and another process may have
        written over it since)."""
        if applied is None or not applied.ran:
            return False
        try:
            with engine.read() as txn:
                snapshot = int(txn.id())
                if snapshot < applied.txn_id:
                    return False
                if applied.token is None:
                    return None
                key, value = applied.token
                if txn.get(key, db=engine.handles.meta) == value:
                    return True
                return False if snapshot == applied.txn_id else None
        except Exception:
            return None

    def _recover_delta(self, engine: Engine, applied: Applied, exc: BaseException) -> None:
        """After a transaction of ``applied``'s bodies failed: undo what they
        did to the delta if the failure surely came before the commit (a
        body's error, or the transaction's before it committed). After an
        interrupt, which may have stopped the delta half changed or come
        after the commit, or a failure after the bodies ran, the next read
        reloads the delta from the file instead."""
        if isinstance(exc, Exception) and not applied.ran:
            self._undo(engine, applied)
        else:
            engine.forget_delta()

    # ----------------------------------------------------- across processes

    def _mailbox_of(self, engine: Engine) -> Mailbox | None:
        """The store's mailbox, opened at the first group that may use it:
        only ``sync=True`` stores share commits across processes (the others
        do not wait for a flush, so gain nothing)."""
        if self._mailbox is None and not self._mailbox_refused:
            if engine.closed:
                return None  # its calls fail as the store's lock is taken
            if not engine.env.shares_commits:
                self._mailbox_refused = True
                return None
            self._mailbox = Mailbox.open(engine.path)
            self._mailbox_refused = self._mailbox is None
        return self._mailbox

    def _commit_posted(
        self, engine: Engine, group: list[Request], mailbox: Mailbox
    ) -> tuple[int | None, bool]:
        """Post ``group`` for the process leading the next commit and wait:
        for that leader's answers (read without the lead), or for the lead,
        to lead the commit itself once as many processes have posted as the
        last group held, or ``GATHER_PROCESSES_SECONDS`` have passed.

        The lead is taken before the store's lock and never the other way
        round, so a thread holding the store's lock never waits for the lead.
        """
        try:
            posted = mailbox.post(wire.pack_request([request.spec for request in group]))
            gather_until = time.monotonic() + GATHER_PROCESSES_SECONDS
            while True:
                # A leader answering now answers every process of its group
                # at once; with no leader at work this returns at once.
                raw = mailbox.answered() if posted else None
                if raw is not None:
                    return self._answered(engine, mailbox, group, raw, lead_held=False)
                mailbox.wait_lead()
                try:
                    with mailbox.answering():
                        Others.resolve_orphans(engine, mailbox)
                    raw = mailbox.outcome()
                    if raw is not None:
                        return self._answered(engine, mailbox, group, raw, lead_held=True)
                    if not (posted and time.monotonic() < gather_until and self._expects_more(mailbox)):
                        with mailbox.answering():
                            return self._lead_others(engine, mailbox, group=group)
                finally:
                    mailbox.release_lead()
                # Processes answered by the last group are coming back: give them
                # the lead a while.
                time.sleep(GATHER_GAP_SECONDS)
        except Exception:
            mailbox.let_go()
            raise
        except BaseException:
            self._take_back(mailbox, group)
            raise

    def _take_back(self, mailbox: Mailbox, group: list[Request]) -> None:
        """This thread was interrupted with ``group`` posted: take it back if
        no leader took it (its writes run again here), or give it the
        outcomes a leader wrote; if a leader that died took it, its fate is
        unknown here (and that leader's successor settles it)."""
        withdrawn, raw = mailbox.take_back()
        if withdrawn:
            for request in group:
                request.retry = True
        elif raw is not None:
            for request in self._take_outcomes(group, raw):
                request.retry = True

    def _answered(
        self, engine: Engine, mailbox: Mailbox, group: list[Request], raw: bytes, *, lead_held: bool
    ) -> tuple[None, bool]:
        """Give ``group`` the outcomes another process's commit gave it, and
        commit those it left to this process (with the lead)."""
        # The commit that holds them was made durable, and with it every
        # commit this process made before it.
        self._durable_up_to(engine.env.committed_txn)
        left = self._take_outcomes(group, raw)
        if not left:
            return None, False
        if lead_held:
            return self._commit_left(engine, mailbox, left)
        mailbox.wait_lead()
        try:
            return self._commit_left(engine, mailbox, left)
        finally:
            mailbox.release_lead()

    @staticmethod
    def _expects_more(mailbox: Mailbox) -> bool:
        """With the lead held: whether fewer processes have posted (this one
        counted) than the last group held. Processes answered by one commit
        post their next writes a little later; a leader that commits at once
        takes only those that came first, and the rest make the next group."""
        return mailbox.posted_count() + 1 < mailbox.last_group()

    @staticmethod
    def _take_outcomes(group: list[Request], raw: bytes) -> list[Request]:
        """Give each request of ``group`` its outcome from another process's
        commit; returns those it left to this process (an outcome too big
        for the slot, a layout this process has not seen)."""
        outcomes = wire.unpack_outcomes(raw, len(group))
        left: list[Request] = []
        for request, outcome in zip(group, outcomes, strict=True):
            if outcome is wire.RUN_HERE:
                left.append(request)
            else:
                request.result, request.error = outcome
                request.done = True
        return left

    def _commit_left(self, engine: Engine, mailbox: Mailbox, left: list[Request]) -> tuple[None, bool]:
        """With the lead held: commit the requests another process's commit
        left to this one, and make them durable before the lead goes."""
        committed, unsure = self._lead_others(engine, mailbox, group=left, take_others=False)
        if committed is not None or unsure:
            self._make_durable(engine, None)
        return None, False

    def _lead_others(
        self,
        engine: Engine,
        mailbox: Mailbox,
        *,
        group: list[Request] | None = None,
        queue: CommitQueue | None = None,
        take_others: bool = True,
    ) -> tuple[int | None, bool]:
        """With the lead held: commit ``group`` (or the requests waiting in
        ``queue`` once the store's lock is held) with every write other
        processes posted, and tell each its outcome once it is durable.
        Returns what :meth:`_lead` does: a commit of this process's writes
        alone is made durable as :meth:`write` makes any other.

        An interrupt leaves the slots this group took ``TAKEN`` with its
        number, and the next leader settles them as a dead leader's
        (:meth:`Others.resolve_orphans`); the other processes never hear of it.
        """
        mailbox.withdraw()  # this process's own request runs as its bodies
        with engine.lock:
            if group is None:
                assert queue is not None
                group = queue.take(MAX_GROUP)
            try:
                engine.check_usable()
                others = Others(engine, mailbox, random.getrandbits(63) | 1, self.body_of)
                if take_others:
                    others.take_posted()
            except Exception as exc:
                for request in group:
                    request.error = exc
                    request.done = True
                return None, False
            except BaseException:
                for request in group:
                    request.retry = True  # nothing ran: the next leader commits them
                raise
            mailbox.set_last_group(len(others.slots) + 1)
            if not others.slots:
                return self._commit(engine, group)
            try:
                self._commit(engine, group, others)
                self._make_durable(engine, None)  # before any other process hears of it
            except Exception as exc:
                others.fail(exc)
                for request in group:
                    if request.error is None:
                        request.error = exc  # committed, but not known to be on the disk
                        request.done = True
                return None, False
            others.answer()
            self.others_committed += len(others.requests)
        return None, False

    def _make_durable(self, engine: Engine, txn_id: int | None) -> None:
        """Return once commit ``txn_id`` (and every one before) is on the disk:
        one flush, unless one begun after that commit has already returned
        (``None``: flush in any case)."""
        with self._flushing:
            if txn_id is not None and self._durable_txn >= txn_id:
                return  # a flush begun since that commit covered it
            # Every commit of this process up to this one has written its
            # meta page by now. (Not LMDB's last_txn_id: this runs outside
            # the store's lock, where fork() may strike mid-call.)
            target = engine.env.committed_txn
            engine.env.flush()
            self._durable_up_to(target)

    def _durable_up_to(self, txn_id: int) -> None:
        with self._durability:
            if txn_id > self._durable_txn:
                self._durable_txn = txn_id
                self._durability.notify_all()

    def _await_durable(self, engine: Engine, txn_id: int, members: int) -> None:
        """Wait for the next group's commit to make commit ``txn_id`` (of a
        group of ``members`` writes) durable.

        That group's leader either commits (which flushes the file first) or
        flushes; the timeout is a safety net only, after which this thread
        flushes itself.
        """
        with self._durability:
            self._awaiting += members
            try:
                flushed = self._durability.wait_for(
                    lambda: self._durable_txn >= txn_id, timeout=AWAIT_FLUSH_SECONDS
                )
                if flushed:
                    return
            finally:
                self._awaiting -= members
        self._make_durable(engine, txn_id)

    def _gather(self, engine: Engine, queue: CommitQueue) -> None:
        """Before a group's commit, let the writers it may expect join it.

        Writers that keep a store busy come back soon after their last write
        returns; a leader that commits at once takes only those that came
        first, and the rest form the next group, so groups alternate between
        few and many writers and each costs a flush. Instead, a leader with
        fewer writers queued than the last group held expects as many (or,
        if more, those queued plus those waiting for this commit to make
        theirs durable, whom a flush lets go at once), and waits for each
        next one up to ``GATHER_GAP_SECONDS``. A lone writer never waits.
        """
        with queue.mutex:
            queued = len(queue.waiting)
        if queued >= self._last_group_size:
            return  # as many as last time: commit now (and make the last group durable)
        with self._durability:
            awaiting = self._awaiting
        expected = min(MAX_GROUP, max(self._last_group_size, queued + awaiting))
        if awaiting:
            self._make_durable(engine, self._last_group_txn)  # they come back once it is on the disk
        with queue.mutex:
            queue.gathering = True
            try:
                while len(queue.waiting) < expected:
                    arrived = len(queue.waiting)
                    queue.arrived.wait(GATHER_GAP_SECONDS)
                    if len(queue.waiting) == arrived:
                        break  # no one came: the rest are busy elsewhere
            finally:
                queue.gathering = False

    def _bodies_in_order(
        self,
        engine: Engine,
        bodies: list[Body[Any]],
        applied: Applied,
        *,
        isolate: bool,
        finish: Callable[[_lmdb.Txn, list[Any]], None] | None = None,
    ) -> Callable[[_lmdb.Txn, State], tuple[list[Any], State, Change]]:
        """One :meth:`Engine.write` body running ``bodies`` in order in its transaction,
        each seeing the state and delta the ones before left.

        ``applied`` records what they did to the delta, so that a transaction
        that does not commit can be undone. With ``isolate``, a body that
        raises is reported as :class:`BodyFailedError` (the group runs again
        without it); without, its error is raised as it is. ``finish`` runs
        in the transaction after the bodies, with their results.
        """

        def run(txn: _lmdb.Txn, state: State) -> tuple[list[Any], State, Change]:
            if applied.before:
                # An earlier attempt of this transaction (the map had to grow)
                # changed the delta, and the transaction that began since may
                # have replayed another process's commits onto it: reload the
                # delta from the log rather than undo.
                applied.before.clear()
                engine.forget_delta()
                state = engine.sync_delta(txn)
            applied.ran = False
            applied.delta = engine.delta
            applied.txn_id = int(txn.id())
            first_state = state
            results = []
            for index, body in enumerate(bodies):
                try:
                    result, state, change = body(txn, state)
                    if change.merged or change.catalog is not None:
                        raise AssertionError("a single write merged or changed the catalog")
                    applied.apply(change)
                except BaseException as exc:
                    applied.undo()
                    # LMDB's own errors (a full map above all) are the
                    # transaction's, not the body's.
                    own = isinstance(exc, Exception) and not _lmdb.is_lmdb_error(exc)
                    if isolate and own and len(bodies) > 1:
                        raise BodyFailedError(index, exc) from exc
                    raise
                results.append(result)
            if finish is not None:
                try:
                    finish(txn, results)
                except BaseException:
                    applied.undo()
                    raise
            applied.changed_state = state != first_state
            applied.results = results
            applied.ran = True
            # The delta is already in step; Engine.write applies no change of its own.
            return results, state, Change([], [])

        return run

    def replay(self, engine: Engine, records: list[tuple[int, bytes]]) -> None:
        """After a restart's roll-back (:mod:`simstore.engine.wal`): commit
        the logged groups again, in order, each in one transaction as before."""
        meta_db = engine.handles.meta
        for _txn_id, payload in records:
            group, specs = wire.unpack_record(payload)
            bodies: list[Body[Any]] = []
            for spec in specs:
                body = self.body_of(engine, spec)
                if body is None:
                    raise CorruptStoreError(f"{engine.path}: a logged write cannot run here: {spec!r:.200}")
                bodies.append(body)

            def finish(txn: _lmdb.Txn, _results: list[Any], group: int = group) -> None:
                if group:
                    txn.put(WRITERS_KEY, group.to_bytes(8, "big"), db=meta_db)

            applied = Applied(engine.delta)
            try:
                engine.write(self._bodies_in_order(engine, bodies, applied, isolate=False, finish=finish))
            except BaseException as exc:
                self._recover_delta(engine, applied, exc)
                raise

    def _undo(self, engine: Engine, applied: Applied) -> None:
        """Undo a group's delta changes after its transaction failed."""
        if applied.delta is engine.delta:
            applied.undo()
        else:
            applied.before.clear()  # the store adopted a new layout and delta since

    def close_mailbox(self) -> None:
        """Close the writers' mailbox (at the store's close)."""
        if self._mailbox is not None:
            self._mailbox.close()
        self._mailbox_refused = True

    def renewed(self) -> GroupCommit:
        """A new group commit for the child of a ``fork()`` (see
        :class:`simstore.engine.core.CommitHooks`)."""
        return GroupCommit(self.body_of)

    def forget_mailbox(self) -> None:
        """In a forked child: drop the parent's mailbox handle, leaving its locks be."""
        if self._mailbox is not None:
            self._mailbox.forget()

    # ------------------------------------------------------------------ batch

    @contextmanager
    def gathering(self, engine: Engine) -> Iterator[list[Body[Any]]]:
        """Gather this thread's single writes (their bodies, in the list
        yielded) and, if the block ends without an error, commit them in
        order, in one transaction: all of them or none (see ``Store.batch``).

        Raises:
            InvalidValueError: a batch is already open in this thread.
        """
        engine.check_usable()
        if self.batching.bodies is not None:
            raise InvalidValueError("a batch is already open in this thread; batches do not nest")
        bodies: list[Body[Any]] = []
        pending: list[Pending] = []
        try:
            self.batching.bodies, self.batching.pending = bodies, pending
            yield bodies
        finally:
            self.batching.bodies = self.batching.pending = None
        if not bodies:
            return
        with engine.lock:
            applied = Applied(engine.delta)
            try:
                results = engine.write(self._bodies_in_order(engine, bodies, applied, isolate=False))
            except BaseException as exc:
                # An interrupt leaves the batch committed whole or not at
                # all, its pending outcomes unknown either way.
                self._recover_delta(engine, applied, exc)
                raise
        for outcome, result in zip(pending, results, strict=True):
            outcome._set(result)

    def refuse_in_batch(self, verb: str) -> None:
        """Refuse a call that commits on its own while a batch is open in this
        thread: it would be written at once, ahead of the batch and outside
        its all or nothing."""
        if self.batching.bodies is not None:
            raise InvalidValueError(
                f"{verb} commits on its own and cannot join the batch open in this thread; "
                "call it after the block (a batch gathers add, add_if_new and remove)"
            )

    def in_batch_through_store(self) -> bool:
        """Whether a batch is open in this thread and the write being made
        comes through the store, not through the batch."""
        return self.batching.bodies is not None and not self.batching.through_batch

    # ---------------------------------------------------------- interval sync

    def committed(self, engine: Engine) -> None:
        """After every commit (the store's lock held): make it durable as
        ``sync`` asks, or leave that to the group's leader."""
        if engine.env.defer_meta_sync:
            if not self._in_group:
                self._make_durable(engine, engine.env.committed_txn)
            return
        if engine.options.sync == "interval":
            self._count_commit(engine)

    def _count_interrupted_commit(self, engine: Engine) -> None:
        """After an interrupt around a commit, with ``sync="interval"``: the
        commit may have come without its count (Engine.write calls
        committed() after it): counted, so that it is flushed in time (an
        extra count only flushes sooner)."""
        if engine.options.sync == "interval":
            with contextlib.suppress(Exception):
                self._count_commit(engine)

    def _count_commit(self, engine: Engine) -> None:
        """``sync="interval"``: count a commit, and flush once ``sync_every``
        have gathered or ``sync_interval`` has passed since the first (a
        timer flushes a store that stops writing)."""
        now = time.monotonic()
        if not self._unflushed:
            self._unflushed_since = now
        self._unflushed += 1
        options = engine.options
        if self._unflushed >= options.sync_every or now - self._unflushed_since >= options.sync_interval:
            self.flush_pending(engine)
        elif self._flush_timer is None:
            timer = threading.Timer(options.sync_interval, self._flush_when_due, args=(engine,))
            timer.daemon = True
            # Started, then recorded: a timer an interrupt kept from being
            # recorded still flushes (see _flush_when_due), and no timer is
            # ever recorded that will not run.
            timer.start()
            self._flush_timer = timer

    def flush_pending(self, engine: Engine) -> None:
        """Flush the commits not yet on disk (called with the lock held)."""
        timer, self._flush_timer = self._flush_timer, None
        if timer is not None:
            timer.cancel()
        if self._unflushed:
            engine.env.flush()
            self._unflushed = 0

    def _flush_when_due(self, engine: Engine) -> None:
        with engine.lock:
            if self._flush_timer is not None and self._flush_timer is not threading.current_thread():
                return  # flushed and re-armed since
            self._flush_timer = None
            if engine.closed or os.getpid() != engine.pid or not self._unflushed:
                return
            try:
                self.flush_pending(engine)
            except SimstoreError as exc:
                warnings.warn(
                    f"{engine.path}: the interval flush failed ({exc})", RuntimeWarning, stacklevel=1
                )

    def flush(self, engine: Engine) -> None:
        """Make every write this process committed durable now (one fsync).

        Only needed with ``sync="interval"`` (or ``sync=False``): with
        ``sync=True`` every write is durable when its call returns.
        """
        with engine.lock:
            engine.check_usable()
            if engine.readonly:
                return
            self._unflushed = max(self._unflushed, 1)
            self.flush_pending(engine)
