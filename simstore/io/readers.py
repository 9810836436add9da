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

import base64
import codecs
import contextlib
import csv
import datetime
import gzip
import io
import json
import os
import stat
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TextIO, TypeVar, cast

from simstore.errors import SimstoreError
from simstore.io.columnar import COLUMNAR_FORMATS, PyarrowMissingError, read_rows, schema_of
from simstore.keys import Key

FORMATS = ("auto", "jsonl", "csv", "tsv", "text", *COLUMNAR_FORMATS)
ON_ERROR = ("fail", "skip")
STDIN = "-"
STDIN_NAME = "<stdin>"
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
    except OSError as exc:
        raise InputError(item.display, 0, f"cannot read: {exc.strerror or exc}") from exc
    except _DAMAGED_GZIP as exc:
        raise InputError(item.display, 1, f"damaged gzip data ({exc})") from exc
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


_Result = TypeVar("_Result")
_DAMAGED_GZIP = (EOFError, gzip.BadGzipFile, zlib.error)


def _gzip_checked(
    name: str, results: Iterator[_Result], line_of: Callable[[_Result], int]
) -> Iterator[_Result]:
    """``results``, with truncated or damaged gzip data raised as an
    :class:`InputError` at the line after the last one read: how far a
    truncated download got (line 1 when nothing could be read)."""
    line = 0
    try:
        for result in results:
            line = line_of(result) or line
            yield result
    except _DAMAGED_GZIP as exc:
        raise InputError(name, line + 1, f"damaged gzip data ({exc})") from exc


def _line_of(result: Document | InputError) -> int:
    return result.line


#: Bytes read to recognise a compressed or binary file.
_SNIFF_BYTES = 16
_GZIP_MAGIC = b"\x1f\x8b"
#: Formats recognised by their first bytes, to say what a binary input is.
_BINARY_MAGIC = (
    (b"PAR1", "a Parquet file: name it *.parquet or pass --input-format parquet"),
    (b"ARROW1", "an Arrow file: name it *.arrow or pass --input-format arrow"),
    (b"ORC", "an ORC file, which simstore cannot read yet; convert it to JSON lines first"),
    (b"PK\x03\x04", "a zip archive; unpack it and give the files or their directory"),
    (b"BZh", "bzip2-compressed; decompress it (bzcat FILE | simstore ... -)"),
    (b"\xfd7zXZ\x00", "xz-compressed; decompress it (xzcat FILE | simstore ... -)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed; decompress it (zstdcat FILE | simstore ... -)"),
    (b"SQLite format 3\x00", "an SQLite database, not text"),
    (codecs.BOM_UTF16_LE, "UTF-16 text; convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"),
    (codecs.BOM_UTF16_BE, "UTF-16 text; convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"),
)
NUL_MESSAGE = (
    "a NUL byte: this is a binary file, not text (simstore reads JSON lines, CSV, TSV, "
    "plain text and their .gz)"
)


def _checked_stream(raw: IO[bytes], name: str) -> IO[bytes]:
    """``raw`` ready to read as text: decompressed if it is gzip (known by its
    first bytes, whatever its name; stdin too), and refused with a whole-file
    :class:`InputError` if its first bytes say it is a binary format.

    A NUL byte further on is refused line by line (:func:`_decoded_lines`).
    """
    if raw.seekable():
        head = raw.read(_SNIFF_BYTES)
        raw.seek(-len(head), os.SEEK_CUR)
        stream = raw
    else:
        head = raw.read(_SNIFF_BYTES)  # a pipe: give the bytes back in front
        stream = cast(IO[bytes], io.BufferedReader(_Chained([head], raw)))
    if head.startswith(_GZIP_MAGIC):
        decompressed = gzip.GzipFile(fileobj=stream, mode="rb")
        head = decompressed.peek(_SNIFF_BYTES)[:_SNIFF_BYTES]
        stream = cast(IO[bytes], decompressed)
    if _looks_binary(head):
        # The magic numbers only name what the bytes already say: a text
        # file may well begin with "ORC" or "PAR1".
        for magic, what in _BINARY_MAGIC:
            if head.startswith(magic):
                raise InputError(name, 1, f"is {what}")
    if b"\x00" in head:
        raise InputError(name, head[: head.index(b"\x00")].count(b"\n") + 1, NUL_MESSAGE)
    return stream


