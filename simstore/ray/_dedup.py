"""The dedup of :mod:`simstore.ray` as Ray tasks: the input's blocks in order,
fingerprinted (and matched against a store) in slices, each connected component of
the pair graph clustered by the single-machine code, and each block's kept rows and
provenance."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.index.prefix_shuffle import edge_forest, hash_buckets, split_by
from simstore.index.shared_keys import key_star_edges
from simstore.io.arrow_batches import MATCH_COLUMNS, fingerprint_batch, query_batch, sketch_array
from simstore.io.tables import member_provenance
from simstore.ray._requires import pa, ray
from simstore.ray._search import (
    _FINGERPRINT,
    _INTERNAL,
    _LENGTH,
    _SKETCH,
    _column_of,
    _fanout,
    _refs,
    _remote,
    _returns,
)
from simstore.store.opening import open as open_store
from simstore.store.sharded import ShardedStore

if TYPE_CHECKING:
    from simstore.store.facade import Store


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
        self,
        k: int,
        fingerprinter: Fingerprinter,
        open_k: int | None,
        threshold: float | None,
        bands: bool = True,
    ) -> None:
        self.k = k
        self.fingerprinter = fingerprinter
        self.open_k = open_k
        self.threshold = threshold
        #: As asked, for ``Store.clusters``.
        self.bands = bands
        #: Whether a store made so pairs by bands: the pair graph needs their links.
        self.banded = False

    @classmethod
    def probe(
        cls,
        k: int | None,
        min_similarity: float | None,
        against: list[str] | None,
        bands: bool = True,
    ) -> _StoreSettings:
        fingerprinter = None
        if against is not None:
            with ShardedStore(against) as stored:
                fingerprinter = stored.shards[0].fingerprinter
        with tempfile.TemporaryDirectory(prefix="simstore-ray-") as scratch:
            options: dict[str, Any] = {
                "k": k,
                "min_similarity": min_similarity,
                "sync": False,
                "bands": False,
            }
            if fingerprinter is not None:
                options["fingerprinter"] = fingerprinter
            with open_store(os.path.join(scratch, "probe.simstore"), "n", **options) as store:
                settings = cls(k if k is not None else store.k, store.fingerprinter, k, min_similarity, bands)
                threshold = min_similarity if min_similarity is not None else store.min_similarity
                settings.banded = bool(bands) and store.sketch is not None and threshold is not None
                return settings

    def open_scratch(self, path: str) -> Store:
        """A new store at ``path`` as :func:`simstore.dedup_table` would make it."""
        return open_store(
            path,
            "n",
            k=self.open_k,
            min_similarity=self.threshold,
            fingerprinter=self.fingerprinter,
            sync=False,
            bands=False,  # as dedup_table's: pairs and clusters band every sketch themselves
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


@_remote
def _band_entries(block: Any, fingerprinter: Fingerprinter, buckets: int) -> Any:
    """Per bucket, ``[keys, fingerprints]`` of the band keys of a block's
    searched rows (:mod:`simstore.fingerprinting.bands`), each sent to the
    bucket its key hashes to."""
    sketch = fingerprinter.sketch
    assert sketch is not None  # (bands apply only where sketches are made)
    searched = np.flatnonzero(_unmatched(block))
    rows = sketch_array(block[_SKETCH].take(pa.array(searched, pa.int64())))
    keyed = band_keys(rows, sketch)
    fingerprints = block[_FINGERPRINT].to_numpy()[searched[keyed.rows]]
    return _returns(split_by(hash_buckets(keyed.keys, buckets, salt=2), buckets, keyed.keys, fingerprints))


@_remote
def _band_forest(*parts: Any) -> tuple[Any, Any]:
    """The component forest of the fingerprints sharing a band key in one
    bucket's ``parts`` (from :func:`_band_entries`): a superset of the pairs
    by bands, which the single-machine clustering then judges."""
    keys = np.concatenate([part[0] for part in parts]).astype(np.uint64)
    fingerprints = np.concatenate([part[1] for part in parts]).astype(np.uint64)
    return edge_forest(*key_star_edges(keys, fingerprints))


def _unmatched(block: Any) -> npt.NDArray[np.bool_]:
    return np.asarray(block[MATCH_COLUMNS[0]].is_null().to_numpy(zero_copy_only=False), dtype=np.bool_)


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
            bands=settings.bands,
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
