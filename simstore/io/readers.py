"""Input documents for the command line: JSON lines, CSV, TSV, plain text (one
document per line), a directory of text files, or standard input; and writers
that give the kept documents back in the format they came in.

Every document carries where it came from (``source`` and 1-based ``line``),
so a bad line is reported as ``FILE:LINE: what is wrong``. What happens then
is the caller's ``on_error`` choice: ``"fail"`` raises :class:`InputError`,
``"skip"`` reports the line and goes on.

Formats (``--input-format auto`` picks by extension, after an optional ``.gz``):

- ``jsonl`` (``.jsonl``, ``.ndjson``, ``.json``): one JSON object a line; the
  text is in ``text_field`` (default ``"text"``), the key in ``id_field``
  (default ``"id"``; a ``str`` or an ``int``).
- ``csv`` (``.csv``) and ``tsv`` (``.tsv``, ``.tab``): a header row, then one
  document a row, with the same two fields as columns.
- ``text`` (anything else): one document per non-blank line.
- a directory: every regular file below it, in sorted order, is one document
  whose key is its path relative to the directory.
- ``-``: standard input; ``auto`` reads JSON lines if the first non-blank line
  starts with ``{`` and plain text otherwise. So does a pipe without a telling
  extension (``<(zcat dump.gz)``).

Gzip is recognised by its first bytes (in a file of any name, and on stdin)
and decompressed. Binary input is refused as a whole, whatever ``on_error``
says: known binary formats (Parquet, zip, ...) by their first bytes, anything
else by a NUL byte, which no text holds.

A document without an id field gets the key ``"SOURCE:LINE"`` (for example
``corpus.txt:17``), which is unique within one run.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from simstore.io.columnar import COLUMNAR_FORMATS, PyarrowMissingError, read_rows, schema_of
from simstore.io.inputs import STDIN, STDIN_NAME, Document, InputError, _json_value
from simstore.io.streams import (
    _DAMAGED_GZIP,
    NUL_MESSAGE,
    _checked_stream,
    _decoded_lines,
    _gzip_checked,
    _sniffed,
)

FORMATS = ("auto", "jsonl", "csv", "tsv", "text", *COLUMNAR_FORMATS)
ON_ERROR = ("fail", "skip")
DEFAULT_ID_FIELD = "id"
DEFAULT_TEXT_FIELD = "text"

_EXTENSIONS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
}


@dataclass(frozen=True)
class ReadOptions:
    """How to read input files (the command line's input options)."""

    format: str = "auto"
    id_field: str | None = None
    text_field: str = DEFAULT_TEXT_FIELD
    meta_fields: tuple[str, ...] = ()
    on_error: str = "fail"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be 'fail' or 'skip', got {self.on_error!r}")


@dataclass(frozen=True)
class Input:
    """One input as given on the command line: ``path`` to read and the
    ``name`` used in keys and messages (``<stdin>`` for ``-``)."""

    path: str
    name: str = ""
    format: str = "auto"

    @property
    def display(self) -> str:
        return self.name or self.path


@dataclass
class ErrorCounter:
    """Collects skipped lines; ``report`` prints each one (or is silent)."""

    report: Callable[[InputError], None] | None = None
    skipped: int = 0
    first: list[InputError] = field(default_factory=list)

    def __call__(self, error: InputError) -> None:
        self.skipped += 1
        if len(self.first) < 1:
            self.first.append(error)
        if self.report is not None:
            self.report(error)


def format_of(path: str, requested: str = "auto") -> str:
    """The format a path is read as: ``requested`` unless ``"auto"``, else by
    extension (``dir`` for a directory).

    >>> format_of("a/b.jsonl.gz"), format_of("x.TSV"), format_of("notes")
    ('jsonl', 'tsv', 'text')
    """
    if os.path.isdir(path):
        return "dir"
    if requested != "auto":
        return requested
    return _by_extension(path) or "text"


@dataclass
class ReadProgress:
    """How far :func:`read_documents` is through its inputs, in bytes as
    stored (compressed for gzip): ``total`` is their size where every input
    has one (files and directories; stdin only when it is a file)."""

    total: int | None = None
    _done: int = 0
    _current: IO[bytes] | None = None

    @classmethod
    def of(cls, inputs: Iterable[Input]) -> ReadProgress:
        total: int | None = 0
        for item in inputs:
            size = _size_of(item)
            total = None if size is None or total is None else total + size
        return cls(total)

    def position(self) -> int:
        """Bytes read so far."""
        current = 0
        if self._current is not None:
            with contextlib.suppress(OSError, ValueError):
                current = self._current.tell()
        return self._done + current

    def reading(self, stream: IO[bytes]) -> None:
        """``stream`` (the file as stored) is being read now."""
        self._current = stream

    def done(self, size: int) -> None:
        """The stream being read, or a file read at once, is done: ``size`` bytes."""
        self._done += size
        self._current = None


def _size_of(item: Input) -> int | None:
    """The input's size, or None where it has none yet (a pipe)."""
    try:
        if item.path == STDIN:
            status = os.fstat(sys.stdin.fileno())
            if not stat.S_ISREG(status.st_mode):
                return None
            return status.st_size - sys.stdin.buffer.tell()
        if os.path.isdir(item.path):
            return sum(
                os.path.getsize(os.path.join(folder, name))
                for folder, _, files in os.walk(item.path)
                for name in files
            )
        status = os.stat(item.path)
        return status.st_size if stat.S_ISREG(status.st_mode) else None
    except (OSError, ValueError, AttributeError):
        return None


def read_documents(
    inputs: Iterable[Input],
    options: ReadOptions,
    on_skip: Callable[[InputError], None],
    progress: ReadProgress | None = None,
) -> Iterator[Document]:
    """Every document of ``inputs`` in order.

    A bad line raises :class:`InputError` when ``options.on_error`` is
    ``"fail"``; with ``"skip"`` it is passed to ``on_skip`` and left out.
    Errors that concern a whole file (a missing column, an unreadable file)
    always raise. ``progress``, if given, follows the bytes read.
    """
    tracker = progress if progress is not None else ReadProgress()
    for item in inputs:
        for result in _read_one(item, options, tracker):
            if isinstance(result, InputError):
                if options.on_error == "fail":
                    raise result
                on_skip(result)
            else:
                yield result


def _read_one(item: Input, options: ReadOptions, tracker: ReadProgress) -> Iterator[Document | InputError]:
    if item.path == STDIN:
        if (raw := getattr(sys.stdin, "buffer", None)) is not None:
            tracker.reading(raw)
        yield from _read_stdin(item, options)
        tracker.done(tracker.position())
        return
    fmt = input_format(item, options.format)
    if fmt == "dir":
        columnar = columnar_files(item.path)
        if columnar is None:
            yield from _read_directory(item, tracker)
            return
        # A directory of Parquet or Arrow files (a dataset's parts): each
        # file's rows, files in name order.
        for path, part_format in columnar:
            part = Input(path, os.path.join(item.display, os.path.relpath(path, item.path)))
            yield from _read_columnar(part, part_format, options)
            tracker.done(os.path.getsize(path))
        return
    if not os.path.exists(item.path):
        raise InputError(item.display, 0, "no such file")
    if fmt in COLUMNAR_FORMATS:
        yield from _read_columnar(item, fmt, options)
        tracker.done(os.path.getsize(item.path))
        return
    with open(item.path, "rb") as raw:
        tracker.reading(raw)
        yield from _gzip_checked(item.display, _read_file(raw, item, fmt, options), _line_of)
        tracker.done(os.fstat(raw.fileno()).st_size)


def check_input(item: Input, options: ReadOptions) -> None:
    """Refuse ``item`` now if reading it would fail as a whole: a missing or
    unreadable file or directory, binary data where text is expected, a CSV
    header or a Parquet or Arrow schema without the text (or id) column.
    Only the first bytes, a header or a file's metadata are read, and only
    from regular files (a pipe would lose them); bad lines are found when
    the input is read.

    Raises:
        InputError: what :func:`read_documents` would raise for the file.
    """
    if item.path == STDIN:
        return
    if not os.path.exists(item.path):
        raise InputError(item.display, 0, "no such file")
    fmt = input_format(item, options.format)
    if fmt == "dir":
        if not os.access(item.path, os.R_OK | os.X_OK):
            raise InputError(item.display, 0, "cannot read: permission denied")
        for path, part_format in columnar_files(item.path) or []:
            shown = os.path.join(item.display, os.path.relpath(path, item.path))
            _check_columns(columnar_schema(path, part_format, shown).names, shown, options)
        return
    if not os.path.isfile(item.path):
        return  # a pipe or a device: read once, when its turn comes
    if fmt in COLUMNAR_FORMATS:
        _check_columns(columnar_schema(item.path, fmt, item.display).names, item.display, options)
        return
    try:
        with open(item.path, "rb") as raw:
            stream = _checked_stream(raw, item.display)  # gzip opened, binary formats refused
            if fmt in ("csv", "tsv"):
                text_stream = io.TextIOWrapper(
                    stream, encoding="utf-8-sig", errors="surrogateescape", newline=""
                )
                try:
                    header = next(csv.reader(text_stream, delimiter="," if fmt == "csv" else "\t"), None)
                finally:
                    text_stream.detach()
                if header is not None:
                    _check_header(header, item.display, options)
    except _DAMAGED_GZIP as exc:  # (before OSError: gzip.BadGzipFile is one)
        raise InputError(item.display, 1, f"damaged gzip data ({exc})") from exc
    except OSError as exc:
        raise InputError(item.display, 0, f"cannot read: {exc.strerror or exc}") from exc
    except csv.Error as exc:
        raise InputError(item.display, 1, NUL_MESSAGE if "NUL" in str(exc) else f"bad CSV: {exc}") from exc


def _check_columns(names: Sequence[str], shown: str, options: ReadOptions) -> None:
    """The text column, and the id column if ``--id-field`` names one, are among ``names``."""
    for wanted in (options.text_field, options.id_field):
        if wanted is not None and wanted not in names:
            raise InputError(shown, 1, f"no {wanted!r} column (columns: {', '.join(names)})")


def columnar_files(folder: str) -> list[tuple[str, str]] | None:
    """``(path, format)`` of every file below ``folder``, in name order, if
    each is a Parquet or Arrow file by its extension (hidden files and
    ``_SUCCESS``-style markers aside); ``None`` otherwise."""
    found: list[tuple[str, str]] = []
    for parent, subfolders, files in os.walk(folder):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith((".", "_")))
        for name in sorted(files):
            if name.startswith((".", "_")):
                continue
            fmt = _by_extension(name)
            if fmt not in COLUMNAR_FORMATS:
                return None
            found.append((os.path.join(parent, name), fmt))
    return found or None


