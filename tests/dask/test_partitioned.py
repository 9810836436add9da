"""The steps of the Dask layer, as pure functions, against the
single-machine oracles: brute-force pairs and the store's representatives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _oracles import planted
from hypothesis import given, settings
from hypothesis import strategies as st

pd = pytest.importorskip("pandas")

from simstore.dask.partitioned import (  # noqa: E402
    ROW_BITS,
    Grouping,
    left_halves,
    positions,
    representatives,
    right_pairs,
    routed_edges,
    scatter_partition,
)
from simstore.errors import InvalidValueError  # noqa: E402
from simstore.index.pairs import brute_force_pairs  # noqa: E402
from simstore.index.permute import one_level_tables  # noqa: E402
from simstore.layout.planner import two_level  # noqa: E402


def position_pairs(
    fingerprints: np.ndarray, tables: Any, k: int, partitions: int, buckets: int, groups: int = 2
) -> set[Any]:
    """The steps :func:`simstore.dask.near_duplicate_pairs` runs as tasks, run
    here one after another: ``(row_a, row_b, distance)`` in input rows."""
    frames = [pd.DataFrame({"fingerprint": chunk}) for chunk in np.array_split(fingerprints, partitions)]
    scattered = [
        scatter_partition(frame, n, "fingerprint", tables, buckets) for n, frame in enumerate(frames)
    ]
    per_bucket = [[parts[b] for parts in scattered] for b in range(buckets)]
    edges = [routed_edges(tables, k, buckets, *per_bucket[b]) for b in range(buckets)]
    halves = [
        left_halves(buckets, partitions, False, *per_bucket[b], *[edge[b] for edge in edges])
        for b in range(buckets)
    ]
    grouping = Grouping.of(partitions, groups)
    starts = np.cumsum([0, *[len(frame) for frame in frames]])
    found: list[tuple[int, int, int]] = []
    for b in range(buckets):
        parts = right_pairs(
            grouping, partitions, False, *per_bucket[b], halves[b][buckets], *[half[b] for half in halves]
        )
        assert len(parts) == grouping.count
        for group, part in enumerate(parts):
            # Routed to the group of the first row's partition.
            assert set((part["position_a"] >> ROW_BITS).tolist()) <= set(grouping.members(group))
            for a, b_, d in zip(part["position_a"], part["position_b"], part["distance"], strict=True):
                row_a = starts[a >> ROW_BITS] + (a & ((1 << ROW_BITS) - 1))
                row_b = starts[b_ >> ROW_BITS] + (b_ & ((1 << ROW_BITS) - 1))
                assert row_a < row_b
                found.append((int(row_a), int(row_b), int(d)))
    assert len(found) == len(set(found))  # each pair once
    return set(found)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(0, 4),
    partitions=st.integers(1, 5),
    buckets=st.integers(1, 5),
    groups=st.integers(1, 5),
)
def test_steps_over_any_split_equal_brute_force(
    seed: int, k: int, partitions: int, buckets: int, groups: int
) -> None:
    """The steps over any number of partitions and buckets give exactly the
    brute-force pairs, each once, exact copies included."""
    fingerprints = planted(seed, singles=60, clusters=6, size=5, k=k)
    fingerprints = np.concatenate([fingerprints, fingerprints[::7]])  # repeated fingerprints
    expected = brute_force_pairs(fingerprints, k)
    tables = one_level_tables(k, k + 2)
    assert position_pairs(fingerprints, tables, k, partitions, buckets, groups) == expected


def test_steps_two_level_layout() -> None:
    fingerprints = planted(7, singles=300, clusters=20, size=6, k=3)
    layout = two_level(3, 4, 3, 4)  # the paper's 16-table layout
    assert position_pairs(fingerprints, layout.tables, 3, 3, 4) == brute_force_pairs(fingerprints, 3)


def test_positions_order_partitions_then_rows() -> None:
    assert positions(0, 3).tolist() == [0, 1, 2]
    assert positions(2, 2).tolist() == [2 << ROW_BITS, (2 << ROW_BITS) + 1]
    with pytest.raises(InvalidValueError, match="partition number"):
        positions(1 << 23, 1)


def test_representatives_policies() -> None:
    members = pd.DataFrame(
        {
            "cluster_id": [5, 5, 5, 9, 9, 12],
            "position": [7, 5, 6, 9, 10, 12],
            "key": ["c", "a", "b", "x", "y", "alone"],
            "fingerprint": np.array([1, 2, 3, 4, 5, 6], dtype=np.uint64),
            # pandas holds a column with a missing value as floats.
            "length": [30, 10, 30, None, 4, 1],
        }
    )
    first = representatives(members, "first", None)
    assert first.key.tolist() == ["a", "b", "c", "x", "y"]  # the single-member cluster is dropped
    assert first.representative.tolist() == ["a", "a", "a", "x", "x"]
    longest = representatives(members, "longest", "length")
    # Ties go to the member first in input order; a missing length counts as 0.
    assert longest.representative.tolist() == ["b", "b", "b", "y", "y"]
    last = representatives(members, lambda records: records[-1].key, None)
    assert last.representative.tolist() == ["c", "c", "c", "y", "y"]
    assert representatives(members.iloc[0:0], "first", None).empty
