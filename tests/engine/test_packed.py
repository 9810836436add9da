"""A bulk write's packed keys: held compactly, given back exactly, and
``ascending`` exactly when the key table would take them in that order."""

from __future__ import annotations

import itertools
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.engine import records
from simstore.engine.packed import PackedKeys, byte_order
from simstore.engine.records import MAX_DIRECT_KEY_BYTES, encode_record, lookup_key
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.keys import pack_key

keys_strategy = st.lists(
    st.one_of(
        st.integers(min_value=2**16, max_value=2**32 - 1),  # all five bytes packed: the fixed-width path
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.text(max_size=8),
        st.binary(max_size=8),
        st.binary(min_size=MAX_DIRECT_KEY_BYTES, max_size=MAX_DIRECT_KEY_BYTES + 3),  # hashed lookups
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(keys=keys_strategy, slice_size=st.integers(min_value=1, max_value=9), sort=st.booleans())
def test_packed_keys_are_the_keys_encodings(keys: list[Any], slice_size: int, sort: bool) -> None:
    if sort:  # sorted batches are the ones that take the fast path
        keys = sorted(keys, key=lambda key: lookup_key(pack_key(key)))
    expected = [pack_key(key) for key in keys]
    lookups = [lookup_key(packed) for packed in expected]
    with mock.patch.object(records, "WRITE_SLICE", slice_size):
        packed_keys = PackedKeys.of(iter(keys))
        assert len(packed_keys) == len(keys)
        assert packed_keys.take(range(len(keys))) == expected
        assert packed_keys.take(list(range(len(keys)))[::-1]) == expected[::-1]
        assert [packed_keys.at(position) for position in range(len(keys))] == expected
        assert list(packed_keys.sliced_lookups(range(len(keys)))) == lookups
        assert packed_keys.total_bytes == sum(map(len, expected))
        fingerprints = np.arange(len(keys), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        backwards = list(range(len(keys)))[::-1]
        assert packed_keys.record_values(fingerprints, range(len(keys))) == [
            encode_record(int(fingerprint), packed)
            for fingerprint, packed in zip(fingerprints, expected, strict=True)
        ]
        assert packed_keys.record_values(fingerprints[::-1].copy(), backwards) == [
            encode_record(int(fingerprints[position]), expected[position]) for position in backwards
        ]
    assert packed_keys.ascending == all(a < b for a, b in itertools.pairwise(lookups))


@pytest.mark.parametrize(
    "keys",
    [
        range(70_000, 70_100),
        [f"{index:04}" for index in range(100)],
        [bytes([index]) for index in range(100)],
    ],
)
def test_keys_of_one_width_come_back_exactly_by_range_and_by_positions(keys: Any) -> None:
    """Keys that all pack to the same width take numpy's path; it must give
    what packing them one by one gives, in any order of positions."""
    expected = [pack_key(key) for key in keys]
    assert len(set(map(len, expected))) == 1
    packed_keys = PackedKeys.of(keys)
    chosen = [7, 3, 99, 0, 3]
    fingerprints = np.arange(5, dtype=np.uint64) << np.uint64(40)
    assert packed_keys.take(range(10, 20)) == expected[10:20]
    assert packed_keys.take(chosen) == [expected[position] for position in chosen]
    assert packed_keys.record_values(fingerprints, chosen) == [
        encode_record(fingerprint, expected[position])
        for fingerprint, position in zip(fingerprints.tolist(), chosen, strict=True)
    ]
    assert packed_keys.record_values(fingerprints, range(5)) == [
        encode_record(fingerprint, packed)
        for fingerprint, packed in zip(fingerprints.tolist(), expected[:5], strict=True)
    ]


def test_a_bad_key_anywhere_in_a_batch_is_refused_with_the_key_by_key_error() -> None:
    with mock.patch.object(records, "WRITE_SLICE", 3):
        with pytest.raises(InvalidTypeError, match="float"):
            PackedKeys.of([1, 2, 3, 4, 5.0, 6])
        with pytest.raises(InvalidValueError, match="2\\*\\*64"):
            PackedKeys.of(iter([1, 2, 3, 4, 2**64]))


@pytest.mark.parametrize("slice_size", [1, 5, 1 << 16])
def test_sorted_unsorted_and_repeated_bulk_keys_store_the_same(tmp_path: Any, slice_size: int) -> None:
    """The same documents given as a range, a generator, a numpy array, in
    reverse, and with repeats (the last one wins) leave the same store, into
    an empty store and into one that already holds some of the keys."""
    rng = np.random.default_rng(slice_size)
    fingerprints = rng.integers(0, 2**64, 40, dtype=np.uint64)
    expected = dict(enumerate(fingerprints.tolist()))
    batches: dict[str, tuple[Any, np.ndarray]] = {
        "range": (range(40), fingerprints),
        "generator": (None, fingerprints),  # a fresh generator each time, below
        "array": (np.arange(40), fingerprints),
        "reversed": (list(range(39, -1, -1)), fingerprints[::-1].copy()),
        "repeats": ([*range(40), 3, 7], np.concatenate([fingerprints, fingerprints[[3, 7]]])),
    }
    batches["repeats, first value lost"] = (
        [3, 7, *range(40)],
        np.concatenate([~fingerprints[[3, 7]], fingerprints]),
    )
    with mock.patch.object(records, "WRITE_SLICE", slice_size):
        for name, (keys, fps) in batches.items():
            for prefilled in (False, True):
                path = str(tmp_path / f"{name}-{prefilled}.simstore")
                with simstore.open(path, "n", k=3) as store:
                    if prefilled:
                        store.add_many(range(0, 40, 2), fingerprints[::2] ^ np.uint64(1))
                    given = list(range(40)) if keys is None else list(keys)
                    store.add_many(iter(given) if keys is None else keys, fps)
                    if not prefilled:  # a store iterates in the order keys were first added
                        assert list(store) == list(dict.fromkeys(int(key) for key in given)), name
                    assert dict(store.items()) == expected, (name, prefilled)
                    assert store.check() == []
                    for key, fingerprint in expected.items():
                        assert key in {match.key for match in store.query(fingerprint=fingerprint, k=0)}


# Strings that tie on their first eight bytes, end inside a word, or differ
# from another only by trailing zero bytes: where a radix sort goes wrong.
_tricky = st.sampled_from(
    [
        b"\x00",
        b"\x00\x00",
        b"a",
        b"a\x00",
        b"ab",
        b"abcdefgh",
        b"abcdefgh\x00",
        b"abcdefghi",
        b"abcdefgg\xff",
        b"\xff" * 9,
    ]
)


@settings(max_examples=400, deadline=None)
@given(strings=st.lists(st.one_of(_tricky, st.binary(min_size=1, max_size=20)), max_size=30))
def test_byte_order_is_lmdbs_order_and_finds_runs_of_equal_strings(strings: list[bytes]) -> None:
    offsets = np.cumsum([0, *map(len, strings)]).astype(np.int64)
    order, run_starts = byte_order(np.frombuffer(b"".join(strings), dtype=np.uint8), offsets)
    # Python compares bytes as LMDB does: bytewise, the shorter first on a common prefix.
    assert order.tolist() == sorted(range(len(strings)), key=strings.__getitem__)  # stable too
    expected_starts = [j == 0 or strings[order[j]] != strings[order[j - 1]] for j in range(len(strings))]
    assert run_starts.tolist() == expected_starts


@settings(max_examples=300, deadline=None)
@given(keys=keys_strategy, sort=st.booleans())
def test_distinct_keeps_last_positions_in_first_occurrence_order(keys: list[Any], sort: bool) -> None:
    """A batch's documents are numbered in the order their keys first occur
    (the store iterates in that order), each with its key's last value, and
    the key order sorts their lookups as the key table does."""
    if sort:
        keys = sorted(keys, key=lambda key: lookup_key(pack_key(key)))
    lookups = [lookup_key(pack_key(key)) for key in keys]
    last_position = {lookup: position for position, lookup in enumerate(lookups)}
    first_seen = list(dict.fromkeys(lookups))
    positions, key_order = PackedKeys.of(keys).distinct()
    assert list(positions) == [last_position[lookup] for lookup in first_seen]
    in_key_order = list(positions) if key_order is None else [positions[index] for index in key_order]
    assert [lookups[position] for position in in_key_order] == sorted(first_seen)