#: Bytes no text holds: C0 controls other than tab, newlines, form feed and escape.
_BINARY_BYTES = frozenset(range(32)) - frozenset(b"\t\n\v\f\r\x1b")


def _looks_binary(head: bytes) -> bool:
    """Whether the first bytes of an input hold a byte no text holds, or are
    not UTF-8 (a character cut off at the end of ``head`` aside)."""
    if any(byte in _BINARY_BYTES for byte in head):
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return True
    return False


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


def _sniffed(stream: IO[bytes]) -> tuple[str, IO[bytes]]:
    """``jsonl`` if the first non-blank line starts with ``{``, else ``text``;
    and the stream, with the lines read to tell given back in front."""
    head: list[bytes] = []
    for line in stream:
        head.append(line)
        if line.strip():
            break
    first = head[-1].lstrip(codecs.BOM_UTF8).lstrip() if head else b""
    fmt = "jsonl" if first.startswith(b"{") else "text"
    return fmt, cast(IO[bytes], io.BufferedReader(_Chained(head, stream)))


def text_lines(path: str) -> Iterator[tuple[int, str | InputError]]:
    """The lines of the file at ``path`` (``-``: stdin), numbered from 1, as
    the readers see them: gzip decompressed, binary refused, a line that is
    not UTF-8 an :class:`InputError` in its place."""
    name = STDIN_NAME if path == STDIN else path
    if path == STDIN:
        raw: IO[bytes] | None = getattr(sys.stdin, "buffer", None)
        if raw is None:
            raw = io.BytesIO(sys.stdin.read().encode("utf-8"))
        yield from _gzip_checked(name, _lines_of(raw, name), _number_of)
        return
    if not os.path.exists(path):
        raise InputError(name, 0, "no such file")
    with open(path, "rb") as file:
        yield from _gzip_checked(name, _lines_of(file, name), _number_of)


def _lines_of(raw: IO[bytes], name: str) -> Iterator[tuple[int, str | InputError]]:
    yield from _decoded_lines(_checked_stream(raw, name), name)


def _number_of(numbered: tuple[int, str | InputError]) -> int:
    return numbered[0]


def sniff_format(path: str, name: str = STDIN_NAME) -> str:
    """``jsonl`` if the first non-blank line of the file at ``path`` (gzip
    decompressed) starts with ``{``, else ``text``: how ``auto`` reads stdin.
    ``name`` is the input's name in messages."""
    with open(path, "rb") as raw:
        try:
            for line in _checked_stream(raw, name):
                if line.strip():
                    return "jsonl" if line.lstrip(codecs.BOM_UTF8).lstrip().startswith(b"{") else "text"
        except _DAMAGED_GZIP as exc:
            raise InputError(name, 1, f"damaged gzip data ({exc})") from exc
    return "text"


