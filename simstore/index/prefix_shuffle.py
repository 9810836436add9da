"""The steps of a distributed pair search that moves fingerprints, not rows.

Manku's batch mode needs, for every permutation table, the fingerprints that
share the table's leading prefix side by side. A dataframe shuffle of one row
per (document, table) moves every entry with its key, position and table
number through pandas and Arrow (hundreds of bytes a document). Here a block
sends each *distinct* fingerprint of its own once per table, as a bare
``uint64``, to the bucket its (table, prefix) hashes to: 8 bytes per table
and distinct fingerprint. A bucket task finds the pairs of distinct
fingerprints within ``k`` bits among what it received, keeping a pair only
in the first table whose prefix it shares (as :mod:`simstore.index.pairs` does),
so every pair of fingerprints comes out of exactly one bucket.

Documents come back in only where a pair needs them: a second shuffle sends
``(fingerprint, position)`` (16 bytes a document) to the bucket its
fingerprint hashes to, where the pairs of fingerprints are joined to the
positions holding them.

Every function is a pure function of numpy arrays (no I/O, no engine), so
:mod:`simstore.ray` wires them into Ray tasks and another engine could wire
them into its own. Positions are global row numbers in input order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from simstore.index.clusters import components
from simstore.index.pairs import prefix_masks, run_pairs
from simstore.index.permute import FINGERPRINT_BITS, MAX_TABLES, Table, block_sizes, one_level_tables
from simstore.index.ranges import expand_ranges

__all__ = [
    "Edges",
    "batch_tables",
    "bucket_edges",
    "bucket_forest",
    "combine_forests",
    "edge_forest",
    "expand_left",
    "expand_right",
    "hash_buckets",
    "label_documents",
    "routed_edges",
    "scatter_documents",
    "scatter_entries",
    "sorted_distinct",
    "split_by",
    "unpermute_array",
]

U64Array = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
#: Pairs of distinct fingerprints ``(low, high, distance)``, ``low < high``.
Edges = tuple[U64Array, U64Array, npt.NDArray[np.uint8]]

_MIX = np.uint64(0x9E3779B97F4A7C15)
_TABLE_SALT = 0xBF58476D1CE4E5B9
_MASK64 = (1 << 64) - 1


def hash_buckets(values: U64Array, buckets: int, salt: int = 0) -> IntArray:
    """The bucket (``0 .. buckets - 1``) of each value: a multiplicative hash,
    so that prefixes and fingerprints spread evenly whatever their bits."""
    mixed = (np.asarray(values, dtype=np.uint64) ^ np.uint64(salt & _MASK64)) * _MIX
    return ((mixed >> np.uint64(32)) % np.uint64(buckets)).astype(np.int64)


def sorted_distinct(values: U64Array) -> U64Array:
    """The distinct values, ascending: a sort and a comparison, several
    times faster for uint64 than :func:`numpy.unique` (whose hash table
    numpy 2.3+ uses there).

    >>> sorted_distinct(np.array([3, 1, 3], dtype=np.uint64)).tolist()
    [1, 3]
    """
    ordered = np.sort(np.asarray(values, dtype=np.uint64))
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def split_by(destination: IntArray, count: int, *arrays: npt.NDArray[np.generic]) -> list[list[np.ndarray]]:
    """``arrays`` cut into ``count`` parts by ``destination`` (one per
    element), each part in the input's order.

    >>> [[a.tolist() for a in part] for part in split_by(np.array([1, 0, 1]), 2, np.array([5, 6, 7]))]
    [[[6]], [[5, 7]]]
    """
    # Few destinations: a narrow dtype makes numpy's stable sort a radix sort.
    narrow = destination.astype(np.uint8 if count <= 1 << 8 else np.uint16 if count <= 1 << 16 else np.int64)
    order = np.argsort(narrow, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(destination, minlength=count))))
    parts: list[list[np.ndarray]] = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        chosen = order[start:end]
        parts.append([array[chosen] for array in arrays])
    return parts


# -------------------------------------------------------------- the search


def batch_tables(k: int, count: int) -> list[Table]:
    """The one-level layout for a batch search of ``count`` fingerprints
    within ``k`` bits that costs least by a simple model.

    Each table costs a sort of every entry (about ``log2(count)`` steps an
    entry) and one comparison per pair of entries in a run of equal
    prefixes (``count / 2**prefix_bits`` entries a run): more blocks mean
    longer prefixes, shorter runs and more tables. The planner behind
    :func:`simstore.best_layout` weighs a *store's* query time instead,
    which favours many tables (56 for k = 5 at a million documents, where
    this search needs 21).

    >>> len(batch_tables(5, 1_000_000)), len(batch_tables(3, 1_000_000))
    (21, 4)
    """
    best_cost, best_blocks = math.inf, k + 1
    for blocks in range(k + 1, FINGERPRINT_BITS + 1):
        table_count = math.comb(blocks, k)
        if table_count > MAX_TABLES:
            break
        prefix_bits = sum(sorted(block_sizes(blocks))[: blocks - k])
        cost = table_count * (math.log2(max(count, 2)) + count / 2.0**prefix_bits)
        if cost < best_cost:
            best_cost, best_blocks = cost, blocks
    return one_level_tables(k, best_blocks)


def scatter_entries(fingerprints: U64Array, tables: Sequence[Table], buckets: int) -> list[U64Array]:
    """One block's table entries, cut into ``buckets`` parts.

    Part ``b`` is one ``uint64`` array: ``len(tables)`` counts, then the
    permuted keys (``table.permute_array``) of the block's distinct
    fingerprints whose (table, prefix) hashes to ``b``, table after table
    (``counts[t]`` of table ``t``).
    """
    distinct = sorted_distinct(fingerprints)
    per_bucket: list[list[U64Array]] = [[] for _ in range(buckets)]
    counts = np.zeros((buckets, len(tables)), dtype=np.uint64)
    for index, table in enumerate(tables):
        permuted = table.permute_array(distinct)
        destination = hash_buckets(
            permuted >> np.uint64(table.suffix_bits), buckets, salt=index * _TABLE_SALT
        )
        for bucket, (values,) in enumerate(split_by(destination, buckets, permuted)):
            per_bucket[bucket].append(values)
            counts[bucket, index] = len(values)
    return [np.concatenate([counts[bucket], *per_bucket[bucket]]) for bucket in range(buckets)]


def bucket_edges(parts: Sequence[U64Array], tables: Sequence[Table], k: int) -> Edges:
    """The pairs of distinct fingerprints within ``k`` bits among one
    bucket's entries (``parts`` from :func:`scatter_entries`), each pair
    only in the first table whose prefix it shares.

    One sort per table: the permuted keys sorted are grouped by prefix with
    equal keys adjacent. A bit permutation keeps Hamming distances, and an
    earlier table's prefix test is its mask permuted the same way, so the
    comparison runs on the permuted keys; only the pairs found are turned
    back into fingerprints.
    """
    table_count = len(tables)
    masks = prefix_masks(tables)
    offsets = [table_count] * len(parts)
    lows: list[U64Array] = []
    highs: list[U64Array] = []
    distances: list[npt.NDArray[np.uint8]] = []
    for index, table in enumerate(tables):
        pieces = []
        for number, part in enumerate(parts):
            count = int(part[index])
            pieces.append(part[offsets[number] : offsets[number] + count])
            offsets[number] += count
        keys = sorted_distinct(np.concatenate(pieces)) if pieces else np.zeros(0, dtype=np.uint64)
        if len(keys) < 2:
            continue
        prefixes = keys >> np.uint64(table.suffix_bits)
        earlier = [table.permute(mask) for mask in masks[:index]]
        for left, right, distance in run_pairs(prefixes, keys, k, earlier):
            first, second = unpermute_array(table, keys[left]), unpermute_array(table, keys[right])
            lows.append(np.minimum(first, second))
            highs.append(np.maximum(first, second))
            distances.append(distance.astype(np.uint8))
    if not lows:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint8)
    return np.concatenate(lows), np.concatenate(highs), np.concatenate(distances)


def routed_edges(parts: Sequence[U64Array], tables: Sequence[Table], k: int, buckets: int) -> list[Edges]:
    """One bucket's :func:`bucket_edges`, cut by the bucket their ``low``
    fingerprint hashes to (where the documents holding it are joined)."""
    low, high, distance = bucket_edges(parts, tables, k)
    routed = split_by(hash_buckets(low, buckets), buckets, low, high, distance)
    return [(part[0], part[1], part[2]) for part in routed]


def bucket_forest(parts: Sequence[U64Array], tables: Sequence[Table], k: int) -> tuple[U64Array, U64Array]:
    """The component forest (:func:`edge_forest`) of one bucket's pairs of
    fingerprints."""
    low, high, _ = bucket_edges(parts, tables, k)
    return edge_forest(low, high)


def unpermute_array(table: Table, permuted: U64Array) -> U64Array:
    """The fingerprints whose permuted keys are ``permuted`` (vectorised
    :meth:`Table.unpermute`)."""
    fingerprints = np.zeros(permuted.shape, dtype=np.uint64)
    for source_shift, mask, target_shift in table.runs:
        fingerprints |= ((permuted >> np.uint64(target_shift)) & np.uint64(mask)) << np.uint64(source_shift)
    return fingerprints


# ------------------------------------------------------------- components


def edge_forest(low: U64Array, high: U64Array) -> tuple[U64Array, U64Array]:
    """``(nodes, roots)``: every fingerprint of an edge, ascending, and the
    smallest fingerprint of its connected component."""
    nodes = sorted_distinct(np.concatenate([low, high]))
    if not len(nodes):
        return nodes, nodes
    labels = components(len(nodes), np.searchsorted(nodes, low), np.searchsorted(nodes, high))
    return nodes, nodes[labels]


def combine_forests(*forests: tuple[U64Array, U64Array]) -> tuple[U64Array, U64Array]:
    """The forest of the union of several forests' components."""
    nodes = [forest[0] for forest in forests]
    roots = [forest[1] for forest in forests]
    if not nodes:
        empty = np.zeros(0, np.uint64)
        return empty, empty
    return edge_forest(np.concatenate(nodes), np.concatenate(roots))


