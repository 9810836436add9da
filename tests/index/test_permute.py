"""Tests of block layouts and permutation tables (simstore.index.permute)."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.index.permute import (
    FINGERPRINT_BITS,
    MAX_FINGERPRINT,
    Table,
    TablesPermuter,
    block_bit_numbers,
    block_sizes,
    default_blocks,
    lane_permuter,
    one_level_tables,
    tables_permuter,
)
from simstore.layout.planner import two_level

# (k, blocks) layouts exercised below; blocks=None means the default for k.
LAYOUTS: list[tuple[int, int]] = [
    (0, 1),
    (0, 2),
    (1, 3),
    (1, 4),
    (2, 4),
    (2, 6),
    (3, 5),
    (3, 4),
    (3, 8),
    (4, 6),
    (5, 7),
    (6, 8),
    (1, 64),
]

fingerprints = st.integers(0, MAX_FINGERPRINT)
FAST = settings(max_examples=60, deadline=None)


def _flip(fingerprint: int, bits: frozenset[int]) -> int:
    for bit in bits:
        fingerprint ^= 1 << bit
    return fingerprint


def _tables(k: int, blocks: int) -> list[Table]:
    return one_level_tables(k, blocks)


# -- block sizes -----------------------------------------------------------------


@pytest.mark.parametrize("blocks", range(1, 65))
def test_block_sizes_cover_64_bits_and_differ_by_at_most_one(blocks: int) -> None:
    """Blocks cover all 64 bits, their sizes differ by at most one, larger ones first."""
    sizes = block_sizes(blocks)
    assert len(sizes) == blocks
    assert sum(sizes) == FINGERPRINT_BITS
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("blocks", [1, 3, 5, 7, 64])
def test_block_bit_numbers_partition_the_bits(blocks: int) -> None:
    """The blocks' bit numbers are disjoint, contiguous and together exactly 0..63."""
    numbered = block_bit_numbers(block_sizes(blocks))
    flat = [bit for block in numbered for bit in block]
    assert flat == list(range(63, -1, -1))
    assert [len(block) for block in numbered] == block_sizes(blocks)


def test_default_blocks_is_k_plus_two() -> None:
    """The documented default: k + 2 blocks (10 tables for k=3)."""
    assert default_blocks(3) == 5
    assert len(one_level_tables(3, default_blocks(3))) == 10


# -- table layouts ---------------------------------------------------------------


@pytest.mark.parametrize(("k", "blocks"), LAYOUTS)
def test_layout_shape(k: int, blocks: int) -> None:
    """C(blocks, k) distinct tables; each bit order is a permutation of 0..63 whose
    prefix is exactly its blocks - k leading blocks."""
    tables = _tables(k, blocks)
    assert len(tables) == comb(blocks, k)
    sizes = block_sizes(blocks)
    numbered = block_bit_numbers(sizes)
    block_of = {bit: index for index, block in enumerate(numbered) for bit in block}
    seen_prefix_blocks = set()
    for table in tables:
        assert sorted(table.bit_order) == list(range(64))
        assert len(table.bit_order) == 64
        prefix_blocks = {block_of[bit] for bit in table.bit_order[: table.prefix_bits]}
        assert len(prefix_blocks) == blocks - k
        assert table.prefix_bits == sum(sizes[index] for index in prefix_blocks)
        assert table.suffix_bits == 64 - table.prefix_bits
        seen_prefix_blocks.add(frozenset(prefix_blocks))
    assert len(seen_prefix_blocks) == len(tables)


@pytest.mark.parametrize(("k", "blocks"), LAYOUTS)
@FAST
@given(fingerprint=fingerprints)
def test_permute_is_a_bijection(k: int, blocks: int, fingerprint: int) -> None:
    """unpermute(permute(x)) == x and permute(unpermute(x)) == x, in range, popcount kept."""
    for table in _tables(k, blocks):
        permuted = table.permute(fingerprint)
        assert 0 <= permuted <= MAX_FINGERPRINT
        assert table.unpermute(permuted) == fingerprint
        assert table.permute(table.unpermute(fingerprint)) == fingerprint
        assert permuted.bit_count() == fingerprint.bit_count()


@pytest.mark.parametrize(("k", "blocks"), LAYOUTS)
def test_permute_moves_each_bit_where_the_bit_order_says(k: int, blocks: int) -> None:
    """Each single source bit lands at the position its bit order names (MSB first),
    in permute, permute_array and unpermute alike."""
    for table in _tables(k, blocks):
        singles = np.array([1 << bit for bit in range(64)], dtype=np.uint64)
        expected = [1 << (63 - table.bit_order.index(bit)) for bit in range(64)]
        assert [table.permute(1 << bit) for bit in range(64)] == expected
        assert table.permute_array(singles).tolist() == expected
        assert [table.unpermute(value) for value in expected] == singles.tolist()


@pytest.mark.parametrize(("k", "blocks"), LAYOUTS)
@FAST
@given(values=st.lists(fingerprints, max_size=40))
def test_permute_array_equals_scalar_permute(k: int, blocks: int, values: list[int]) -> None:
    """The vectorised permutation gives the scalar one's answer for every element."""
    array = np.array([*values, 0, MAX_FINGERPRINT], dtype=np.uint64)
    for table in _tables(k, blocks):
        permuted = table.permute_array(array)
        assert permuted.dtype == np.uint64
        assert permuted.tolist() == [table.permute(value) for value in array.tolist()]


