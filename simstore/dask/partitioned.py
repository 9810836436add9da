"""The steps of corpus-scale dedup on Dask, as pure functions.

:mod:`simstore.dask` wires these into ``dask.delayed`` tasks over the input
partitions; each is a pure function of pandas partitions and numpy arrays (no
I/O, no Dask), so the tests check them against the single-machine code
directly. The pair search itself is :mod:`simstore.index.prefix_shuffle`'s,
as on Ray: only bare fingerprints cross the first shuffle, and
``(fingerprint, position)`` the second.

Rows are identified by a *position*: ``(partition number << 40) + row within
the partition``. It orders rows as the input orders them (so "the first
added" means the same as for one store filled in input order), it is the same
when a lost partition is recomputed, it needs no pass over the data to
count rows, and it names the partition that holds the row, so that pairs
travel to their rows and the rows never move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from simstore.errors import InvalidValueError
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard, sketch_rows
from simstore.index import prefix_shuffle
from simstore.index.pairs import IntArray
from simstore.index.permute import Table, U64Array, as_fingerprint_array
from simstore.index.prefix_shuffle import (
    Edges,
    edge_forest,
    expand_left,
    expand_right,
    hash_buckets,
    label_documents,
    scatter_documents,
    scatter_entries,
    split_by,
)
from simstore.index.shared_keys import pairs_beyond_k
from simstore.keys import Key, pack_key, unpack_key
from simstore.results import Record
from simstore.store.dedup import KeepPolicy, choose_representative

#: Bits of a position that number the row within its partition.
ROW_BITS = 40

#: One row per (document, table), as the per-entry shuffle that
#: :func:`table_entries` fed moved them (``benchmarks/suite/bench_dask.py``
#: still measures its size).
ENTRY_COLUMNS = {"table": "uint16", "prefix": "uint64", "fingerprint": "uint64", "position": "int64"}
#: One row per member of a cluster with more than one member.
CLUSTER_COLUMNS = {
    "cluster_id": "int64",
    "position": "int64",
    "key": "object",
    "representative": "object",
    "distance": "int64",
    "similarity": "float64",
}

#: Named arrays of equal length: the rows of a part of pairs or members.
Columns = dict[str, np.ndarray]
#: ``(nodes, roots)``: fingerprints and their component's smallest fingerprint.
Forest = tuple[U64Array, U64Array]


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty frame with these columns and dtypes (Dask's ``meta``)."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


def positions(partition_number: int, rows: int) -> IntArray:
    """The positions of the ``rows`` rows of partition ``partition_number``."""
    if rows >= 1 << ROW_BITS:
        raise InvalidValueError(f"a partition holds {rows} rows; at most 2**{ROW_BITS} are supported")
    if partition_number >= 1 << (63 - ROW_BITS):
        raise InvalidValueError(f"partition number {partition_number} is too large")
    return np.arange(rows, dtype=np.int64) + (partition_number << ROW_BITS)


def checked_fingerprints(values: Any, column: str) -> U64Array:
    """A column of fingerprints as uint64, checked like every fingerprint
    simstore accepts (0 .. 2**64 - 1, no missing values)."""
    try:
        return as_fingerprint_array(np.asarray(values))
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"column {column!r}: {exc}") from exc


def pack_keys(keys: pd.Series) -> pd.Series:
    """Keys as their msgpack encoding, the store's own: bytes, one type that
    Arrow (and so Dask's shuffle) carries whatever mix of str, bytes and int
    the keys are, and that decodes back to exactly the keys given."""
    packed = [pack_key(plain_key(key)) for key in keys.tolist()]
    return pd.Series(packed, index=keys.index, dtype=object)


def plain_key(key: Any) -> Any:
    """A key as the store would give it back (numpy ints as Python ints)."""
    return key.item() if isinstance(key, np.generic) else key


def unpack_keys(packed: pd.Series) -> list[Key]:
    """The keys :func:`pack_keys` encoded."""
    return [unpack_key(value) for value in packed.tolist()]


def table_entries(fingerprints: U64Array, row_positions: IntArray, tables: Sequence[Table]) -> pd.DataFrame:
    """One row per (document, table) with the table's leading prefix of the
    document's permuted fingerprint, as the per-entry shuffle moved them
    before the pair search moved bare fingerprints
    (``benchmarks/suite/bench_dask.py`` reports their size beside it)."""
    count = len(fingerprints)
    table_numbers = np.repeat(np.arange(len(tables), dtype=np.uint16), count)
    prefixes = np.concatenate(
        [table.permute_array(fingerprints) >> np.uint64(table.suffix_bits) for table in tables]
        or [np.zeros(0, dtype=np.uint64)]
    )
    return pd.DataFrame(
        {
            "table": table_numbers,
            "prefix": prefixes.astype(np.uint64),
            "fingerprint": np.tile(fingerprints, len(tables)),
            "position": np.tile(row_positions, len(tables)),
        }
    )


# ------------------------------------------------------- the pair search


@dataclass(frozen=True)
class Grouping:
    """Input partitions taken in contiguous groups of ``size``: the pairs
    and the members of clusters travel to the group holding their rows, so
    that an exchange between partitions costs groups x groups parts, not
    partitions x partitions (each part a task of the scheduler's)."""

    partitions: int
    size: int

    @classmethod
    def of(cls, partitions: int, groups: int) -> Grouping:
        """About ``groups`` groups of ``partitions``."""
        return cls(partitions, max(1, -(-partitions // max(1, groups))))

    @property
    def count(self) -> int:
        return max(1, -(-self.partitions // self.size))

    def members(self, group: int) -> range:
        """The partitions of ``group``."""
        return range(group * self.size, min(self.partitions, (group + 1) * self.size))

    def group_of(self, found: IntArray) -> IntArray:
        """The group of each position."""
        groups: IntArray = (np.asarray(found, dtype=np.int64) >> ROW_BITS) // self.size
        return groups


def scatter_partition(
    frame: pd.DataFrame, number: int, column: str, tables: Sequence[Table], buckets: int
) -> list[tuple[U64Array, list[np.ndarray]]]:
    """Partition ``number``'s part of both shuffles, one item per bucket:
    the table entries of its distinct fingerprints
    (:func:`~simstore.index.prefix_shuffle.scatter_entries`) and
    ``[fingerprints, positions]`` of its rows whose fingerprint hashes there
    (:func:`~simstore.index.prefix_shuffle.scatter_documents`).
    ``frame["fingerprint"]`` holds the fingerprints (``column`` in the
    input, named by a failure)."""
    fingerprints = checked_fingerprints(frame["fingerprint"].to_numpy(), column)
    rows = positions(number, len(fingerprints))
    entries = scatter_entries(fingerprints, tables, buckets)
    documents = scatter_documents(fingerprints, rows, buckets)
    return list(zip(entries, documents, strict=True))


def routed_edges(tables: Sequence[Table], k: int, buckets: int, *parts: Any) -> list[Edges]:
    """One bucket's pairs of distinct fingerprints (its ``parts`` from
    :func:`scatter_partition`), cut by the bucket their ``low`` fingerprint
    hashes to (:func:`~simstore.index.prefix_shuffle.routed_edges`)."""
    return prefix_shuffle.routed_edges([part[0] for part in parts], tables, k, buckets)


def bucket_forest(tables: Sequence[Table], k: int, *parts: Any) -> Forest:
    """The component forest of one bucket's pairs of fingerprints."""
    return prefix_shuffle.bucket_forest([part[0] for part in parts], tables, k)


def first_documents(parts: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """``[[fingerprints, positions]]``: each distinct fingerprint of the
    documents ``parts`` with the first position holding it."""
    fingerprints = np.concatenate([part[0] for part in parts]).astype(np.uint64)
    row_positions = np.concatenate([part[1] for part in parts]).astype(np.int64)
    order = np.lexsort((row_positions, fingerprints))
    fingerprints, row_positions = fingerprints[order], row_positions[order]
    first = np.ones(len(fingerprints), dtype=np.bool_)
    first[1:] = fingerprints[1:] != fingerprints[:-1]
    return [[fingerprints[first], row_positions[first]]]


def _documents(scattered: Sequence[Any], firsts: bool) -> Sequence[Any]:
    documents = [part[1] for part in scattered]
    return first_documents(documents) if firsts else documents


def left_halves(buckets: int, scattered_count: int, firsts: bool, *parts: Any) -> list[Any]:
    """:func:`~simstore.index.prefix_shuffle.expand_left` of one bucket (the
    documents of its ``scattered_count`` parts from :func:`scatter_partition`,
    then its edge parts): the halves cut by the bucket of ``high``, then the
    pairs of documents sharing a fingerprint. With ``firsts``, only each
    fingerprint's first document takes part (and so no two share one)."""
    documents = _documents(parts[:scattered_count], firsts)
    (left, high, distance), shared = expand_left(documents, parts[scattered_count:])
    routed = split_by(hash_buckets(high, buckets), buckets, left, high, distance)
    return [*[(part[0], part[1], part[2]) for part in routed], shared]


def right_pairs(grouping: Grouping, scattered_count: int, firsts: bool, *parts: Any) -> list[Columns]:
    """The pairs of positions of one bucket
    (:func:`~simstore.index.prefix_shuffle.expand_right` of its documents and
    the halves routed to it, and its pairs sharing a fingerprint), cut by
    the group of ``position_a``. ``parts``: ``scattered_count`` parts from
    :func:`scatter_partition`, the shared pairs, then the halves."""
    documents = _documents(parts[:scattered_count], firsts)
    shared, halves = parts[scattered_count], parts[scattered_count + 1 :]
    first, second, distance = expand_right(documents, halves)
    columns = {
        "position_a": np.concatenate([first, shared[0]]).astype(np.int64),
        "position_b": np.concatenate([second, shared[1]]).astype(np.int64),
        "distance": np.concatenate([distance, np.zeros(len(shared[0]), np.uint8)]),
    }
    return split_columns(columns, grouping.group_of(columns["position_a"]), grouping.count)


# ------------------------------------------------------ pairs by text

#: Salt of the band shuffle's buckets (apart from the fingerprints').
BAND_SALT = 0x5BD1E995


def scatter_bands(
    frame: pd.DataFrame, number: int, column: str, sketch: Sketch, buckets: int
) -> list[list[np.ndarray]]:
    """Partition ``number``'s part of the band shuffle, one item per bucket:
    ``[keys, positions, fingerprints]`` of every band key
    (:func:`~simstore.fingerprinting.bands.band_keys`) of every row's
    ``frame["sketch"]``, sent to the bucket the key hashes to; rows without
    a sketch have none. ``column`` names the fingerprints in a failure."""
    fingerprints = checked_fingerprints(frame["fingerprint"].to_numpy(), column)
    rows, present = sketch_rows(frame["sketch"].tolist(), sketch)
    sketched = np.flatnonzero(present)
    keyed = band_keys(rows[sketched], sketch)
    chosen = sketched[keyed.rows]
    row_positions = positions(number, len(fingerprints))[chosen]
    destination = hash_buckets(keyed.keys, buckets, BAND_SALT)
    return split_by(destination, buckets, keyed.keys, row_positions, fingerprints[chosen])


def band_pairs(k: int, grouping: Grouping, *parts: Sequence[np.ndarray]) -> list[Columns]:
    """One bucket's pairs of positions sharing a band key more than ``k``
    bits apart (:func:`~simstore.index.shared_keys.pairs_beyond_k` of its
    ``parts`` from :func:`scatter_bands`), cut by the group of
    ``position_a``. A pair sharing keys in several buckets comes out of each:
    :func:`distinct_pairs` keeps one."""
    first, second, distance = pairs_beyond_k(
        np.concatenate([part[0] for part in parts]).astype(np.uint64),
        np.concatenate([part[1] for part in parts]).astype(np.int64),
        np.concatenate([part[2] for part in parts]).astype(np.uint64),
        k,
    )
    columns: Columns = {"position_a": first, "position_b": second, "distance": distance.astype(np.uint8)}
    return split_columns(columns, grouping.group_of(first), grouping.count)


def distinct_pairs(*parts: Columns) -> Columns:
    """The pairs of ``parts`` (from :func:`band_pairs`), each once."""
    columns = concat_columns(parts)
    if not len(columns["position_a"]):
        return columns
    pairs = np.stack([columns["position_a"], columns["position_b"]], axis=1)
    _, where = np.unique(pairs, axis=0, return_index=True)
    return {name: values[where] for name, values in columns.items()}


# ------------------------------------------------ pairs meet their rows


def split_columns(columns: Columns, destination: IntArray, count: int) -> list[Columns]:
    """``columns`` (equal-length arrays) cut into ``count`` parts by ``destination``."""
    names = list(columns)
    return [
        dict(zip(names, part, strict=True))
        for part in split_by(destination.astype(np.int64), count, *columns.values())
    ]


def concat_columns(parts: Sequence[Columns]) -> Columns:
    """The rows of several parts of the same columns, one after another."""
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def row_values(frames: Sequence[pd.DataFrame], first: int, name: str, found: IntArray) -> np.ndarray:
    """Column ``name`` of the rows at positions ``found``, all in ``frames``
    (consecutive input partitions, the first numbered ``first``)."""
    lengths = [len(frame) for frame in frames]
    offsets = np.concatenate(([0], np.cumsum(lengths)))[:-1].astype(np.int64)
    values = np.concatenate([frame[name].to_numpy() for frame in frames])
    partition = (found >> ROW_BITS) - first
    rows = found & ((1 << ROW_BITS) - 1)
    picked: np.ndarray = values[offsets[partition] + rows]
    return picked


def with_side(
    frames: Sequence[pd.DataFrame],
    first: int,
    side: str,
    names: Sequence[str],
    grouping: Grouping | None,
    *parts: Columns,
) -> Columns | list[Columns]:
    """The pairs whose row ``side`` (``"a"`` or ``"b"``) is in ``frames``
    (a group of input partitions, the first numbered ``first``), with that
    row's columns ``names`` added as ``{name}_{side}``; then, with a
    ``grouping``, cut by the group of ``position_b``. The pairs travel to
    the rows; the rows never move."""
    columns = concat_columns(parts)
    for name in names:
        columns[f"{name}_{side}"] = row_values(frames, first, name, columns[f"position_{side}"])
    if grouping is None:
        return columns
    return split_columns(columns, grouping.group_of(columns["position_b"]), grouping.count)


def pair_similarity(columns: Columns, sketch: Sketch | None) -> npt.NDArray[np.float64]:
    """The estimated similarity of each pair from its ``sketch_a`` and
    ``sketch_b`` (NaN where a row has no sketch, or without ``sketch``)."""
    similarity = np.full(len(columns["position_a"]), np.nan)
    if sketch is None or not len(similarity):
        return similarity
    rows_a, present_a = sketch_rows(columns["sketch_a"].tolist(), sketch)
    rows_b, present_b = sketch_rows(columns["sketch_b"].tolist(), sketch)
    both = present_a & present_b
    if both.any():
        similarity[both] = estimate_jaccard(rows_a[both], rows_b[both], sketch)
    return similarity


def _kept(similarity: npt.NDArray[np.float64], threshold: float | None) -> npt.NDArray[np.bool_]:
    """Pairs at or above ``threshold``; pairs without a similarity stay, unjudged."""
    if threshold is None:
        return np.ones(len(similarity), dtype=np.bool_)
    kept: npt.NDArray[np.bool_] = ~(similarity < threshold)
    return kept


def finished_pairs(sketch: Sketch | None, threshold: float | None, columns: Columns) -> pd.DataFrame:
    """Pairs with both rows' ``key`` (and ``sketch``) as the result of
    :func:`simstore.dask.near_duplicate_pairs`."""
    similarity = pair_similarity(columns, sketch)
    kept = _kept(similarity, threshold)
    return pd.DataFrame(
        {
            "key_a": pd.Series([plain_key(key) for key in columns["key_a"][kept].tolist()], dtype=object),
            "key_b": pd.Series([plain_key(key) for key in columns["key_b"][kept].tolist()], dtype=object),
            "distance": columns["distance"][kept].astype(np.uint8),
            "similarity": similarity[kept],
        }
    )


def judged_forest(sketch: Sketch | None, threshold: float | None, columns: Columns) -> Forest:
    """The component forest of the pairs (with both rows' ``fingerprint``
    and ``sketch``) at least ``threshold`` similar."""
    kept = _kept(pair_similarity(columns, sketch), threshold)
    first = columns["fingerprint_a"][kept].astype(np.uint64)
    second = columns["fingerprint_b"][kept].astype(np.uint64)
    return edge_forest(np.minimum(first, second), np.maximum(first, second))


# --------------------------------------------------------------- clusters


def labelled_parts(forest: Forest, grouping: Grouping, *parts: Any) -> list[tuple[IntArray, U64Array]]:
    """One bucket's documents (of its ``parts`` from
    :func:`scatter_partition`) that may be in a cluster, ``(positions,
    labels)`` (:func:`~simstore.index.prefix_shuffle.label_documents`), cut
    by group of input partitions."""
    found, labels = label_documents(forest, [part[1] for part in parts])
    routed = split_by(grouping.group_of(found), grouping.count, found, labels)
    return [(part[0], part[1]) for part in routed]


def picked_members(
    frames: Sequence[pd.DataFrame], first: int, names: Sequence[str], groups: int, *parts: Any
) -> list[Columns]:
    """The labelled rows of a group of input partitions (``frames``, the
    first numbered ``first``), with their ``names`` columns, cut by the
    group their label hashes to: a cluster's members all meet in one group."""
    found = np.concatenate([part[0] for part in parts]).astype(np.int64)
    labels = np.concatenate([part[1] for part in parts]).astype(np.uint64)
    columns: Columns = {"position": found, "label": labels}
    for name in names:
        columns[name] = row_values(frames, first, name, found)
    return split_columns(columns, hash_buckets(labels, groups, salt=1), groups)


def cluster_members(
    keep: KeepPolicy, length_column: str | None, sketch: Sketch | None, *parts: Columns
) -> pd.DataFrame:
    """One group's clusters (each with every member), as the result of
    :func:`simstore.dask.clusters`: a cluster's id is its first member's position."""
    columns = concat_columns(parts)
    if not len(columns["position"]):
        return empty_frame(CLUSTER_COLUMNS)
    members = pd.DataFrame(columns)
    members["cluster_id"] = members.groupby("label")["position"].transform("min")
    return representatives(members, keep, length_column, sketch)


def representatives(
    members: pd.DataFrame, keep: KeepPolicy, length_column: str | None, sketch: Sketch | None = None
) -> pd.DataFrame:
    """One row per member of every cluster in ``members``, with the
    cluster's representative, and the member's distance and (with a
    ``sketch`` column and its geometry ``sketch``) estimated similarity to it.

    ``members`` holds ``cluster_id``, ``position``, ``key``,
    ``fingerprint`` (and ``length_column``), every member of each cluster
    it holds. The
    policies are the single-machine ones (:meth:`simstore.Store.clusters`),
    with "added first" meaning "first in input order" and a member's
    ``meta`` being ``{"length": its length}`` when ``length_column`` is given.
    """
    if members.empty:
        return empty_frame(CLUSTER_COLUMNS)
    ordered = members.sort_values(["cluster_id", "position"], kind="stable")
    cluster_ids = ordered["cluster_id"].to_numpy()
    keys = [plain_key(key) for key in ordered["key"].tolist()]
    starts = np.flatnonzero(np.r_[True, cluster_ids[1:] != cluster_ids[:-1]])
    ends = np.r_[starts[1:], len(cluster_ids)]
    chosen: list[Key] = []
    leader_rows = starts.copy()  # each cluster's representative, as a row of ``ordered``
    if keep == "first":
        chosen = [keys[start] for start in starts.tolist()]
    else:
        fingerprints = ordered["fingerprint"].tolist()
        lengths = ordered[length_column].tolist() if length_column is not None else None
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            records = [
                Record(
                    keys[row],
                    int(fingerprints[row]),
                    None if lengths is None else {"length": plain_value(lengths[row])},
                )
                for row in range(start, end)
            ]
            picked = choose_representative(records, keep)
            chosen.append(picked)
            leader_rows[len(chosen) - 1] = start + next(
                row for row, record in enumerate(records) if record.key is picked
            )
    sizes = ends - starts
    representative = np.repeat(np.array(chosen, dtype=object), sizes)
    leaders = np.repeat(leader_rows, sizes)
    fingerprints_array = checked_fingerprints(ordered["fingerprint"].to_numpy(), "fingerprint")
    distance = np.bitwise_count(fingerprints_array ^ fingerprints_array[leaders]).astype(np.int64)
    similarity = np.full(len(ordered), np.nan)
    if sketch is not None and "sketch" in ordered.columns:
        table, present = sketch_rows(ordered["sketch"].tolist(), sketch)
        both = present & present[leaders]
        if both.any():
            similarity[both] = estimate_jaccard(table[both], table[leaders[both]], sketch)
    result = pd.DataFrame(
        {
            "cluster_id": cluster_ids,
            "position": ordered["position"].to_numpy(),
            "key": np.array(keys, dtype=object),
            "representative": representative,
            "distance": distance,
            "similarity": similarity,
        }
    )
    return result[np.repeat(sizes > 1, sizes)].reset_index(drop=True)


def plain_value(value: Any) -> Any:
    """A numpy scalar as the Python value a stored ``meta`` would hold."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if np.isnan(value):
            return None
        if value.is_integer():
            # pandas turns an int column with a missing value into floats.
            return int(value)
    return value
