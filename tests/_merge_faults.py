"""Faults injected into compaction steps, and a look at the compaction under way, for the
tests that cut compactions short."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

from simstore.engine.catalog import Compaction
from simstore.engine.tableset import TableSet
from simstore.store.facade import Store


class StepInterruptedError(Exception):
    """Stands in for a crash or a Ctrl-C inside a compaction step."""


@contextlib.contextmanager
def failing_after(steps: int, error: BaseException) -> Iterator[None]:
    """Let ``steps`` compaction steps through, then raise ``error`` inside the next one
    (after it has written some of its entries, before its transaction commits)."""
    real = TableSet.compaction_step
    taken = 0

    def compaction_step(self: TableSet, txn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal taken
        result = real(self, txn, *args, **kwargs)
        if taken == steps:
            raise error
        taken += 1
        return result

    with mock.patch.object(TableSet, "compaction_step", compaction_step):
        yield


def compaction_under_way(store: Store) -> Compaction | None:
    """The compaction the store's latest snapshot has under way, if any."""
    with store._engine.read():
        return store._engine.tableset.catalog.compaction


def run_count(store: Store) -> int:
    with store._engine.read():
        return len(store._engine.tableset.catalog.runs)


class SmallStretches:
    """A state machine mixin (listed before the machine): joins merge
    ``STRETCH`` entries at a time instead of about 4M, so that every join
    cuts its runs into many stretches, for as long as the machine runs."""

    STRETCH = 3

    def __init__(self) -> None:
        self._stretch = mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", self.STRETCH)
        self._stretch.start()
        super().__init__()

    def teardown(self) -> None:
        try:
            super().teardown()  # type: ignore[misc]
        finally:
            self._stretch.stop()
