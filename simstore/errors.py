"""The exception hierarchy, and where simstore's warnings point.

Every error simstore raises on purpose derives from :class:`SimstoreError`.
Where an error resembles a standard one it mixes that type in too, so callers
may catch either: a missing store is also a :class:`FileNotFoundError`, a
missing document also a :class:`KeyError`, a bad argument also a
:class:`ValueError` or :class:`TypeError`.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any

#: simstore's own source files, which a warning never names as its place.
_PACKAGE_FOLDER = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_caller(message: str, category: type[Warning]) -> None:
    """Warn at the line of the first caller outside simstore: the user's line
    that called ``store.add`` or ``dedup_table``, however many simstore
    frames lie between it and the code that found the problem (a fixed
    ``stacklevel`` names a simstore line on every path but one)."""
    frame = sys._getframe(1)
    level = 2  # warnings.warn's count for our caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_FOLDER):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


class SimstoreError(Exception):
    """Base class of every error simstore raises on purpose."""


class InvalidValueError(SimstoreError, ValueError):
    """An argument has the right type but an unusable value (a fingerprint
    outside 0..2**64-1, a k larger than the store's, an empty key list)."""


class InvalidTypeError(SimstoreError, TypeError):
    """An argument has a type simstore does not accept."""


class KeyNotFoundError(SimstoreError, KeyError):
    """The store holds no document under this key."""

    def __str__(self) -> str:
        # KeyError.__str__ repr()s its argument; a message reads better.
        return str(self.args[0]) if self.args else "key not found"


class StoreNotFoundError(SimstoreError, FileNotFoundError):
    """The store file does not exist and the open mode does not create it."""


class NotAStoreError(SimstoreError, ValueError):
    """The file exists but is not a simstore store (not LMDB, or LMDB written
    by another program). The file is left untouched."""


class CorruptStoreError(SimstoreError):
    """The store file is a simstore store but its contents are damaged."""


class FormatVersionError(SimstoreError):
    """The store was written by a newer simstore whose format this version
    cannot read safely."""


class ParameterMismatchError(SimstoreError, ValueError):
    """Parameters passed to :func:`simstore.open` disagree with the ones
    stored in the file. ``differences`` maps each parameter name to the pair
    ``(stored, requested)``."""

    def __init__(self, differences: Mapping[str, tuple[Any, Any]]) -> None:
        self.differences = dict(differences)
        listed = "; ".join(
            f"{name}: stored {stored!r}, requested {requested!r}"
            for name, (stored, requested) in sorted(self.differences.items())
        )
        super().__init__(
            f"parameters differ from the ones stored in the file ({listed}); "
            "pass None (or omit them) to use the stored values"
        )


class ShardMismatchError(ParameterMismatchError):
    """The shards given to :class:`simstore.ShardedStore` disagree on a
    parameter that shapes answers. ``differences`` maps each parameter name to
    ``(first shard's value, this shard's value)``."""

    def __init__(self, path: str, first_path: str, differences: Mapping[str, tuple[Any, Any]]) -> None:
        self.differences = dict(differences)
        listed = "; ".join(
            f"{name}: {first!r} in {first_path}, {this!r} here"
            for name, (first, this) in sorted(self.differences.items())
        )
        SimstoreError.__init__(self, f"{path} cannot be a shard beside {first_path} ({listed})")


class ReadOnlyError(SimstoreError, PermissionError):
    """A write was attempted on a store opened read-only."""


class AccessDeniedError(SimstoreError, PermissionError):
    """The operating system refused the access a store needs: a file or
    folder this user may not read or write (the store, its ``-lock`` file,
    or the folder they are made in)."""


class StoreClosedError(SimstoreError, ValueError):
    """An operation was attempted on a closed store."""


class StoreFullError(SimstoreError, OSError):
    """The store cannot grow: the disk is full or ``max_map_size`` is reached.
    The failed operation changed nothing."""


class FlushError(SimstoreError, OSError):
    """Committed writes could not be flushed to the disk (an I/O error from
    ``fdatasync``). Other processes see them, but a power loss may undo them;
    the calls that get this error were not acknowledged as durable."""


class CommitInterruptedError(SimstoreError):
    """Another thread was committing this write together with its own when
    it was interrupted (``KeyboardInterrupt``, or another exception raised
    into that thread), at a point where it cannot tell whether the commit
    happened: the write was stored whole or not at all; look the key up to
    know. Writes whose fate is known are committed or run again instead."""


class StoreLockedError(SimstoreError, OSError):
    """The store's lock file could not be created or used."""


class MainGuardError(SimstoreError, RuntimeError):
    """Worker processes were asked for while ``multiprocessing`` was starting
    a child, which re-runs the main script's top level: the script's work
    belongs under ``if __name__ == "__main__":``."""


class WorkerError(SimstoreError, RuntimeError):
    """A fingerprinting worker process failed or stopped unexpectedly."""
