"""Occupancy bitmaps: never rule out a prefix a table holds, and rule out most others."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.engine import occupancy
from simstore.errors import CorruptStoreError


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


def test_chunks_round_trip_and_refuse_damage() -> None:
    keys = np.random.default_rng(2).integers(0, 2**64, 3000, dtype=np.uint64)
    for bits in (3, 12, occupancy.CHUNK_BITS, occupancy.CHUNK_BITS + 2):
        bitmap = occupancy.built(bits, keys)
        records = occupancy.encode_chunks(7, occupancy.OCCUPIED, bits, bitmap)
        assert len(records) == occupancy.chunk_count(bits)
        joined = b"".join(occupancy.decode_chunk(key, value, bits) for key, value in records)
        assert joined == bitmap.tobytes()
        key, value = records[-1]
        with pytest.raises(CorruptStoreError, match="checksum"):
            occupancy.decode_chunk(key, value[:-1] + bytes([value[-1] ^ 1]), bits)
        with pytest.raises(CorruptStoreError):
            occupancy.decode_chunk(key, value[:-1], bits)
        with pytest.raises(CorruptStoreError, match="checksum"):  # a chunk under another key
            occupancy.decode_chunk(occupancy.chunk_key(8, occupancy.OCCUPIED, 0), records[0][1], bits)


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**64 - 1), max_size=200),
    bits=st.integers(1, 12),
    chunk_bits=st.integers(3, 8),  # chunks are whole bytes
    data=st.data(),
)
def test_bitmaps_built_a_chunk_range_at_a_time_equal_the_whole(
    keys: list[int], bits: int, chunk_bits: int, data: st.DataObject
) -> None:
    """What a compaction step writes for its key range is exactly that range's chunks
    of the bitmaps of the whole run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(occupancy, "CHUNK_BITS", chunk_bits)
        chunks = occupancy.chunk_count(bits)
        first = data.draw(st.integers(0, chunks - 1), label="first chunk")
        past = data.draw(st.integers(first + 1, chunks), label="past chunk")
        coverage = 64 - occupancy.chunk_span_bits(bits)
        inside = [key for key in keys if first <= (key >> coverage if coverage < 64 else 0) < past]
        whole, whole_crowded = occupancy.built_with_crowded(bits, np.array(keys, dtype=np.uint64))
        occupied, crowded = occupancy.built_range(bits, np.array(inside, dtype=np.uint64), first, past)
        size = occupancy.bitmap_bytes(min(bits, chunk_bits))
        assert occupied.tobytes() == whole.tobytes()[first * size : past * size]
        assert crowded.tobytes() == whole_crowded.tobytes()[first * size : past * size]


# -- in a store -------------------------------------------------------------------------------


def brute(fingerprints: dict[str, int], query: int, k: int) -> list[tuple[int, str]]:
    return sorted(
        ((query ^ fp).bit_count(), key) for key, fp in fingerprints.items() if (query ^ fp).bit_count() <= k
    )


def loaded_bitmaps(store: simstore.Store) -> int:
    """How many (table, run) pairs the store's queries have bitmaps for."""
    return sum(entry[7] is not None for probes in store._engine.tableset.probes for entry in probes)


def test_every_run_has_bitmaps_sized_to_it(store_path: str) -> None:
    rng = np.random.default_rng(5)
    model: dict[str, int] = {}
    with simstore.open(store_path, "n", k=3, blocks=5, merge_threshold=500) as store:
        for step in range(5):
            count = 300 * 4**step
            keys = [f"s{step}-{i}" for i in range(count)]
            fps = rng.integers(0, 2**64, count, dtype=np.uint64)
            store.add_many(keys, fps)
            model.update(zip(keys, fps.tolist(), strict=True))
            for i in range(600):  # single adds, merged as runs of their own
                fp = int(rng.integers(0, 2**64, dtype=np.uint64))
                store.add(f"one{step}-{i}", fingerprint=fp)
                model[f"one{step}-{i}"] = fp
            store.merge()
            catalog = store._engine.tableset.catalog
            for run in catalog.runs:
                for table, bits in zip(store.tables, run.bitmap_bits, strict=True):
                    assert bits == occupancy.bits_for(run.entries, table.prefix_bits, len(store.tables))
            assert store.check() == []
        store.query_many(np.zeros(100, dtype=np.uint64))  # a batch reads every bitmap
        assert loaded_bitmaps(store) == len(store.tables) * len(store._engine.tableset.catalog.runs)
        for query in list(model.values())[:200] + rng.integers(0, 2**64, 50, dtype=np.uint64).tolist():
            near = query ^ (1 << int(rng.integers(64)))
            assert [(m.distance, m.key) for m in store.query(fingerprint=near)] == brute(model, near, 3)


def _rewrite_chunks(store: simstore.Store, kind: bytes, how: str) -> None:
    """Blank (``"blank"``) or delete (``"delete"``) every stored chunk of ``kind``."""
    runs_now = store._engine.tableset.catalog.runs

    def body(txn: Any) -> None:
        for index, db in enumerate(store._engine.handles.tables):
            for run in runs_now:
                bits = run.bitmap_bits[index]
                for chunk in range(occupancy.chunk_count(bits)):
                    key = occupancy.chunk_key(run.run_id, kind, chunk)
                    if how == "delete":
                        txn.delete(key, db=db)
                    else:
                        size = occupancy.bitmap_bytes(min(bits, occupancy.CHUNK_BITS))
                        blank = occupancy.encode_chunks(run.run_id, kind, bits, occupancy.empty(bits))
                        txn.put(key, dict(blank)[key] if size else b"", db=db)

    store._engine.env.write(body)


