"""Occupancy bitmaps: never rule out a prefix a table holds, and rule out most others."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore import occupancy
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
    stepwise = occupancy.empty(16)
    for chunk in np.array_split(keys, 7):
        occupancy.mark(stepwise, 16, chunk)
    assert np.array_equal(stepwise, occupancy.built(16, keys))


def test_sizing_keeps_bitmaps_sparse() -> None:
    rng = np.random.default_rng(2)
    for entries in (1_000, 100_000, 1_000_000):
        bits = occupancy.bits_for(entries, 64)
        bitmap = occupancy.built(bits, rng.integers(0, 2**64, entries, dtype=np.uint64))
        assert occupancy.fill_ratio(bitmap) <= 2.0**-occupancy.SPARSITY_BITS
    assert occupancy.bits_for(10**12, 64) == occupancy.MAX_BITS
    assert occupancy.bits_for(10**6, 9) == 9  # never past the table's prefix


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
