"""What the ``simstore`` command line's verbs share: opening stores (with
messages in the command line's words), argument types, JSON output, input
files, progress bars, and fingerprinting documents in chunks."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import stat
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from simstore.cli.cleanup import existing_files, remove_new_store, remove_stale_creations, remove_unused_store
from simstore.errors import InvalidValueError, ParameterMismatchError, SimstoreError, StoreNotFoundError
from simstore.fingerprint.fingerprinter import Fingerprinter, ShortTextWarning
from simstore.fingerprint.pool import Workers, available_cores
from simstore.index.permute import MAX_FINGERPRINT, validate_k
from simstore.io.readers import (
    FORMATS,
    ON_ERROR,
    STDIN,
    STDIN_NAME,
    Document,
    ErrorCounter,
    Input,
    InputError,
    ReadOptions,
    ReadProgress,
    check_input,
    format_of,
    named_format,
    sniff_format,
)
from simstore.keys import Key
from simstore.store.dedup import LENGTH_FIELD
from simstore.store.facade import Store
from simstore.store.opening import open as open_store

PROG = "simstore"
#: Texts fingerprinted per call: enough characters for the fingerprinter to
#: use every core, few enough documents for a responsive progress bar.
FINGERPRINT_CHUNK_DOCS = 20_000
FINGERPRINT_CHUNK_CHARS = 16_000_000
#: Queries per query_many call in ``dedup --against``.
QUERY_CHUNK = 10_000


class CommandError(SimstoreError):
    """A command cannot go on; its message is printed as ``simstore: error: ...``."""


# ------------------------------------------------------------ opening stores
#
# The library's messages speak Python (``use mode 'c'``, ``pass None``); these
# say the same in the command line's words.


def similarity(value: str) -> float:
    """An argparse type: a similarity threshold, a number from 0 to 1."""
    try:
        threshold = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0.0 <= threshold <= 1.0:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1: {value!r}")
    return threshold


def open_existing(path: str, mode: str = "r") -> Store:
    """The store at ``path``, which the command needs to exist already."""
    try:
        return open_store(path, mode)
    except StoreNotFoundError:
        raise CommandError(
            f"no simstore store at {path} (`simstore add {path} FILE...` or `simstore import` creates one)"
        ) from None


def open_or_create(path: str, k: int | None, **options: Any) -> Store:
    """The store at ``path``, created with ``-k k`` if missing."""
    try:
        return open_store(path, "c", k=k, **options)
    except ParameterMismatchError as exc:
        stored_k, _ = exc.differences.get("k", (None, None))
        if set(exc.differences) == {"k"}:
            raise CommandError(
                f"{path} has k={stored_k}, not {k}: leave out -k to use the store's k, or change it "
                f"with `simstore relayout {path} -k {k} --docs N`"
            ) from None
        raise


class StoreOnDemand:
    """The store a command adds documents to: one that exists is opened at
    once (so a wrong ``-k`` is refused before any input is read), a missing
    one is created only when the first documents are committed, by
    ``open_new()`` (:meth:`opened`). A command that fails before then (a
    bad line, a text that cannot be fingerprinted, Ctrl-C) leaves no new
    store behind, with a ``k`` nobody chose for it; nor does one that fails
    or is interrupted while the store is being created or its first
    documents committed: the store it created, empty, is removed again
    (see :func:`simstore.cli.cleanup.remove_unused_store`).

    Until the store exists, documents are fingerprinted with the settings a
    new store gets (``Fingerprinter()``); :meth:`opened` checks that the
    store it creates has them.
    """

    def __init__(self, path: str, k: int | None, open_new: Callable[[], Store]) -> None:
        self.path = path
        self._open_new = open_new
        self._store: Store | None = None
        # The store's files that existed before this command created it (None: it did not).
        self._existed_before: set[str] | None = None
        self.committed = 0  # documents this command committed
        if os.path.lexists(path):
            self._store = open_new()
            self.fingerprinter = self._store.fingerprinter
            self.sketch = self._store.sketch
            return
        # What creating it would refuse, refused now rather than after the whole input.
        if k is not None:
            validate_k(k)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise CommandError(f"cannot create {path}: there is no directory {folder}")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise CommandError(f"cannot create {path}: the directory {folder} is not writable")
        self.fingerprinter = Fingerprinter()
        self.sketch = self.fingerprinter.sketch

    @property
    def exists(self) -> bool:
        """Whether the store is open (it existed, or :meth:`opened` created it)."""
        return self._store is not None

    @property
    def created(self) -> bool:
        """Whether this command created the store."""
        return self._existed_before is not None

    def opened(self) -> Store:
        """The store, created now if it does not exist yet."""
        if self._store is None:
            before = existing_files(self.path)
            if self.path not in before:
                remove_stale_creations(self.path)
            try:
                # Ours as soon as it is returned: __exit__ closes it (and removes it if need be).
                self._store = self._open_new()
            except BaseException:
                if self.path not in before:
                    # Interrupted after the store appeared, before it was ours to close.
                    remove_new_store(self.path, before)
                raise
            if self.path not in before:
                self._existed_before = before
            store = self._store
            if store.fingerprinter != self.fingerprinter or store.sketch != self.sketch:
                # Another process created it meanwhile, with other settings: the
                # fingerprints made for a new store would not match its own.
                self._store = self._existed_before = None
                store.close()
                raise CommandError(
                    f"{self.path} was created meanwhile by another process, with other fingerprinter "
                    "settings; nothing was added (run the command again)"
                )
        return self._store

    def add(self, batch: Collected) -> None:
        """Commit ``batch`` to the store (created now if need be), in one transaction."""
        if batch.keys:
            batch.add_to(self.opened())
            self.committed += len(batch.keys)

    def __enter__(self) -> StoreOnDemand:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        store, self._store = self._store, None
        if store is None:
            return
        existed_before = self._existed_before
        if exc_type is None or existed_before is None or self.committed:
            store.close()
            return
        # This command created the store and failed before it committed a
        # document. A second try if an interrupt cuts the first short.
        try:
            self._close_and_remove(store, existed_before)
        except KeyboardInterrupt:
            self._close_and_remove(store, existed_before)
            raise

    def _close_and_remove(self, store: Store, existed_before: set[str]) -> None:
        documents = None
        if not store.closed:
            with contextlib.suppress(SimstoreError):
                documents = len(store)
            store.close()
        remove_unused_store(self.path, existed_before, documents)


def check_distance(k: int | None, store: Store) -> None:
    """``-k`` of a query against ``store``, which finds nothing beyond its own k."""
    if k is not None and k > store.k:
        raise CommandError(
            f"-k {k} is larger than the k={store.k} of {store.path}: its tables find documents within "
            f"{store.k} bits only (change it with `simstore relayout {store.path} -k {k} --docs N`)"
        )


# ------------------------------------------------------------ shared helpers


#: The width of a bar where the terminal gives none (a pty of size 0, as
#: under `script` or a CI runner's) and ``COLUMNS`` names none either.
FALLBACK_COLUMNS = 80
FALLBACK_ROWS = 24
#: Seconds between the lines of ``--progress`` bars on a stderr that is not a terminal.
LOG_LINE_SECONDS = 10.0


def progress(args: argparse.Namespace, **options: Any) -> Any:
    """A tqdm bar on stderr. None with ``-q``, nor when stderr is not a
    terminal unless ``--progress`` asks for one; then (a CI log, a file)
    each refresh is a line of its own, one every :data:`LOG_LINE_SECONDS`.
    On a terminal that reports no width the bar is ``COLUMNS`` (else 80)
    wide, where tqdm drew nothing at all."""
    from tqdm import tqdm  # lazily: `simstore stats` should start fast

    quiet = bool(getattr(args, "quiet", False))
    asked = bool(getattr(args, "progress", False))
    terminal = sys.stderr.isatty()
    if quiet or not (terminal or asked):
        return tqdm(file=sys.stderr, disable=True, **options)
    if not terminal:
        return tqdm(
            file=_LineStream(sys.stderr),
            ncols=_columns_from_environment(),
            mininterval=LOG_LINE_SECONDS,
            ascii=True,
            **options,
        )
    if _terminal_columns(sys.stderr) > 0:
        return tqdm(file=sys.stderr, dynamic_ncols=True, **options)
    # tqdm takes a terminal's size of 0 x 0 for -1 rows and draws no line;
    # the rows matter only to bars stacked in several positions.
    return tqdm(file=sys.stderr, ncols=_columns_from_environment(), nrows=FALLBACK_ROWS, **options)


def _terminal_columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` is, 0 if it reports none."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def _columns_from_environment() -> int:
    """``COLUMNS`` if it holds a width, else :data:`FALLBACK_COLUMNS`."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return FALLBACK_COLUMNS
    return columns if columns > 0 else FALLBACK_COLUMNS


