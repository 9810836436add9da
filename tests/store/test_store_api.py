"""The Store API: keys, fingerprints, metadata, replacement, iteration, stats, check,
closing, map growth, the map ceiling and use from several threads."""

from __future__ import annotations

import contextlib
import pathlib
import threading
from collections.abc import Callable
from math import comb
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.engine import records
from simstore.engine.packed import PackedKeys
from simstore.engine.records import MAX_DIRECT_KEY_BYTES
from simstore.errors import SimstoreError
from simstore.keys import pack_key, pack_keys

Key = str | bytes | int


def keys_at_distance_zero(store: simstore.Store, fingerprint: int) -> list[Key]:
    return [match.key for match in store.query(fingerprint=fingerprint, k=0)]


# -- keys --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "plain",
        "",
        "\u4e2d\u6587 \U0001f600 caf\u00e9",
        b"",
        b"\x00\xff\xc1 binary",
        0,
        -1,
        2**63,
        2**64 - 1,
        -(2**63),
    ],
)
def test_key_round_trips_with_its_type(store: simstore.Store, key: Key) -> None:
    """A key comes back from get, iteration, items and query as the same value and type."""
    store.add(key, fingerprint=42, meta={"k": 1})
    for returned in (store[key].key, next(iter(store)), next(store.items())[0], store.query(42)[0].key):
        assert returned == key
        assert type(returned) is type(key)
    assert key in store


def test_equal_looking_keys_of_different_types_are_distinct(store: simstore.Store) -> None:
    """1, "1" and b"1" are three documents, listed int, bytes, str at equal distance."""
    store.add("1", fingerprint=10)
    store.add(b"1", fingerprint=10)
    store.add(1, fingerprint=10)
    assert len(store) == 3
    assert [match.key for match in store.query(10)] == [1, b"1", "1"]
    store.remove(b"1")
    assert list(store) == ["1", 1]
    assert 1 in store
    assert "1" in store
    assert b"1" not in store


def test_mixed_keys_sorted_by_distance_then_type_then_value(store: simstore.Store) -> None:
    """Results order: distance, then ints before bytes before str, each in natural order."""
    entries: list[tuple[Key, int]] = [
        ("b", 0),
        ("a", 0),
        (b"z", 0),
        (b"a", 0),
        (5, 0),
        (-5, 0),
        ("a1", 1),
        (0, 1),
        (b"q", 2),
    ]
    store.add_many([key for key, _ in entries], [distance_bits for _, distance_bits in _fps(entries)])
    got = [(match.key, match.distance) for match in store.query(fingerprint=0)]
    assert got == [(-5, 0), (5, 0), (b"a", 0), (b"z", 0), ("a", 0), ("b", 0), (0, 1), ("a1", 1), (b"q", 2)]


def _fps(entries: list[tuple[Key, int]]) -> list[tuple[Key, int]]:
    """A fingerprint at the given distance from 0 for each entry (distinct bits per entry)."""
    return [(key, (1 << distance) - 1 << (index % 40)) for index, (key, distance) in enumerate(entries)]


LONG_URL = "https://example.com/" + "/".join(f"segment-{i:04d}" for i in range(200))


@pytest.mark.parametrize("merged", [False, True])
def test_very_long_keys(store: simstore.Store, merged: bool) -> None:
    """2,000-character URLs (looked up by digest) add, get, query, replace and remove;
    long keys that differ only at the end stay distinct."""
    first = LONG_URL[:1999] + "a"
    second = LONG_URL[:1999] + "b"
    assert len(first) == 2000
    long_bytes = first.encode() * 2
    store.add(first, fingerprint=1, meta={"n": 1})
    store.add(second, fingerprint=1)
    store.add(long_bytes, fingerprint=1)
    if merged:
        store.merge()
    assert len(store) == 3
    assert store[first] == simstore.Record(first, 1, {"n": 1})
    assert store[second] == simstore.Record(second, 1, None)
    assert store[long_bytes].key == long_bytes
    assert keys_at_distance_zero(store, 1) == [long_bytes, first, second]
    store.add(first, fingerprint=2)
    assert keys_at_distance_zero(store, 2) == [first]
    assert len(store) == 3
    store.remove(second)
    assert second not in store
    assert first in store
    assert store.check() == []