def columnar_schema(path: str, fmt: str, shown: str) -> Any:
    """The schema of the Parquet or Arrow file at ``path``, from its
    metadata alone; a file pyarrow cannot read raises an :class:`InputError`
    naming it as ``shown``, as reading its rows would."""
    if not os.path.exists(path):
        raise InputError(shown, 0, "no such file")
    try:
        return schema_of(path, fmt)
    except PyarrowMissingError:
        raise
    except Exception as exc:  # pyarrow's several error types for a file it cannot read
        raise InputError(shown, 0, f"not a readable {fmt} file: {exc}") from exc


def _read_columnar(item: Input, fmt: str, options: ReadOptions) -> Iterator[Document | InputError]:
    """A Parquet or Arrow IPC file's rows, a record batch at a time."""
    try:
        names, rows = read_rows(item.path, fmt)
    except PyarrowMissingError:
        raise
    except Exception as exc:  # pyarrow's several error types for a file it cannot read
        raise InputError(item.display, 0, f"not a readable {fmt} file: {exc}") from exc
    _check_columns(names, item.display, options)
    for number, row in enumerate(rows, start=1):
        yield _document_from_fields(row, item.display, number, options)


def _read_file(
    raw: IO[bytes], item: Input, fmt: str, options: ReadOptions
) -> Iterator[Document | InputError]:
    stream = _checked_stream(raw, item.display)
    unnamed = "auto" == options.format == item.format and _by_extension(item.path) is None
    if unnamed and not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
        # A pipe (`<(zcat dump.jsonl.gz)`) has no telling name: sniff it as stdin is.
        fmt, stream = _sniffed(stream)
    yield from _read_stream(stream, fmt, item.display, options)


