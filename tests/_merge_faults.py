"""Faults injected into a merge's per-table steps, for the tests that cut merges short."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

from simstore.store import Store


class StepInterruptedError(Exception):
    """Stands in for a crash or a Ctrl-C inside a merge step."""


@contextlib.contextmanager
def failing_after(tables: int, error: BaseException) -> Iterator[None]:
    """Let ``tables`` table writes through, then raise ``error`` in the next one."""
    real = Store._write_table
    written = 0

    def write_table(self: Store, *args: Any, **kwargs: Any) -> None:
        nonlocal written
        if written == tables:
            raise error
        written += 1
        real(self, *args, **kwargs)

    with mock.patch.object(Store, "_write_table", write_table):
        yield


def merged_tables(store: Store) -> int:
    """How many tables the merge under way has written (0: none under way)."""
    with store._read():
        return store._delta.state.merged_tables