def test_keys_either_side_of_the_digest_threshold(store: simstore.Store) -> None:
    """Keys whose encoding is just under, at and just over the direct-lookup limit all work
    and stay distinct."""
    keys: list[Key] = []
    for length in range(MAX_DIRECT_KEY_BYTES - 6, MAX_DIRECT_KEY_BYTES + 4):
        text = "k" * length
        keys.append(text)
        keys.append(text.encode())
    assert {len(pack_key(key)) for key in keys} >= {MAX_DIRECT_KEY_BYTES, MAX_DIRECT_KEY_BYTES + 1}
    store.add_many(keys, list(range(len(keys))))
    assert list(store) == keys
    for index, key in enumerate(keys):
        assert store[key].fingerprint == index
    assert store.check() == []


def _packed_or_error(keys: list[Any]) -> object:
    try:
        return [pack_key(key) for key in keys]
    except SimstoreError as exc:
        return type(exc)


_any_key = st.one_of(
    st.text(),
    st.binary(),
    st.integers(-(2**63), 2**64 - 1),
    st.integers(),  # out of range ones too
    st.booleans(),
    st.floats(allow_nan=False),
    st.just("\ud800"),  # a lone surrogate: not encodable
)


@settings(max_examples=300, deadline=None)
@given(
    keys=st.one_of(
        st.lists(st.text(), max_size=20),
        st.lists(st.binary(), max_size=20),
        st.lists(st.integers(-(2**64), 2**65), max_size=20),
        st.lists(_any_key, max_size=20),
    )
)
def test_pack_keys_packs_and_refuses_exactly_as_pack_key_does(keys: list[Any]) -> None:
    """The batch path (C-level loops for a batch of one plain type) must agree with
    the key-at-a-time path on every key, and refuse the same batches with the same error."""
    expected = _packed_or_error(keys)
    if isinstance(expected, list):
        assert pack_keys(keys) == expected
    else:
        with pytest.raises(expected):  # type: ignore[call-overload]
            pack_keys(keys)


_u64s = st.integers(0, 2**64 - 1)


@settings(max_examples=100, deadline=None)
@given(
    pairs=st.lists(st.tuples(_u64s, _u64s), max_size=40),
    slice_size=st.integers(1, 9),
)
def test_bulk_write_pairs_are_the_big_endian_columns_whatever_the_slice(
    pairs: list[tuple[int, int]], slice_size: int
) -> None:
    """Bulk writes make their LMDB pairs a slice at a time; slicing must not
    drop, repeat or reorder a pair, at any slice size."""
    keys = np.array([key for key, _ in pairs], dtype=np.uint64)
    values = np.array([value for _, value in pairs], dtype=np.uint64)
    expected = [(key.to_bytes(8, "big"), value.to_bytes(8, "big")) for key, value in pairs]
    packed = [pack_key(f"key{index}") for index in range(len(pairs))]
    positions = list(range(len(pairs)))[::-1]
    expected_records = [
        (key.to_bytes(8, "big"), value.to_bytes(8, "big") + packed[position])
        for (key, value), position in zip(pairs, positions, strict=True)
    ]
    with mock.patch.object(records, "WRITE_SLICE", slice_size):
        assert list(records.big_endian_pairs(keys, values)) == expected
        packed_keys = PackedKeys.of(f"key{index}" for index in range(len(pairs)))
        assert (
            list(records.record_pairs(keys, values, packed_keys.record_values, positions)) == expected_records
        )


