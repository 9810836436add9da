"""Corpus dedup on Ray Data (the optional ``ray`` extra).

Install with ``pip install 'simstore[ray]'``. Ray Datasets in, Ray Datasets
out:

- :func:`dedup_dataset`: the kept rows and every row's provenance, the same
  answer :func:`simstore.dedup_table` gives for the same rows; optionally
  against an existing store (``against=``) first.
- :func:`near_duplicate_pairs`: every pair of rows within ``k`` bits, the
  same pairs :meth:`simstore.Store.near_duplicate_pairs` gives.
- :func:`clusters`: the clusters :meth:`simstore.Store.clusters` forms, on a
  Dataset of keys and fingerprints.

Ray Data executes the input Dataset into blocks, in its order; everything
after that runs as Ray tasks on the blocks: fingerprinting (with
:func:`simstore.io.arrow_batches.fingerprint_batch`), then the pair search over
the blocks' fingerprints (:mod:`simstore.index.prefix_shuffle`):
only 8-byte fingerprints are shuffled by table prefix, and rows move only
when they are in a cluster. Clusters are formed per connected component of
the pair graph, each component by the single-machine code (a store of its
own documents), which is why the answer is the single machine's exactly.

Ray is started the way Ray Data starts it: if the caller has not called
``ray.init()``, the first Dataset this module executes starts a local Ray,
as any Ray Data call would. Nothing here starts Ray before that.

"The first" row is the first in the Dataset's order: while one of these
functions executes a Dataset it sets Ray Data's ``preserve_order`` (and puts
the caller's setting back afterwards), so that order is the order of the
input's blocks and rows, whatever the number of blocks or workers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError, SimstoreError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.index.permute import Table
from simstore.index.prefix_shuffle import (
    batch_tables,
    bucket_edges,
    combine_forests,
    edge_forest,
    expand_left,
    expand_right,
    hash_buckets,
    label_documents,
    scatter_documents,
    scatter_entries,
    split_by,
)
from simstore.io.arrow_batches import MATCH_COLUMNS, fingerprint_batch, query_batch, sketch_array
from simstore.io.tables import check_keep, member_provenance
from simstore.store.opening import open as open_store
from simstore.store.sharded import ShardedStore

if TYPE_CHECKING:
    from simstore.store.facade import Store


class RayMissingError(SimstoreError, ImportError):
    """``simstore.ray`` was imported without Ray installed."""


try:
    import pyarrow as pa
    import pyarrow.compute
    import ray
    import ray.data
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise RayMissingError("simstore.ray needs Ray Data: pip install 'simstore[ray]'") from exc

__all__ = ["PROVENANCE_COLUMNS", "RayMissingError", "clusters", "dedup_dataset", "near_duplicate_pairs"]

#: The provenance Dataset's columns: ``simstore.dedup_table``'s (among them
#: ``cluster_size``, the members of the row's cluster: 1 for a row in no
#: cluster, null for a row an ``against=`` store matched), then
#: ``stored_match`` (the key of the stored document that store matched).
PROVENANCE_COLUMNS = (
    "id",
    "cluster_id",
    "duplicate_of",
    "distance",
    "similarity",
    "cluster_size",
    "kept",
    "stored_match",
)
#: The most table entries (8 bytes each) one bucket of the pair search
#: receives by default: 256 MiB of fingerprints, about 1 GiB with the
#: bucket's sort and comparison arrays.
ENTRIES_PER_BUCKET = 32 * 1024 * 1024
#: How many forests one task of the component tree combines.
FOREST_FAN_IN = 8

_FINGERPRINT = "__simstore_fingerprint"
_SKETCH = "__simstore_sketch"
_LENGTH = "__simstore_length"
_INTERNAL = (_FINGERPRINT, _SKETCH, _LENGTH, *MATCH_COLUMNS)


def _remote(function: Callable[..., Any]) -> Any:
    """``function`` as a Ray task (typed, so that mypy accepts it as a decorator)."""
    return ray.remote(function)


# ------------------------------------------------------------ dedup_dataset


def dedup_dataset(
    ds: Any,
    text_column: str = "text",
    id_column: str | None = None,
    *,
    k: int | None = None,
    min_similarity: float | None = None,
    keep: str = "first",
    linkage: str = "star",
    against: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    buckets: int | None = None,
    task_rows: int = 50_000,
    order_column: str | None = None,
) -> tuple[Any, Any]:
    """Deduplicate the rows of a Ray Dataset by the text in ``text_column``.

    The kept rows are those :func:`simstore.dedup_table` keeps for the same
    rows in the same order (``k``, ``min_similarity``, ``keep`` and
    ``linkage`` as there), on every run and for any number of blocks.

    Args:
        ds: a ``ray.data.Dataset``.
        text_column: the column of texts (strings, no nulls).
        id_column: the rows' ids for the provenance (default: the row's
            position in the Dataset).
        against: an existing store (a path, or the shard paths of a sharded
            one): rows with a near-duplicate there (judged by the store's own
            ``k`` and threshold) are dropped first, with ``stored_match`` set;
            the others are deduplicated among themselves. Texts are then
            fingerprinted with the store's fingerprinter.
        buckets: tasks of each shuffle (default: the blocks, at least twice
            the cluster's CPUs). More buckets, less memory per task.
        order_column: a column whose values (unique, comparable) rank the
            rows for "first" (``keep="first"`` and the order of a star), in
            place of the Dataset's order. Ray Data 2.60 reads the row groups
            of one Parquet file out of order, even with ``preserve_order``:
            give the column that numbers the rows (``"id"``) to get the
            file's order, as :func:`simstore.dedup_table` and the command
            line see it.
        task_rows: rows per fingerprinting task (a block larger than this
            is fingerprinted by several tasks, each on a zero-copy slice).

    Returns:
        ``(kept, provenance)``, two Ray Datasets in input order: the kept
        rows with the input's columns, and one row per input row with the
        :data:`PROVENANCE_COLUMNS` (``cluster_id`` is the position of the
        cluster's first row, ``duplicate_of`` the id of the row kept in its
        place).
    """
    _check_dataset(ds, [text_column, *[name for name in (id_column, order_column) if name]])
    check_keep(keep)
    _checked_buckets(buckets)
    if linkage not in ("star", "components"):
        raise InvalidValueError(f"linkage must be 'star' or 'components', got {linkage!r}")
    against_paths = None if against is None else _paths(against)
    settings = _StoreSettings.probe(k, min_similarity, against_paths)
    annotate = _Annotate(text_column, settings.fingerprinter, keep == "longest", against_paths)
    blocks = _annotated(_ordered_blocks(ds), annotate, _checked_task_rows(task_rows))
    kept, provenance = _deduplicated(blocks, id_column, settings, keep, linkage, None, buckets, order_column)
    return ray.data.from_arrow_refs(kept), ray.data.from_arrow_refs(provenance)


def _deduplicated(
    blocks: list[Any],
    id_column: str | None,
    settings: _StoreSettings,
    keep: str,
    linkage: str,
    layout: Any,
    buckets: int | None,
    order_column: str | None = None,
) -> tuple[list[Any], list[Any]]:
    """``(kept, provenance)`` block references, in order, of blocks with the internal columns."""
    counts = ray.get([_row_count.remote(block) for block in blocks])
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
    _, tables = _tables(settings.k, layout, int(offsets[-1]))
    bucket_count = _bucket_count(buckets, int(offsets[-1]), len(tables))
    fingerprints = [_searched_fingerprints.remote(block) for block in blocks]
    forest = _forest(fingerprints, tables, settings.k, bucket_count)
    labelled = _labelled(fingerprints, offsets, forest, bucket_count)
    groups = _groups(blocks, labelled, offsets, (id_column, order_column), bucket_count)
    found = [
        _fanout(_cluster_group, len(blocks)).remote(offsets, settings, keep, linkage, id_column, *parts)
        for parts in groups
    ]
    results = [
        _finish_block.options(num_returns=2).remote(
            block, int(offsets[number]), id_column, _INTERNAL, *_column_of(found, number)
        )
        for number, block in enumerate(blocks)
    ]
    return [result[0] for result in results], [result[1] for result in results]


# ---------------------------------------------------------------- clusters


def clusters(
    ds: Any,
    key_column: str = "key",
    fingerprint_column: str = "fingerprint",
    k: int = 5,
    layout: Any = None,
    *,
    linkage: str = "components",
    buckets: int | None = None,
) -> Any:
    """The clusters of the rows' near-duplicate pair graph, as
    :meth:`simstore.Store.clusters` (``keep="first"``) gives them for a store
    of the same rows added in order (without sketches).

    Args:
        ds: a ``ray.data.Dataset`` with a key and a fingerprint column.
        k, layout, buckets: as for :func:`near_duplicate_pairs`.
        linkage: ``"components"`` or ``"star"``, as for ``Store.clusters``.

    Returns:
        A Ray Dataset with one row per member of a cluster of two or more, in
        input order: ``cluster_id`` (the position of its first member, as
        ``Store.clusters`` numbers a store filled in input order), ``key``,
        ``representative`` (the first member's key) and ``distance`` (to
        the representative).
    """
    _check_dataset(ds, [key_column, fingerprint_column])
    _checked_buckets(buckets)
    if linkage not in ("star", "components"):
        raise InvalidValueError(f"linkage must be 'star' or 'components', got {linkage!r}")
    k, _ = _tables(k, layout, 1)
    settings = _StoreSettings(k, Fingerprinter(sketch=None), k, None)
    searched = _SearchedColumns(key_column, fingerprint_column)
    blocks = _annotated(_ordered_blocks(ds), searched, 1 << 40)
    _, provenance = _deduplicated(blocks, key_column, settings, "first", linkage, layout, buckets)
    return ray.data.from_arrow_refs([_cluster_rows_of.remote(block) for block in provenance])


class _SearchedColumns:
    """A batch's keys and fingerprints with the internal columns."""

    def __init__(self, key_column: str, fingerprint_column: str) -> None:
        self.key_column = key_column
        self.fingerprint_column = fingerprint_column

    def __call__(self, batch: Any) -> Any:
        return _as_searched(batch.select([self.key_column, self.fingerprint_column]), self.fingerprint_column)


def _as_searched(batch: Any, fingerprint_column: str) -> Any:
    """A batch of keys and fingerprints with the internal columns."""
    values = batch[fingerprint_column]
    if values.null_count or not pa.types.is_integer(values.type):
        raise InvalidTypeError(
            f"column {fingerprint_column!r} must hold fingerprints (unsigned ints), without nulls"
        )
    rows = batch.num_rows
    batch = batch.append_column(_FINGERPRINT, values.cast(pa.uint64()))
    batch = batch.append_column(_SKETCH, pa.nulls(rows, pa.binary()))
    batch = batch.append_column(_LENGTH, pa.nulls(rows))
    return batch.append_column(MATCH_COLUMNS[0], pa.nulls(rows))


@_remote
def _cluster_rows_of(provenance: Any) -> Any:
    """The provenance rows in a cluster, as ``Store.clusters`` members."""
    clustered = provenance.filter(provenance["cluster_id"].is_valid())
    representative = pa.compute.coalesce(clustered["duplicate_of"], clustered["id"])
    return pa.table(
        {
            "cluster_id": clustered["cluster_id"],
            "key": clustered["id"],
            "representative": representative,
            "distance": clustered["distance"],
        }
    )


class _StoreSettings:
    """What a store made as :func:`simstore.dedup_table` makes it would
    use: its ``k`` and fingerprinter, and the arguments to make it again."""

    def __init__(
        self, k: int, fingerprinter: Fingerprinter, open_k: int | None, threshold: float | None
    ) -> None:
        self.k = k
        self.fingerprinter = fingerprinter
        self.open_k = open_k
        self.threshold = threshold

    @classmethod
    def probe(cls, k: int | None, min_similarity: float | None, against: list[str] | None) -> _StoreSettings:
        fingerprinter = None
        if against is not None:
            with ShardedStore(against) as stored:
                fingerprinter = stored.shards[0].fingerprinter
        with tempfile.TemporaryDirectory(prefix="simstore-ray-") as scratch:
            options: dict[str, Any] = {"k": k, "min_similarity": min_similarity, "sync": False}
            if fingerprinter is not None:
                options["fingerprinter"] = fingerprinter
            with open_store(os.path.join(scratch, "probe.simstore"), "n", **options) as store:
                return cls(k if k is not None else store.k, store.fingerprinter, k, min_similarity)

    def open_scratch(self, path: str) -> Store:
        """A new store at ``path`` as :func:`simstore.dedup_table` would make it."""
        return open_store(
            path,
            "n",
            k=self.open_k,
            min_similarity=self.threshold,
            fingerprinter=self.fingerprinter,
            sync=False,
        )


class _Annotate:
    """The fingerprinting step: each row's fingerprint, sketch and length
    (for ``keep="longest"``), and its closest stored match (``against``)."""

    def __init__(
        self,
        text_column: str,
        fingerprinter: Fingerprinter,
        lengths: bool,
        against: list[str] | None,
    ) -> None:
        self.text_column = text_column
        self.fingerprinter = fingerprinter
        self.lengths = lengths
        self.against = against

    def __call__(self, batch: Any) -> Any:
        for name in _INTERNAL:
            if name in batch.column_names:
                raise InvalidValueError(f"the Dataset already has a column {name!r}")
        sketches = self.fingerprinter.sketch is not None
        batch = fingerprint_batch(
            batch,
            self.text_column,
            fingerprinter=self.fingerprinter,
            sketches=sketches,
            fingerprint_column=_FINGERPRINT,
            sketch_column=_SKETCH,
        )
        if not sketches:
            batch = batch.append_column(_SKETCH, pa.nulls(batch.num_rows, pa.binary()))
        lengths = pa.compute.utf8_length(batch[self.text_column]) if self.lengths else None
        batch = batch.append_column(_LENGTH, lengths if lengths is not None else pa.nulls(batch.num_rows))
        if self.against is None:
            return batch.append_column(MATCH_COLUMNS[0], pa.nulls(batch.num_rows))
        queried = query_batch(
            batch, self.against, fingerprint_column=_FINGERPRINT, sketch_column=_SKETCH if sketches else None
        )
        return queried.drop_columns(list(MATCH_COLUMNS[1:]))


@contextmanager
def _order_preserved() -> Iterator[None]:
    """Ray Data's ``preserve_order`` for the duration, the caller's after."""
    options = ray.data.DataContext.get_current().execution_options
    saved = options.preserve_order
    options.preserve_order = True
    try:
        yield
    finally:
        options.preserve_order = saved


def _ordered_blocks(ds: Any) -> list[Any]:
    """The Dataset executed, as Arrow block references in its order.

    Everything after this runs as Ray tasks on these references, not as
    Ray Data operators: Ray Data 2.60 gave the blocks of a ``map_batches``
    over a Parquet file out of order even with ``preserve_order`` (the
    file's second half first), which would change which row is "first".
    """
    with _order_preserved():
        return list(ds.to_arrow_refs())


def _checked_task_rows(task_rows: object) -> int:
    if isinstance(task_rows, bool) or not isinstance(task_rows, int) or task_rows < 1:
        raise InvalidValueError(f"task_rows must be a positive int, got {task_rows!r}")
    return task_rows


def _annotated(blocks: list[Any], step: Callable[[Any], Any], task_rows: int) -> list[Any]:
    """``step`` applied to every block, cut into slices of at most
    ``task_rows`` rows: the resulting blocks' references, in order."""
    counts = ray.get([_row_count.remote(block) for block in blocks])
    return [
        _annotate_slice.remote(step, block, start, min(task_rows, count - start))
        for block, count in zip(blocks, counts, strict=True)
        for start in range(0, count, task_rows)
    ]


@_remote
def _annotate_slice(step: Callable[[Any], Any], block: Any, start: int, rows: int) -> Any:
    return step(block.slice(start, rows))


@_remote
def _row_count(block: Any) -> int:
    return int(block.num_rows)


@_remote
def _searched_fingerprints(block: Any) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
    """``(fingerprints, searched)``: a block's fingerprints, and which of its
    rows take part in the search (all but those a stored document matched)."""
    fingerprints = block[_FINGERPRINT].to_numpy()
    unmatched = _unmatched(block)
    return np.where(unmatched, fingerprints, np.uint64(0)).astype(np.uint64), unmatched


def _unmatched(block: Any) -> npt.NDArray[np.bool_]:
    return np.asarray(block[MATCH_COLUMNS[0]].is_null().to_numpy(zero_copy_only=False), dtype=np.bool_)


# ----------------------------------------------------------- the pipeline


def _bucket_count(buckets: int | None, rows: int, tables: int) -> int:
    """Buckets of each shuffle: as asked, or about two per CPU, more when a
    bucket would otherwise receive over :data:`ENTRIES_PER_BUCKET` entries."""
    checked = _checked_buckets(buckets)
    if checked is None:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        return max(2 * cpus, -(-rows * tables // ENTRIES_PER_BUCKET), 1)
    return checked


def _checked_buckets(buckets: object) -> int | None:
    if buckets is not None and (isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1):
        raise InvalidValueError(f"buckets must be a positive int, got {buckets!r}")
    return buckets


def _fanout(function: Any, count: int) -> Any:
    """``function`` as a task with ``count`` returns."""
    return function.options(num_returns=count)


def _refs(result: Any, count: int) -> list[Any]:
    """A task's returns as a list (Ray gives one reference, not a list, for one)."""
    return [result] if count == 1 else list(result)


def _column_of(rows: list[Any], number: int) -> list[Any]:
    """The ``number``-th return of each task in ``rows``."""
    return [row[number] if isinstance(row, list) else row for row in rows]


def _returns(items: list[Any]) -> Any:
    """A task's ``items`` as Ray expects them for ``len(items)`` returns."""
    return items[0] if len(items) == 1 else items


def _forest(searched: list[Any], tables: tuple[Any, ...], k: int, buckets: int) -> Any:
    """The component forest of the searched fingerprints' pair graph."""
    scattered = [
        _refs(_fanout(_scatter_entries, buckets).remote(refs, tables, buckets), buckets) for refs in searched
    ]
    forests = [
        _bucket_forest.remote(tables, k, *[parts[bucket] for parts in scattered]) for bucket in range(buckets)
    ]
    while len(forests) > 1:
        forests = [
            _combine.remote(*forests[start : start + FOREST_FAN_IN])
            for start in range(0, len(forests), FOREST_FAN_IN)
        ]
    return forests[0]


@_remote
def _scatter_entries(searched: Any, tables: tuple[Any, ...], buckets: int) -> Any:
    fingerprints, unmatched = searched
    return _returns(scatter_entries(fingerprints[unmatched], tables, buckets))


@_remote
def _bucket_forest(tables: tuple[Any, ...], k: int, *parts: Any) -> tuple[Any, Any]:
    low, high, _ = bucket_edges(parts, tables, k)
    return edge_forest(low, high)


@_remote
def _combine(*forests: Any) -> tuple[Any, Any]:
    return combine_forests(*forests)


def _labelled(searched: list[Any], offsets: npt.NDArray[np.int64], forest: Any, buckets: int) -> list[Any]:
    """Per bucket of fingerprints, references to ``(positions, labels)``
    per block: the documents that may be in a cluster."""
    blocks = len(searched)
    scattered = [
        _refs(_fanout(_scatter_documents, buckets).remote(refs, int(offsets[number]), buckets), buckets)
        for number, refs in enumerate(searched)
    ]
    return [
        _refs(
            _fanout(_label, blocks).remote(forest, offsets, *[parts[bucket] for parts in scattered]),
            blocks,
        )
        for bucket in range(buckets)
    ]


@_remote
def _scatter_documents(searched: Any, offset: int, buckets: int) -> Any:
    fingerprints, unmatched = searched
    positions = np.flatnonzero(unmatched).astype(np.int64)
    return _returns(scatter_documents(fingerprints[positions], positions + offset, buckets))


@_remote
def _label(forest: Any, offsets: npt.NDArray[np.int64], *parts: Any) -> Any:
    positions, labels = label_documents(forest, parts)
    destination = np.searchsorted(offsets[1:], positions, side="right").astype(np.int64)
    return _returns(split_by(destination, len(offsets) - 1, positions, labels))


def _groups(
    blocks: list[Any],
    labelled: list[Any],
    offsets: npt.NDArray[np.int64],
    columns: tuple[str | None, str | None],
    groups: int,
) -> list[list[Any]]:
    """Per group, references to the rows each block sends it: the
    documents of the components whose label hashes to the group.
    ``columns`` are the id column and the order column (``None``: the
    position)."""
    picked = [
        _refs(
            _fanout(_pick_rows, groups).remote(
                block, int(offsets[number]), columns, groups, *_column_of(labelled, number)
            ),
            groups,
        )
        for number, block in enumerate(blocks)
    ]
    return [[parts[group] for parts in picked] for group in range(groups)]


@_remote
def _pick_rows(
    block: Any, offset: int, columns: tuple[str | None, str | None], groups: int, *parts: Any
) -> Any:
    id_column, order_column = columns
    positions = np.concatenate([part[0] for part in parts]).astype(np.int64)
    labels = np.concatenate([part[1] for part in parts]).astype(np.uint64)
    rows = positions - offset
    ids = pa.array(positions) if id_column is None else block[id_column].take(pa.array(rows))
    order = pa.array(positions) if order_column is None else block[order_column].take(pa.array(rows))
    table = pa.table(
        {
            "order": order,
            "position": pa.array(positions, pa.int64()),
            "label": pa.array(labels, pa.uint64()),
            "id": ids,
            "fingerprint": block[_FINGERPRINT].take(pa.array(rows)),
            "sketch": block[_SKETCH].take(pa.array(rows)),
            "length": block[_LENGTH].take(pa.array(rows)),
        }
    )
    destination = hash_buckets(labels, groups, salt=1)
    order = np.argsort(destination, kind="stable")
    bounds = np.searchsorted(destination[order], np.arange(groups + 1))
    return _returns([table.take(pa.array(order[bounds[g] : bounds[g + 1]])) for g in range(groups)])


@_remote
def _cluster_group(
    offsets: npt.NDArray[np.int64],
    settings: _StoreSettings,
    keep: str,
    linkage: str,
    id_column: str | None,
    *parts: Any,
) -> Any:
    """The provenance of one group of components' rows, by the single-machine
    code: their rows, in input order, in a store of their own, clustered."""
    rows = (
        pa.concat_tables(parts).sort_by([("order", "ascending"), ("position", "ascending")])
        if parts
        else None
    )
    blocks = len(offsets) - 1
    if rows is None or rows.num_rows == 0:
        return _returns([_empty_found() for _ in range(blocks)])
    positions = rows["position"].to_numpy()
    ids = rows["id"]
    found = _cluster_rows(rows, settings, keep, linkage)
    row_of = {int(position): index for index, position in enumerate(positions.tolist())}
    member_rows = np.array([row_of[position] for position in found["position"]], dtype=np.int64)
    representative_rows = [
        None if position is None else row_of[position] for position in found["representative"]
    ]
    duplicate_of = ids.take(pa.array(representative_rows, pa.int64()))
    table = pa.table(
        {
            "position": pa.array(positions[member_rows], pa.int64()),
            "cluster_id": pa.array(found["cluster_id"], pa.int64()),
            "duplicate_of": duplicate_of,
            "distance": pa.array(found["distance"], pa.int64()),
            "similarity": pa.array(found["similarity"], pa.float64()),
            "kept": pa.array(found["kept"], pa.bool_()),
            "cluster_size": pa.array(found["cluster_size"], pa.int64()),
        }
    )
    member_positions = table["position"].to_numpy()
    destination = np.searchsorted(offsets[1:], member_positions, side="right").astype(np.int64)
    order = np.argsort(destination, kind="stable")
    bounds = np.searchsorted(destination[order], np.arange(blocks + 1))
    return _returns([table.take(pa.array(order[bounds[b] : bounds[b + 1]])) for b in range(blocks)])


def _cluster_rows(rows: Any, settings: _StoreSettings, keep: str, linkage: str) -> dict[str, list[Any]]:
    """Each clustered row's figures, from a store of ``rows`` alone, keyed by position."""
    positions = rows["position"].to_pylist()
    fingerprints = rows["fingerprint"].to_numpy()
    sketches = None
    if settings.fingerprinter.sketch is not None:
        sketches = sketch_array(rows["sketch"])
    metas = None
    if keep == "longest":
        metas = [{"length": length} for length in rows["length"].to_pylist()]
    found: dict[str, list[Any]] = {
        name: [] for name in ("position", "cluster_id", "representative", "distance", "similarity")
    }
    found["kept"], found["cluster_size"] = [], []
    with (
        tempfile.TemporaryDirectory(prefix="simstore-ray-group-") as scratch,
        settings.open_scratch(os.path.join(scratch, "group.simstore")) as store,
    ):
        store.add_many(positions, fingerprints, metas=metas, sketches=sketches)
        clusters = store.clusters(
            settings.open_k,
            keep="first" if keep == "none" else keep,
            linkage=linkage,
            min_similarity=settings.threshold,
        )
        for cluster in clusters:
            representative = cluster.representative
            first = cluster.members[0]  # the first added: the first in the order
            for member, distance, similarity in member_provenance(store, cluster):
                found["position"].append(member)
                found["cluster_id"].append(first)
                found["representative"].append(None if member == representative else representative)
                found["distance"].append(distance)
                found["similarity"].append(similarity)
                found["kept"].append(member == representative and keep != "none")
                found["cluster_size"].append(cluster.size)
    return found


def _empty_found() -> Any:
    return pa.table(
        {
            "position": pa.array([], pa.int64()),
            "cluster_id": pa.array([], pa.int64()),
            "duplicate_of": pa.array([], pa.null()),
            "distance": pa.array([], pa.int64()),
            "similarity": pa.array([], pa.float64()),
            "kept": pa.array([], pa.bool_()),
            "cluster_size": pa.array([], pa.int64()),
        }
    )


@_remote
def _finish_block(
    block: Any, offset: int, id_column: str | None, internal: tuple[str, ...], *parts: Any
) -> tuple[Any, Any]:
    """A block's kept rows (its own columns only) and its provenance."""
    count = block.num_rows
    positions = np.arange(count, dtype=np.int64) + offset
    ids = pa.array(positions) if id_column is None else block[id_column]
    found = [part for part in parts if part.num_rows]
    cluster_id = np.full(count, -1, dtype=np.int64)
    distance = np.full(count, -1, dtype=np.int64)
    cluster_size = np.ones(count, dtype=np.int64)  # a row in no cluster is one of its own
    similarity = np.full(count, np.nan)
    judged = np.zeros(count, dtype=np.bool_)
    kept = np.ones(count, dtype=np.bool_)
    duplicate_of: list[Any] = [None] * count
    for part in found:
        rows = part["position"].to_numpy() - offset
        cluster_id[rows] = part["cluster_id"].to_numpy()
        distance[rows] = part["distance"].to_numpy()
        cluster_size[rows] = part["cluster_size"].to_numpy()
        values = part["similarity"]
        judged[rows] = values.is_valid().to_numpy(zero_copy_only=False)
        similarity[rows] = values.fill_null(np.nan).to_numpy()
        kept[rows] = part["kept"].to_numpy(zero_copy_only=False)
        for row, value in zip(rows.tolist(), part["duplicate_of"].to_pylist(), strict=True):
            duplicate_of[row] = value
    stored = block[MATCH_COLUMNS[0]]
    matched = np.asarray(stored.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    kept &= ~matched
    in_cluster = cluster_id >= 0
    provenance = pa.table(
        {
            "id": ids,
            "cluster_id": pa.array(cluster_id, mask=~in_cluster),
            "duplicate_of": pa.array(duplicate_of, type=ids.type),
            "distance": pa.array(distance, mask=~in_cluster),
            "similarity": pa.array(similarity, mask=~judged),
            # Null for a row the store matched (it was not clustered), as
            # the command line's --against and simstore.hf give it.
            "cluster_size": pa.array(cluster_size, mask=matched & ~in_cluster),
            "kept": pa.array(kept),
            "stored_match": stored,
        }
    )
    own = [name for name in block.column_names if name not in internal]
    return block.select(own).filter(pa.array(kept)), provenance


# ------------------------------------------------------------------- pairs


def near_duplicate_pairs(
    ds: Any,
    key_column: str = "key",
    fingerprint_column: str = "fingerprint",
    k: int = 5,
    layout: Any = None,
    *,
    buckets: int | None = None,
) -> Any:
    """Every pair of rows whose fingerprints are within ``k`` bits, each once:
    the pairs :meth:`simstore.Store.near_duplicate_pairs` gives for a store of
    the same rows added in order (without sketches).

    Args:
        ds: a ``ray.data.Dataset`` with a key and a fingerprint column
            (unsigned ints; see :func:`simstore.io.arrow_batches.fingerprint_batch`).
        k: the largest distance reported.
        layout: the permutation tables (a :class:`simstore.Layout` or a
            sequence of :class:`simstore.Table`); by default the one-level
            layout :func:`simstore.index.prefix_shuffle.batch_tables` picks for the
            Dataset's size. Each table costs 8 bytes per distinct fingerprint
            in the shuffle.
        buckets: tasks of each shuffle (see :func:`dedup_dataset`).

    Returns:
        A Ray Dataset with ``key_a`` (the earlier row's key), ``key_b`` and
        ``distance``, in no particular order.
    """
    _check_dataset(ds, [key_column, fingerprint_column])
    _checked_buckets(buckets)
    blocks = _ordered_blocks(ds)
    counts = ray.get([_row_count.remote(block) for block in blocks])
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
    k, tables = _tables(k, layout, int(offsets[-1]))
    bucket_count = _bucket_count(buckets, int(offsets[-1]), len(tables))
    fingerprints = [_block_fingerprints.remote(block, fingerprint_column) for block in blocks]
    scattered = [
        _refs(_fanout(_scatter_entries, bucket_count).remote(refs, tables, bucket_count), bucket_count)
        for refs in fingerprints
    ]
    edges = [
        _fanout(_bucket_edges, bucket_count).remote(
            tables, k, bucket_count, *[parts[b] for parts in scattered]
        )
        for b in range(bucket_count)
    ]
    edges = [_refs(result, bucket_count) for result in edges]
    documents = [
        _refs(
            _fanout(_scatter_documents, bucket_count).remote(refs, int(offsets[n]), bucket_count),
            bucket_count,
        )
        for n, refs in enumerate(fingerprints)
    ]
    document_parts = [[parts[b] for parts in documents] for b in range(bucket_count)]
    halves = [
        _fanout(_expand_left, bucket_count + 1).remote(
            bucket_count, len(document_parts[b]), *document_parts[b], *[edge[b] for edge in edges]
        )
        for b in range(bucket_count)
    ]
    pairs = [
        _expand_right.remote(len(document_parts[b]), *document_parts[b], *[half[b] for half in halves])
        for b in range(bucket_count)
    ]
    pairs.extend(half[bucket_count] for half in halves)
    with_keys = _with_keys(pairs, blocks, offsets, key_column)
    return ray.data.from_arrow_refs(with_keys)


def _tables(k: object, layout: Any, total: int) -> tuple[int, tuple[Any, ...]]:
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 64:
        raise InvalidValueError(f"k must be an int in 0..64, got {k!r}")
    if layout is None:
        return k, tuple(batch_tables(k, total))
    tables = tuple(getattr(layout, "tables", layout))
    if not all(isinstance(table, Table) for table in tables):
        raise InvalidTypeError("layout must be a simstore.Layout or a sequence of simstore.Table")
    return k, tables


@_remote
def _block_fingerprints(block: Any, column: str) -> Any:
    values = block[column]
    if values.null_count or not pa.types.is_integer(values.type):
        raise InvalidTypeError(f"column {column!r} must hold fingerprints (unsigned ints), without nulls")
    fingerprints = values.to_numpy().astype(np.uint64)
    return fingerprints, np.ones(len(fingerprints), dtype=np.bool_)


@_remote
def _bucket_edges(tables: tuple[Any, ...], k: int, buckets: int, *parts: Any) -> Any:
    low, high, distance = bucket_edges(parts, tables, k)
    destination = hash_buckets(low, buckets)
    return _returns([(a, b, d) for a, b, d in split_by(destination, buckets, low, high, distance)])


@_remote
def _expand_left(buckets: int, document_count: int, *parts: Any) -> Any:
    documents, edges = parts[:document_count], parts[document_count:]
    (left, high, distance), (shared_a, shared_b) = expand_left(documents, edges)
    routed = split_by(hash_buckets(high, buckets), buckets, left, high, distance)
    same = (shared_a, shared_b, np.zeros(len(shared_a), np.uint8))
    return [*[tuple(part) for part in routed], same]


@_remote
def _expand_right(document_count: int, *parts: Any) -> Any:
    documents, halves = parts[:document_count], parts[document_count:]
    return expand_right(documents, halves)


def _with_keys(
    pairs: list[Any], blocks: list[Any], offsets: npt.NDArray[np.int64], key_column: str
) -> list[Any]:
    """Each pair of positions with its two rows' keys: the pairs travel (twice)
    to the groups of blocks holding their rows; the rows stay where they are.

    Blocks are taken in a few contiguous groups (about two per CPU), so that
    the pairs' routing makes pairs-sources x groups and groups x groups
    objects, not blocks x blocks.
    """
    cpus = int(ray.cluster_resources().get("CPU", 1))
    starts = [int(part[0]) for part in np.array_split(np.arange(len(blocks)), min(len(blocks), 2 * cpus))]
    bounds = [*starts, len(blocks)]
    group_offsets = offsets[bounds]
    count = len(starts)
    routed = [_refs(_fanout(_route, count).remote(group_offsets, pair), count) for pair in pairs]
    members = [blocks[bounds[g] : bounds[g + 1]] for g in range(count)]
    with_a = [
        _refs(
            _fanout(_add_key, count).remote(
                len(members[g]),
                int(group_offsets[g]),
                key_column,
                0,
                group_offsets,
                *members[g],
                *_column_of(routed, g),
            ),
            count,
        )
        for g in range(count)
    ]
    return [
        _add_key.remote(
            len(members[g]), int(group_offsets[g]), key_column, 1, None, *members[g], *_column_of(with_a, g)
        )
        for g in range(count)
    ]


@_remote
def _route(offsets: npt.NDArray[np.int64], pair: Any) -> Any:
    first, second, distance = pair
    destination = np.searchsorted(offsets[1:], first, side="right").astype(np.int64)
    parts = split_by(destination, len(offsets) - 1, first, second, distance)
    return _returns([pa.table({"a": a, "b": b, "distance": d}) for a, b, d in parts])


@_remote
def _add_key(
    block_count: int,
    offset: int,
    key_column: str,
    side: int,
    offsets: npt.NDArray[np.int64] | None,
    *blocks_and_parts: Any,
) -> Any:
    """The pairs whose row ``side`` is in this group of blocks (the first
    ``block_count`` arguments, whose first row is at ``offset``), with that
    row's key (``key_a`` or ``key_b``); then routed on to the group of the
    other row (``offsets`` given) or finished."""
    blocks, parts = blocks_and_parts[:block_count], blocks_and_parts[block_count:]
    table = pa.concat_tables(parts, promote_options="default")
    column = ("a", "b")[side]
    keys = pa.chunked_array([block[key_column].combine_chunks() for block in blocks])
    rows = table[column].to_numpy() - offset
    table = table.append_column(f"key_{column}", keys.take(pa.array(rows, pa.int64())))
    if offsets is None:
        return table.select(["key_a", "key_b", "distance"])
    destination = np.searchsorted(offsets[1:], table["b"].to_numpy(), side="right").astype(np.int64)
    count = len(offsets) - 1
    order = np.argsort(destination, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(destination, minlength=count))))
    return _returns([table.take(pa.array(order[bounds[n] : bounds[n + 1]])) for n in range(count)])


# ------------------------------------------------------------------ helpers


def _check_dataset(ds: object, columns: Sequence[str]) -> None:
    if not isinstance(ds, ray.data.Dataset):
        raise InvalidTypeError(f"expected a ray.data.Dataset, got {type(ds).__name__}")
    names = ds.schema().names
    for column in columns:
        if column not in names:
            raise InvalidValueError(f"no column {column!r}; the Dataset has {names}")


def _paths(against: Any) -> list[str]:
    if isinstance(against, str | bytes | os.PathLike):
        return [os.fsdecode(against)]
    paths = [os.fspath(path) for path in against]
    if not paths:
        raise InvalidValueError("against= needs at least one store path")
    return paths
