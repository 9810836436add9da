"""Explicit batches: the writes of one ``with store.batch() as batch:``
block, gathered in their thread and committed together at its end (by
:class:`simstore.commit.group.GroupCommit`)."""

from __future__ import annotations

import threading
from typing import Any, cast

from simstore.commit.queue import Body
from simstore.errors import InvalidValueError


class Pending:
    """What a write made in a batch returns: its outcome, known once the
    batch has committed (``batch.add_if_new``'s matches)."""

    __slots__ = ("_done", "_result")

    def __init__(self) -> None:
        self._done = False
        self._result: Any = None

    def result(self) -> Any:
        """The write's outcome (for ``add_if_new``, the near-duplicates that
        kept it out; empty when it was inserted).

        Raises:
            InvalidValueError: the batch has not committed (yet, or at all).
        """
        if not self._done:
            raise InvalidValueError("the batch holding this write has not committed")
        return self._result

    def _set(self, result: Any) -> None:
        self._result = result
        self._done = True


class Batching(threading.local):
    """Per thread: the bodies of the batch open in this thread (``None``:
    no batch), a :class:`Pending` for each, and whether the write being
    gathered comes through the batch (whose ``add_if_new`` can return a
    pending outcome) or through the store (whose ``add_if_new`` cannot)."""

    bodies: list[Body[Any]] | None = None
    pending: list[Pending] | None = None
    through_batch = False


class Batch:
    """The writes of one ``with store.batch() as batch:`` block.

    ``add``, ``add_if_new`` and ``remove`` take the arguments of the
    store's methods and check them at once (bad input raises there), but
    write nothing until the block ends. ``add`` and ``remove`` return
    ``None``; ``add_if_new`` returns a :class:`Pending` whose ``result()``
    gives the near-duplicates once the block has ended. Only the thread that
    opened the batch may use it.
    """

    def __init__(self, store: Any, bodies: list[Body[Any]], batching: Batching) -> None:
        # The facade whose single writes the block gathers (not imported here).
        self._store = store
        self._bodies = bodies
        self._batching = batching

    def _check_open(self) -> None:
        # Open while its bodies are the ones this thread gathers: after the
        # block (or from another thread) a call would write on its own.
        if self._batching.bodies is not self._bodies:
            raise InvalidValueError(
                "this batch's block has ended (or it belongs to another thread); "
                "write through the store, or open another batch"
            )

    def add(self, *args: Any, **kwargs: Any) -> None:
        self._check_open()
        self._store.add(*args, **kwargs)

    def add_if_new(self, *args: Any, **kwargs: Any) -> Pending:
        """``store.add_if_new`` in the batch: its outcome is known once the
        block ends, from the returned :class:`Pending`."""
        self._check_open()
        self._batching.through_batch = True
        try:
            return cast(Pending, self._store.add_if_new(*args, **kwargs))
        finally:
            self._batching.through_batch = False

    def remove(self, *args: Any, **kwargs: Any) -> None:
        self._check_open()
        self._store.remove(*args, **kwargs)

    def __len__(self) -> int:
        return len(self._bodies)
