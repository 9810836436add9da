"""The pair search of :mod:`simstore.ray` as Ray tasks: fingerprints scattered to
(table, prefix) buckets, each bucket's pairs, connected components as forests
combined in a tree, and the pairs of rows turned back into keys (the steps of
:mod:`simstore.index.prefix_shuffle`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.index.permute import Table, validate_k
from simstore.index.prefix_shuffle import (
    batch_tables,
    bucket_forest,
    combine_forests,
    expand_left,
    expand_right,
    hash_buckets,
    label_documents,
    routed_edges,
    scatter_documents,
    scatter_entries,
    split_by,
)
from simstore.io.arrow_batches import MATCH_COLUMNS
from simstore.layout.choose import layout_tables
from simstore.ray._requires import pa, ray

if TYPE_CHECKING:
    pass


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


def _forest(
    searched: list[Any], tables: tuple[Any, ...], k: int, buckets: int, more: Sequence[Any] = ()
) -> Any:
    """The component forest of the searched fingerprints' pair graph, joined
    with the forests ``more`` (references)."""
    scattered = [
        _refs(_fanout(_scatter_entries, buckets).remote(refs, tables, buckets), buckets) for refs in searched
    ]
    forests = [
        _bucket_forest.remote(tables, k, *[parts[bucket] for parts in scattered]) for bucket in range(buckets)
    ]
    forests += list(more)
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
    return bucket_forest(parts, tables, k)


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


def _tables(k: object, layout: Any, total: int) -> tuple[int, tuple[Table, ...]]:
    """``k``, checked as every other call checks it, and the search's tables:
    ``layout``'s, checked to find every pair within ``k``, or the ones
    :func:`batch_tables` picks for ``total`` fingerprints."""
    checked = validate_k(k)
    if layout is None:
        return checked, tuple(batch_tables(checked, total))
    _, tables, _ = layout_tables(layout, checked)
    return checked, tables


@_remote
def _block_fingerprints(block: Any, column: str) -> Any:
    values = block[column]
    if values.null_count or not pa.types.is_integer(values.type):
        raise InvalidTypeError(f"column {column!r} must hold fingerprints (unsigned ints), without nulls")
    fingerprints = values.to_numpy().astype(np.uint64)
    return fingerprints, np.ones(len(fingerprints), dtype=np.bool_)


@_remote
def _bucket_edges(tables: tuple[Any, ...], k: int, buckets: int, *parts: Any) -> Any:
    return _returns(routed_edges(parts, tables, k, buckets))


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
