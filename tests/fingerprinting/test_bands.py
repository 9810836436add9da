"""Band keys of sketches (simstore.fingerprinting.bands) and pairs sharing a
key (simstore.index.shared_keys), each against a brute-force reference."""

from __future__ import annotations

import itertools
import math
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.fingerprinting.bands import (
    FEW_ROWS,
    MAX_FILLED,
    MIN_BAND_BITS,
    MIN_FILLED,
    band_keys,
    band_shared,
    band_slots,
    filled_bins,
    kept_bands,
    keyed_bands,
    shares_band_rows,
    sketch_codes,
    slot_keys,
)
from simstore.fingerprinting.sketch import Sketch, _pack
from simstore.index import shared_keys
from simstore.index.prefix_shuffle import edge_forest
from simstore.index.shared_keys import key_star_edges, pairs_across, pairs_beyond_k, pairs_sharing_keys

SKETCHES = (Sketch(), Sketch(bins=64, bits=8), Sketch(bins=128, bits=2))


def _sketches(seed: int, sketch: Sketch, families: int, per_family: int) -> np.ndarray:
    """Packed sketches in families: each a random fill, and copies with a
    few bins changed, so that some bands are shared and others not."""
    rng = np.random.default_rng(seed)
    top = (1 << sketch.bits) - 1
    codes = []
    for _ in range(families):
        fill = rng.uniform(0.02, 1.0)
        base = np.where(rng.random(sketch.bins) < fill, rng.integers(1, top + 1, sketch.bins), 0)
        for _ in range(per_family):
            copy = base.copy()
            changed = rng.integers(0, sketch.bins, rng.integers(0, 6))
            copy[changed] = np.where(
                rng.random(len(changed)) < 0.8, rng.integers(1, top + 1, len(changed)), 0
            )
            codes.append(copy)
    return _pack(np.array(codes, dtype=np.uint8).reshape(-1, sketch.bins), sketch.bits)


def _reference_pairs(rows: np.ndarray, sketch: Sketch) -> set[tuple[int, int]]:
    """Pairs sharing a band, from the rules in the module's docstring, in loops."""
    codes = sketch_codes(rows, sketch)
    code_bits = math.log2((1 << sketch.bits) - 1)
    width = max(1, 8 // sketch.bits)
    banded: list[set[tuple[int, int, bytes]]] = [set() for _ in range(len(codes))]
    while width <= sketch.bins:
        for doc, row in enumerate(codes):
            spread = int(np.count_nonzero(row)) * width / sketch.bins
            if not MIN_FILLED <= spread <= MAX_FILLED:
                continue
            for band in range(sketch.bins // width):
                piece = row[band * width : (band + 1) * width]
                filled = int(np.count_nonzero(piece))
                if filled * code_bits + math.log2(math.comb(width, filled)) >= MIN_BAND_BITS:
                    banded[doc].add((width, band, piece.tobytes()))
        width *= 2
    return {(a, b) for a, b in itertools.combinations(range(len(codes)), 2) if banded[a] & banded[b]}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(SKETCHES))
def test_band_pairs_equal_the_reference(seed: int, sketch: Sketch) -> None:
    rows = _sketches(seed, sketch, families=6, per_family=4)
    keys = band_keys(rows, sketch)
    left, right = pairs_sharing_keys(keys.rows, keys.keys)
    assert set(zip(left.tolist(), right.tolist(), strict=True)) == _reference_pairs(rows, sketch)


def test_a_full_sketch_is_banded_in_bands_of_8_and_an_empty_one_not_at_all() -> None:
    sketch = Sketch()
    full = _pack(np.arange(256, dtype=np.uint8).reshape(1, 256) % 15 + 1, 4)
    keys = band_keys(np.vstack([full, np.zeros_like(full)]), sketch)
    assert keys.rows.tolist() == [0] * 32  # 256 bins in bands of 8: 32 bits of codes each
    assert len(set(keys.keys.tolist())) == 32


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6)), max_size=60))
def test_pairs_sharing_keys_equal_brute_force(entries: list[tuple[int, int]]) -> None:
    items = np.array([item for item, _ in entries], dtype=np.int64)
    keys = np.array([key for _, key in entries], dtype=np.uint64)
    left, right = pairs_sharing_keys(items, keys)
    got = list(zip(left.tolist(), right.tolist(), strict=True))
    expected = sorted(
        {
            (min(a, b), max(a, b))
            for (a, ka), (b, kb) in itertools.combinations(entries, 2)
            if ka == kb and a != b
        }
    )
    assert got == expected


_ENTRIES = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6)), max_size=40)


@settings(max_examples=100, deadline=None)
@given(_ENTRIES, _ENTRIES, st.sampled_from([0, shared_keys.FEW_KEYS]))
def test_pairs_across_equal_brute_force(
    left: list[tuple[int, int]], right: list[tuple[int, int]], few_keys: int
) -> None:
    """In a dict (a few keys) and in numpy (``FEW_KEYS`` 0: always)."""
    with mock.patch.object(shared_keys, "FEW_KEYS", few_keys):
        a, b = pairs_across(
            np.array([item for item, _ in left], dtype=np.int64),
            np.array([key for _, key in left], dtype=np.uint64),
            np.array([item for item, _ in right], dtype=np.int64),
            np.array([key for _, key in right], dtype=np.uint64),
        )
    got = list(zip(a.tolist(), b.tolist(), strict=True))
    assert got == sorted({(x, y) for x, kx in left for y, ky in right if kx == ky})


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5)), max_size=50),
    st.lists(st.integers(0, 2**64 - 1), min_size=16, max_size=16),
    st.integers(0, 64),
)
def test_pairs_beyond_k_equal_brute_force(entries: list[tuple[int, int]], pool: list[int], k: int) -> None:
    """Positions 0..15 with fingerprints drawn from a few values (copies
    included), keys shared at random."""
    fingerprint_of = [pool[position % 5] for position in range(16)]
    positions = np.array([position for position, _ in entries], dtype=np.int64)
    keys = np.array([key for _, key in entries], dtype=np.uint64)
    fingerprints = np.array([fingerprint_of[position] for position, _ in entries], dtype=np.uint64)
    first, second, distance = pairs_beyond_k(keys, positions, fingerprints, k)
    got = list(zip(first.tolist(), second.tolist(), distance.tolist(), strict=True))
    expected = set()
    for (a, ka), (b, kb) in itertools.combinations(entries, 2):
        bits = (fingerprint_of[a] ^ fingerprint_of[b]).bit_count()
        if ka == kb and a != b and bits > k:
            expected.add((min(a, b), max(a, b), bits))
    assert got == sorted(expected)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 12)), max_size=50))
