"""What crosses the writers' mailbox (:mod:`simstore.commit.mailbox`): a process's
single writes, and each one's outcome, in msgpack.

A request is the list of the writes' specs (:func:`simstore.store.writes.body_of`
reads them). An outcome is ``[0, result]`` (a ``Match`` list for
``add_if_new``, else ``None``), ``[1, error type, message]``, or ``[2]``:
commit it yourself (its outcome did not fit the slot, or the leader's layout
differs from the one the write was checked against).
"""

from __future__ import annotations

from typing import Any

import msgpack

from simstore import errors
from simstore.errors import CorruptStoreError, SimstoreError
from simstore.results import Match

_OK, _ERROR, _HERE = 0, 1, 2


class _RunHere:
    """The outcome of a write left to its own process."""

    def __repr__(self) -> str:
        return "RUN_HERE"


RUN_HERE: Any = _RunHere()


class LeftToPosterError(SimstoreError):
    """Internal: a write whose outcome does not fit its slot; its process commits it."""


def pack_request(specs: list[Any]) -> bytes:
    return bytes(msgpack.packb(specs, use_bin_type=True))


def unpack_request(raw: bytes) -> list[list[Any]]:
    return _writes(msgpack.unpackb(raw, raw=False, strict_map_key=False), "a request in the writers' mailbox")


def _writes(specs: Any, what: str) -> list[list[Any]]:
    """``specs`` if it is a list of writes' specs (each a non-empty list)."""
    if not isinstance(specs, list) or not all(isinstance(spec, list) and spec for spec in specs):
        raise CorruptStoreError(f"{what} is not a list of writes")
    return specs


def pack_record(group: int, specs: list[Any]) -> bytes:
    """A logged commit's record (simstore.engine.wal): its mailbox group's
    number (0: none) and its writes' specs, in the order they ran."""
    return bytes(msgpack.packb([group, specs], use_bin_type=True))


def unpack_record(raw: bytes) -> tuple[int, list[list[Any]]]:
    record = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    if not (isinstance(record, list) and len(record) == 2 and isinstance(record[0], int)):
        raise CorruptStoreError("a record of the write-ahead log is not a group of writes")
    return record[0], _writes(record[1], "a record of the write-ahead log")


def outcome_of(result: Any, error: BaseException | None) -> list[Any]:
    """One write's outcome, as the mailbox carries it."""
    if error is not None:
        if isinstance(error, LeftToPosterError):
            return [_HERE]
        return [_ERROR, type(error).__name__, str(error)]
    if result is None:
        return [_OK, None]
    if isinstance(result, list):
        return [_OK, [list(match) for match in result]]
    raise TypeError(f"a single write returned {type(result).__name__}")


def pack_outcomes(outcomes: list[list[Any]]) -> bytes:
    return bytes(msgpack.packb(outcomes, use_bin_type=True))


def unpack_outcomes(raw: bytes, count: int) -> list[Any]:
    """The ``count`` outcomes of a request: each ``(result, error)``, or
    :data:`RUN_HERE`."""
    outcomes = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    if not isinstance(outcomes, list) or len(outcomes) != count:
        raise CorruptStoreError("the writers' mailbox gave an outcome that does not match the request")
    decoded: list[Any] = []
    for outcome in outcomes:
        if outcome[0] == _HERE:
            decoded.append(RUN_HERE)
        elif outcome[0] == _ERROR:
            decoded.append((None, _error(outcome[1], outcome[2])))
        elif outcome[1] is None:
            decoded.append((None, None))
        else:
            decoded.append(([Match(*row) for row in outcome[1]], None))
    return decoded


def _error(name: str, message: str) -> SimstoreError:
    """The error another process's commit gave a write: simstore's own type
    when it is one (with the message it had), else :class:`SimstoreError`."""
    kind = getattr(errors, name, None)
    if isinstance(kind, type) and issubclass(kind, SimstoreError):
        try:
            return kind(message)
        except TypeError:
            pass  # a type built from other arguments
    return SimstoreError(f"{name}: {message}" if kind is None else message)