@pytest.mark.parametrize("slice_size", [1, 7, 64])
def test_bulk_adds_written_in_slices_are_found_exactly(tmp_path: Any, slice_size: int) -> None:
    """Bulk adds (straight into the tables, and into a store that holds
    documents, with keys repeated) written a few entries per slice leave a
    store whose answers are brute force's and whose check() is clean."""
    rng = np.random.default_rng(slice_size)
    base = rng.integers(0, 2**64, 300, dtype=np.uint64)
    near = base[:100] ^ (np.uint64(1) << rng.integers(0, 64, 100).astype(np.uint64))
    stored: dict[Key, int] = {}
    path = str(tmp_path / "s.simstore")
    with (
        mock.patch.object(records, "WRITE_SLICE", slice_size),
        simstore.open(path, "n", merge_threshold=50) as store,
    ):
        # Out of sorted order, as LMDB compares them (the key table is sorted before it is written).
        keys: list[Key] = [f"doc{index * 7919 % 1009}" for index in range(300)]
        store.add_many(keys, base)
        stored.update(zip(keys, base.tolist(), strict=True))
        # Repeats within the batch and of stored keys, new int keys, metadata.
        more_keys: list[Key] = ["doc5", "doc5", *range(100), keys[7]]
        more_fps = np.concatenate([near[:2], near, near[2:3]])
        metas = [{"n": index} for index in range(len(more_keys))]
        store.add_many(more_keys, more_fps, metas=metas)
        stored.update(zip(more_keys, more_fps.tolist(), strict=True))
        assert store.check() == []
        assert len(store) == len(stored)
        assert store.get("doc5").meta == {"n": 1}  # type: ignore[union-attr]
        fps = np.array(list(stored.values()), dtype=np.uint64)
        names = list(stored)
        for query in np.concatenate([base[::7], near[::5]]).tolist():
            distances = np.bitwise_count(fps ^ np.uint64(query))
            expected = sorted((int(d), str(names[i])) for i, d in enumerate(distances) if d <= 3)
            got = sorted((match.distance, str(match.key)) for match in store.query(query))
            assert got == expected


# -- fingerprints and replacement -------------------------------------------------------------


def test_several_keys_share_one_fingerprint(store: simstore.Store) -> None:
    """Documents with equal fingerprints are all found, in key order, merged or not."""
    store.add_many(["c", "a"], [7, 7])
    store.merge()
    store.add("b", fingerprint=7)
    store.add("far", fingerprint=7 ^ 0xF0F0_0000_0000_0000)
    assert keys_at_distance_zero(store, 7) == ["a", "b", "c"]
    assert [match.distance for match in store.query(7 ^ 1)] == [1, 1, 1]
    store.remove("a")
    assert keys_at_distance_zero(store, 7) == ["b", "c"]
    store.merge()
    assert keys_at_distance_zero(store, 7) == ["b", "c"]
    assert store.check() == []


@pytest.mark.parametrize(
    "where",
    ["delta", "merged", "merged-then-merge", "delta-then-merge", "batch-delta", "batch-merged"],
)
def test_replacing_a_fingerprint_moves_the_document(store: simstore.Store, where: str) -> None:
    """After re-adding a key with a new fingerprint the old one no longer matches and the
    new one does, whether the document sat in the delta or in the tables."""
    old, new = 0x1111_2222_3333_4444, 0x9999_AAAA_BBBB_CCCC
    store.add_many(["before", "doc", "after"], [5, old, 6])
    if where.endswith("merged") or where == "merged-then-merge":
        store.merge()
    if where.startswith("batch"):
        store.add_many(["other", "doc"], [old ^ 1, new])
    else:
        assert store.add("doc", fingerprint=new) == new
    if where.endswith("then-merge"):
        store.merge()
    assert "doc" not in [match.key for match in store.query(fingerprint=old)]
    assert keys_at_distance_zero(store, new) == ["doc"]
    assert store.query(fingerprint=new ^ 0b111) == [simstore.Match("doc", 3, new)]
    assert store["doc"].fingerprint == new
    assert list(store)[:3] == ["before", "doc", "after"]  # replacement keeps its place
    assert store.check() == []
    store.merge()
    assert "doc" not in [match.key for match in store.query(fingerprint=old)]
    assert keys_at_distance_zero(store, new) == ["doc"]
    assert store.check() == []


def test_re_adding_the_same_fingerprint_changes_only_meta(store: simstore.Store) -> None:
    """Re-adding a key with its own fingerprint keeps one document in the same place."""
    store.add_many(["a", "b"], [1, 2])
    store.merge()
    store.add("a", fingerprint=1, meta={"v": 2})
    assert len(store) == 2
    assert list(store) == ["a", "b"]
    assert store.stats().delta_docs == 0
    assert store.query(fingerprint=1, k=0) == [simstore.Match("a", 0, 1)]
    assert store["a"].meta == {"v": 2}
    assert store.check() == []


# -- meta ----------------------------------------------------------------------------------