def input_format(item: Input, requested: str = "auto") -> str:
    """How ``item`` is read: ``requested`` (``--input-format``) unless ``"auto"``,
    else the format sniffed for it (``item.format``: stdin, a pipe), else by
    its extension."""
    return format_of(item.path, requested if requested != "auto" else item.format)


def _by_extension(path: str) -> str | None:
    base = path[:-3] if path.lower().endswith(".gz") else path
    return _EXTENSIONS.get(os.path.splitext(base)[1].lower())


def named_format(path: str) -> str | None:
    """The format ``path``'s name says (``dir`` for a directory), or ``None``
    when it says none: stdin, a pipe or a file without a known extension.

    >>> named_format("corpus.parquet"), named_format("notes.txt"), named_format("-")
    ('parquet', None, None)
    """
    if path == STDIN:
        return None
    if os.path.isdir(path):
        return "dir"
    return _by_extension(path)


def _line_of(result: Document | InputError) -> int:
    return result.line


def _read_stdin(item: Input, options: ReadOptions) -> Iterator[Document | InputError]:
    if options.format in COLUMNAR_FORMATS:
        raise InputError(STDIN_NAME, 0, f"{options.format} input must be a file, not stdin")
    yield from _gzip_checked(item.name or STDIN_NAME, _read_stdin_checked(item, options), _line_of)


