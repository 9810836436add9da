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
from collections.abc import Sequence
from typing import Any

import numpy as np

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.io.tables import check_keep
from simstore.ray._dedup import (
    _Annotate,
    _annotated,
    _band_entries,
    _band_forest,
    _checked_task_rows,
    _cluster_group,
    _cluster_rows_of,
    _finish_block,
    _groups,
    _ordered_blocks,
    _row_count,
    _searched_fingerprints,
    _SearchedColumns,
    _StoreSettings,
)
from simstore.ray._requires import RayMissingError, ray
from simstore.ray._search import (
    _INTERNAL,
    _block_fingerprints,
    _bucket_count,
    _bucket_edges,
    _checked_buckets,
    _column_of,
    _expand_left,
    _expand_right,
    _fanout,
    _forest,
    _labelled,
    _refs,
    _scatter_documents,
    _scatter_entries,
    _tables,
    _with_keys,
)
from simstore.store.arguments import check_flag

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
    bands: bool = True,
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
        bands: pair rows whose sketches share a band too, as
            :func:`simstore.dedup_table` does (by default, where a threshold
            applies): one more shuffle sends each row's band keys
            (about 20, 16 bytes each) to the bucket the key hashes to, and
            rows sharing one join one component.

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
    settings = _StoreSettings.probe(k, min_similarity, against_paths, check_flag("bands", bands))
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
    more = []
    if settings.banded:
        # Rows sharing a band join one component, so that each component's
        # clustering, with bands, sees every pair the whole corpus's would.
        entries = [
            _refs(
                _fanout(_band_entries, bucket_count).remote(block, settings.fingerprinter, bucket_count),
                bucket_count,
            )
            for block in blocks
        ]
        more = [_band_forest.remote(*[parts[b] for parts in entries]) for b in range(bucket_count)]
    forest = _forest(fingerprints, tables, settings.k, bucket_count, more)
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


# ----------------------------------------------------------- the pipeline


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