class _Chained(io.RawIOBase):
    """Lines already read, then the rest of a stream, as one binary stream."""

    def __init__(self, head: list[bytes], rest: IO[bytes]) -> None:
        super().__init__()
        self._head = list(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # read1: what the pipe holds now; read(n) would wait for n bytes, so
        # `add --batch-size N -` would commit nothing until 8 KiB arrived.
        read_some = getattr(self._rest, "read1", self._rest.read)
        data = self._head.pop(0) if self._head else read_some(len(buffer))
        if not data:
            return 0
        if len(data) > len(buffer):
            self._head.insert(0, data[len(buffer) :])
            data = data[: len(buffer)]
        buffer[: len(data)] = data
        return len(data)


def _read_stream(
    stream: IO[bytes], fmt: str, name: str, options: ReadOptions
) -> Iterator[Document | InputError]:
    if fmt == "jsonl":
        yield from _read_jsonl(stream, name, options)
    elif fmt in ("csv", "tsv"):
        yield from _read_delimited(stream, name, options, "," if fmt == "csv" else "\t")
    else:
        yield from _read_text(stream, name)


def _decoded_lines(stream: Iterable[bytes], name: str) -> Iterator[tuple[int, str | InputError]]:
    """Each line decoded, or an :class:`InputError` for a line that is not
    UTF-8; a NUL byte raises one for the whole file (a binary file read as
    text would give lines of garbage, each of them skippable)."""
    for number, raw in enumerate(stream, 1):
        if b"\x00" in raw:
            raise InputError(name, number, NUL_MESSAGE)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield number, InputError(name, number, f"not UTF-8 ({exc.reason} at byte {exc.start})")
            continue
        if number == 1:
            line = line.removeprefix("\ufeff")
        yield number, line


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


class DocumentWriter:
    """Writes documents back in an input format: ``jsonl`` writes the record
    read (or ``{"id": key, "text": text}`` for text and directory inputs),
    ``text`` the line, ``csv``/``tsv`` the row under a header of every
    field of the rows written.

    A CSV header must come first, yet a later record may hold a field no
    earlier one did (JSON lines vary): so CSV and TSV rows are kept in a
    temporary file until :meth:`finish`, which writes the header (``header``
    first, then every other field in first-seen order, then the fields of
    ``last``) and then the rows, each with an empty cell for a field it
    lacks. No field is ever left out.
    """

    def __init__(
        self, stream: TextIO, fmt: str, header: Sequence[str] | None = None, last: Sequence[str] = ()
    ) -> None:
        self.stream = stream
        self.format = fmt
        # Every field name seen, in order (a dict keeps it): the header to be.
        self._fields: dict[str, None] = {} if header is None else dict.fromkeys([*header, *last])
        self._last = list(last)
        self._header_given = header is not None
        self._spool: IO[str] | None = None
        if fmt in ("csv", "tsv"):
            # Closed by finish(), or by close() after an error.
            self._spool = tempfile.TemporaryFile("w+", encoding="utf-8", newline="")  # noqa: SIM115

    def write(self, document: Document, extra: Mapping[str, Any] | None = None) -> None:
        """Write ``document``, with the fields of ``extra`` added (columns of
        a CSV row, keys of a JSON object; a text line cannot carry them)."""
        if self._spool is not None:
            record = _record_of(document)
            row = {name: _csv_value(value) for name, value in record.items()}
            if extra is not None:
                row.update(extra)
            for name in row:
                self._fields.setdefault(str(name), None)
            # A row's cells in header order as it stands: fields only ever
            # join the header at its end, so finish() pads the row's tail.
            cells = [_csv_cell(row.get(name)) for name in self._fields]
            self._spool.write(json.dumps(cells, ensure_ascii=False) + "\n")
        elif self.format == "text":
            self.stream.write(document.text.replace("\n", " ") + "\n")
        else:
            record = _record_of(document)
            if extra is not None:
                record = {**record, **extra}
            self.stream.write(json.dumps(record, ensure_ascii=False, default=_json_value) + "\n")

    def finish(self) -> None:
        """End the output: a CSV or TSV file's header, then its rows. With
        no row written, the ``header`` given still goes out alone, so that
        an output with no rows still names its columns."""
        if self._spool is None:
            return
        with self._spool:
            if not self._fields and not self._header_given:
                return
            # A spooled row's cells are in the order fields were seen; the
            # header puts ``last`` at the end.
            position = {name: index for index, name in enumerate(self._fields)}
            last = [name for name in self._last if name in position]
            names = [name for name in self._fields if name not in last] + last
            writer = csv.writer(
                self.stream, delimiter="," if self.format == "csv" else "\t", lineterminator="\n"
            )
            writer.writerow(names)
            self._spool.seek(0)
            for line in self._spool:
                cells = json.loads(line)
                cells += [""] * (len(position) - len(cells))
                writer.writerow([cells[position[name]] for name in names])

    def close(self) -> None:
        """Drop what :meth:`finish` did not write (after an error)."""
        if self._spool is not None:
            self._spool.close()


def _record_of(document: Document) -> dict[str, Any]:
    """The fields a document is written with: the JSON object or row read,
    or ``{"id": key, "text": text}`` for a text line or file."""
    if isinstance(document.record, dict):
        return document.record
    return {"id": document.key, "text": document.text}


def _json_value(value: Any) -> Any:
    """A Parquet or Arrow value JSON has no type for: bytes as ``{"$bytes":
    base64}`` (as ``simstore export`` writes them), dates and times in ISO
    8601, anything else (decimals, durations) as its text."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def _csv_value(value: Any) -> Any:
    """A value as a CSV cell: lists and objects as JSON, bytes as base64,
    dates and times in ISO 8601 (the csv module writes others as text)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=_json_value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return value


def _csv_cell(value: Any) -> str:
    """A value as the text the csv module writes for it (``None`` as empty)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


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
