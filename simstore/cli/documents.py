"""Documents in, for the verbs that read them: input options, inputs checked before
anything is read, fingerprinting in chunks (on worker processes past a size), skipped
lines reported in input order, and unique keys."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from simstore.cli.common import PROG, CommandError
from simstore.errors import InvalidValueError
from simstore.fingerprinting.fingerprinter import Fingerprinter, ShortTextWarning
from simstore.fingerprinting.pool import Workers, available_cores
from simstore.fingerprinting.sketch import Sketch
from simstore.io.inputs import STDIN, STDIN_NAME, Document, InputError
from simstore.io.readers import (
    FORMATS,
    ON_ERROR,
    ErrorCounter,
    Input,
    ReadOptions,
    check_input,
    format_of,
    named_format,
)
from simstore.io.streams import sniff_format
from simstore.keys import Key
from simstore.store.dedup import LENGTH_FIELD
from simstore.store.facade import Store

#: Texts fingerprinted per call: enough characters for the fingerprinter to
#: use every core, few enough documents for a responsive progress bar.
FINGERPRINT_CHUNK_DOCS = 20_000


class FingerprintSource(Protocol):
    """What documents are fingerprinted with: a store's settings (a
    :class:`~simstore.Store`, or a store the command will create)."""

    @property
    def fingerprinter(self) -> Fingerprinter: ...

    @property
    def sketch(self) -> Sketch | None: ...


FINGERPRINT_CHUNK_CHARS = 16_000_000


def add_input_options(parser: argparse.ArgumentParser, *, format_is_input: bool = True) -> None:
    """The options that say how inputs are read. ``--input-format`` reads
    every input in one format; with ``format_is_input`` (a verb with no
    output to name a format for), ``--format`` is another name for it."""
    group = parser.add_argument_group("input")
    group.add_argument(
        "--input-format",
        *(["--format"] if format_is_input else []),
        dest="input_format",
        choices=FORMATS,
        default="auto",
        help="read every input in this format (default: by extension; stdin and pipes: sniffed)",
    )
    group.add_argument(
        "--id-field", help="JSONL field / CSV column holding the key (default: id, else FILE:LINE)"
    )
    group.add_argument(
        "--text-field", default="text", help="JSONL field / CSV column holding the text (default: text)"
    )
    group.add_argument(
        "--meta-field",
        action="append",
        default=[],
        metavar="FIELD",
        help="also store this field as metadata (repeatable)",
    )
    group.add_argument(
        "--on-error",
        choices=ON_ERROR,
        default="fail",
        help="a bad input line stops the command before anything is written (fail, the default) "
        "or is reported and skipped (skip)",
    )


def read_options(args: argparse.Namespace) -> ReadOptions:
    return ReadOptions(
        format=args.input_format,
        id_field=args.id_field,
        text_field=args.text_field,
        meta_fields=tuple(args.meta_field),
        on_error=args.on_error,
    )


def inputs_of(
    paths: Sequence[str], spool_dir: str | None = None, unnamed_format: str = "auto"
) -> list[Input]:
    """Command-line paths as inputs; with ``spool_dir``, stdin and other
    inputs that can be read only once (a pipe such as ``<(zcat dump.gz)``) are
    first copied to a file there, so that they can be read twice. An input
    whose name says no format (:func:`named_format`) is read as
    ``unnamed_format`` unless that is ``"auto"`` (sniffed, or text)."""
    if sum(path == STDIN for path in paths) > 1:
        raise CommandError("standard input (-) may be given only once")
    inputs = []
    for index, path in enumerate(paths):
        name = STDIN_NAME if path == STDIN else ""
        if spool_dir is not None and _read_once(path):
            spooled = os.path.join(spool_dir, f"input-{index}")
            with open(spooled, "wb") as copy:
                if path == STDIN:
                    source = getattr(sys.stdin, "buffer", None)
                    if source is not None:
                        shutil.copyfileobj(source, copy)
                    else:
                        copy.write(sys.stdin.read().encode("utf-8"))
                else:
                    with open(path, "rb") as source:
                        shutil.copyfileobj(source, copy)
            if unnamed_format != "auto" and named_format(path) is None:
                # Not sniffed: a sniff refuses binary data, and Parquet on stdin is read from the copy.
                read_as = unnamed_format
            else:
                named = format_of(path) if path != STDIN else "text"
                read_as = named if named != "text" else sniff_format(spooled, name or path)
            inputs.append(Input(spooled, name or path, format=read_as))
        elif unnamed_format != "auto" and named_format(path) is None:
            inputs.append(Input(path, name, format=unnamed_format))
        else:
            inputs.append(Input(path, name))
    return inputs


def check_inputs(inputs: Iterable[Input], options: ReadOptions) -> None:
    """Refuse, before a store is created or an output written, an input that
    cannot be read at all (see :func:`simstore.io.readers.check_input`)."""
    for item in inputs:
        check_input(item, options)


def _read_once(path: str) -> bool:
    """Whether ``path`` is stdin, or exists and is neither a regular file nor a directory."""
    if path == STDIN:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # reported as a missing input when it is read
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@dataclass
class Collected:
    """Documents read and fingerprinted: keys, fingerprints, metadata, and
    verification sketches when the store keeps them."""

    keys: list[Key] = field(default_factory=list)
    fingerprints: list[np.ndarray] = field(default_factory=list)
    metas: list[dict[str, Any] | None] = field(default_factory=list)
    sketches: list[np.ndarray] = field(default_factory=list)
    read: int = 0

    def extend(self, chunk: list[Document], values: np.ndarray, sketches: np.ndarray | None) -> None:
        """Append a fingerprinted chunk."""
        self.keys.extend(doc.key for doc in chunk)
        self.metas.extend(doc.meta for doc in chunk)
        self.fingerprints.append(values)
        if sketches is not None:
            self.sketches.append(sketches)

    def fingerprint_array(self) -> np.ndarray:
        if not self.fingerprints:
            return np.zeros(0, dtype=np.uint64)
        return np.concatenate(self.fingerprints)

    def sketch_array(self) -> np.ndarray | None:
        """The sketches, one row a document; ``None`` if none were made."""
        if not self.sketches:
            return None
        return np.concatenate(self.sketches)

    def clear(self) -> None:
        self.keys.clear()
        self.fingerprints.clear()
        self.metas.clear()
        self.sketches.clear()

    def take(self, count: int) -> Collected:
        """Remove the first ``count`` documents and return them."""
        values = self.fingerprint_array()
        rows = self.sketch_array()
        head = Collected(
            self.keys[:count], [values[:count]], self.metas[:count], [] if rows is None else [rows[:count]]
        )
        del self.keys[:count]
        del self.metas[:count]
        self.fingerprints = [values[count:]] if count < len(values) else []
        self.sketches = [rows[count:]] if rows is not None and count < len(rows) else []
        return head

    def add_to(self, store: Store) -> None:
        """Add the collected documents to ``store`` in one transaction."""
        metas = self.metas if any(meta is not None for meta in self.metas) else None
        store.add_many(self.keys, self.fingerprint_array(), metas=metas, sketches=self.sketch_array())


def fingerprint_documents(
    store: FingerprintSource,
    documents: Iterable[Document],
    options: ReadOptions,
    errors: ErrorCounter,
    *,
    with_length: bool,
    chunk_docs: int | None = None,
) -> Iterator[tuple[list[Document], np.ndarray, np.ndarray | None]]:
    """Fingerprint documents in chunks of at most ``chunk_docs`` (default
    and ceiling :data:`FINGERPRINT_CHUNK_DOCS`), with their sketches if the
    store keeps them; a text the fingerprinter refuses is a bad line like
    any other. ``errors`` (which the reading of ``documents`` reports to)
    reports every skipped line in input order: a chunk's are held until it
    is fingerprinted, as a text with no features is found only then. Worker
    processes, where they pay (an automatic pool, see :mod:`simstore.fingerprinting.pool`),
    are started once for all the chunks."""
    with Workers(available_cores(), automatic=True) as workers:
        yield from _fingerprint_chunks(store, documents, options, errors, workers, with_length, chunk_docs)


def _fingerprint_chunks(
    store: FingerprintSource,
    documents: Iterable[Document],
    options: ReadOptions,
    errors: ErrorCounter,
    workers: Workers,
    with_length: bool,
    chunk_docs: int | None,
) -> Iterator[tuple[list[Document], np.ndarray, np.ndarray | None]]:
    fingerprinter = store.fingerprinter
    sketching = store.sketch is not None
    most_docs = min(chunk_docs or FINGERPRINT_CHUNK_DOCS, FINGERPRINT_CHUNK_DOCS)
    chunk: list[Document] = []
    characters = 0
    held = _HeldReports(errors, lambda: len(chunk))

    def fingerprint(texts: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        if sketching:
            return fingerprinter.fingerprints_and_sketches(texts, workers=workers)
        return fingerprinter.fingerprint_many(texts, workers=workers), None

    def flush() -> tuple[list[Document], np.ndarray, np.ndarray | None]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ShortTextWarning)
            try:
                values, sketches = fingerprint([doc.text for doc in chunk])
                return list(chunk), values, sketches
            except InvalidValueError:
                pass
            # Some text has no features: find which, one at a time.
            good: list[Document] = []
            for index, doc in enumerate(chunk):
                try:
                    fingerprinter.fingerprint(doc.text)
                    good.append(doc)
                except InvalidValueError as exc:
                    error = InputError(doc.source, doc.line, str(exc))
                    if options.on_error == "fail":
                        raise error from None
                    held.at_document(index, error)
            values, sketches = fingerprint([doc.text for doc in good])
            return good, values, sketches

    with held:
        for document in documents:
            if with_length:
                meta = dict(document.meta or {})
                meta[LENGTH_FIELD] = len(document.text)
                document = Document(
                    document.key, document.text, document.source, document.line, document.record, meta
                )
            chunk.append(document)
            characters += len(document.text)
            if len(chunk) >= most_docs or characters >= FINGERPRINT_CHUNK_CHARS:
                done = flush()
                held.release()
                yield done
                chunk = []
                characters = 0
        if chunk:
            done = flush()
            held.release()
            yield done


class _HeldReports:
    """The reports of skipped lines, held back while a chunk is read and
    fingerprinted and then given in input order: a line the reader refuses
    is reported as it is read, a text with no features only when its chunk
    is fingerprinted, after lines read later. ``position()`` is how many
    documents of the chunk have been read. As a context manager it holds
    them, and gives what it holds on leaving (an error, or the end)."""

    def __init__(self, errors: ErrorCounter, position: Callable[[], int]) -> None:
        self._errors = errors
        self._position = position
        self._report = errors.report
        # (documents of the chunk read before it, 0 for a line the reader
        # refused or 1 for a document's own error, the error)
        self._held: list[tuple[int, int, InputError]] = []
        self._document: int | None = None

    def __enter__(self) -> _HeldReports:
        if self._report is not None:
            self._errors.report = self._hold
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._errors.report = self._report
        self.release()

    def _hold(self, error: InputError) -> None:
        if self._document is None:
            self._held.append((self._position(), 0, error))
        else:
            self._held.append((self._document, 1, error))

    def at_document(self, index: int, error: InputError) -> None:
        """The chunk's document ``index`` is a bad line: counted now, reported in its place."""
        self._document = index
        try:
            self._errors(error)
        finally:
            self._document = None

    def release(self) -> None:
        """Report what is held, in input order (a stable sort: lines read at
        one position stay in turn)."""
        held, self._held = self._held, []
        if self._report is not None:
            for _, _, error in sorted(held, key=lambda entry: entry[:2]):
                self._report(error)


def skip_reporter(args: argparse.Namespace) -> ErrorCounter:
    def report(error: InputError) -> None:
        if not args.quiet:
            print(f"{PROG}: skipped {error}", file=sys.stderr)

    return ErrorCounter(report)


def unique_keys(
    documents: Iterable[Document],
    options: ReadOptions,
    errors: ErrorCounter,
    first_seen: dict[Key, str] | None = None,
) -> Iterator[Document]:
    """Documents with a key seen before are bad lines (``dedup`` needs unique
    keys); ``first_seen`` carries the keys seen across several calls."""
    if first_seen is None:
        first_seen = {}
    for document in documents:
        seen = first_seen.get(document.key)
        if seen is not None:
            error = InputError(
                document.source, document.line, f"key {document.key!r} repeats (first at {seen})"
            )
            if options.on_error == "fail":
                raise error
            errors(error)
            continue
        first_seen[document.key] = f"{document.source}:{document.line}"
        yield document
