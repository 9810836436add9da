"""What reading an input yields: a document (its key, text, metadata and line), or an
InputError that names the input and line; shared by the readers, the stream checks and
the writers."""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from typing import Any, TypeVar

from simstore.errors import SimstoreError
from simstore.keys import Key

STDIN = "-"


STDIN_NAME = "<stdin>"


class InputError(SimstoreError, ValueError):
    """A bad input line (or file): ``source``, 1-based ``line`` (0 for the
    whole file) and what is wrong with it."""

    def __init__(self, source: str, line: int, message: str) -> None:
        super().__init__(f"{source}:{line}: {message}" if line else f"{source}: {message}")
        self.source = source
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Document:
    """One input document and where it came from.

    ``record`` is what was read, for writing the document back out: the JSON
    object or CSV row (a dict), or the line or file text (a str).
    """

    key: Key
    text: str
    source: str
    line: int
    record: Any
    meta: dict[str, Any] | None = None


_Result = TypeVar("_Result")


def _json_value(value: Any) -> Any:
    """A Parquet or Arrow value JSON has no type for: bytes as ``{"$bytes":
    base64}`` (as ``simstore export`` writes them), dates and times in ISO
    8601, anything else (decimals, durations) as its text."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)