# ------------------------------------------------------------- documents


def scatter_documents(fingerprints: U64Array, positions: IntArray, buckets: int) -> list[list[np.ndarray]]:
    """``[fingerprints, positions]`` of one block, cut by the bucket each fingerprint hashes to."""
    return split_by(hash_buckets(fingerprints, buckets), buckets, fingerprints, positions)


def label_documents(
    forest: tuple[U64Array, U64Array], parts: Sequence[Sequence[np.ndarray]]
) -> tuple[IntArray, U64Array]:
    """``(positions, labels)`` of the documents of one bucket that may be in
    a cluster: those whose fingerprint is in an edge (labelled by its
    component's root) and those sharing their fingerprint with another
    document (labelled by the fingerprint). Others are left out."""
    fingerprints = np.concatenate([part[0] for part in parts]).astype(np.uint64)
    positions = np.concatenate([part[1] for part in parts]).astype(np.int64)
    nodes, roots = forest
    where = np.searchsorted(nodes, fingerprints)
    inside = where < len(nodes)
    inside[inside] = nodes[where[inside]] == fingerprints[inside]
    ordered = np.sort(fingerprints)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    shared = np.isin(fingerprints, repeated) if len(repeated) else np.zeros(len(fingerprints), np.bool_)
    chosen = inside | shared
    labels = fingerprints.copy()
    labels[inside] = roots[where[inside]]
    return positions[chosen], labels[chosen]


