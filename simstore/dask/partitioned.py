"""The per-partition steps of corpus-scale dedup on a dataframe engine.

:mod:`simstore.dask` wires these into Dask graphs; each is a pure function of
one pandas partition (no I/O, no Dask), so the tests check them against the
single-machine code directly.

Rows are identified by a *position*: ``(partition number << 40) + row within
the partition``. It orders rows as the input orders them (so "the first
added" means the same as for one store filled in input order), it is the same
when a lost partition is recomputed, and it needs no pass over the data to
count rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from simstore.errors import InvalidValueError
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard, sketch_rows
from simstore.index.clusters import components
from simstore.index.pairs import IntArray, prefix_masks, run_pairs
from simstore.index.permute import Table, U64Array, as_fingerprint_array
from simstore.keys import Key, pack_key, unpack_key
from simstore.results import Record
from simstore.store.dedup import KeepPolicy, choose_representative

#: Bits of a position that number the row within its partition.
ROW_BITS = 40

#: One row per (document, table): what the shuffle moves.
ENTRY_COLUMNS = {"table": "uint16", "prefix": "uint64", "fingerprint": "uint64", "position": "int64"}
#: Pairs as positions, ``position_a < position_b``.
PAIR_COLUMNS = {"position_a": "int64", "position_b": "int64", "distance": "uint8"}
#: One row per member of a cluster with more than one member.
CLUSTER_COLUMNS = {
    "cluster_id": "int64",
    "position": "int64",
    "key": "object",
    "representative": "object",
    "distance": "int64",
    "similarity": "float64",
}
#: A star forest: every node of a component that is not its root, and the root.
FOREST_COLUMNS = {"node": "int64", "root": "int64"}


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
    document's permuted fingerprint: equal ``(table, prefix)`` rows are the
    candidates Manku's batch mode compares."""
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


def bucket_pairs(entries: pd.DataFrame, tables: Sequence[Table], k: int) -> pd.DataFrame:
    """Every pair within ``k`` bits among entries that share a table's prefix,
    each reported once: by the first table whose prefix it shares.

    ``entries`` may hold any mix of tables and prefixes, as long as every
    entry of each ``(table, prefix)`` it holds is here (the shuffle makes it
    so). Runs the same vectorised comparison as the single-machine
    :func:`simstore.index.pairs.run_pairs`.
    """
    if not len(entries):  # a partition the shuffle left empty
        return empty_frame(PAIR_COLUMNS)
    masks = prefix_masks(tables)
    order = _table_prefix_order(entries, tables)
    table_column = entries["table"].to_numpy()[order]
    prefixes = entries["prefix"].to_numpy()[order]
    row_positions = entries["position"].to_numpy()[order]
    fingerprints = entries["fingerprint"].to_numpy()[order]
    # One pass over all entries sorted by (table, prefix): each table is one slice.
    bounds = np.flatnonzero(np.r_[True, table_column[1:] != table_column[:-1], True])
    found_a: list[IntArray] = []
    found_b: list[IntArray] = []
    found_distance: list[np.ndarray] = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        table_number = int(table_column[start])
        positions_here = row_positions[start:end]
        for left, right, distance in run_pairs(
            prefixes[start:end], fingerprints[start:end], k, masks[:table_number]
        ):
            found_a.append(np.minimum(positions_here[left], positions_here[right]))
            found_b.append(np.maximum(positions_here[left], positions_here[right]))
            found_distance.append(distance)
    if not found_a:
        return empty_frame(PAIR_COLUMNS)
    return pd.DataFrame(
        {
            "position_a": np.concatenate(found_a),
            "position_b": np.concatenate(found_b),
            "distance": np.concatenate(found_distance).astype(np.uint8),
        }
    )