def test_damaged_or_missing_bitmaps_cost_probes_not_answers(store_path: str) -> None:
    """A bitmap chunk that is blank (wrong but sound) is reported by check(); one that is
    missing or fails its checksum is reported too, and queries probe that run instead."""
    rng = np.random.default_rng(9)
    fps = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    fps[2000:] = fps[:1000]  # exact copies: every one of their slots is crowded
    model = {f"d{i}": int(fp) for i, fp in enumerate(fps.tolist())}
    with simstore.open(store_path, "n", k=3, blocks=5) as store:
        store.add_many(list(model), fps)
        store.merge()
        assert store.check() == []
        _rewrite_chunks(store, occupancy.CROWDED, "blank")
        assert any("crowded bitmap" in problem for problem in store.check())
        _rewrite_chunks(store, occupancy.OCCUPIED, "blank")
        assert any("occupancy bitmap" in problem for problem in store.check())
        _rewrite_chunks(store, occupancy.OCCUPIED, "delete")
        assert any("lacks bitmap chunk" in problem for problem in store.check())
    with simstore.open(store_path, "r") as reader:
        reader.query_many(np.zeros(100, dtype=np.uint64))
        assert loaded_bitmaps(reader) == 0  # none trusted: every run probed
        for key in ("d3", "d2500", "d1999"):
            query = model[key] ^ 1
            assert [(m.distance, m.key) for m in reader.query(fingerprint=query)] == brute(model, query, 3)


def test_relayout_writes_new_bitmaps(store_path: str) -> None:
    rng = np.random.default_rng(7)
    with simstore.open(store_path, "n", k=3, blocks=5) as store:
        store.add_many([f"d{i}" for i in range(2000)], rng.integers(0, 2**64, 2000, dtype=np.uint64))
        store.merge()
        store.relayout(blocks=6)
        assert len(store.tables) == 20
        with store._engine.read():
            [run] = store._engine.tableset.catalog.runs
        assert all(run.bitmap_bits)
        store.query_many(np.zeros(100, dtype=np.uint64))
        assert loaded_bitmaps(store) == 20
        assert store.check() == []


class CountingTxn:
    """A read transaction that counts its bucket look-ups (the probes)."""

    def __init__(self, txn: Any, buckets: set[Any]) -> None:
        self.txn = txn
        self.buckets = buckets
        self.probes = 0

    def get(self, key: bytes, db: Any = None) -> Any:
        if db in self.buckets:
            self.probes += 1
        return self.txn.get(key, db=db)


def test_near_duplicate_queries_skip_tables_whose_slot_holds_only_what_they_found(store_path: str) -> None:
    rng = np.random.default_rng(8)
    fps = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    with simstore.open(store_path, "n", k=3, blocks=5) as store:
        store.add_many(list(range(3000)), fps)
        store.merge()
        tableset = store._engine.tableset
        with store._engine.read() as txn:
            tableset.read_bitmaps(txn, 1 << 20)
            with_crowded = tableset.probes
            assert all(entry[8] is not None for probes in with_crowded for entry in probes)
            without_crowded = [
                tuple((*entry[:8], None, *entry[9:]) for entry in probes) for probes in with_crowded
            ]
            probes = {"with": 0, "without": 0}
            for index in range(300):
                # One flipped bit: the document shares the query's prefix in 6 of the 10 tables.
                query = int(fps[index]) ^ (1 << int(rng.integers(64)))
                expected = sorted(d for d in np.bitwise_count(fps ^ np.uint64(query)).tolist() if d <= 3)
                for label, plan in (("with", with_crowded), ("without", without_crowded)):
                    tableset.probes = plan
                    counting = CountingTxn(txn, set(store._engine.handles.tables))
                    found: dict[int, int] = {}
                    engine = store._engine
                    permuted = engine.permute_all(query)
                    tableset.find(
                        counting, permuted, query, 3, found, {}, engine.handles.docs, engine.permute_all
                    )  # type: ignore[arg-type]
                    assert sorted(found.values()) == expected
                    probes[label] += counting.probes
            tableset.probes = with_crowded
        assert probes["without"] >= 6 * 300
        assert probes["with"] * 2 < probes["without"], probes


def test_a_reopened_store_reads_its_bitmaps_a_table_per_query(store_path: str) -> None:
    rng = np.random.default_rng(10)
    fps = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    model = {f"d{i}": fp for i, fp in enumerate(fps.tolist())}
    with simstore.open(store_path, "n", k=3, blocks=5) as store:
        store.add_many(list(model), fps)
        store.merge()
        tables = len(store.tables)
    with simstore.open(store_path, "r") as store:
        loaded = []
        for index in range(tables + 3):
            query = int(fps[index]) ^ (1 << index)
            assert [(m.distance, m.key) for m in store.query(fingerprint=query)] == brute(model, query, 3)
            loaded.append(loaded_bitmaps(store))
        assert loaded == [*range(1, tables + 1), tables, tables, tables]
    with simstore.open(store_path, "r") as store:
        queries = fps[:100] ^ np.uint64(6)
        results = store.query_many(queries)  # a batch reads them all first
        assert loaded_bitmaps(store) == tables
        for query, matches in zip(queries.tolist(), results, strict=True):
            assert [(m.distance, m.key) for m in matches] == brute(model, query, 3)
