"""Whole tables deduplicated in one call (issue 22): pyarrow, pandas and
polars tables, or lists of row dicts, in; the kept rows and each row's
provenance out, in the kind of table that came in. Their columns are read
with :func:`simstore.columns.as_column`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.columns import as_column
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.sketch import estimate_jaccard

__all__ = [
    "Provenance",
    "check_keep",
    "cluster_rows",
    "dedup_table",
    "member_provenance",
    "provenance_of",
]


def dedup_table(
    table: Any,
    text_column: str = "text",
    id_column: str | None = None,
    *,
    k: int | None = None,
    min_similarity: float | None = None,
    keep: str = "first",
    linkage: str = "star",
    store_path: str | os.PathLike[str] | None = None,
    bands: bool = True,
) -> tuple[Any, Any]:
    """Deduplicate the rows of a table by the text in ``text_column``; the
    answer comes back in the kind of table that came in.

    ``table`` is a pyarrow ``Table``, a pandas or polars ``DataFrame``, a
    list of row dicts, or anything else ``pyarrow.table()`` accepts (a dict
    of columns, a ``RecordBatch``). The rows go into a store (a temporary
    one, or ``store_path``, created if missing and kept), are clustered
    (``linkage``, ``keep``, ``min_similarity`` and ``bands`` as for
    :meth:`simstore.Store.clusters`; the store's defaults otherwise), and one
    row is kept per cluster.

    Returns:
        ``(kept, provenance)``, both of the input's kind: pyarrow Tables for
        a pyarrow Table (and for the other inputs ``pyarrow.table()``
        takes), pandas DataFrames for a pandas DataFrame, polars DataFrames
        for a polars DataFrame, lists of dicts for a list of row dicts.
        ``kept`` holds the kept rows as they came in: the input's schema,
        dtypes and (pandas) index, or the input's own dicts. ``provenance``
        holds one row per input row, in input order (a pandas one under the
        input's index): ``id`` (``id_column``'s value, or the row's
        position), ``cluster_id``, ``duplicate_of`` (the id kept in its
        place; null for kept rows and rows in no cluster), ``distance`` and
        ``similarity`` (to that row), ``cluster_size`` (how many rows its
        cluster holds; 1 for a row in no cluster, a cluster of its own, so
        it is never null) and ``kept``. In pandas its integer
        columns are nullable (``Int64``), so a missing value is ``<NA>``
        rather than turning the column into floats.

    Examples:
        >>> kept, provenance = dedup_table([
        ...     {"id": 1, "text": "the quick brown fox jumps over the lazy dog"},
        ...     {"id": 2, "text": "the quick brown fox jumps over the lazy dog"},
        ... ], id_column="id")
        >>> kept
        [{'id': 1, 'text': 'the quick brown fox jumps over the lazy dog'}]
        >>> [(row["id"], row["duplicate_of"], row["kept"]) for row in provenance]
        [(1, None, True), (2, 1, False)]
    """
    import pyarrow as pa

    kind = _kind_of(table)
    if kind == _ARROW:
        table = _arrow_table(table)
    wanted = [text_column] if id_column is None else [text_column, id_column]
    names, columns = _columns_of(table, kind, wanted)
    for column in wanted:
        if column not in names:
            raise InvalidValueError(f"no column {column!r}; the table has {names}")
    check_keep(keep)
    rows = columns.num_rows
    keys: Sequence[Any] = range(rows) if id_column is None else as_column(columns[id_column])
    if len(set(np.asarray(keys).tolist())) != rows:
        raise InvalidValueError(f"column {id_column!r} repeats an id; each row needs its own")
    texts = columns[text_column].to_pylist()
    if any(not isinstance(text, str) for text in texts):
        raise InvalidTypeError(f"column {text_column!r} must hold strings, without nulls")
    position = {key: index for index, key in enumerate(np.asarray(keys).tolist())}
    found = cluster_rows(
        [(keys, texts)],
        position,
        rows,
        k=k,
        min_similarity=min_similarity,
        keep=keep,
        linkage=linkage,
        store_path=store_path,
        bands=bands,
    )
    ids = pa.array(np.asarray(keys).tolist())
    provenance = pa.table(
        {
            "id": ids,
            "cluster_id": pa.array(found.cluster_id, type=pa.int64()),
            "duplicate_of": pa.array(found.duplicate_of, type=ids.type),
            "distance": pa.array(found.distance, type=pa.int64()),
            "similarity": pa.array(found.similarity, type=pa.float64()),
            "cluster_size": pa.array(found.cluster_size, type=pa.int64()),
            "kept": pa.array(found.kept),
        }
    )
    return _in_kind(table, kind, found.kept, provenance)


#: The kinds of table :func:`dedup_table` gives back as they came.
_PANDAS, _POLARS, _ROWS, _ARROW = "pandas", "polars", "rows", "arrow"


def _kind_of(table: Any) -> str:
    """Which kind of table ``table`` is. A pandas or polars frame can only
    be one if its library is imported already, so neither is imported here."""
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(table, pandas.DataFrame):
        return _PANDAS
    polars = sys.modules.get("polars")
    if polars is not None and isinstance(table, polars.DataFrame):
        return _POLARS
    if isinstance(table, list) and all(isinstance(row, dict) for row in table):
        return _ROWS
    return _ARROW


def _columns_of(table: Any, kind: str, wanted: Sequence[str]) -> tuple[list[str], Any]:
    """The table's column names, and a pyarrow Table of those of ``wanted``
    it has (the whole table for pyarrow input; only these columns of a
    frame are converted)."""
    import pyarrow as pa

    if kind == _PANDAS:
        names = [str(name) for name in table.columns]
        present = [name for name in wanted if name in names]
        return names, pa.Table.from_pandas(table[present], preserve_index=False)
    if kind == _POLARS:
        names = list(table.columns)
        return names, table.select([name for name in wanted if name in names]).to_arrow()
    if kind == _ROWS:
        names = list(dict.fromkeys(name for row in table for name in row))
        present = [name for name in wanted if name in names]
        return names, pa.Table.from_pylist([{name: row.get(name) for name in present} for row in table])
    return list(table.column_names), table


def _arrow_table(table: Any) -> Any:
    """``table`` as a pyarrow Table (``pyarrow.table()``'s conversions)."""
    import pyarrow as pa

    if isinstance(table, pa.Table):
        return table
    try:
        return pa.table(table)
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise InvalidTypeError(
            "dedup_table takes a pyarrow Table, a pandas or polars DataFrame, a dict of "
            f"columns or a list of row dicts; got {type(table).__name__} ({exc})"
        ) from exc


def _in_kind(table: Any, kind: str, kept: npt.NDArray[np.bool_], provenance: Any) -> tuple[Any, Any]:
    """``(kept rows, provenance)`` in the kind of table that came in."""
    import pyarrow as pa

    if kind == _PANDAS:
        import pandas as pd

        nullable = {
            pa.int8(): pd.Int8Dtype(),
            pa.int16(): pd.Int16Dtype(),
            pa.int32(): pd.Int32Dtype(),
            pa.int64(): pd.Int64Dtype(),
            pa.uint8(): pd.UInt8Dtype(),
            pa.uint16(): pd.UInt16Dtype(),
            pa.uint32(): pd.UInt32Dtype(),
            pa.uint64(): pd.UInt64Dtype(),
        }
        frame = provenance.to_pandas(types_mapper=nullable.get)
        frame.index = table.index
        return table.loc[kept], frame
    if kind == _POLARS:
        import polars as pl

        return table.filter(pl.Series(kept)), pl.from_arrow(provenance)
    if kind == _ROWS:
        kept_rows = [row for row, is_kept in zip(table, kept.tolist(), strict=True) if is_kept]
        return kept_rows, provenance.to_pylist()
    return table.filter(pa.array(kept)), provenance


def check_keep(keep: object) -> None:
    """Refuse a ``keep=`` that is not one of the row-dedup policies."""
    if keep not in ("first", "longest", "none"):
        raise InvalidValueError(f"keep must be 'first', 'longest' or 'none', got {keep!r}")


def cluster_rows(
    batches: Iterable[tuple[Sequence[Any], list[str]]],
    position: Mapping[Any, int] | None,
    count: int,
    *,
    k: int | None,
    min_similarity: float | None,
    keep: str,
    linkage: str,
    store_path: str | os.PathLike[str] | None,
    bands: bool = True,
) -> Provenance:
    """Add ``batches`` of ``(keys, texts)`` (``count`` rows in all) to a
    store, a temporary one or ``store_path`` (created if missing, and
    kept), cluster it, and give each row's :class:`Provenance` (``position``
    as for :func:`provenance_of`)."""
    from simstore.store.opening import open as open_store

    with tempfile.TemporaryDirectory(prefix="simstore-rows-") as scratch:
        path = os.fspath(store_path) if store_path is not None else os.path.join(scratch, "rows.simstore")
        options: dict[str, Any] = {"sync": False}
        if store_path is None:
            # No band table: pairs and clusters band every stored sketch themselves.
            options.update(k=k, min_similarity=min_similarity, bands=False)
        with open_store(path, "c", **options) as store:
            for keys, texts in batches:
                metas = [{"length": len(text)} for text in texts] if keep == "longest" else None
                store.add_many(keys, texts=texts, metas=metas)
            clusters = store.clusters(
                k,
                keep="first" if keep == "none" else keep,
                linkage=linkage,
                min_similarity=min_similarity,
                bands=bands,
            )
            return provenance_of(store, clusters, position, count, keep)


@dataclass
class Provenance:
    """Per row of a deduplicated table: whether it is kept, its cluster,
    the key kept in its place (``None`` for kept rows and rows in no
    cluster), its distance and estimated similarity to that row, and the
    size of its cluster (1 for a row in no cluster)."""

    kept: npt.NDArray[np.bool_]
    cluster_id: list[int | None]
    duplicate_of: list[Any]
    distance: list[int | None]
    similarity: list[float | None]
    cluster_size: npt.NDArray[np.int64] = field(default_factory=lambda: np.ones(0, dtype=np.int64))

    def __post_init__(self) -> None:
        # Ones by default (the factory's empty array): a row in no cluster
        # is a cluster of its own.
        if len(self.cluster_size) == 0:
            self.cluster_size = np.ones(len(self.kept), dtype=np.int64)
        elif len(self.cluster_size) != len(self.kept):
            raise ValueError(f"{len(self.cluster_size)} cluster sizes for {len(self.kept)} rows")


def provenance_of(
    store: Any, clusters: Sequence[Any], position: Mapping[Any, int] | None, count: int, keep: str
) -> Provenance:
    """The :class:`Provenance` of ``count`` rows stored under keys whose
    row is ``position[key]`` (the key itself if ``position`` is ``None``),
    from ``store``'s ``clusters``; with ``keep="none"`` no member of a
    cluster is kept."""
    found = Provenance(
        np.ones(count, dtype=bool), [None] * count, [None] * count, [None] * count, [None] * count
    )
    for cluster in clusters:
        representative = cluster.representative
        for member, distance, similarity in member_provenance(store, cluster):
            row = member if position is None else position[member]
            found.cluster_id[row] = cluster.cluster_id
            found.distance[row] = distance
            found.similarity[row] = similarity
            found.cluster_size[row] = cluster.size
            if member != representative:
                found.duplicate_of[row] = representative
            if member != representative or keep == "none":
                found.kept[row] = False
    return found


def member_provenance(store: Any, cluster: Any) -> Iterator[tuple[Any, int, float | None]]:
    """``(key, distance, similarity)`` of each member of ``cluster`` to its
    representative (similarity ``None`` where either has no sketch): the
    cluster's own figures, or for a cluster made elsewhere, looked up in
    ``store``."""
    representative = cluster.representative
    distances = getattr(cluster, "distances", ())
    if len(distances) == len(cluster.members):
        yield from zip(cluster.members, distances, cluster.similarities, strict=True)
        return
    leader = store[representative].fingerprint
    leader_sketch = store.sketch_of(representative)
    for member in cluster.members:
        similarity = None
        own = store.sketch_of(member)
        if leader_sketch is not None and own is not None and store.sketch is not None:
            first, second = np.frombuffer(leader_sketch, np.uint8), np.frombuffer(own, np.uint8)
            similarity = float(estimate_jaccard(first, second, store.sketch)[0])
        yield member, (store[member].fingerprint ^ leader).bit_count(), similarity
