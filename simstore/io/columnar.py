"""Parquet and Arrow IPC files in and out of the command line, with pyarrow
(the optional extra ``simstore[parquet]``; the core install stays lean).

Reading streams record batches, so memory stays flat whatever the file's
size: each row becomes one document, its columns the record a writer gives
back. Writing buffers rows and writes them in row groups under one schema:
every input's columns (:func:`unified_schema`, decided from the files'
metadata before any row is read), with the provenance columns of ``dedup
--annotate`` appended when asked. Only this module imports pyarrow.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

from simstore.errors import SimstoreError

#: The columnar formats, by the name ``--format`` takes.
COLUMNAR_FORMATS = ("parquet", "arrow")
#: Rows read (and written) per batch: bounds memory, keeps pyarrow's calls few.
BATCH_ROWS = 8_192


class PyarrowMissingError(SimstoreError, ImportError):
    """Parquet or Arrow input or output was asked for without pyarrow."""


class SchemaConflictError(SimstoreError, ValueError):
    """Two Parquet or Arrow inputs hold a column in types that no one type
    holds without changing a value."""


class ColumnarWriteError(SimstoreError, ValueError):
    """pyarrow could not write a row (or the file's end) of a Parquet or Arrow output."""


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


def unified_schema(schemas: Iterable[tuple[str, Any]]) -> Any:
    """The schema that holds the rows of files with ``schemas`` (each with
    the file's name in messages; :func:`schema_of` reads one from the
    file's metadata, so no row need be read).

    Columns come in first-seen order; a column some file lacks is nullable
    (those rows hold null). A column whose type differs between files takes
    the type both widen to without changing a value (int32 and double give
    double, string and large_string give large_string); where there is none
    (int64 and double: doubles hold integers up to 2**53 only; int64 and
    string) the files are refused, as a cast that changes values would
    change the data silently.

    Raises:
        SchemaConflictError: naming the column and the two files.
    """
    pa = _pyarrow()
    fields: dict[str, Any] = {}
    # The file (or files) whose type each column has so far, for messages.
    type_origin: dict[str, str] = {}
    nullable: dict[str, bool] = {}
    files_read = 0
    for shown, schema in schemas:
        for name in set(fields) - set(schema.names):
            nullable[name] = True
        for field in schema:
            current = fields.get(field.name)
            if current is None:
                fields[field.name] = field
                type_origin[field.name] = shown
                # Absent from every earlier file: their rows hold null.
                nullable[field.name] = field.nullable or files_read > 0
                continue
            nullable[field.name] = nullable[field.name] or field.nullable
            if current.type == field.type:
                continue
            common = _common_type(pa, current.type, field.type)
            if common is None:
                raise SchemaConflictError(
                    f"column {field.name!r} is {current.type} in {type_origin[field.name]} but "
                    f"{field.type} in {shown}, and no type holds both without changing values; "
                    "cast one of them to the other's type (no row was read)"
                )
            if common == field.type:
                type_origin[field.name] = shown
            elif common != current.type:
                type_origin[field.name] = f"{type_origin[field.name]} + {shown}"
            fields[field.name] = current.with_type(common)
        files_read += 1
    return pa.schema([field.with_nullable(nullable[name]) for name, field in fields.items()])


#: Significand bits of a float type, by its bit width: the integers it holds exactly.
_SIGNIFICAND_BITS = {16: 11, 32: 24, 64: 53}
#: Timestamp units from the coarsest; ``ns`` is left out as a target: its
#: range (years 1677 to 2262) is narrower than the others'.
_TIME_UNITS = ("s", "ms", "us")


def _common_type(pa: Any, first: Any, second: Any) -> Any | None:
    """The type both ``first`` and ``second`` widen to losslessly, or ``None``."""
    candidates = [second, first]
    # No type pyarrow promotes both to: the other candidates may still do.
    with contextlib.suppress(pa.ArrowException, TypeError, ValueError):
        candidates.append(
            pa.unify_schemas(
                [pa.schema([("column", first)]), pa.schema([("column", second)])],
                promote_options="permissive",
            )
            .field("column")
            .type
        )
    # A dictionary column's rows are read as its values.
    candidates.extend(kind.value_type for kind in (first, second) if pa.types.is_dictionary(kind))
    for candidate in candidates:
        if _widens(pa, first, candidate) and _widens(pa, second, candidate):
            return candidate
    return None


def _widens(pa: Any, source: Any, target: Any) -> bool:
    """Whether every value of type ``source``, as read into Python, is
    written as the same value in a column of type ``target``."""
    types = pa.types
    if source == target or types.is_null(source):
        return True
    if types.is_dictionary(source):
        return _widens(pa, source.value_type, target)
    if types.is_integer(source):
        signed = types.is_signed_integer(source)
        if types.is_integer(target):
            if types.is_signed_integer(target):
                return bool(target.bit_width >= source.bit_width + (0 if signed else 1))
            return not signed and bool(target.bit_width >= source.bit_width)
        if types.is_floating(target):
            magnitude_bits = source.bit_width - (1 if signed else 0)
            return bool(magnitude_bits <= _SIGNIFICAND_BITS[target.bit_width])
        return False
    if types.is_floating(source):
        return types.is_floating(target) and bool(target.bit_width >= source.bit_width)
    if types.is_string(source):
        return bool(types.is_large_string(target))
    if types.is_binary(source):
        return bool(types.is_large_binary(target))
    if types.is_decimal(source):
        return bool(
            types.is_decimal(target)
            and target.scale >= source.scale
            and target.precision - target.scale >= source.precision - source.scale
        )
    if types.is_timestamp(source):
        return (
            types.is_timestamp(target)
            and source.tz == target.tz
            and source.unit in _TIME_UNITS
            and target.unit in _TIME_UNITS
            and _TIME_UNITS.index(target.unit) >= _TIME_UNITS.index(source.unit)
        )
    if (types.is_list(source) or types.is_large_list(source)) and (
        types.is_list(target) or types.is_large_list(target)
    ):
        return _widens(pa, source.value_type, target.value_type)
    if types.is_struct(source) and types.is_struct(target):
        target_names = [target.field(index).name for index in range(target.num_fields)]
        return all(
            source.field(index).name in target_names
            and _widens(pa, source.field(index).type, target.field(source.field(index).name).type)
            for index in range(source.num_fields)
        )
    return False


def key_column_type(id_type: Any, keys: Iterable[object]) -> tuple[Any, bool]:
    """The type of a column of keys (``dedup --annotate``'s ``duplicate_of``),
    decided from the keys it will hold: ``id_type`` (the id column's type,
    ``None`` if there is none) where it is an integer type that holds every
    key; else int64 or uint64 where one holds them all; else string. Returns
    the type and whether keys must be written as text (ints in decimal).

    A key of a null id (``FILE:LINE``), of a store filled from Python, or a
    uint64 id of 2**63 or more would not fit an int64 column.
    """
    pa = _pyarrow()
    if id_type is None or not pa.types.is_integer(id_type):
        return pa.string(), True
    integer_keys: list[int] = []
    for key in keys:
        if not isinstance(key, int) or isinstance(key, bool):
            return pa.string(), True
        integer_keys.append(key)
    smallest, largest = min(integer_keys, default=0), max(integer_keys, default=0)
    for candidate in (id_type, pa.int64(), pa.uint64()):
        signed = pa.types.is_signed_integer(candidate)
        bits = candidate.bit_width
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        if low <= smallest and largest <= high:
            return candidate, False
    return pa.string(), True


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
    pyarrow schema), with ``extra`` columns appended (name, and a pyarrow
    type or its name: ``"int64"``, ``"float64"``, ``"string"``). ``name``
    is the output's name in messages.

    Raises:
        ColumnarWriteError: from :meth:`write` or :meth:`close`, for a row
            pyarrow cannot write under the schema (a value it would have to
            change) or a write that fails; no value is ever cast to fit.
    """

    def __init__(
        self,
        stream: IO[bytes],
        fmt: str,
        schema: Any,
        extra: Sequence[tuple[str, Any]] = (),
        name: str = "the output",
    ) -> None:
        pa = _pyarrow()
        self._pa = pa
        self._format = fmt
        self._name = name
        fields = list(schema)
        for column, column_type in extra:
            if column in schema.names:
                raise SimstoreError(f"the input already has a column {column!r}")
            if isinstance(column_type, str):
                column_type = getattr(pa, column_type)()
            fields.append(pa.field(column, column_type))
        self.schema = pa.schema(fields)
        self._rows: list[Mapping[str, Any]] = []
        self._failed = False
        with self._translated():
            if fmt == "parquet":
                self._writer: Any = pa.parquet.ParquetWriter(stream, self.schema)
            else:
                self._writer = pa.ipc.new_file(stream, self.schema)

    def write(self, row: Mapping[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        with self._translated():
            # Python values into the schema's types: the unified schema holds
            # each input's values as they are, so nothing is cast here; a
            # float into an integer column (which pyarrow would truncate) is
            # refused by unified_schema before any row is read.
            table = self._pa.Table.from_pylist(rows, schema=self.schema)
            self._writer.write_table(table)

    def close(self) -> None:
        """Write the buffered rows and the file's end; after a failed write,
        only release the writer (the output is discarded)."""
        if self._failed:
            with contextlib.suppress(Exception):
                self._writer.close()
            return
        try:
            self._flush()
        finally:
            if not self._failed:
                with self._translated():
                    self._writer.close()
            else:
                with contextlib.suppress(Exception):
                    self._writer.close()

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """pyarrow's errors as one :class:`ColumnarWriteError` line."""
        try:
            yield
        except (self._pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            self._failed = True
            raise ColumnarWriteError(
                f"{self._name}: cannot write the {self._format} output: {_shortened(str(exc))}"
            ) from exc


#: The longest pyarrow message kept whole: it quotes the value it could not
#: convert, which may be a whole document.
_MESSAGE_CHARS = 300


def _shortened(message: str) -> str:
    """``message`` on one line, its middle cut if it is long (the end says which type was wanted)."""
    message = " ".join(message.split())
    if len(message) <= _MESSAGE_CHARS:
        return message
    return f"{message[: _MESSAGE_CHARS - 100]} ... {message[-80:]}"
