"""simstore.index.prefix_shuffle: the distributed pair search's steps, run in one
process, against the brute-force oracle and simstore.index.pairs."""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import fingerprint_families
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.index.pairs import brute_force_pairs
from simstore.index.permute import one_level_tables
from simstore.index.prefix_shuffle import (
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
    unpermute_array,
)


def distributed_edges(
    fingerprints: np.ndarray, blocks: int, buckets: int, k: int
) -> set[tuple[int, int, int]]:
    tables = one_level_tables(k, k + 2)
    scattered = [scatter_entries(part, tables, buckets) for part in np.array_split(fingerprints, blocks)]
    found: set[tuple[int, int, int]] = set()
    for bucket in range(buckets):
        low, high, distance = bucket_edges([parts[bucket] for parts in scattered], tables, k)
        edges = list(zip(low.tolist(), high.tolist(), distance.tolist(), strict=True))
        assert not found & set(edges), "a pair came out of two buckets"
        assert len(set(edges)) == len(edges), "a pair came out of one bucket twice"
        found.update(edges)
    return found


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(0, 120),
    blocks=st.integers(1, 5),
    buckets=st.integers(1, 7),
    k=st.integers(1, 5),
)
def test_bucket_edges_are_every_pair_of_distinct_fingerprints_once(
    seed: int, count: int, blocks: int, buckets: int, k: int
) -> None:
    fingerprints = fingerprint_families(seed, count, flips=3)
    distinct = np.unique(fingerprints)
    expected = {(int(distinct[i]), int(distinct[j]), d) for i, j, d in brute_force_pairs(distinct, k)}
    assert distributed_edges(fingerprints, blocks, buckets, k) == expected


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1), count=st.integers(0, 80), buckets=st.integers(1, 5), k=st.integers(1, 4)
)
def test_expanded_pairs_equal_the_document_pairs(seed: int, count: int, buckets: int, k: int) -> None:
    fingerprints = fingerprint_families(seed, count, flips=2)
    positions = np.arange(count, dtype=np.int64)
    edges = distributed_edges(fingerprints, 2, buckets, k)
    low = np.array([e[0] for e in edges], dtype=np.uint64)
    high = np.array([e[1] for e in edges], dtype=np.uint64)
    distance = np.array([e[2] for e in edges], dtype=np.uint8)
    documents = scatter_documents(fingerprints, positions, buckets)
    routed = split_by(hash_buckets(low, buckets), buckets, low, high, distance)
    halves = []
    found: set[tuple[int, int, int]] = set()
    for bucket in range(buckets):
        half, (same_a, same_b) = expand_left([documents[bucket]], [tuple(routed[bucket])])
        halves.append(half)
        found.update((a, b, 0) for a, b in zip(same_a.tolist(), same_b.tolist(), strict=True))
    for bucket in range(buckets):
        wanted = [split_by(hash_buckets(h[1], buckets), buckets, *h)[bucket] for h in halves]
        a, b, d = expand_right([documents[bucket]], [tuple(w) for w in wanted])
        found.update(zip(a.tolist(), b.tolist(), d.tolist(), strict=True))
    assert found == brute_force_pairs(fingerprints, k)


def test_forests_label_components_by_their_smallest_fingerprint() -> None:
    low = np.array([5, 9, 20], dtype=np.uint64)
    high = np.array([9, 12, 30], dtype=np.uint64)
    first = edge_forest(low[:1], high[:1])
    second = edge_forest(low[1:], high[1:])
    nodes, roots = combine_forests(first, second)
    assert dict(zip(nodes.tolist(), roots.tolist(), strict=True)) == {5: 5, 9: 5, 12: 5, 20: 20, 30: 20}


def test_label_documents_keeps_joined_and_shared_fingerprints_only() -> None:
    forest = edge_forest(np.array([5], dtype=np.uint64), np.array([9], dtype=np.uint64))
    fingerprints = np.array([9, 7, 7, 100, 5], dtype=np.uint64)
    positions = np.array([0, 1, 2, 3, 4], dtype=np.int64)
    chosen, labels = label_documents(
        forest, [[fingerprints[:2], positions[:2]], [fingerprints[2:], positions[2:]]]
    )
    assert dict(zip(chosen.tolist(), labels.tolist(), strict=True)) == {0: 5, 1: 7, 2: 7, 4: 5}


@pytest.mark.parametrize("buckets", [1, 3])
def test_split_by_keeps_order_within_a_part(buckets: int) -> None:
    destination = np.array([0, buckets - 1, 0, buckets - 1], dtype=np.int64)
    parts = split_by(destination, buckets, np.array([1, 2, 3, 4]))
    assert parts[0][0].tolist() == ([1, 3] if buckets > 1 else [1, 2, 3, 4])


@given(values=st.lists(st.integers(0, 2**64 - 1), max_size=50), k=st.integers(1, 6))
def test_unpermute_array_inverts_every_tables_permutation(values: list[int], k: int) -> None:
    fingerprints = np.array(values, dtype=np.uint64)
    for table in one_level_tables(k, k + 2):
        assert unpermute_array(table, table.permute_array(fingerprints)).tolist() == values
