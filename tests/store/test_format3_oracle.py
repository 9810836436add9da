"""The oracle for format-3 stores (``layout="multi-index"``): every ``query``
and ``query_many`` answer equals a brute-force scan of the live documents,
at every k from 0 to 12 and every k' <= k, with documents in the delta, in
several runs, after removals and new fingerprints (stale entries), after a
compaction (joins) and after a reopen; ``check()`` is clean at each step."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

import simstore
from simstore.engine._lmdb import MapMovedError
from simstore.engine.column_tableset import ColumnTableSet
from simstore.index.permute import MAX_FINGERPRINT

CENTRES = (0, MAX_FINGERPRINT, 0x0123_4567_89AB_CDEF, 0xF0F0_F0F0_0F0F_0F0F)


def clustered(rng: np.random.Generator, count: int, k: int) -> list[int]:
    """Fingerprints near a few centres (within 2k bits) and random ones."""
    values = []
    for index in range(count):
        if index % 4 == 3:
            values.append(int(rng.integers(0, MAX_FINGERPRINT, dtype=np.uint64, endpoint=True)))
            continue
        value = CENTRES[index % len(CENTRES)]
        for bit in rng.choice(64, size=int(rng.integers(0, 2 * k + 2)), replace=False).tolist():
            value ^= 1 << bit
        values.append(value)
    return values


def expected(model: dict[str, int], query: int, k: int) -> set[tuple[str, int]]:
    return {
        (key, (fingerprint ^ query).bit_count())
        for key, fingerprint in model.items()
        if (fingerprint ^ query).bit_count() <= k
    }


def assert_oracle(store: simstore.Store, model: dict[str, int], queries: list[int], k: int) -> None:
    for radius in sorted({0, k // 2, k}):
        for query in queries:
            got = {(match.key, match.distance) for match in store.query(query, k=radius)}
            assert got == expected(model, query, radius), (hex(query), radius)
        batch = store.query_many(np.array(queries, dtype=np.uint64), k=radius)
        for query, matches in zip(queries, batch, strict=True):
            assert {(match.key, match.distance) for match in matches} == expected(model, query, radius)
    assert store.check() == []


@pytest.mark.parametrize("k", range(13))
def test_format3_queries_equal_a_brute_force_scan_at_every_step(store_path: str, k: int) -> None:
    rng = np.random.default_rng(k)
    model: dict[str, int] = {}
    queries = clustered(rng, 12, k)
    with simstore.open(store_path, k=k, layout="multi-index", merge_threshold=40, sync=False) as store:
        assert store.stats().format_version == 3
        # Single adds: the delta, then merges into several runs.
        for index, fingerprint in enumerate(clustered(rng, 150, k)):
            store.add(f"a{index}", fingerprint=fingerprint)
            model[f"a{index}"] = fingerprint
        assert_oracle(store, model, queries, k)
        # A batch that goes straight into a run of its own.
        batch = clustered(rng, 300, k)
        store.add_many([f"b{index}" for index in range(300)], fingerprints=np.array(batch, dtype=np.uint64))
        model.update({f"b{index}": fingerprint for index, fingerprint in enumerate(batch)})
        store.merge()
        assert store.stats().runs >= 1  # (writes pay for joins as they go: often one run already)
        assert_oracle(store, model, queries, k)
        # Removals and new fingerprints leave stale entries in the runs.
        for index in range(0, 300, 3):
            store.remove(f"b{index}")
            del model[f"b{index}"]
        for index in range(0, 150, 5):
            fingerprint = int(rng.integers(0, MAX_FINGERPRINT, dtype=np.uint64, endpoint=True))
            store.add(f"a{index}", fingerprint=fingerprint)
            model[f"a{index}"] = fingerprint
        store.merge()
        assert_oracle(store, model, queries, k)
        store.compact()
        assert store.stats().runs <= 1
        assert_oracle(store, model, queries, k)
    with simstore.open(store_path, "r") as reopened:
        assert reopened.stats().format_version == 3
        assert_oracle(reopened, model, queries, k)


def test_relayout_converts_to_format3_and_back(store_path: str) -> None:
    rng = np.random.default_rng(99)
    fingerprints = clustered(rng, 500, 5)
    model = {f"d{index}": fingerprint for index, fingerprint in enumerate(fingerprints)}
    queries = clustered(rng, 10, 5)
    with simstore.open(store_path, k=5, merge_threshold=64, sync=False) as store:
        store.add_many(list(model), fingerprints=np.array(fingerprints, dtype=np.uint64))
        store.remove("d0")
        del model["d0"]
        assert store.stats().format_version == 2
        store.relayout("multi-index")
        assert store.stats().format_version == 3
        assert store.stats().k == 5
        assert_oracle(store, model, queries, 5)
        store.relayout()
        assert store.stats().format_version == 2
        assert_oracle(store, model, queries, 5)


def test_a_format2_store_is_not_opened_as_multi_index(store_path: str) -> None:
    with simstore.open(store_path, k=3) as store:
        store.add("a", fingerprint=1)
    with pytest.raises(simstore.ParameterMismatchError):
        simstore.open(store_path, layout="multi-index")
    with simstore.open(store_path, "r") as store:
        assert store.stats().format_version == 2
        assert store.get("a") is not None


def test_an_unknown_layout_name_is_refused(store_path: str) -> None:
    with pytest.raises(simstore.InvalidValueError):
        simstore.open(store_path, layout="multi-indexes")


def test_queries_search_every_run_and_the_runs_a_snapshot_lacks(store_path: str) -> None:
    """With joins held back, several runs answer together; with no pinned
    snapshot to be had (another process grew the map), every run is viewed
    from the query's own transaction and the answers are the same."""
    rng = np.random.default_rng(5)
    model: dict[str, int] = {}
    queries = clustered(rng, 10, 5)
    with (
        mock.patch.object(ColumnTableSet, "plan", return_value=None),
        simstore.open(store_path, k=5, layout="multi-index", merge_threshold=50, sync=False) as store,
    ):
        for round_number in range(4):
            batch = clustered(rng, 60, 5)
            keys = [f"r{round_number}-{index}" for index in range(60)]
            store.add_many(keys, fingerprints=np.array(batch, dtype=np.uint64))
            model.update(zip(keys, batch, strict=True))
            store.merge()
        assert store.stats().runs == 4
        assert_oracle(store, model, queries, 5)
        store._engine.tableset.release()
        with (
            mock.patch.object(ColumnTableSet, "prepare"),
            mock.patch.object(ColumnTableSet, "_renew", side_effect=MapMovedError),
        ):
            assert_oracle(store, model, queries, 5)
