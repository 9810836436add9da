"""Occupancy bitmaps: never rule out a prefix a table holds, and rule out most others."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore import occupancy
from simstore.errors import CorruptStoreError
from simstore.permute import one_level_tables
from simstore.query import occupied_tables, permute_columns, scan_plan, scan_tables


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**64 - 1), max_size=60),
    probes=st.lists(st.integers(0, 2**64 - 1), max_size=60),
    bits=st.integers(1, 20),
)
def test_may_hold_is_exactly_prefix_membership(keys: list[int], probes: list[int], bits: int) -> None:
    bitmap = occupancy.built(bits, np.array(keys, dtype=np.uint64)).tobytes()
    shift = 64 - bits
    held = {key >> shift for key in keys}
    for probe in probes + keys:
        assert occupancy.may_hold(bitmap, shift, probe) == ((probe >> shift) in held)


def test_marking_in_steps_equals_building_at_once() -> None:
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    stepwise, crowded = occupancy.empty(16), occupancy.empty(16)
    for chunk in np.array_split(keys, 7):
        occupancy.mark_with_crowded(stepwise, crowded, 16, chunk)
    assert np.array_equal(stepwise, occupancy.built(16, keys))


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**64 - 1), max_size=80),
    bits=st.integers(1, 9),
    splits=st.lists(st.integers(0, 80), max_size=4),
)
def test_crowded_marks_exactly_the_slots_of_several_keys(
    keys: list[int], bits: int, splits: list[int]
) -> None:
    shift = 64 - bits
    counts = Counter(key >> shift for key in keys)
    array = np.array(keys, dtype=np.uint64)
    bitmap, crowded = occupancy.built_with_crowded(bits, array)
    assert np.array_equal(bitmap, occupancy.built(bits, array))
    for slot in range(1 << bits):
        assert occupancy.is_set(bitmap.tobytes(), slot) == (counts[slot] >= 1)
        assert occupancy.is_set(crowded.tobytes(), slot) == (counts[slot] >= 2)
    # Marked batch by batch (as merges do), the same bitmaps come out.
    stepwise, stepwise_crowded = occupancy.empty(bits), occupancy.empty(bits)
    for chunk in np.split(array, sorted(min(split, len(keys)) for split in splits)):
        occupancy.mark_with_crowded(stepwise, stepwise_crowded, bits, chunk)
    assert np.array_equal(stepwise, bitmap)
    assert np.array_equal(stepwise_crowded, crowded)


def test_a_crowded_bitmap_is_trusted_only_beside_a_current_occupancy_bitmap() -> None:
    keys = np.array([1 << 63, (1 << 63) + 1, 5 << 52], dtype=np.uint64)
    bitmap, crowded = occupancy.built_with_crowded(12, keys)
    raw, raw_crowded = occupancy.encode(bitmap, 12, 5), occupancy.encode(crowded, 12, 5)
    assert occupancy.trusted_pair((raw, raw_crowded), 5) == (raw, raw_crowded, 52)
    assert occupancy.trusted_pair((raw, None), 5) == (raw, None, 52)  # written by an older simstore
    assert occupancy.trusted_pair((raw, occupancy.encode(crowded, 12, 4)), 5) == (raw, None, 52)
    other_size = occupancy.encode(occupancy.empty(13), 13, 5)
    assert occupancy.trusted_pair((raw, other_size), 5) == (raw, None, 52)
    assert occupancy.trusted_pair((occupancy.encode(bitmap, 12, 4), raw_crowded), 5) is None
    with pytest.raises(CorruptStoreError):
        occupancy.trusted_pair((raw, raw_crowded[:-1]), 5)

    kept = occupancy.updatable((raw, raw_crowded), 5, 12)
    assert kept is not None
    assert kept[0] == 12
    assert np.array_equal(kept[1], bitmap)
    assert np.array_equal(kept[2], crowded)
    assert occupancy.updatable((raw, raw_crowded), 5, 13) is None  # too small for the table now
    assert occupancy.updatable((raw, raw_crowded), 6, 12) is None  # stale
    assert occupancy.updatable((raw, occupancy.encode(crowded, 12, 4)), 5, 12) is None
    assert occupancy.updatable((raw, None), 5, 12) is None
    assert occupancy.crowded_record_key(3, 7) == b"crowded:3:007"


@settings(max_examples=100, deadline=None)
@given(
    stored=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=200),
    queries=st.lists(st.integers(0, 2**64 - 1), max_size=50),
    bits=st.integers(1, 14),
    without=st.sets(st.integers(0, 9), max_size=3),
)
def test_batch_bit_tests_equal_the_single_query_ones(
    stored: list[int], queries: list[int], bits: int, without: set[int]
) -> None:
    """occupied_tables (numpy, for query_many) must name exactly the tables the
    single-query loop would not rule out, tables without a bitmap included."""
    tables = one_level_tables(3, 5)
    stored_keys = permute_columns(tables, np.array(stored, dtype=np.uint64))
    bitmaps = [
        None if index in without else (occupancy.built(bits, keys).tobytes(), None, 64 - bits)
        for index, keys in enumerate(stored_keys)
    ]
    query_array = np.array(stored[:5] + queries, dtype=np.uint64)
    columns = permute_columns(tables, query_array)
    expected = [
        [
            index
            for index, entry in enumerate(bitmaps)
            if entry is None or occupancy.may_hold(entry[0], entry[2], int(columns[index][row]))
        ]
        for row in range(len(query_array))
    ]
    assert occupied_tables(scan_plan(tables, bitmaps), columns) == expected


def test_sizing_keeps_bitmaps_sparse() -> None:
    rng = np.random.default_rng(2)
    for entries in (1_000, 100_000, 1_000_000):
        bits = occupancy.bits_for(entries, 64, 10)
        bitmap = occupancy.built(bits, rng.integers(0, 2**64, entries, dtype=np.uint64))
        assert occupancy.fill_ratio(bitmap) <= 2.0**-occupancy.SPARSITY_BITS
    assert occupancy.bits_for(10**12, 64, 10) == occupancy.MAX_BITS
    assert occupancy.bits_for(10**6, 9, 10) == 9  # never past the table's prefix


def test_many_tables_keep_their_bitmaps_within_the_budget() -> None:
    for tables in (1, 10, 16, 17, 84, 210, 495):
        bits = occupancy.bits_for(10**12, 64, tables)
        assert bits in (occupancy.MAX_BITS, occupancy.BUDGETED_MAX_BITS)
        full_size = tables * 2 * occupancy.bitmap_bytes(occupancy.MAX_BITS)
        full_size_fits = full_size <= occupancy.BITMAP_BUDGET_BYTES
        # The full size whenever it fits the budget; the budgeted size only when it does not.
        assert full_size_fits == (bits == occupancy.MAX_BITS)


def test_records_round_trip_and_refuse_damage() -> None:
    bitmap = occupancy.built(12, np.array([1 << 63], dtype=np.uint64))
    raw = occupancy.encode(bitmap, 12, 77)
    assert occupancy.decode(raw) == (12, 77, raw)
    assert raw.startswith(bitmap.tobytes())  # the record is the bitmap, then its trailer
    with pytest.raises(CorruptStoreError):
        occupancy.decode(raw[:-1])
    with pytest.raises(CorruptStoreError):
        occupancy.decode(raw[:4])
    with pytest.raises(CorruptStoreError):
        occupancy.decode(raw[:-9] + bytes([40]) + raw[-8:])
    assert occupancy.record_key(3, 7) == b"occupancy:3:007"


# -- in a store -------------------------------------------------------------------------------


def bitmap_records(store: simstore.Store) -> dict[bytes, tuple[int, int, bytes]]:
    with store._read() as txn:
        cursor = txn.cursor(store._handles.meta)
        return {
            key: occupancy.decode(value) for key, value in cursor.iternext() if key.startswith(b"occupancy:")
        }


def brute(fingerprints: dict[str, int], query: int, k: int) -> list[tuple[int, str]]:
    return sorted(
        ((query ^ fp).bit_count(), key) for key, fp in fingerprints.items() if (query ^ fp).bit_count() <= k
    )


def test_bitmaps_follow_bulk_adds_and_merges_and_grow(store_path: str) -> None:
    rng = np.random.default_rng(5)
    model: dict[str, int] = {}
    with simstore.open(store_path, "n", k=3, merge_threshold=500) as store:
        sizes = []
        for step in range(6):
            count = 300 * 4**step if step < 4 else 2000
            keys = [f"s{step}-{i}" for i in range(count)]
            fps = rng.integers(0, 2**64, count, dtype=np.uint64)
            store.add_many(keys, fps)
            model.update(zip(keys, fps.tolist(), strict=True))
            for i in range(600):  # single adds, merged in between
                fp = int(rng.integers(0, 2**64, dtype=np.uint64))
                store.add(f"one{step}-{i}", fingerprint=fp)
                model[f"one{step}-{i}"] = fp
            store.merge()
            records = bitmap_records(store)
            assert len(records) == len(store.tables)
            state_epoch = store._delta.merge_epoch
            assert {epoch for _, epoch, _ in records.values()} == {state_epoch}
            sizes.append(max(bits for bits, _, _ in records.values()))
            assert store.check() == []
        assert sizes == sorted(sizes)
        assert sizes[-1] > sizes[0]  # the bitmaps grew with the tables
        for query in list(model.values())[:200] + rng.integers(0, 2**64, 50, dtype=np.uint64).tolist():
            near = query ^ (1 << int(rng.integers(64)))
            assert [(m.distance, m.key) for m in store.query(fingerprint=near)] == brute(model, near, 3)


def test_a_bitmap_from_another_epoch_is_not_trusted(store_path: str) -> None:
    """A writer that does not maintain the bitmaps (an older simstore) moves the merge
    epoch on without restamping them; such bitmaps must be ignored, never trusted."""
    rng = np.random.default_rng(6)
    fps = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    with simstore.open(store_path, "n", k=3) as store:
        store.add_many([f"d{i}" for i in range(3000)], fps)
        store.merge()
        records = bitmap_records(store)
        assert len(records) == len(store.tables)
        epoch = store._delta.merge_epoch

        def restamp(stamp: int) -> None:
            def body(txn: object) -> None:
                for key, (bits, _, _) in records.items():
                    blank = occupancy.empty(bits)
                    txn.put(key, occupancy.encode(blank, bits, stamp), db=store._handles.meta)  # type: ignore[attr-defined]

            store._env.write(body)
            store._occupancy_epoch = -1  # make this process read them again

        restamp(epoch - 1)  # blank and stale: ignored
        assert [m.key for m in store.query(fingerprint=int(fps[7]), k=0)] == ["d7"]
        assert store.check() == []
        restamp(epoch)  # blank but current: trusted, so wrong; check() must say so
        assert any("occupancy bitmap lacks" in problem for problem in store.check())


def test_relayout_replaces_the_bitmaps(store_path: str) -> None:
    rng = np.random.default_rng(7)
    with simstore.open(store_path, "n", k=3) as store:
        store.add_many([f"d{i}" for i in range(2000)], rng.integers(0, 2**64, 2000, dtype=np.uint64))
        store.merge()
        assert len(bitmap_records(store)) == len(store.tables)
        old_generation = store._params.generation
        store.relayout(blocks=6)
        keys = bitmap_records(store)
        assert len(keys) == len(store.tables) == 20
        assert all(key.startswith(f"occupancy:{old_generation + 1}:".encode()) for key in keys)
        assert store.check() == []


class CountingCursor:
    """An LMDB cursor that counts its probes (``set_range`` calls)."""

    def __init__(self, cursor: object, probes: list[int]) -> None:
        self.cursor = cursor
        self.probes = probes

    def set_range(self, key: bytes) -> bool:
        self.probes[0] += 1
        return self.cursor.set_range(key)  # type: ignore[attr-defined,no-any-return]

    def key(self) -> bytes:
        return self.cursor.key()  # type: ignore[attr-defined,no-any-return]

    def __iter__(self) -> object:
        return iter(self.cursor)  # type: ignore[call-overload]


class CountingTxn:
    def __init__(self, txn: object) -> None:
        self.txn = txn
        self.probes = [0]

    def cursor(self, db: object) -> CountingCursor:
        return CountingCursor(self.txn.cursor(db), self.probes)  # type: ignore[attr-defined]


def test_near_duplicate_queries_skip_tables_whose_slot_holds_only_what_they_found(store_path: str) -> None:
    rng = np.random.default_rng(8)
    fps = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    with simstore.open(store_path, "n", k=3) as store:
        store.add_many(list(range(3000)), fps)
        store.merge()
        with store._read() as txn:
            store._read_bitmaps(txn, len(store.tables))
            plan = store._scan_plan
            assert all(entry[1] is not None and entry[2] is not None for entry in plan)
            without_crowded = tuple(
                (suffix, bitmap, None, shift, slot_masks) for suffix, bitmap, _, shift, slot_masks in plan
            )
            probes = {"with": 0, "without": 0}
            for index in range(300):
                # One flipped bit: the document shares the query's prefix in 6 of the 10 tables.
                query = int(fps[index]) ^ (1 << int(rng.integers(64)))
                expected = sorted(d for d in np.bitwise_count(fps ^ np.uint64(query)).tolist() if d <= 3)
                for label, scan in (("with", plan), ("without", without_crowded)):
                    counting, found = CountingTxn(txn), {}
                    permuted = store._permute_all(query)
                    tables = store._handles.tables
                    scan_tables(counting, tables, [None] * len(plan), scan, permuted, 3, found)  # type: ignore[arg-type]
                    assert sorted(found.values()) == expected
                    probes[label] += counting.probes[0]
        assert probes["without"] >= 6 * 300
        assert probes["with"] * 2 < probes["without"], probes


def test_check_finds_a_crowded_slot_the_bitmap_lacks_and_queries_survive_missing_ones(
    store_path: str,
) -> None:
    rng = np.random.default_rng(9)
    fps = rng.integers(0, 2**64, 400, dtype=np.uint64)
    fps[200:] = fps[:200]  # exact copies: every one of their slots is crowded
    model = {f"d{i}": int(fp) for i, fp in enumerate(fps.tolist())}
    with simstore.open(store_path, "n", k=3) as store:
        store.add_many(list(model), fps)
        store.merge()
        assert store.check() == []
        generation, epoch = store._params.generation, store._delta.merge_epoch

        def rewrite(blank: bool) -> None:
            def body(txn: object) -> None:
                meta = store._handles.meta
                for index in range(len(store.tables)):
                    key = occupancy.crowded_record_key(generation, index)
                    if blank:
                        bits = occupancy.decode(txn.get(key, db=meta))[0]  # type: ignore[attr-defined]
                        blank_record = occupancy.encode(occupancy.empty(bits), bits, epoch)
                        txn.put(key, blank_record, db=meta)  # type: ignore[attr-defined]
                    else:
                        txn.delete(key, db=meta)  # type: ignore[attr-defined]

            store._env.write(body)
            store._occupancy_epoch = -1  # make this process read them again
            store._synced_snapshot = -1

        rewrite(blank=True)  # current but wrong: check() must say so
        assert any("crowded bitmap lacks" in problem for problem in store.check())
        rewrite(blank=False)  # missing, as an older simstore leaves them: queries probe instead
        assert store.check() == []
        for key in ("d3", "d250"):
            query = model[key] ^ 1
            assert [(m.distance, m.key) for m in store.query(fingerprint=query)] == brute(model, query, 3)
        store.add("extra", fingerprint=int(fps[0]))
        store.merge()  # the next write to the tables rebuilds them
        with store._read() as txn:
            store._read_bitmaps(txn, len(store.tables))
        assert all(entry[1] is not None and entry[2] is not None for entry in store._scan_plan)
        assert store.check() == []


def test_a_reopened_store_reads_its_bitmaps_a_table_per_query(store_path: str) -> None:
    rng = np.random.default_rng(10)
    fps = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    model = {f"d{i}": fp for i, fp in enumerate(fps.tolist())}
    with simstore.open(store_path, "n", k=3) as store:
        store.add_many(list(model), fps)
        store.merge()
        tables = len(store.tables)
    with simstore.open(store_path, "r") as store:
        loaded = []
        for index in range(tables + 3):
            query = int(fps[index]) ^ (1 << index)
            assert [(m.distance, m.key) for m in store.query(fingerprint=query)] == brute(model, query, 3)
            loaded.append(sum(entry[1] is not None for entry in store._scan_plan))
        assert loaded == [*range(1, tables + 1), tables, tables, tables]
    with simstore.open(store_path, "r") as store:
        queries = fps[:100] ^ np.uint64(6)
        results = store.query_many(queries)  # a batch reads them all first
        assert all(entry[1] is not None for entry in store._scan_plan)
        for query, matches in zip(queries.tolist(), results, strict=True):
            assert [(m.distance, m.key) for m in matches] == brute(model, query, 3)
