"""The join's test of live entries against every record at once, by id table
and by search, equals a dict of the records."""

from __future__ import annotations

import numpy as np
import pytest

from simstore.engine.column_tableset import _Recorded


@pytest.mark.parametrize("spacing", [1, 3, 50_000])  # dense ids, gaps, sparse ids (the search)
def test_recorded_fingerprints_agree_with_a_dict(spacing: int) -> None:
    rng = np.random.default_rng(spacing)
    ids = np.arange(0, 200 * spacing, spacing, dtype=np.uint64)
    fingerprints = rng.integers(0, 2**64 - 1, size=len(ids), dtype=np.uint64)
    recorded = _Recorded(ids, fingerprints)
    assert recorded.dense == (spacing < 50_000)
    records = dict(zip(ids.tolist(), fingerprints.tolist(), strict=True))
    asked_ids = np.concatenate([ids, ids + np.uint64(1), np.array([2**63, 2**64 - 1], dtype=np.uint64)])
    asked = np.concatenate([fingerprints, fingerprints, np.array([0, 1], dtype=np.uint64)])
    asked[::7] ^= np.uint64(1)  # some recorded ids with another fingerprint
    expected = [
        records.get(doc_id) == fingerprint
        for doc_id, fingerprint in zip(asked_ids.tolist(), asked.tolist(), strict=True)
    ]
    assert recorded.holds(asked_ids, asked).tolist() == expected


def test_no_records_hold_nothing() -> None:
    recorded = _Recorded(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64))
    assert recorded.holds(np.array([0, 5], dtype=np.uint64), np.array([0, 1], dtype=np.uint64)).tolist() == [
        False,
        False,
    ]