META = {
    "title": "caf\u00e9 \u4e2d\u6587",
    "n": -7,
    "big": 2**63,
    "f": 1.5,
    "flag": True,
    "none": None,
    "raw": b"\x00\x01",
    "list": [1, "two", [3.0]],
    "nested": {"a": {"b": []}},
}


def test_meta_round_trips_and_is_replaced_or_cleared(store: simstore.Store) -> None:
    """Meta comes back from get() as given; re-adding replaces it, or clears it with no meta."""
    store.add("doc", fingerprint=1, meta=META)
    assert store["doc"].meta == META
    store.merge()
    assert store["doc"].meta == META
    store.add("doc", fingerprint=2, meta={"v": 2})
    assert store["doc"].meta == {"v": 2}
    store.add("doc", fingerprint=2)
    assert store["doc"].meta is None
    store.add("doc", fingerprint=2, meta={})
    assert store["doc"].meta == {}
    store.add_many(["doc", "other"], [3, 4], metas=[{"v": 3}, None])
    assert store["doc"].meta == {"v": 3}
    assert store["other"].meta is None
    store.add_many(["doc"], [3])
    assert store["doc"].meta is None
    store.remove("doc")
    store.add("doc", fingerprint=3)
    assert store["doc"].meta is None
    assert store.check() == []


def test_meta_accepts_any_mapping(store: simstore.Store) -> None:
    """A Mapping that is not a dict is stored as a dict."""
    from types import MappingProxyType

    store.add("doc", fingerprint=1, meta=MappingProxyType({"a": 1}))
    assert store["doc"].meta == {"a": 1}


# -- add_many ----------------------------------------------------------------------------


def test_add_many_duplicate_keys_last_wins(store: simstore.Store) -> None:
    """A key repeated in one batch keeps its last fingerprint and meta; order is first
    occurrence; the returned array is every fingerprint given, in order."""
    returned = store.add_many(
        ["a", "b", "a", 3, "a", 3],
        np.array([1, 2, 3, 4, 5, 6], dtype=np.uint64),
        metas=[{"i": 0}, None, {"i": 2}, None, {"i": 4}, {"i": 5}],
    )
    assert returned.tolist() == [1, 2, 3, 4, 5, 6]
    assert returned.dtype == np.uint64
    assert list(store.items()) == [("a", 5), ("b", 2), (3, 6)]
    assert store["a"].meta == {"i": 4}
    assert store[3].meta == {"i": 5}
    for stale in (1, 3, 4):
        assert keys_at_distance_zero(store, stale) == []
    assert store.check() == []


@pytest.mark.parametrize("merge_threshold", [1, 5, 100])
def test_add_many_across_the_merge_threshold(store_path: str, merge_threshold: int) -> None:
    """Batches bigger than merge_threshold go to the tables (with the delta beside them);
    replacements inside such batches leave no stale table entries."""
    with simstore.open(store_path, k=3, merge_threshold=merge_threshold) as store:
        store.add_many(["x", "y"], [100, 200])
        store.add_many([f"k{i}" for i in range(10)] + ["x"], [*range(10), 300])
        assert store.stats().delta_docs < merge_threshold
        assert keys_at_distance_zero(store, 100) == []
        assert keys_at_distance_zero(store, 300) == ["x"]
        assert len(store) == 12
        assert store.check() == []


# -- container protocol, stats, check ------------------------------------------------------


def test_len_contains_and_iteration_order(store: simstore.Store) -> None:
    """len and `in` follow adds and removals; iteration is first-add order, kept by
    replacement, with re-added keys at the end."""
    assert len(store) == 0
    assert list(store) == []
    store.add_many(["c", "a", "b"], [1, 2, 3])
    store.merge()
    store.add(10, fingerprint=4)
    store.add("a", fingerprint=5)
    assert list(store) == ["c", "a", "b", 10]
    assert store.keys() == ["c", "a", "b", 10]
    store.remove("c")
    store.add("c", fingerprint=6)
    assert list(store) == ["a", "b", 10, "c"]
    assert list(store.items()) == [("a", 5), ("b", 3), (10, 4), ("c", 6)]
    assert store.fingerprints().tolist() == [5, 3, 4, 6]
    assert store.fingerprints().dtype == np.uint64
    assert len(store) == 4
    assert "a" in store
    assert 10 in store
    assert "zz" not in store
    assert 1.5 not in store


