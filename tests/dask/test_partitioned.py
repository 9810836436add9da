"""The per-partition steps of the Dask layer, as pure functions, against the
single-machine oracles: brute-force pairs and union-find components."""

from __future__ import annotations

import numpy as np
import pytest
from _oracles import plain_union_find, planted
from hypothesis import given, settings
from hypothesis import strategies as st

pd = pytest.importorskip("pandas")

from simstore.dask.partitioned import (  # noqa: E402
    ROW_BITS,
    bucket_pairs,
    combine_forests,
    pack_keys,
    positions,
    representatives,
    star_forest,
    table_entries,
    with_roots,
)
from simstore.errors import InvalidValueError  # noqa: E402
from simstore.index.pairs import brute_force_pairs  # noqa: E402
from simstore.index.permute import one_level_tables  # noqa: E402
from simstore.layout.planner import two_level  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(0, 4), parts=st.integers(1, 5))
def test_bucket_pairs_over_any_split_equal_brute_force(seed: int, k: int, parts: int) -> None:
    """Entries split into any partitions that keep each (table, prefix) whole
    give exactly the brute-force pairs, each once."""
    fingerprints = planted(seed, singles=60, clusters=6, size=5, k=k)
    tables = one_level_tables(k, k + 2)
    entries = table_entries(fingerprints, np.arange(len(fingerprints), dtype=np.int64), tables)
    bucket = (entries["prefix"].to_numpy() * np.uint64(31) + entries["table"].to_numpy()) % np.uint64(parts)
    found = pd.concat(
        [bucket_pairs(entries[bucket == part], tables, k) for part in range(parts)], ignore_index=True
    )
    got = list(
        zip(found.position_a.tolist(), found.position_b.tolist(), found.distance.tolist(), strict=True)
    )
    assert len(got) == len(set(got))
    assert set(got) == brute_force_pairs(fingerprints, k)


def test_bucket_pairs_two_level_layout() -> None:
    fingerprints = planted(7, singles=300, clusters=20, size=6, k=3)
    layout = two_level(3, 4, 3, 4)  # the paper's 16-table layout
    entries = table_entries(fingerprints, np.arange(len(fingerprints), dtype=np.int64), layout.tables)
    found = bucket_pairs(entries, layout.tables, 3)
    got = set(zip(found.position_a.tolist(), found.position_b.tolist(), found.distance.tolist(), strict=True))
    assert got == brute_force_pairs(fingerprints, 3)


@settings(max_examples=60, deadline=None)
@given(
    node_count=st.integers(2, 50),
    data=st.data(),
    pieces=st.integers(1, 4),
)
def test_combined_forests_equal_union_find(node_count: int, data: st.DataObject, pieces: int) -> None:
    """Forests of any split of the edges, combined, label every node with its
    component's smallest node, as union-find does."""
    edges = data.draw(
        st.lists(st.tuples(st.integers(0, node_count - 1), st.integers(0, node_count - 1)), max_size=60)
    )
    spread = 1 << 41  # positions from several partitions
    forests = []
    for piece in range(pieces):
        chunk = edges[piece::pieces]
        forests.append(
            star_forest(
                np.array([a * spread for a, _ in chunk], dtype=np.int64),
                np.array([b * spread for _, b in chunk], dtype=np.int64),
            )
        )
    forest = with_roots(combine_forests(*forests))
    labels = dict(zip(forest.node.tolist(), forest.root.tolist(), strict=True))
    expected = plain_union_find(node_count, edges)
    for node in range(node_count):
        if expected.count(expected[node]) > 1:
            assert labels[node * spread] == expected[node] * spread
        else:
            assert node * spread not in labels


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
            "key": pack_keys(pd.Series(["c", "a", "b", "x", "y", "alone"])),
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