def expand_left(
    parts: Sequence[Sequence[np.ndarray]], edges: Sequence[Edges]
) -> tuple[tuple[IntArray, U64Array, npt.NDArray[np.uint8]], tuple[IntArray, IntArray]]:
    """The first half of joining pairs of fingerprints to documents.

    Args:
        parts: ``[fingerprints, positions]`` of the documents whose
            fingerprint hashes to this bucket.
        edges: pairs of fingerprints whose ``low`` hashes to this bucket.

    Returns:
        ``((position of low, high, distance), (position_a, position_b))``:
        each edge once per document holding its ``low``, and the pairs of
        documents that share a fingerprint (``position_a < position_b``,
        distance 0).
    """
    fingerprints = np.concatenate([part[0] for part in parts]).astype(np.uint64)
    positions = np.concatenate([part[1] for part in parts]).astype(np.int64)
    order = np.lexsort((positions, fingerprints))
    fingerprints, positions = fingerprints[order], positions[order]
    low = np.concatenate([edge[0] for edge in edges]) if edges else np.zeros(0, np.uint64)
    high = np.concatenate([edge[1] for edge in edges]) if edges else np.zeros(0, np.uint64)
    distance = np.concatenate([edge[2] for edge in edges]) if edges else np.zeros(0, np.uint8)
    edge_index, document = _join(fingerprints, low)
    expanded = (positions[document], high[edge_index], distance[edge_index])
    return expanded, _shared_pairs(fingerprints, positions)