@pytest.mark.parametrize(("k", "blocks"), [(3, 5), (2, 6), (0, 2), (4, 6), (5, 7)])
def test_stats_fields(store_path: str, k: int, blocks: int) -> None:
    """A format-2 store's docs, delta_docs, tables == C(blocks, k) and per-table
    entries follow merges."""
    with simstore.open(store_path, k=k, blocks=blocks, merge_threshold=1000) as store:
        store.add_many([f"m{i}" for i in range(20)], list(range(20)))
        store.merge()
        for i in range(7):
            store.add(f"d{i}", fingerprint=1000 + i)
        store.remove("m3")
        stats = store.stats()
        expected_blocks = blocks
        assert (stats.docs, stats.delta_docs) == (26, 7)
        assert (stats.k, stats.blocks) == (k, expected_blocks)
        assert stats.tables == comb(expected_blocks, k) == len(stats.table_entries)
        assert stats.table_entries == (19,) * stats.tables
        assert len(stats.prefix_bits) == stats.tables
        assert stats.format_version == simstore.engine.format.FORMAT_VERSION == 2
        assert stats.readonly is False
        assert stats.path == store_path
        assert stats.bytes_on_disk > 0
        assert 0 < stats.bytes_used <= stats.map_size
        store.merge()
        stats = store.stats()
        assert (stats.docs, stats.delta_docs, stats.table_entries) == (26, 0, (26,) * stats.tables)


def test_merge_returns_the_number_merged(store: simstore.Store) -> None:
    """merge() reports how many delta documents it folded in; a second merge folds none."""
    store.add_many(["a", "b", "c"], [1, 2, 3])
    store.remove("b")
    assert store.merge() == 2
    assert store.merge() == 0
    assert store.stats().delta_docs == 0


def test_check_is_clean_after_mixed_operations(store_path: str) -> None:
    """check() finds nothing wrong after a mixture of every kind of write."""
    rng = np.random.default_rng(9)
    with simstore.open(store_path, k=3, merge_threshold=40) as store:
        live: list[Key] = []
        for step in range(400):
            choice = int(rng.integers(0, 10))
            if choice < 5 or not live:
                key: Key = [f"s{step}", step, f"b{step}".encode()][step % 3]
                store.add(key, fingerprint=int(rng.integers(0, 2**64, dtype=np.uint64)))
                live.append(key)
            elif choice < 7:
                new = [f"batch{step}-{i}" for i in range(int(rng.integers(1, 60)))]
                batch = new + live[:3]  # with some replacements
                store.add_many(batch, rng.integers(0, 2**64, len(batch), dtype=np.uint64))
                live.extend(new)
            elif choice < 9:
                store.remove(live.pop(int(rng.integers(0, len(live)))))
            else:
                store.merge()
        assert store.check() == []
        assert len(store) == len(live)


# -- closing -----------------------------------------------------------------------------


def test_close_twice_and_context_manager(store_path: str) -> None:
    """close() may be called again; `with` closes the store, also when the block raises."""
    store = simstore.open(store_path)
    store.add("a", fingerprint=1)
    store.close()
    store.close()
    assert store.closed
    with simstore.open(store_path) as opened:
        assert not opened.closed
        assert opened["a"].fingerprint == 1
    assert opened.closed
    failing = simstore.open(store_path)

    def fail_inside_with() -> None:
        with failing:
            failing.add("b", fingerprint=2)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside_with()
    assert failing.closed
    with simstore.open(store_path, "r") as reopened:
        assert list(reopened) == ["a", "b"]
        assert reopened.stats().delta_docs == 0  # merged on close


def test_repr_names_the_store(store: simstore.Store) -> None:
    """repr shows the path and parameters, and says when the store is closed."""
    assert store.path in repr(store)
    assert "k=3" in repr(store)
    store.close()
    assert "closed" in repr(store)


# -- the map -----------------------------------------------------------------------------------


