"""Store.remove_many: one transaction, all or nothing, the tables' entries taken out
bucket by bucket; answers equal brute force afterwards at every k."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
import simstore.engine.tableset

K = 3


def brute_force(model: dict[object, int], query: int, k: int) -> list[tuple[int, object]]:
    return sorted(
        ((fp ^ query).bit_count(), key) for key, fp in model.items() if (fp ^ query).bit_count() <= k
    )


def assert_exact(store: simstore.Store, model: dict[object, int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    stored = list(model.values())
    probes = [int(q) for q in rng.integers(0, 2**64, 4, dtype=np.uint64)]
    if stored:  # every document may have been removed
        picks, bits = rng.integers(0, len(stored), 30), rng.integers(0, 64, 30)
        probes += [stored[int(i)] ^ (1 << int(bit)) for i, bit in zip(picks, bits, strict=True)]
    for k in range(K + 1):
        for probe in probes:
            found = [(match.distance, match.key) for match in store.query(fingerprint=probe, k=k)]
            assert found == brute_force(model, probe, k)


def filled(path: Path, tabled: int, in_delta: int, seed: int = 1) -> tuple[simstore.Store, dict[object, int]]:
    """``tabled`` documents in the tables (a third near-duplicates of the one before)
    and ``in_delta`` more in the delta."""
    rng = np.random.default_rng(seed)
    fingerprints = rng.integers(0, 2**64, tabled + in_delta, dtype=np.uint64)
    for index in range(1, len(fingerprints), 3):
        fingerprints[index] = fingerprints[index - 1] ^ np.uint64(1 << int(rng.integers(0, 64)))
    store = simstore.open(path, "n", k=K, sync=False, merge_threshold=10**9)
    store.add_many(range(tabled), fingerprints[:tabled])
    store.merge()
    for index in range(tabled, tabled + in_delta):
        store.add(f"d{index}", fingerprint=int(fingerprints[index]))
    model: dict[object, int] = dict(store.items())
    return store, model


@settings(max_examples=25, deadline=None)
@given(
    share=st.floats(0.0, 1.0),
    delta_share=st.floats(0.0, 1.0),
    slice_buckets=st.sampled_from([1, 3, 1 << 14]),
    seed=st.integers(0, 2**16),
)
def test_remove_many_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, share: float, delta_share: float, slice_buckets: int, seed: int
) -> None:
    path = tmp_path_factory.mktemp("rm") / "s.simstore"
    store, model = filled(path, 3000, 200, seed)
    rng = np.random.default_rng(seed)
    tabled_keys = [key for key in model if isinstance(key, int)]
    delta_keys = [key for key in model if isinstance(key, str)]
    doomed = [key for key in tabled_keys if rng.random() < share]
    doomed += [key for key in delta_keys if rng.random() < delta_share]
    with mock.patch.object(simstore.engine.tableset, "DELETE_SLICE_BUCKETS", slice_buckets):
        assert store.remove_many([*doomed, *doomed[:5]]) == len(doomed)  # repeats count once
    for key in doomed:
        del model[key]
    assert len(store) == len(model)
    assert store.check() == []
    assert_exact(store, model, seed)
    store.close()
    with simstore.open(path, "r") as reopened:
        assert dict(reopened.items()) == model


def test_a_missing_key_removes_nothing(tmp_path: Path) -> None:
    store, model = filled(tmp_path / "s.simstore", 500, 20)
    before = dict(store.items())
    with pytest.raises(simstore.KeyNotFoundError, match=r"'nope'.*nothing was removed"):
        store.remove_many([*range(200), "nope", "d510"])
    assert dict(store.items()) == before
    assert store.remove_many([*range(200), "nope", "d510"], missing_ok=True) == 201
    assert len(store) == len(model) - 201
    assert store.check() == []
    store.close()


def test_bad_input_is_refused_before_anything_is_removed(tmp_path: Path) -> None:
    store, model = filled(tmp_path / "s.simstore", 100, 0)
    with pytest.raises(simstore.InvalidTypeError):
        store.remove_many("abc")
    with pytest.raises(simstore.InvalidTypeError):
        store.remove_many(5)  # type: ignore[arg-type]
    with pytest.raises((simstore.InvalidTypeError, simstore.InvalidValueError)):
        store.remove_many([1, 2, 3.5])  # type: ignore[list-item]
    with pytest.raises(simstore.InvalidTypeError):
        store.remove_many([1], missing_ok="yes")  # type: ignore[arg-type]
    assert store.remove_many([]) == 0
    with store.batch(), pytest.raises(simstore.InvalidValueError, match="batch"):
        store.remove_many([1])
    assert dict(store.items()) == model
    store.close()
