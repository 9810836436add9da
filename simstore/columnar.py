"""Parquet and Arrow IPC files in and out of the command line, with pyarrow
(the optional extra ``simstore[parquet]``; the core install stays lean).

Reading streams record batches, so memory stays flat whatever the file's
size: each row becomes one document, its columns the record a writer gives
back. Writing buffers rows and writes them in row groups under one schema:
the first input's, with the provenance columns of ``dedup --annotate``
appended when asked. Only this module imports pyarrow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

from simstore.errors import SimstoreError

#: The columnar formats, by the name ``--format`` takes.
COLUMNAR_FORMATS = ("parquet", "arrow")
#: Rows read (and written) per batch: bounds memory, keeps pyarrow's calls few.
BATCH_ROWS = 8_192


class PyarrowMissingError(SimstoreError, ImportError):
    """Parquet or Arrow input or output was asked for without pyarrow."""


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as exc:
        raise PyarrowMissingError(
            "Parquet and Arrow files need pyarrow (the parquet extra: pip install pyarrow)"
        ) from exc
    return pyarrow


def schema_of(path: str, fmt: str) -> Any:
    """The schema of a Parquet or Arrow IPC file."""
    pa = _pyarrow()
    if fmt == "parquet":
        return pa.parquet.ParquetFile(path).schema_arrow
    with _ipc_reader(pa, path) as reader:
        return reader.schema


class _IpcReader:
    """An Arrow IPC file or stream, whichever ``path`` holds."""

    def __init__(self, pa: Any, path: str) -> None:
        self._handle = pa.memory_map(path, "r")
        try:
            self._reader = pa.ipc.open_file(self._handle)
            self.schema = self._reader.schema
            self._file = True
        except pa.ArrowInvalid:
            self._handle.seek(0)
            self._reader = pa.ipc.open_stream(self._handle)
            self.schema = self._reader.schema
            self._file = False

    def batches(self) -> Iterator[Any]:
        if self._file:
            for index in range(self._reader.num_record_batches):
                yield self._reader.get_batch(index)
        else:
            yield from self._reader

    def __enter__(self) -> _IpcReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._handle.close()


def _ipc_reader(pa: Any, path: str) -> _IpcReader:
    return _IpcReader(pa, path)


def read_rows(path: str, fmt: str) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """The column names of a Parquet or Arrow IPC file, and its rows as
    dicts, read a record batch at a time."""
    pa = _pyarrow()
    names = list(schema_of(path, fmt).names)

    def rows() -> Iterator[dict[str, Any]]:
        if fmt == "parquet":
            # pre_buffer (the default) keeps every column chunk read so far:
            # memory grew by 600 bytes a row over a file (bench_columnar.py).
            reader = pa.parquet.ParquetFile(path, pre_buffer=False)
            for batch in reader.iter_batches(batch_size=BATCH_ROWS):
                yield from batch.to_pylist()
            return
        with _ipc_reader(pa, path) as reader:
            for batch in reader.batches():
                yield from batch.to_pylist()

    return names, rows()


class ColumnarWriter:
    """Rows written as a Parquet or Arrow IPC file under ``schema`` (a
    pyarrow schema), with ``extra`` columns appended (name, pyarrow type
    name: ``"int64"``, ``"float64"``, ``"string"``)."""

    def __init__(
        self, stream: IO[bytes], fmt: str, schema: Any, extra: Sequence[tuple[str, str]] = ()
    ) -> None:
        pa = _pyarrow()
        self._pa = pa
        fields = list(schema)
        for name, type_name in extra:
            if name in schema.names:
                raise SimstoreError(f"the input already has a column {name!r}")
            fields.append(pa.field(name, getattr(pa, type_name)()))
        self.schema = pa.schema(fields)
        self._rows: list[Mapping[str, Any]] = []
        if fmt == "parquet":
            self._writer: Any = pa.parquet.ParquetWriter(stream, self.schema)
        else:
            self._writer = pa.ipc.new_file(stream, self.schema)

    def write(self, row: Mapping[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            table = self._pa.Table.from_pylist(self._rows, schema=self.schema)
            self._writer.write_table(table)
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._writer.close()