def _read_stdin_checked(item: Input, options: ReadOptions) -> Iterator[Document | InputError]:
    raw: IO[bytes] | None = getattr(sys.stdin, "buffer", None)
    name = item.name or STDIN_NAME
    stream = _checked_stream(raw if raw is not None else io.BytesIO(sys.stdin.read().encode("utf-8")), name)
    fmt = options.format if options.format != "auto" else item.format
    if fmt == "auto":
        fmt, stream = _sniffed(stream)
    yield from _read_stream(stream, fmt, name, options)


def _read_stream(
    stream: IO[bytes], fmt: str, name: str, options: ReadOptions
) -> Iterator[Document | InputError]:
    if fmt == "jsonl":
        yield from _read_jsonl(stream, name, options)
    elif fmt in ("csv", "tsv"):
        yield from _read_delimited(stream, name, options, "," if fmt == "csv" else "\t")
    else:
        yield from _read_text(stream, name)


def _read_text(stream: IO[bytes], name: str) -> Iterator[Document | InputError]:
    for number, line in _decoded_lines(stream, name):
        if isinstance(line, InputError):
            yield line
            continue
        text = line.rstrip("\r\n")
        if text.strip():
            yield Document(f"{name}:{number}", text, name, number, text)


def _read_jsonl(stream: IO[bytes], name: str, options: ReadOptions) -> Iterator[Document | InputError]:
    for number, line in _decoded_lines(stream, name):
        if isinstance(line, InputError):
            yield line
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield InputError(name, number, f"not valid JSON: {exc.msg} (column {exc.colno})")
            continue
        if not isinstance(record, dict):
            yield InputError(name, number, f"expected a JSON object, got {type(record).__name__}")
            continue
        yield _document_from_fields(record, name, number, options)


def _read_delimited(
    stream: IO[bytes], name: str, options: ReadOptions, delimiter: str
) -> Iterator[Document | InputError]:
    # Bytes that are not UTF-8 are decoded as lone surrogates, so that a bad
    # byte costs its row only (reported below), not the rest of the file.
    text_stream = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="surrogateescape", newline="")
    # Documents are longer than the csv module's 128 KiB default field limit.
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    reader = csv.DictReader(text_stream, delimiter=delimiter)
    try:
        header = reader.fieldnames
        if header is None:
            return
        _check_header(header, name, options)
        start = reader.line_num + 1
        for row in reader:
            number = start
            start = reader.line_num + 1
            if None in row:
                yield InputError(name, number, f"more fields than the {len(header)} columns of the header")
                continue
            if (undecoded := _undecoded(row)) is not None:
                yield InputError(name, number, f"not UTF-8 ({undecoded})")
                continue
            yield _document_from_fields(dict(row), name, number, options)
    except csv.Error as exc:
        if "NUL" in str(exc):
            raise InputError(name, reader.line_num, NUL_MESSAGE) from exc
        raise InputError(name, reader.line_num, f"bad CSV: {exc}") from exc
    finally:
        text_stream.detach()


def _check_header(header: Sequence[str], name: str, options: ReadOptions) -> None:
    """A CSV or TSV header (decoded with ``surrogateescape``) is UTF-8 and
    names the text column, and the id column if ``--id-field`` gives one."""
    if (undecoded := _undecoded(dict(enumerate(header)))) is not None:
        raise InputError(name, 1, f"the header is not UTF-8 ({undecoded})")
    _check_columns(header, name, options)


