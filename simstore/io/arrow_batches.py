"""Pure functions of one Arrow batch: what a dataframe engine calls per block.

Each takes a ``pyarrow.RecordBatch``, a ``pyarrow.Table`` or a pandas
``DataFrame`` and returns the same kind, with columns added (or, for
:func:`add_batch`, a one-row summary). They start no process and no thread,
hold no state between calls, and are picklable module-level functions, so
they drop into Ray Data's ``map_batches(fn, batch_format="pyarrow")``,
Spark's ``mapInArrow``, a Daft UDF or Dask's ``map_partitions``:

- :func:`fingerprint_batch`: a text column to a ``uint64`` fingerprint column,
  and (``sketches=True``) each text's verification sketch as a
  ``fixed_size_binary`` column, as the store would make them.
- :func:`query_batch`: each row's closest stored match in an existing store
  (or the shards of a sharded one), without inserting anything.
- :func:`add_batch`: the rows added to a store (one shard of a corpus).

:func:`query_batch` and :func:`add_batch` open the store at the start of the
call and close it before returning: nothing stays open in a worker between
batches, so a forked or reused worker process holds no LMDB environment it
did not open itself. LMDB allows one writer at a time per file, so give
concurrent :func:`add_batch` calls different shard paths (or run them one
after another): a second writer waits for the first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.store.opening import open as open_store
from simstore.store.sharded import ShardedStore

__all__ = [
    "MATCH_COLUMNS",
    "add_batch",
    "fingerprint_batch",
    "query_batch",
    "sketch_array",
]

#: The columns :func:`query_batch` adds: the closest stored match's key, its
#: distance and its estimated similarity (null where there is no match).
MATCH_COLUMNS = ("match_key", "match_distance", "match_similarity")

StorePaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def fingerprint_batch(
    batch: Any,
    text_column: str = "text",
    *,
    fingerprinter: Fingerprinter | None = None,
    sketches: bool = False,
    fingerprint_column: str = "fingerprint",
    sketch_column: str = "sketch",
) -> Any:
    """``batch`` with each text's fingerprint added as ``fingerprint_column``
    (``uint64``) and, with ``sketches``, its verification sketch as
    ``sketch_column`` (``fixed_size_binary(nbytes)``; a row of zeros for a text
    too short for one, as the store keeps it).

    Args:
        batch: a pyarrow ``RecordBatch`` or ``Table``, or a pandas ``DataFrame``.
        text_column: the column of texts (strings, no nulls).
        fingerprinter: the settings (default ``Fingerprinter()``); a store
            that will hold or answer these fingerprints must use the same
            (``store.fingerprinter``).
        sketches: add the sketches too (the fingerprinter must make them).

    Returns:
        The same kind of batch, every input column kept.

    >>> import pyarrow as pa
    >>> out = fingerprint_batch(pa.table({"text": ["the quick brown fox jumps over the lazy dog"]}))
    >>> out.column_names, str(out.schema.field("fingerprint").type)
    (['text', 'fingerprint'], 'uint64')
    """
    settings = fingerprinter if fingerprinter is not None else Fingerprinter()
    if not isinstance(settings, Fingerprinter):
        raise InvalidTypeError(
            f"fingerprinter must be a simstore.Fingerprinter, got {type(settings).__name__}"
        )
    texts = _texts(batch, text_column)
    _refuse_existing(batch, [fingerprint_column, *([sketch_column] if sketches else [])])
    if not sketches:
        values = settings.fingerprint_many(texts, processes=1)
        return _with_columns(batch, {fingerprint_column: _uint64(values)})
    if settings.sketch is None:
        raise InvalidValueError(
            "sketches=True needs a fingerprinter that makes sketches (its sketch is None)"
        )
    values, rows = settings.fingerprints_and_sketches(texts, processes=1)
    return _with_columns(batch, {fingerprint_column: _uint64(values), sketch_column: _sketch_column(rows)})


def query_batch(
    batch: Any,
    store_paths: StorePaths,
    *,
    fingerprint_column: str = "fingerprint",
    sketch_column: str | None = None,
    k: int | None = None,
    min_similarity: float | None = None,
) -> Any:
    """``batch`` with each row's closest match in a store added as the
    :data:`MATCH_COLUMNS` (``match_key``, ``match_distance``,
    ``match_similarity``; null for a row with no match), inserting nothing.

    Args:
        store_paths: a store path, or the paths of a sharded store's shards
            (as for :class:`simstore.ShardedStore`). Opened read-only for
            this call and closed before it returns.
        fingerprint_column: the rows' fingerprints (made with the store's
            fingerprinter, see :func:`fingerprint_batch`).
        sketch_column: the rows' sketches, so that the store's similarity
            threshold (or ``min_similarity``) judges the matches; without
            them matches are not judged.
        k: as for :meth:`simstore.Store.query_many` (the store's own by
            default).
        min_similarity: as for :meth:`simstore.Store.query_many` (the
            store's own by default).
    """
    paths = _paths(store_paths)
    fingerprints = _fingerprints(batch, fingerprint_column)
    _refuse_existing(batch, list(MATCH_COLUMNS))
    rows = None if sketch_column is None else sketch_array(_column(batch, sketch_column))
    with ShardedStore(paths) as store:
        answers = store.query_many(fingerprints, k=k, sketches=rows, min_similarity=min_similarity, limit=1)
    closest = [matches[0] if matches else None for matches in answers]
    import pyarrow as pa

    added = {
        MATCH_COLUMNS[0]: pa.array([None if match is None else match.key for match in closest]),
        MATCH_COLUMNS[1]: pa.array(
            [None if match is None else match.distance for match in closest], pa.uint8()
        ),
        MATCH_COLUMNS[2]: pa.array(
            [None if match is None else match.similarity for match in closest], pa.float64()
        ),
    }
    return _with_columns(batch, added)


def add_batch(
    batch: Any,
    store_path: str | os.PathLike[str],
    *,
    key_column: str = "key",
    fingerprint_column: str | None = "fingerprint",
    text_column: str | None = None,
    sketch_column: str | None = None,
    meta_columns: Sequence[str] = (),
    mode: str = "c",
    **open_options: Any,
) -> Any:
    """Add the rows of ``batch`` to the store at ``store_path`` in one
    transaction (all of them or none), and return a one-row summary of the
    same kind as ``batch``: ``path``, ``added`` (rows in this batch) and
    ``documents`` (the store's size after it).

    Args:
        key_column: the documents' keys (str, bytes or int).
        fingerprint_column: their fingerprints; or set it to ``None`` and
            give ``text_column`` to have the store fingerprint the texts.
        sketch_column: with ``fingerprint_column``, the rows' sketches
            (see :func:`fingerprint_batch`), kept for the store's threshold.
        meta_columns: columns stored as each document's ``meta``.
        mode: as for :func:`simstore.open` (``"c"``: create the store if
            missing). The store is opened for this call and closed before it
            returns.
        **open_options: as for :func:`simstore.open`.
    """
    if (fingerprint_column is None) == (text_column is None):
        raise InvalidValueError("give exactly one of fingerprint_column= and text_column=")
    if mode == "r":
        raise InvalidValueError("add_batch writes; mode must be 'c', 'w' or 'n'")
    keys = _column(batch, key_column)
    metas = None
    if meta_columns:
        columns = [_column(batch, name) for name in meta_columns]
        metas = [dict(zip(meta_columns, row, strict=True)) for row in zip(*columns, strict=True)]
    with open_store(store_path, mode, **open_options) as store:
        if fingerprint_column is None:
            store.add_many(keys, texts=_texts(batch, str(text_column)), metas=metas)
        else:
            rows = None if sketch_column is None else sketch_array(_column(batch, sketch_column))
            store.add_many(keys, _fingerprints(batch, fingerprint_column), metas=metas, sketches=rows)
        documents = len(store)
    summary = {"path": [os.fspath(store_path)], "added": [len(keys)], "documents": [documents]}
    if _is_pandas(batch):
        import pandas as pd

        return pd.DataFrame(summary)
    import pyarrow as pa

    table = pa.table(summary)
    return table.to_batches()[0] if isinstance(batch, pa.RecordBatch) else table


def sketch_array(values: Any) -> npt.NDArray[np.uint8]:
    """A column of sketches (a pyarrow ``fixed_size_binary`` or binary
    column, or a sequence of bytes) as a ``(rows, nbytes)`` uint8 array, the
    form ``add_many`` and ``query_many`` take."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array) and pa.types.is_fixed_size_binary(values.type) and not values.null_count:
        width = values.type.byte_width
        data = np.frombuffer(values.buffers()[1], dtype=np.uint8)
        start = values.offset * width
        return data[start : start + len(values) * width].reshape(len(values), width)
    items = values.to_pylist() if isinstance(values, pa.Array) else list(values)
    if any(not isinstance(item, bytes) for item in items):
        raise InvalidTypeError("a sketch column must hold bytes, without nulls")
    widths = {len(item) for item in items}
    if len(widths) > 1:
        raise InvalidValueError(f"sketches of different widths: {sorted(widths)} bytes")
    width = widths.pop() if widths else 0
    return np.frombuffer(b"".join(items), dtype=np.uint8).reshape(len(items), width)


# ------------------------------------------------------------------ helpers


def _is_pandas(batch: Any) -> bool:
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(batch, pandas.DataFrame)


def _column_names(batch: Any) -> list[str]:
    if _is_pandas(batch):
        return [str(name) for name in batch.columns]
    import pyarrow as pa

    if not isinstance(batch, pa.RecordBatch | pa.Table):
        raise InvalidTypeError(
            f"expected a pyarrow RecordBatch or Table or a pandas DataFrame, got {type(batch).__name__}"
        )
    return list(batch.schema.names)


def _column(batch: Any, name: str) -> Any:
    """Column ``name`` as a list or numpy array (see :func:`simstore.columns.as_column`)."""
    names = _column_names(batch)
    if name not in names:
        raise InvalidValueError(f"no column {name!r}; the batch has {names}")
    column = batch[name]
    if _is_pandas(batch):
        return column.to_numpy() if column.dtype.kind in "iu" else column.tolist()
    import pyarrow as pa

    if pa.types.is_fixed_size_binary(column.type):
        return column
    if pa.types.is_integer(column.type) and not column.null_count:
        return column.to_numpy()
    return column.to_pylist()


def _texts(batch: Any, text_column: str) -> list[str]:
    texts = _column(batch, text_column)
    texts = texts.tolist() if isinstance(texts, np.ndarray) else texts
    if any(not isinstance(text, str) for text in texts):
        raise InvalidTypeError(f"column {text_column!r} must hold strings, without nulls")
    return list(texts)


def _fingerprints(batch: Any, column: str) -> npt.NDArray[np.uint64]:
    values = _column(batch, column)
    if not isinstance(values, np.ndarray):
        raise InvalidTypeError(f"column {column!r} must hold fingerprints (unsigned ints), without nulls")
    if values.dtype.kind == "i" and len(values) and int(values.min()) < 0:
        raise InvalidValueError(f"column {column!r} holds a negative fingerprint")
    return values.astype(np.uint64, copy=False)


def _paths(store_paths: StorePaths) -> list[str]:
    if isinstance(store_paths, str | bytes | os.PathLike):
        return [os.fsdecode(store_paths)]
    paths = [os.fspath(path) for path in store_paths]
    if not paths:
        raise InvalidValueError("query_batch needs at least one store path")
    return paths


def _refuse_existing(batch: Any, names: Sequence[str]) -> None:
    existing = set(_column_names(batch))
    for name in names:
        if name in existing:
            raise InvalidValueError(f"the batch already has a column {name!r}")


def _uint64(values: npt.NDArray[np.uint64]) -> Any:
    import pyarrow as pa

    return pa.array(np.asarray(values, dtype=np.uint64), type=pa.uint64())


def _sketch_column(rows: npt.NDArray[np.uint8]) -> Any:
    import pyarrow as pa

    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    width = rows.shape[1]
    buffer = pa.py_buffer(rows.tobytes())
    return pa.Array.from_buffers(pa.binary(width), len(rows), [None, buffer])


def _with_columns(batch: Any, columns: dict[str, Any]) -> Any:
    """``batch`` with pyarrow arrays ``columns`` appended, in its own kind."""
    if _is_pandas(batch):
        import pandas as pd
        import pyarrow as pa

        nullable = {pa.uint8(): pd.UInt8Dtype(), pa.uint64(): pd.UInt64Dtype()}
        frame = batch.copy(deep=False)
        for name, values in columns.items():
            if pa.types.is_fixed_size_binary(values.type):
                frame[name] = pd.Series(values.to_pylist(), index=frame.index, dtype=object)
            elif values.null_count:
                frame[name] = values.to_pandas(types_mapper=nullable.get).set_axis(frame.index)
            else:
                frame[name] = values.to_numpy(zero_copy_only=False)
        return frame
    for name, values in columns.items():
        batch = batch.append_column(name, values)
    return batch
