"""Skew statistics of prefix ranges and degenerate fingerprints, against plain-Python counts."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.index.permute import MAX_FINGERPRINT
from simstore.index.skew import degenerate_fingerprints, table_skew
from simstore.layout.planner import one_level
from simstore.results import Degenerate, TableSkew

U64 = np.uint64


def naive_skew(keys: list[int], prefix_bits: int, hot: int) -> TableSkew:
    sizes = Counter(key >> (64 - prefix_bits) for key in keys)
    counts = sorted(sizes.values())
    ranked = sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:hot]
    p99_index = int(np.ceil(0.99 * (len(counts) - 1)))
    return TableSkew(
        prefix_bits=prefix_bits,
        entries=len(keys),
        occupied=len(sizes),
        largest_range=counts[-1],
        p99_range=counts[p99_index],
        mean_range=len(keys) / len(sizes),
        expected_range=len(keys) / 2**prefix_bits,
        query_weighted_range=sum(count * count for count in counts) / len(keys),
        hot_prefixes=tuple(ranked),
    )


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(
        st.one_of(st.integers(0, MAX_FINGERPRINT), st.sampled_from([0, 1, 1 << 63, MAX_FINGERPRINT])),
        min_size=1,
        max_size=300,
    ),
    prefix_bits=st.integers(1, 64),
    hot=st.integers(0, 6),
)
def test_table_skew_matches_plain_counting(keys: list[int], prefix_bits: int, hot: int) -> None:
    ordered = sorted(keys)
    got = table_skew(np.array(ordered, dtype=np.uint64), prefix_bits, hot=hot)
    expected = naive_skew(ordered, prefix_bits, hot)
    assert got.hot_prefixes == expected.hot_prefixes
    assert got.mean_range == pytest.approx(expected.mean_range)
    assert got.query_weighted_range == pytest.approx(expected.query_weighted_range)
    assert got.expected_range == pytest.approx(expected.expected_range)
    assert (got.entries, got.occupied, got.largest_range, got.p99_range) == (
        expected.entries,
        expected.occupied,
        expected.largest_range,
        expected.p99_range,
    )


def test_table_skew_of_a_small_example() -> None:
    keys = np.array([0, 1, 2, 1 << 62, (1 << 63) + 5, MAX_FINGERPRINT], dtype=np.uint64)
    skew = table_skew(keys, 2, hot=2)
    # Prefixes 00 (3 keys), 01 (1), 10 (1), 11 (1).
    assert skew.largest_range == 3
    assert skew.occupied == 4
    assert skew.hot_prefixes == ((0, 3), (1, 1))
    assert skew.expected_range == 1.5
    assert skew.query_weighted_range == pytest.approx((9 + 1 + 1 + 1) / 6)


def test_table_skew_of_random_keys_is_close_to_the_planners_model() -> None:
    fps = np.random.default_rng(3).integers(0, 2**63, size=200_000, dtype=np.uint64) * U64(2) + U64(1)
    table = one_level(3, 4).tables[0]  # a 16-bit prefix: ~3 entries per range
    skew = table_skew(np.sort(table.permute_array(fps)), table.prefix_bits)
    assert skew.expected_range == pytest.approx(200_000 / 65536)
    # Size-biased mean of a Poisson(λ) occupancy is 1 + λ.
    assert skew.query_weighted_range == pytest.approx(1 + skew.expected_range, rel=0.05)
    assert skew.largest_range < 20


def test_table_skew_finds_a_hot_prefix() -> None:
    rng = np.random.default_rng(4)
    fps = rng.integers(0, 2**64 - 1, size=10_000, dtype=np.uint64, endpoint=True)
    boilerplate = np.full(500, 0x0123456789ABCDEF, dtype=np.uint64)
    table = one_level(3, 5).tables[0]
    permuted = np.sort(table.permute_array(np.concatenate([fps, boilerplate])))
    skew = table_skew(permuted, table.prefix_bits, hot=1)
    hot_prefix = table.permute(0x0123456789ABCDEF) >> table.suffix_bits
    assert skew.hot_prefixes == ((hot_prefix, 500),)
    assert skew.largest_range == 500
    assert skew.query_weighted_range > 20


def test_table_skew_edge_cases() -> None:
    empty = table_skew(np.array([], dtype=np.uint64), 20)
    assert (empty.entries, empty.occupied, empty.largest_range, empty.hot_prefixes) == (0, 0, 0, ())
    full = table_skew(np.array([5, 5, 7], dtype=np.uint64), 64)
    assert full.hot_prefixes == ((5, 2), (7, 1))


@pytest.mark.parametrize(
    ("keys", "prefix_bits", "hot", "error"),
    [
        (np.array([2, 1], dtype=np.uint64), 8, 5, InvalidValueError),
        (np.array([1, 2], dtype=np.int64), 8, 5, InvalidTypeError),
        ([1, 2], 8, 5, InvalidTypeError),
        (np.array([[1, 2]], dtype=np.uint64), 8, 5, InvalidTypeError),
        (np.array([1, 2], dtype=np.uint64), 0, 5, InvalidValueError),
        (np.array([1, 2], dtype=np.uint64), 65, 5, InvalidValueError),
        (np.array([1, 2], dtype=np.uint64), 8, -1, InvalidValueError),
        (np.array([1, 2], dtype=np.uint64), 8.0, 5, InvalidTypeError),
    ],
)
def test_table_skew_refuses_bad_input(keys: object, prefix_bits: object, hot: object, error: type) -> None:
    with pytest.raises(error):
        table_skew(keys, prefix_bits, hot=hot)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    fps=st.lists(
        st.one_of(st.integers(0, MAX_FINGERPRINT), st.sampled_from([0, MAX_FINGERPRINT, 42, 43])),
        max_size=300,
    ),
    threshold=st.integers(2, 5),
    top=st.integers(0, 4),
)
def test_degenerate_matches_plain_counting(fps: list[int], threshold: int, top: int) -> None:
    got = degenerate_fingerprints(np.array(fps, dtype=np.uint64), shared_threshold=threshold, top=top)
    counts = Counter(fps)
    shared = sorted(
        ((fp, count) for fp, count in counts.items() if count >= threshold),
        key=lambda item: (-item[1], item[0]),
    )
    assert got == Degenerate(
        docs=len(fps),
        distinct=len(counts),
        zeros=counts[0],
        ones=counts[MAX_FINGERPRINT],
        shared_docs=sum(count for _, count in shared),
        shared=tuple(shared[:top]),
        shared_threshold=threshold,
    )


def test_degenerate_fingerprints_of_a_corpus_with_empty_texts() -> None:
    rng = np.random.default_rng(9)
    fps = np.concatenate(
        [
            rng.integers(1, 2**63, size=5000, dtype=np.uint64),
            np.zeros(30, dtype=np.uint64),
            np.full(3, MAX_FINGERPRINT, dtype=np.uint64),
            np.full(12, 0xDEADBEEF, dtype=np.uint64),
        ]
    )
    found = degenerate_fingerprints(fps)
    assert (found.zeros, found.ones) == (30, 3)
    assert found.shared == ((0, 30), (0xDEADBEEF, 12))
    assert found.shared_docs == 42


def test_degenerate_refuses_bad_input() -> None:
    with pytest.raises(InvalidTypeError):
        degenerate_fingerprints([1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError):
        degenerate_fingerprints(np.array([1], dtype=np.uint64), shared_threshold=1)
    assert degenerate_fingerprints(np.array([], dtype=np.uint64)).docs == 0