def test_map_grows_on_its_own(store_path: str) -> None:
    """A store opened with a 64 KiB map grows it several times without any error."""
    with simstore.open(store_path, k=3, map_size=65536, sync=False, merge_threshold=300) as store:
        initial = store.stats().map_size
        keys = [f"https://example.com/page/{i}" for i in range(6000)]
        fps = np.arange(6000, dtype=np.uint64) * np.uint64(0x9E37_79B9_7F4A_7C15)
        store.add_many(keys[:3000], fps[:3000])
        for key, fp in zip(keys[3000:3500], fps[3000:3500].tolist(), strict=True):
            store.add(key, fingerprint=fp, meta={"url": key})
        store.add_many(keys[3500:], fps[3500:])
        assert store.stats().map_size >= 4 * initial
        assert len(store) == 6000
        assert store.check() == []
        for index in (0, 3001, 5999):
            assert keys_at_distance_zero(store, int(fps[index])) == [keys[index]]


def _fill_until_full(store: simstore.Store, limit: int = 50_000) -> list[str]:
    added: list[str] = []
    for index in range(limit):
        key = f"key-{index:06d}"
        try:
            store.add(key, fingerprint=index * 0x9E37_79B9)
        except simstore.StoreFullError:
            return added
        added.append(key)
    raise AssertionError("max_map_size was never reached")


@pytest.mark.parametrize(
    "merge_threshold",
    [20_000, 100],
)
@pytest.mark.filterwarnings("ignore::simstore.StoreFullWarning")
def test_max_map_size_raises_store_full_and_keeps_the_store_sound(
    store_path: str, merge_threshold: int
) -> None:
    """Past max_map_size a write raises StoreFullError (an OSError) and changes nothing:
    every earlier add is present, check() is clean, a refused batch leaves no trace."""
    with simstore.open(
        store_path,
        k=3,
        map_size=65536,
        max_map_size=4 * 65536,
        sync=False,
        merge_threshold=merge_threshold,
        merge_on_close=False,
    ) as store:
        added = _fill_until_full(store)
        assert len(added) > 100
        before = list(store.items())
        with pytest.raises(simstore.StoreFullError) as caught:
            store.add_many([f"batch-{i}" for i in range(500)], list(range(500)))
        assert isinstance(caught.value, OSError)
        assert isinstance(caught.value, simstore.SimstoreError)
        assert list(store.items()) == before
        assert [key for key, _ in before] == added
        assert store.check() == []
        assert keys_at_distance_zero(store, 5 * 0x9E37_79B9) == ["key-000005"]
        assert store.stats().map_size <= 4 * 65536
        # Even a removal needs fresh copy-on-write pages, so in a full store it
        # either fits or is refused whole.
        try:
            store.remove(added[0])
        except simstore.StoreFullError:
            assert list(store.items()) == before
            remaining = added
        else:
            assert added[0] not in store
            remaining = added[1:]
    with simstore.open(store_path, "r") as reopened:
        assert list(reopened) == remaining
        assert reopened.check() == []


def test_close_of_a_full_store_keeps_every_document(store_path: str) -> None:
    """Closing a store whose merge-on-close cannot fit below max_map_size still closes it,
    and every acknowledged add survives (in the delta)."""
    store = simstore.open(store_path, k=3, map_size=65536, max_map_size=4 * 65536, sync=False)
    added = _fill_until_full(store)
    with contextlib.suppress(simstore.StoreFullError):
        store.close()
    assert store.closed
    with simstore.open(store_path, "r") as reopened:
        assert list(reopened) == added
        assert reopened.check() == []


# -- threads --------------------------------------------------------------------------------


