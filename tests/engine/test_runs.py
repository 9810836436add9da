"""The table format (simstore.engine.runs): what is encoded decodes to the same
entries, a probe finds exactly the entries a brute-force filter would, and a
damaged bucket is reported, never decoded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.engine import runs
from simstore.errors import CorruptStoreError
from simstore.index.permute import MAX_FINGERPRINT

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


@st.composite
def run_contents(draw: st.DrawFn) -> tuple[runs.Geometry, np.ndarray, np.ndarray]:
    prefix_bits = draw(st.integers(min_value=1, max_value=40))
    # Few distinct high bits make crowded buckets and equal keys likely.
    high = draw(st.lists(U64, min_size=1, max_size=4))
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from(high), st.integers(min_value=0, max_value=(1 << 30) - 1)),
            min_size=1,
            max_size=300,
        )
    )
    permuted = np.array(sorted(h ^ low for h, low in keys), dtype=np.uint64)
    doc_ids = np.array(draw(st.permutations(range(len(permuted)))), dtype=np.uint64) * np.uint64(
        draw(st.sampled_from([1, 255, 70_001, 1 << 33]))
    )
    known_limit = draw(st.integers(min_value=prefix_bits, max_value=64))
    filter_bits = runs.filter_bits_for(draw(st.integers(min_value=0, max_value=8)))
    geometry = runs.choose_geometry(
        len(permuted), prefix_bits, int(doc_ids.max()), known_limit=known_limit, filter_bits=filter_bits
    )
    return geometry, permuted, doc_ids


def known(permuted: np.ndarray, geometry: runs.Geometry) -> np.ndarray:
    """The keys a run records, worked out one Python int at a time (an oracle for
    runs.known_keys and the decoders)."""
    unknown = 64 - geometry.known_bits
    return np.array([int(key) >> unknown << unknown for key in permuted], dtype=np.uint64)


def test_known_keys_clear_the_bits_past_known_bits() -> None:
    geometry = runs.choose_geometry(1000, 20, 999)
    keys = np.random.default_rng(4).integers(0, 2**64, 500, dtype=np.uint64)
    assert runs.known_keys(keys, geometry).tolist() == known(keys, geometry).tolist()


@settings(max_examples=200, deadline=None)
@given(run_contents(), st.integers(min_value=0, max_value=(1 << 32) - 2))
def test_buckets_decode_to_what_was_encoded(
    contents: tuple[runs.Geometry, np.ndarray, np.ndarray], run_id: int
) -> None:
    geometry, permuted, doc_ids = contents
    buckets = list(runs.encode_buckets(run_id, geometry, permuted, doc_ids))
    keys = [key for key, _ in buckets]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    one_by_one = [runs.check_bucket(key, value, geometry) for key, value in buckets]
    for key, (bucket_keys, _) in zip(keys, one_by_one, strict=True):
        assert {runs.bucket_of(int(k), geometry) for k in bucket_keys} == {runs.KEY.unpack(key)[1]}
    all_keys = np.concatenate([k for k, _ in one_by_one])
    all_ids = np.concatenate([i for _, i in one_by_one])
    at_once_keys, at_once_ids = runs.decode_buckets(keys, [value for _, value in buckets], geometry)
    assert np.array_equal(all_keys, known(permuted, geometry))
    assert np.array_equal(at_once_keys, all_keys)
    assert np.array_equal(at_once_ids, all_ids)
    # Every entry is kept with its own id.
    assert sorted(zip(all_keys.tolist(), all_ids.tolist(), strict=True)) == sorted(
        zip(known(permuted, geometry).tolist(), doc_ids.tolist(), strict=True)
    )


@settings(max_examples=300, deadline=None)
@given(run_contents(), U64, st.integers(min_value=0, max_value=8))
def test_a_probe_finds_what_a_brute_force_filter_finds(
    contents: tuple[runs.Geometry, np.ndarray, np.ndarray], query_key: int, k: int
) -> None:
    """probe() of the query's bucket, and probe_buckets() of it (the numpy
    search crowded prefixes use), find exactly the entries a brute-force
    filter does."""
    geometry, permuted, doc_ids = contents
    if len(permuted) and query_key % 2:  # half the time, a query near an entry
        query_key = int(permuted[query_key % len(permuted)]) ^ (query_key >> 50)
    plan = runs.probe_plan(geometry)
    found: list[int] = []
    together: list[int] = []
    for key, value in runs.encode_buckets(7, geometry, permuted, doc_ids):
        if runs.KEY.unpack(key)[1] == runs.bucket_of(query_key, geometry):
            found = runs.probe(key, value, plan, query_key, geometry.bucket_bits, k)
            query_tag = ((query_key << geometry.bucket_bits) & MAX_FINGERPRINT) >> plan[1]
            prefix_mask, filter_mask = runs.probe_masks(plan)
            together = runs.probe_buckets(
                [key], [value], plan[4], plan[5], [query_tag], [prefix_mask], [filter_mask], k
            )
    prefix_shift = 64 - geometry.prefix_bits
    known_shift = 64 - geometry.known_bits
    expected = [
        int(doc_id)
        for key, doc_id in zip(permuted.tolist(), doc_ids.tolist(), strict=True)
        if key >> prefix_shift == query_key >> prefix_shift
        and ((key ^ query_key) >> known_shift).bit_count() <= k
    ]
    assert sorted(found) == sorted(expected)
    assert sorted(together) == sorted(expected)


@settings(max_examples=100, deadline=None)
@given(run_contents(), st.data())
def test_any_damaged_byte_is_reported(
    contents: tuple[runs.Geometry, np.ndarray, np.ndarray], data: st.DataObject
) -> None:
    geometry, permuted, doc_ids = contents
    buckets = list(runs.encode_buckets(3, geometry, permuted, doc_ids))
    index = data.draw(st.integers(min_value=0, max_value=len(buckets) - 1))
    key, value = buckets[index]
    position = data.draw(st.integers(min_value=0, max_value=len(value) - 1))
    flip = data.draw(st.integers(min_value=1, max_value=255))
    damaged = value[:position] + bytes([value[position] ^ flip]) + value[position + 1 :]
    with pytest.raises(CorruptStoreError):
        runs.check_bucket(key, damaged, geometry)
    with pytest.raises(CorruptStoreError):
        runs.decode_buckets(
            [k for k, _ in buckets],
            [damaged if i == index else v for i, (_, v) in enumerate(buckets)],
            geometry,
        )
    cut = value[:position]  # shorter than its header, or by part of an entry or more
    with pytest.raises(CorruptStoreError):
        runs.decode_buckets(
            [k for k, _ in buckets], [cut if i == index else v for i, (_, v) in enumerate(buckets)], geometry
        )
    plan = runs.probe_plan(geometry)
    with pytest.raises(CorruptStoreError):
        runs.probe(key, damaged, plan, int(permuted[0]), geometry.bucket_bits, 64)
    with pytest.raises(CorruptStoreError):
        runs.probe_buckets([key], [damaged], plan[4], plan[5], [0], [0], [0], 64)


def test_a_bucket_under_another_key_is_reported() -> None:
    geometry = runs.choose_geometry(1000, 20, 999)
    permuted = np.sort(np.random.default_rng(1).integers(0, 1 << 63, size=1000, dtype=np.uint64))
    buckets = list(runs.encode_buckets(5, geometry, permuted, np.arange(1000, dtype=np.uint64)))
    (first_key, first_value), (second_key, _) = buckets[0], buckets[1]
    with pytest.raises(CorruptStoreError):
        runs.check_bucket(second_key, first_value, geometry)
    with pytest.raises(CorruptStoreError):
        runs.decode_buckets([second_key], [first_value], geometry)
    assert runs.decode_buckets([first_key], [first_value], geometry)[0].size > 0