def expand_right(
    parts: Sequence[Sequence[np.ndarray]], halves: Sequence[tuple[IntArray, U64Array, npt.NDArray[np.uint8]]]
) -> tuple[IntArray, IntArray, npt.NDArray[np.uint8]]:
    """The second half: ``(position_a, position_b, distance)`` with
    ``position_a < position_b``, from :func:`expand_left`'s first output
    routed by the bucket of ``high``."""
    fingerprints = np.concatenate([part[0] for part in parts]).astype(np.uint64)
    positions = np.concatenate([part[1] for part in parts]).astype(np.int64)
    order = np.argsort(fingerprints, kind="stable")
    fingerprints, positions = fingerprints[order], positions[order]
    left = np.concatenate([half[0] for half in halves]) if halves else np.zeros(0, np.int64)
    high = np.concatenate([half[1] for half in halves]) if halves else np.zeros(0, np.uint64)
    distance = np.concatenate([half[2] for half in halves]) if halves else np.zeros(0, np.uint8)
    edge_index, document = _join(fingerprints, high)
    first, second = left[edge_index], positions[document]
    return np.minimum(first, second), np.maximum(first, second), distance[edge_index]


def _join(sorted_values: U64Array, wanted: U64Array) -> tuple[IntArray, IntArray]:
    """``(index into wanted, index into sorted_values)`` of every equal pair."""
    starts = np.searchsorted(sorted_values, wanted, side="left")
    ends = np.searchsorted(sorted_values, wanted, side="right")
    positions, edge_index = expand_ranges(starts, ends - starts)
    return edge_index, positions


def _shared_pairs(fingerprints: U64Array, positions: IntArray) -> tuple[IntArray, IntArray]:
    """Every pair of positions holding the same fingerprint (sorted by
    fingerprint, then position), earlier position first."""
    lefts: list[IntArray] = []
    rights: list[IntArray] = []
    count = len(fingerprints)
    offset = 1
    active = np.flatnonzero(fingerprints[1:] == fingerprints[:-1]) if count > 1 else np.zeros(0, np.int64)
    while active.size:
        lefts.append(positions[active])
        rights.append(positions[active + offset])
        offset += 1
        active = active[active + offset < count]
        active = active[fingerprints[active] == fingerprints[active + offset]]
    empty = np.zeros(0, np.int64)
    return (np.concatenate(lefts) if lefts else empty), (np.concatenate(rights) if rights else empty)
