"""What the ``simstore`` command line's verbs share: the program's name,
its usage error, argument types, and keys and values as JSON. Opening
stores is :mod:`simstore.cli.stores`, progress :mod:`simstore.cli.progress`,
reading and fingerprinting documents :mod:`simstore.cli.documents`."""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any, TextIO

from simstore.errors import SimstoreError
from simstore.index.permute import MAX_FINGERPRINT
from simstore.keys import Key

PROG = "simstore"
#: Queries per query_many call in ``dedup --against``.
QUERY_CHUNK = 10_000


class CommandError(SimstoreError):
    """A command cannot go on; its message is printed as ``simstore: error: ...``."""


# ------------------------------------------------------------ opening stores
#
# The library's messages speak Python (``use mode 'c'``, ``pass None``); these
# say the same in the command line's words.


# ------------------------------------------------------------ shared helpers


def key_to_json(key: Key) -> Any:
    """Keys as JSON: str and int as themselves, bytes as ``{"$bytes": base64}``."""
    if isinstance(key, bytes):
        return {"$bytes": base64.b64encode(key).decode("ascii")}
    return key


def json_safe(value: Any) -> Any:
    """Metadata as JSON: bytes anywhere become ``{"$bytes": base64}``."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(name): json_safe(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def from_json(value: Any) -> Any:
    """The inverse of :func:`json_safe`."""
    if isinstance(value, dict):
        if len(value) == 1 and "$bytes" in value and isinstance(value["$bytes"], str):
            return base64.b64decode(value["$bytes"], validate=True)
        return {name: from_json(item) for name, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless one.

    >>> counted(1, "document"), counted(2, "bad line"), counted(0, "document")
    ('1 document', '2 bad lines', '0 documents')
    """
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def show_key(key: Key) -> str:
    return key if isinstance(key, str) else repr(key)


def hex_fingerprint(value: int) -> str:
    return f"{value:016x}"


def parse_fingerprint(text: str) -> int:
    """A fingerprint given as hex (``0x`` optional)."""
    try:
        value = int(text, 16)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a hexadecimal fingerprint: {text!r}") from None
    if not 0 <= value <= MAX_FINGERPRINT:
        raise argparse.ArgumentTypeError(f"a fingerprint has 64 bits; {text!r} is too large")
    return value


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def document_count(text: str) -> float:
    """``--docs``: a number of documents (``1e9`` allowed), at least 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of documents: {text!r}") from None
    if not value >= 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be at least 1 document, got {text}")
    return value


def print_json(value: Any, file: TextIO | None = None) -> None:
    print(json.dumps(value, ensure_ascii=False), file=file)


# ------------------------------------------------------------------- inputs