class _LineStream:
    """A stream for tqdm that writes each refresh of a bar as a line of its
    own: tqdm redraws in place with a carriage return, which a log file or a
    CI log shows as one ever longer line."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.encoding = getattr(stream, "encoding", "utf-8")

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip()
        if line:
            self._stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


class ReadingBar:
    """The "reading" bar: the bytes of the inputs where their size is known
    (so tqdm shows a total and an ETA), with the documents read as a
    postfix; the documents alone otherwise (stdin from a pipe)."""

    def __init__(self, args: argparse.Namespace, inputs: Sequence[Input]) -> None:
        self.tracker = ReadProgress.of(inputs)
        self.documents = 0
        if self.tracker.total is None:
            self.bar = progress(args, desc="reading", unit="doc")
        else:
            self.bar = progress(
                args, desc="reading", total=self.tracker.total, unit="B", unit_scale=True, unit_divisor=1024
            )

    def __enter__(self) -> ReadingBar:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.bar.__exit__(*exc_info)

    def update(self, documents: int) -> None:
        """``documents`` more were read."""
        self.documents += documents
        if self.tracker.total is None:
            self.bar.update(documents)
            return
        self.bar.set_postfix_str(f"{self.documents} docs", refresh=False)
        self.bar.update(self.tracker.position() - self.bar.n)


def table_progress(args: argparse.Namespace, description: str) -> tuple[Any, Callable[[int, int], None]]:
    bar = progress(args, desc=description, unit="table")

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    return bar, update


def note(args: argparse.Namespace, message: str) -> None:
    """A line on stderr unless ``-q``."""
    if not getattr(args, "quiet", False):
        print(f"{PROG}: {message}", file=sys.stderr)


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
    store: Store | StoreOnDemand,
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
    processes, where they pay (an automatic pool, see :mod:`simstore.fingerprint.pool`),
    are started once for all the chunks."""
    with Workers(available_cores(), automatic=True) as workers:
        yield from _fingerprint_chunks(store, documents, options, errors, workers, with_length, chunk_docs)


def _fingerprint_chunks(
    store: Store | StoreOnDemand,
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