def test_key_star_edges_join_what_pairs_sharing_a_key_join(entries: list[tuple[int, int]]) -> None:
    keys = np.array([key for key, _ in entries], dtype=np.uint64)
    fingerprints = np.array([fingerprint for _, fingerprint in entries], dtype=np.uint64)
    low, high = key_star_edges(keys, fingerprints)
    assert (low < high).all()
    pairs = {(a, b) for (ka, a), (kb, b) in itertools.combinations(entries, 2) if ka == kb and a != b}
    every_low = np.array([min(pair) for pair in pairs], dtype=np.uint64)
    every_high = np.array([max(pair) for pair in pairs], dtype=np.uint64)
    nodes, roots = edge_forest(low, high)
    want_nodes, want_roots = edge_forest(every_low, every_high)
    assert dict(zip(nodes.tolist(), roots.tolist(), strict=True)) == dict(
        zip(want_nodes.tolist(), want_roots.tolist(), strict=True)
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(SKETCHES))
def test_the_keys_of_every_slot_are_the_band_keys(seed: int, sketch: Sketch) -> None:
    rows = _sketches(seed, sketch, families=6, per_family=4)
    whole = band_keys(rows, sketch)
    filled = filled_bins(rows, sketch)
    assert filled.tolist() == (sketch_codes(rows, sketch) != 0).sum(axis=1).tolist()
    by_slot = [slot_keys(rows, filled, sketch, slot) for slot in band_slots(sketch)]
    got = sorted(
        (row, key)
        for part in by_slot
        for row, key in zip(part.rows.tolist(), part.keys.tolist(), strict=True)
    )
    assert got == sorted(zip(whole.rows.tolist(), whole.keys.tolist(), strict=True))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(SKETCHES), st.sampled_from([None, 1, 3, 8]))
def test_a_few_sketches_banded_in_python_get_the_numpy_keys(
    seed: int, sketch: Sketch, per_width: int | None
) -> None:
    """A query's sketch and its candidates' take the plain-Python path
    (``FEW_ROWS``): the same keys, in the same order, as the vectorised one,
    which the kept bands of ``per_width`` thin the same way."""
    rows = _sketches(seed, sketch, families=3, per_family=3)
    numpy_keys = band_keys(rows, sketch, per_width)  # more rows than FEW_ROWS: vectorised
    whole = band_keys(rows, sketch)
    assert set(zip(numpy_keys.rows.tolist(), numpy_keys.keys.tolist(), strict=True)) <= set(
        zip(whole.rows.tolist(), whole.keys.tolist(), strict=True)
    )
    for start in range(0, len(rows), FEW_ROWS):
        few = band_keys(rows[start : start + FEW_ROWS], sketch, per_width)
        wanted = (numpy_keys.rows >= start) & (numpy_keys.rows < start + FEW_ROWS)
        expected = sorted(
            zip((numpy_keys.rows[wanted] - start).tolist(), numpy_keys.keys[wanted].tolist(), strict=True)
        )
        assert sorted(zip(few.rows.tolist(), few.keys.tolist(), strict=True)) == expected


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(SKETCHES), st.sampled_from([None, 1, 3, 8]))
def test_band_shared_is_a_shared_band_key(seed: int, sketch: Sketch, per_width: int | None) -> None:
    """A single query's candidates are verified by comparing band bytes:
    the same answer as intersecting the band keys of both (families share
    some bands and not others; fills reach every width)."""
    rows = _sketches(seed, sketch, families=3, per_family=4)
    keys = band_keys(rows, sketch, per_width)
    key_sets = [set(keys.keys[keys.rows == row].tolist()) for row in range(len(rows))]
    for query in range(len(rows)):
        expected = [bool(key_sets[query] & key_sets[row]) for row in range(len(rows))]
        keyed = keyed_bands(rows[query], sketch, per_width)
        filled = filled_bins(rows, sketch).tolist()
        assert [
            band_shared(keyed, row.tobytes(), count) for row, count in zip(rows, filled, strict=True)
        ] == expected
        # The numpy check of many rows gives the same answers.
        assert shares_band_rows(keyed, rows, sketch).tolist() == expected
    assert any(expected) or not key_sets[query]  # a banded sketch shares a band with itself


def test_kept_bands_are_evenly_spaced_and_at_most_per_width() -> None:
    assert kept_bands(32, 8) == slice(0, 32, 4)
    assert kept_bands(8, 8) == slice(None)
    assert kept_bands(32, None) == slice(None)
    for bands in (2, 7, 32, 128):
        for per_width in (1, 3, 5, 8, 200):
            kept = range(bands)[kept_bands(bands, per_width)]
            assert 1 <= len(kept) <= min(bands, per_width)
            assert len(kept) >= min(bands, per_width) // 2  # not thinned past half what was asked