def _undecoded(row: Mapping[Any, str | None]) -> str | None:
    """Where a row decoded with ``surrogateescape`` holds a byte that is not
    UTF-8 (``"byte 0xe9 in column 'text'"``); ``None`` if it holds none."""
    for column, value in row.items():
        if value is None or value.isascii():
            continue
        try:
            value.encode("utf-8")  # refuses the surrogates, in C
        except UnicodeEncodeError as exc:
            where = f"column {column!r}" if isinstance(column, str) else f"column {column + 1}"
            return f"byte 0x{ord(value[exc.start]) - 0xDC00:02x} in {where}"
    return None


def _document_from_fields(
    record: dict[str, Any], name: str, number: int, options: ReadOptions
) -> Document | InputError:
    if options.text_field not in record:
        return InputError(name, number, f"no {options.text_field!r} field")
    text = record[options.text_field]
    if text is None:
        return InputError(name, number, f"{options.text_field!r} is null, not a string")
    if not isinstance(text, str):
        return InputError(name, number, f"{options.text_field!r} is {type(text).__name__}, not a string")
    if not text.strip():
        return InputError(name, number, f"{options.text_field!r} is empty")
    id_field = options.id_field or DEFAULT_ID_FIELD
    key: Any = record.get(id_field)
    if key is None:
        if options.id_field is not None:
            if id_field in record:
                return InputError(name, number, f"{id_field!r} is null, not a string or an integer")
            return InputError(name, number, f"no {id_field!r} field")
        key = f"{name}:{number}"
    elif isinstance(key, bool) or not isinstance(key, str | int):
        return InputError(name, number, f"{id_field!r} must be a string or an integer, got {_shown(key)}")
    elif isinstance(key, int) and not -(2**63) <= key < 2**64:
        return InputError(name, number, f"{id_field!r} {key} is outside -2**63..2**64-1")
    meta = {field_name: record[field_name] for field_name in options.meta_fields if field_name in record}
    return Document(key, text, name, number, record, meta or None)


def _shown(value: Any) -> str:
    """A value in a message: as JSON where JSON has a type for it, else its
    type and text (a Parquet timestamp, date or decimal, which json.dumps
    refuses)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        if isinstance(value, bytes):
            return f"bytes ({len(value)} bytes)"
        return f"{type(value).__name__} {_json_value(value)}"


def _read_directory(item: Input, tracker: ReadProgress) -> Iterator[Document | InputError]:
    root = item.path
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        for file_name in sorted(files):
            path = os.path.join(folder, file_name)
            key = os.path.relpath(path, root).replace(os.sep, "/")
            shown = os.path.join(item.display, key)
            try:
                with open(path, "rb") as raw:
                    data = _checked_stream(raw, shown).read()
                    tracker.done(os.fstat(raw.fileno()).st_size)
                if b"\x00" in data:
                    raise InputError(shown, 0, NUL_MESSAGE)
                text = data.decode("utf-8").removeprefix("\ufeff")
            except InputError as exc:
                yield exc  # one file of the directory: skippable like a bad line
                continue
            except _DAMAGED_GZIP as exc:
                yield InputError(shown, 0, f"damaged gzip data ({exc})")
                continue
            except UnicodeDecodeError as exc:
                yield InputError(shown, 0, f"not UTF-8 ({exc.reason} at byte {exc.start})")
                continue
            except OSError as exc:
                yield InputError(shown, 0, f"cannot read: {exc.strerror or exc}")
                continue
            if not text.strip():
                yield InputError(shown, 0, "empty file")
                continue
            yield Document(key, text, shown, 1, text)


# ------------------------------------------------------------------- writing


def delimited_header(item: Input, fmt: str) -> list[str] | None:
    """The header row of a CSV (``fmt`` ``"csv"``) or TSV file, gzip or not;
    ``None`` for an empty file."""
    with open(item.path, "rb") as raw:
        stream = _checked_stream(raw, item.display)
        text_stream = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="replace", newline="")
        try:
            return next(csv.reader(text_stream, delimiter="," if fmt == "csv" else "\t"), None)
        finally:
            text_stream.detach()