@pytest.mark.parametrize(("k", "blocks"), LAYOUTS)
@FAST
@given(data=st.data())
def test_pairs_within_k_share_a_full_prefix_in_some_table(k: int, blocks: int, data: st.DataObject) -> None:
    """Manku's guarantee: two fingerprints within k bits agree on some table's whole prefix."""
    base = data.draw(fingerprints, label="base")
    bits = data.draw(st.frozensets(st.integers(0, 63), max_size=k), label="bits")
    other = _flip(base, bits)
    assert any(
        table.permute(base) >> table.suffix_bits == table.permute(other) >> table.suffix_bits
        for table in _tables(k, blocks)
    )


def test_pair_beyond_k_can_miss_every_prefix() -> None:
    """The guarantee is tight: k+1 differences, one in each of k+1 blocks, miss every prefix
    when blocks == k+1 (so the previous test is not vacuous)."""
    k, blocks = 2, 3
    numbered = block_bit_numbers(block_sizes(blocks))
    other = _flip(0, frozenset(block[0] for block in numbered))
    assert all(
        table.permute(0) >> table.suffix_bits != table.permute(other) >> table.suffix_bits
        for table in _tables(k, blocks)
    )


@pytest.mark.parametrize(
    ("k", "blocks"), [*((k, default_blocks(k)) for k in (0, 1, 3, 4)), (5, 7), (2, 6), (3, 4)]
)
def test_store_layout_is_the_stored_tables(store_path: str, k: int, blocks: int) -> None:
    """A format-2 store's tables (and stats().layout) are permutations of 0..63,
    C(blocks, k) of them, and equal the one-level layout for its parameters."""
    with simstore.open(store_path, k=k, blocks=blocks) as store:
        expected_blocks = blocks
        assert store.blocks == expected_blocks
        stats = store.stats()
        assert stats.tables == comb(expected_blocks, k) == len(store.tables)
        for bit_order in stats.layout:
            assert sorted(bit_order) == list(range(64))
        assert list(store.tables) == one_level_tables(k, expected_blocks)
        assert stats.prefix_bits == tuple(table.prefix_bits for table in store.tables)


# -- validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "bit_order",
    [
        tuple(range(63)),
        (*range(63), 62),
        (*range(63), 64),
        (*range(64), 0),
        (*range(1, 64), -1),
    ],
)
def test_table_refuses_a_bit_order_that_is_not_a_permutation(bit_order: tuple[int, ...]) -> None:
    """A Table cannot be built from anything but a permutation of 0..63."""
    with pytest.raises(InvalidValueError):
        Table(bit_order, 10)


@pytest.mark.parametrize("prefix_bits", [0, -1, 65])
def test_table_refuses_a_bad_prefix_length(prefix_bits: int) -> None:
    """Prefix lengths outside 1..64 are refused."""
    with pytest.raises(InvalidValueError):
        Table(tuple(range(64)), prefix_bits)


@pytest.mark.parametrize(
    ("k", "blocks", "error"),
    [
        (3, 3, InvalidValueError),  # no error-free block
        (0, 0, InvalidValueError),
        (2, 65, InvalidValueError),
        (-1, 3, InvalidValueError),
        (33, 40, InvalidValueError),
        (16, 32, InvalidValueError),  # far more than 512 tables
        (True, 3, InvalidTypeError),
        (2, 4.0, InvalidTypeError),
        (2, True, InvalidTypeError),
        ("2", 4, InvalidTypeError),
    ],
)
def test_one_level_tables_refuses_bad_parameters(k: object, blocks: object, error: type[Exception]) -> None:
    """Impossible or oversized layouts are refused with the documented error type."""
    with pytest.raises(error):
        one_level_tables(k, blocks)  # type: ignore[arg-type]


@FAST
@given(a=fingerprints, b=fingerprints)
def test_hamming_counts_differing_bits(a: int, b: int) -> None:
    """simstore.hamming is the XOR popcount, symmetric, zero only for equal inputs."""
    expected = bin(a ^ b).count("1")
    assert simstore.hamming(a, b) == expected == simstore.hamming(b, a)
    assert (simstore.hamming(a, b) == 0) == (a == b)


@pytest.mark.parametrize("bad", [-1, 2**64, 1.0, True, "1", None])
def test_hamming_refuses_non_fingerprints(bad: object) -> None:
    """hamming validates both arguments like every other fingerprint input."""
    with pytest.raises((InvalidTypeError, InvalidValueError)):
        simstore.hamming(bad, 0)  # type: ignore[arg-type]
    with pytest.raises((InvalidTypeError, InvalidValueError)):
        simstore.hamming(0, bad)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    k=st.integers(0, 8),
    extra=st.integers(1, 3),
    fingerprint=st.integers(0, 2**64 - 1),
)
def test_every_permuter_equals_each_tables_permute(k: int, extra: int, fingerprint: int) -> None:
    tables = one_level_tables(k, k + extra)
    expected = [table.permute(fingerprint) for table in tables]
    assert TablesPermuter(tables)(fingerprint) == expected
    assert list(lane_permuter(tables)(fingerprint)) == expected
    assert list(tables_permuter(tables)(fingerprint)) == expected


def test_tables_permuter_picks_lanes_for_small_layouts_and_numpy_for_large() -> None:
    assert isinstance(tables_permuter(one_level_tables(6, 10)), TablesPermuter)  # 210 tables
    assert not isinstance(tables_permuter(one_level_tables(3, 5)), TablesPermuter)


def test_tables_permuter_two_level_layouts() -> None:
    tables = two_level(3, 4, 3, 4).tables
    rng = np.random.default_rng(3)
    permuter = TablesPermuter(tables)
    lanes = lane_permuter(tables)
    for fingerprint in [*rng.integers(0, 2**64, 200, dtype=np.uint64).tolist(), 0, 2**64 - 1]:
        assert permuter(fingerprint) == [table.permute(fingerprint) for table in tables]
        assert list(lanes(fingerprint)) == [table.permute(fingerprint) for table in tables]
