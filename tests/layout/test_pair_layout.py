"""The tables of an all-pairs search in memory: exact at every k, the cheapest
the cost model knows, and the pairs they find equal a brute-force scan."""

from __future__ import annotations

import numpy as np
from _oracles import pair_tuples, planted
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.index.cover import covers
from simstore.index.pairs import all_pairs, brute_force_pairs
from simstore.layout.pair_layout import pair_layout, pair_seconds
from simstore.layout.planner import candidate_layouts

COUNTS = st.sampled_from([0, 1, 2, 3, 100, 10_000, 1_000_000, 10_000_000, 100_000_000, 2**40])


@settings(max_examples=80, deadline=None)
@given(k=st.integers(0, 12), count=COUNTS)
def test_the_chosen_tables_are_exact_and_cheapest(k: int, count: int) -> None:
    layout = pair_layout(k, count)
    assert covers(layout.tables, k)
    chosen = pair_seconds(layout.tables, count)
    assert all(chosen <= pair_seconds(other.tables, count) * (1 + 1e-9) for other in candidate_layouts(k))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    singles=st.integers(0, 80),
    clusters=st.integers(0, 8),
    size=st.integers(2, 6),
    k=st.integers(0, 12),
    count=COUNTS,
)
def test_pairs_through_the_chosen_tables_equal_brute_force(
    seed: int, singles: int, clusters: int, size: int, k: int, count: int
) -> None:
    """Whatever N the tables were chosen for, the search is exact for the data it gets."""
    fingerprints = planted(seed, singles, clusters, size, k)
    found = pair_tuples(all_pairs(fingerprints, pair_layout(k, count).tables, k))
    assert len(found) == len(set(found)), "a pair was reported twice"
    assert set(found) == brute_force_pairs(fingerprints, k)


def test_more_fingerprints_buy_longer_prefixes() -> None:
    """The choice follows N: for many fingerprints, runs of equal prefixes are
    kept short with more tables (at k = 8 and 1M, 165 tables took 23 s where
    a store's 45 took 88 s)."""
    for k in (3, 5, 8):
        small, large = pair_layout(k, 1_000), pair_layout(k, 10_000_000)
        assert small.table_count <= large.table_count
        assert min(large.prefix_bits) > min(small.prefix_bits)
    assert np.mean(pair_layout(8, 1_000_000).prefix_bits) > 15
