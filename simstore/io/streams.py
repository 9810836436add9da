"""Byte streams of input files, checked before they are parsed: gzip read whole or reported
as damaged, binary data refused, the format sniffed from the first bytes, standard input
chained back to what was sniffed, and lines decoded one at a time with their numbers."""

from __future__ import annotations

import codecs
import gzip
import io
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, cast

from simstore.io.inputs import STDIN, STDIN_NAME, InputError, _Result

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