def test_one_store_used_from_several_threads(store_path: str) -> None:
    """Concurrent queries, adds, batches and merges on one Store give exact answers."""
    rng = np.random.default_rng(12)
    static_fps = [(0xAAAA_AAAA << 32) | int(value) for value in rng.integers(0, 2**32, 200)]
    static = {f"static-{i}": fp for i, fp in enumerate(static_fps)}
    errors: list[BaseException] = []

    def expected(query: int, k: int) -> list[simstore.Match]:
        hits = [
            simstore.Match(key, (fp ^ query).bit_count(), fp)
            for key, fp in static.items()
            if (fp ^ query).bit_count() <= k
        ]
        return sorted(hits, key=lambda match: (match.distance, match.key))

    with simstore.open(store_path, k=3, merge_threshold=37, sync=False) as store:
        store.add_many(list(static), static_fps)

        def guarded(body: Callable[[], Any]) -> Callable[[], None]:
            def run() -> None:
                try:
                    body()
                except BaseException as exc:
                    errors.append(exc)

            return run

        def writer(prefix: str, batch: bool) -> Callable[[], None]:
            def body() -> None:
                for step in range(150):
                    # far (>= 32 bits) from every static fingerprint
                    fp = (0x5555_5555 << 32) | (step * 7 + len(prefix))
                    if batch:
                        store.add_many([f"{prefix}-{step}", f"{prefix}-{step}-b"], [fp, fp])
                    else:
                        store.add(f"{prefix}-{step}", fingerprint=fp)
                    if step % 50 == 49:
                        store.merge()

            return body

        def reader(seed: int) -> Callable[[], None]:
            def body() -> None:
                local = np.random.default_rng(seed)
                last_len = 0
                for _ in range(60):
                    query = static_fps[int(local.integers(0, 200))] ^ (1 << int(local.integers(0, 64)))
                    assert store.query(fingerprint=query) == expected(query, 3)
                    queries = [static_fps[int(i)] for i in local.integers(0, 200, 3)]
                    assert store.query_many(queries, k=1) == [expected(q, 1) for q in queries]
                    current = len(store)
                    assert current >= last_len
                    last_len = current

            return body

        threads = [
            threading.Thread(target=guarded(writer("single", batch=False))),
            threading.Thread(target=guarded(writer("batch", batch=True))),
            threading.Thread(target=guarded(reader(1))),
            threading.Thread(target=guarded(reader(2))),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        assert len(store) == 200 + 150 + 300
        for step in (0, 77, 149):
            fp = (0x5555_5555 << 32) | (step * 7 + len("single"))
            assert f"single-{step}" in keys_at_distance_zero(store, fp)
        assert store.check() == []


@pytest.mark.parametrize("damage", ["table-entry", "key-entry", "extra-table-entry"])
def test_check_detects_damage(store_path: str, damage: str) -> None:
    """check() is not vacuous: entries changed behind simstore's back are reported."""
    import lmdb

    with simstore.open(store_path, k=3, blocks=5) as store:  # Manku tables (format 2)
        store.add_many(["a", "b", "c"], [1, 2, 3])
    env = lmdb.open(store_path, subdir=False, max_dbs=600)
    with env.begin(write=True) as txn:
        if damage == "key-entry":
            keys_db = env.open_db(b"keys", txn=txn, create=False)
            cursor = txn.cursor(keys_db)
            assert cursor.first()
            cursor.delete()
        else:
            table = env.open_db(b"table:003", txn=txn, dupsort=True, dupfixed=True, create=False)
            cursor = txn.cursor(table)
            if damage == "table-entry":
                assert cursor.first()
                cursor.delete()
            else:
                txn.put((12345).to_bytes(8, "big"), (1).to_bytes(8, "big"), db=table)
    env.close()
    with simstore.open(store_path, "r") as store:
        problems = store.check()
    assert problems != []


def test_numpy_integer_keys_are_their_python_ints(tmp_path: pathlib.Path) -> None:
    """Keys from numpy (an id column, np.arange) work wherever an int key does, and come
    back as Python ints; a numpy bool is still refused like a bool."""
    with simstore.open(str(tmp_path / "np.simstore"), k=3, sync=False) as store:
        fingerprints = np.arange(5, dtype=np.uint64) << np.uint64(20)
        store.add_many(np.arange(5, dtype=np.int64), fingerprints=fingerprints)
        store.add_many(np.array([7, 2**64 - 1], dtype=np.uint64), fingerprints=[1, 2])
        store.add(np.int32(9), fingerprint=3)
        assert list(store) == [0, 1, 2, 3, 4, 7, 2**64 - 1, 9]
        assert all(type(key) is int for key in store)
        assert np.int64(3) in store
        assert store[np.uint8(9)].fingerprint == 3
        store.remove(np.int16(4))
        assert 4 not in store
        assert [match.key for match in store.query(3 << 20, k=0)] == [3]
        with pytest.raises(simstore.InvalidTypeError):
            store.add(np.bool_(True), fingerprint=1)


def test_stats_skew_is_a_flag(store: simstore.Store) -> None:
    with pytest.raises(simstore.InvalidTypeError):
        store.stats(skew="no")  # type: ignore[arg-type]
    assert store.stats(skew=False).degenerate is None
