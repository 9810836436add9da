"""Resumable ``dedup --store`` runs: which inputs, and how many of their
documents, a run has committed to its store, kept in a file beside it.

The log is written after each commit (write to a temporary file, then
rename), so it never claims more than the store holds. It may claim less: a
run killed between a commit and the log's update adds that batch again on
``--resume``, and re-adding a key replaces its document with the same one.
So a resumed run's store, and its output, are an uninterrupted run's.

A file is known by its path, size and modification time; a directory (of
text files, or of a dataset's Parquet or Arrow parts) by its path and a
digest of the relative path, size and modification time of every file below
it, all taken before the input is read. Its documents are read in a fixed
order (files in name order), so "the first N documents" names the same ones
again. An input that changed since is read in full again; standard input
and pipes (read from a copy each run makes) cannot be resumed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from typing import Any

from simstore.cli.cleanup import remove_file, signals_held
from simstore.cli.common import CommandError
from simstore.io.readers import Input

#: What the log's first field says, so that a file of another program is never replaced.
LOG_FORMAT = "simstore-dedup-progress"


def log_path(store_path: str) -> str:
    """Where the progress of a run into ``store_path`` is kept."""
    return store_path + ".dedup-progress"


def _identity(item: Input) -> list[Any] | None:
    """What ``item`` is known by in the log: ``[absolute path, size,
    mtime_ns]`` of a regular file, ``[absolute path, total size, digest]``
    of a directory (see the module docstring); ``None`` for what cannot be
    resumed (stdin, a pipe: a copy, named after what it copies)."""
    if item.name:
        return None  # read from a copy in this run's scratch folder
    try:
        status = os.stat(item.path)
    except OSError:
        return None
    path = os.path.abspath(item.path)
    if stat.S_ISREG(status.st_mode):
        return [path, status.st_size, status.st_mtime_ns]
    if stat.S_ISDIR(status.st_mode):
        return _directory_identity(path)
    return None


def _directory_identity(folder: str) -> list[Any]:
    """``[folder, total size, digest]``: the digest of every file below
    ``folder`` (hidden ones too) with its size and modification time, in
    the order the reader takes them."""
    digest = hashlib.sha256()
    total = 0
    for parent, subfolders, files in os.walk(folder):
        subfolders.sort()
        for name in sorted(files):
            path = os.path.join(parent, name)
            try:
                status = os.stat(path)
            except OSError:
                continue  # gone meanwhile: reading it would say so
            total += status.st_size
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            digest.update(
                f"{relative}\0{status.st_size}\0{status.st_mtime_ns}\n".encode("utf-8", "surrogateescape")
            )
    return [folder, total, digest.hexdigest()]


def resumable(inputs: list[Input]) -> bool:
    """Whether ``--resume`` could skip any of ``inputs`` (a file or a directory)."""
    return any(not item.name and (os.path.isfile(item.path) or os.path.isdir(item.path)) for item in inputs)


class ProgressLog:
    """The documents of each input committed so far by this run (or, with
    ``resume``, by the run it resumes)."""

    def __init__(self, store_path: str, *, resume: bool) -> None:
        self.path = log_path(store_path)
        self._done: dict[str, tuple[list[Any], int]] = {}
        self._identities: dict[str, list[Any] | None] = {}
        existing = self._read()
        if resume and existing is not None:
            for entry in existing.get("inputs", []):
                identity, committed = entry
                self._done[identity[0]] = (identity, committed)

    def _read(self) -> dict[str, Any] | None:
        try:
            with open(self.path, encoding="utf-8") as handle:
                record = json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise CommandError(f"{self.path} is not a simstore progress log ({exc}); move it away") from None
        if not isinstance(record, dict) or record.get("format") != LOG_FORMAT:
            raise CommandError(f"{self.path} is not a simstore progress log; move it away")
        return record

    def committed(self, item: Input) -> int:
        """How many documents of ``item`` (in reading order) are committed.
        Call it before reading ``item``: what ``item`` is known by is taken
        now (a file changed while it is read is read in full on resume)."""
        identity = self._identity_of(item)
        if identity is None:
            return 0
        known = self._done.get(identity[0])
        return known[1] if known is not None and known[0] == identity else 0

    def _identity_of(self, item: Input) -> list[Any] | None:
        """``item``'s identity, taken once a run."""
        if item.path not in self._identities:
            self._identities[item.path] = _identity(item)
        return self._identities[item.path]

    def record(self, item: Input, committed: int) -> None:
        """``committed`` documents of ``item`` are in the store now."""
        identity = self._identity_of(item)
        if identity is None:
            return
        self._done[identity[0]] = (identity, committed)
        record = {"format": LOG_FORMAT, "version": 1, "inputs": list(self._done.values())}
        folder = os.path.dirname(os.path.abspath(self.path))
        temporary = None
        try:
            with signals_held():  # see simstore.cli.output.output_stream
                handle, temporary = tempfile.mkstemp(prefix=".simstore-progress-", dir=folder)
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(record, stream)
            os.replace(temporary, self.path)
        except BaseException:
            if temporary is not None:
                try:
                    remove_file(temporary)
                except KeyboardInterrupt:  # (cut short: done again in full)
                    remove_file(temporary)
                    raise
            raise

    def finish(self) -> None:
        """The run is done: the log goes (it was this run's, or its predecessor's)."""
        if self._read() is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
