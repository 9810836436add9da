"""Occupancy bitmaps: never rule out a prefix a table holds, and rule out most others."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    assert occupancy.decode(raw) == (12, 77, bitmap.tobytes())
    with pytest.raises(CorruptStoreError):
        occupancy.decode(raw[:-1])
    with pytest.raises(CorruptStoreError):
        occupancy.decode(raw[:4])
    with pytest.raises(CorruptStoreError):
        occupancy.decode(bytes([40]) + raw[1:])
    assert occupancy.record_key(3, 7) == b"occupancy:3:007"