def _table_prefix_order(entries: pd.DataFrame, tables: Sequence[Table]) -> IntArray:
    """The entries' order by (table, prefix).

    Packing (table, prefix, row) into one uint64 and sorting values is ~8x
    faster than ``np.lexsort`` over the columns (measured on the shape of a
    10M-document run); a layout whose prefixes are too long to pack falls
    back to lexsort.
    """
    count = len(entries)
    table_column = entries["table"].to_numpy()
    prefixes = entries["prefix"].to_numpy()
    prefix_bits = max(table.prefix_bits for table in tables)
    row_bits = max(1, int(count - 1).bit_length())
    table_bits = max(1, int(len(tables) - 1).bit_length())
    if table_bits + prefix_bits + row_bits > 64:
        by_columns: IntArray = np.lexsort((prefixes, table_column)).astype(np.int64)
        return by_columns
    packed = (table_column.astype(np.uint64) << np.uint64(prefix_bits + row_bits)) | (
        prefixes << np.uint64(row_bits)
    )
    packed |= np.arange(count, dtype=np.uint64)
    packed.sort()
    by_packed: IntArray = (packed & np.uint64((1 << row_bits) - 1)).astype(np.int64)
    return by_packed


def sorted_distinct(values: IntArray) -> IntArray:
    """The distinct values, ascending. ``np.unique`` does the same, but in
    numpy 2.4 it takes ~1.5 s for a million distinct int64 (measured), a
    hundred times a sort."""
    ordered = np.sort(values)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def star_forest(left: IntArray, right: IntArray) -> pd.DataFrame:
    """The connected components of the edges ``left[i] - right[i]`` as a star
    forest: one row ``(node, root)`` per node that is not its component's
    root, the root being the component's smallest node.

    Forests combine: the forest of the edges of several forests is the forest
    of all their edges, which is what lets a tree of tasks reduce many
    partitions of pairs to one forest.
    """
    left = np.asarray(left, dtype=np.int64)
    right = np.asarray(right, dtype=np.int64)
    nodes = sorted_distinct(np.concatenate([left, right]))
    labels = components(len(nodes), np.searchsorted(nodes, left), np.searchsorted(nodes, right))
    joined = labels != np.arange(len(nodes))
    # The nodes are sorted, so the smallest index is the smallest node.
    return pd.DataFrame({"node": nodes[joined], "root": nodes[labels[joined]]})


def combine_forests(*forests: pd.DataFrame) -> pd.DataFrame:
    """One star forest of the union of several forests' components."""
    edges = pd.concat(forests, ignore_index=True) if forests else empty_frame(FOREST_COLUMNS)
    return star_forest(edges["node"].to_numpy(), edges["root"].to_numpy())


def with_roots(forest: pd.DataFrame) -> pd.DataFrame:
    """A star forest with a ``(root, root)`` row added for every root, so that
    a lookup by node finds every node of every component."""
    roots = sorted_distinct(forest["root"].to_numpy())
    return pd.concat([forest, pd.DataFrame({"node": roots, "root": roots})], ignore_index=True)


def pairs_forest(pairs: pd.DataFrame) -> pd.DataFrame:
    """The star forest of one partition of position pairs."""
    return star_forest(pairs["position_a"].to_numpy(), pairs["position_b"].to_numpy())


def representatives(
    members: pd.DataFrame, keep: KeepPolicy, length_column: str | None, sketch: Sketch | None = None
) -> pd.DataFrame:
    """One row per member of every cluster in ``members``, with the
    cluster's representative, and the member's distance and (with a
    ``sketch`` column and its geometry ``sketch``) estimated similarity to it.

    ``members`` holds ``cluster_id``, ``position``, ``key`` (packed by
    :func:`pack_keys`), ``fingerprint`` (and ``length_column``), every member
    of each cluster it holds; the result's keys are unpacked. The
    policies are the single-machine ones (:meth:`simstore.Store.clusters`),
    with "added first" meaning "first in input order" and a member's
    ``meta`` being ``{"length": its length}`` when ``length_column`` is given.
    """
    if members.empty:
        return empty_frame(CLUSTER_COLUMNS)
    ordered = members.sort_values(["cluster_id", "position"], kind="stable")
    cluster_ids = ordered["cluster_id"].to_numpy()
    keys = unpack_keys(ordered["key"])
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
