"""The oracle: every query and query_many answer equals a brute-force XOR-popcount scan,
for every k up to the store's, with the delta empty, partly merged and full."""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simstore
import simstore.index.costs
from simstore.engine.query import FEW_QUERIES
from simstore.index.permute import MAX_FINGERPRINT

Key = str | bytes | int
Expected = list[tuple[Key, int, int]]

ORACLE = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PHASES = ("empty", "partial", "full")


def _rank(key: Key) -> tuple[int, Key]:
    """The documented order of mixed keys: ints, then bytes, then str."""
    if isinstance(key, int):
        return (0, key)
    if isinstance(key, bytes):
        return (1, key)
    return (2, key)


def brute(keys: list[Key], fps: np.ndarray, query: int, k: int) -> Expected:
    """Every (key, distance, fingerprint) within k of query, sorted by (distance, key)."""
    if len(keys) == 0:
        return []
    distances = np.bitwise_count(fps ^ np.uint64(query))
    hits = [(keys[i], int(distances[i]), int(fps[i])) for i in np.flatnonzero(distances <= k)]
    return sorted(hits, key=lambda hit: (hit[1], _rank(hit[0])))


def as_tuples(matches: list[simstore.Match]) -> Expected:
    return [(match.key, match.distance, match.fingerprint) for match in matches]


def flip_random_bits(rng: np.random.Generator, fingerprint: int, distance: int) -> int:
    for bit in rng.choice(64, size=distance, replace=False).tolist():
        fingerprint ^= 1 << bit
    return fingerprint


def make_key(index: int) -> Key:
    """Keys of all three types, so the mixed-type ordering is exercised."""
    return (index, f"doc-{index}", f"doc-{index}".encode())[index % 3]


@st.composite
def corpora(draw: st.DrawFn, k: int) -> tuple[list[int], list[int], int]:
    """(stored fingerprints, query fingerprints, seed).

    Stored: hypothesis-chosen bases (which include 0, 2**64-1 and clustered values),
    random bulk, and for each base planted neighbours at every distance 0..k+1.
    Queries: bases, neighbours of bases at 0..k+1 and random values.
    """
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    bases = draw(
        st.lists(
            st.one_of(
                st.integers(0, MAX_FINGERPRINT),
                st.sampled_from([0, MAX_FINGERPRINT, 1 << 63, (1 << 63) - 1]),
                # clustered: only the low 12 bits vary, so many share long prefixes
                st.integers(0, 4095).map(lambda low: 0x5A5A_5A5A_5A5A_0000 | low),
            ),
            min_size=1,
            max_size=12,
        ),
        label="bases",
    )
    bulk = rng.integers(0, 2**64, draw(st.integers(0, 150), label="bulk"), dtype=np.uint64).tolist()
    stored = list(bases) + bulk
    for base in bases:
        for distance in range(k + 2):
            stored.append(flip_random_bits(rng, base, distance))
    # one exact duplicate fingerprint under a second key
    stored.append(stored[0])
    queries = list(bases)
    for base in bases:
        queries.extend(flip_random_bits(rng, base, d) for d in range(k + 2))
    queries.extend(rng.integers(0, 2**64, 5, dtype=np.uint64).tolist())
    return stored, queries, seed


def build(path: str, k: int, blocks: int | None, stored: list[int], phase: str) -> simstore.Store:
    """A store holding ``stored`` under keys make_key(i), its delta empty, partly merged or full."""
    store = simstore.open(path, k=k, blocks=blocks, sync=False, merge_threshold=10**9)
    try:
        keys = [make_key(i) for i in range(len(stored))]
        half = len(stored) // 2
        store.add_many(keys[:half], np.array(stored[:half], dtype=np.uint64))
        if phase == "partial":
            store.merge()
        for key, fingerprint in zip(keys[half:], stored[half:], strict=True):
            store.add(key, fingerprint=fingerprint)
        if phase == "empty":
            store.merge()
        stats = store.stats()
        assert stats.docs == len(stored)
        expected_delta = {"empty": 0, "partial": len(stored) - half, "full": len(stored)}[phase]
        assert stats.delta_docs == expected_delta
    except BaseException:
        store.close()
        raise
    return store


def check_against_brute(store: simstore.Store, stored: list[int], queries: list[int]) -> None:
    keys = [make_key(i) for i in range(len(stored))]
    fps = np.array(stored, dtype=np.uint64)
    query_array = np.array(queries, dtype=np.uint64)
    # A batch of FEW_QUERIES or more is permuted a table at a time, a smaller one a query at a time.
    wide_array = np.resize(query_array, FEW_QUERIES + len(queries))
    for k in range(store.k + 1):
        batch = store.query_many(query_array, k=k)
        assert len(batch) == len(queries)
        for query, batch_result in zip(queries, batch, strict=True):
            expected = brute(keys, fps, query, k)
            assert as_tuples(store.query(fingerprint=query, k=k)) == expected, (query, k)
            assert as_tuples(batch_result) == expected, (query, k)
        if len(queries):
            wide = store.query_many(wide_array, k=k)
            for query, result in zip(wide_array.tolist(), wide, strict=True):
                assert as_tuples(result) == brute(keys, fps, query, k), (query, k)
    # k omitted means the store's k
    default = store.query_many(query_array)
    for query, result in zip(queries, default, strict=True):
        assert as_tuples(result) == brute(keys, fps, query, store.k)
        assert as_tuples(store.query(query)) == as_tuples(result)


#: (k, blocks): ``None`` is a new store's layout (a multi-index scheme, format 3,
#: which has no crowded prefixes), blocks Manku's tables (format 2).
LAYOUTS = [*((k, None) for k in range(5)), (0, 2), (4, 6), (5, 7), (2, 6), (3, 4), (1, 2)]


@pytest.mark.parametrize(
    ("k", "blocks", "crowded"),
    [
        pytest.param(k, blocks, crowded, id=f"{'crowded' if crowded else 'one-at-a-time'}-{k}-{blocks}")
        for crowded in (False, True)
        for k, blocks in LAYOUTS
        if blocks is not None or not crowded
    ],
)
@ORACLE
@given(data=st.data())
def test_queries_equal_brute_force(k: int, blocks: int | None, crowded: bool, data: st.DataObject) -> None:
    """query and query_many return exactly the brute-force matches (keys, distances,
    fingerprints, order) for every k <= the store's, whatever state the delta is in,
    whether the tables are probed one run at a time or their buckets are read first
    and searched together (as crowded prefixes are)."""
    stored, queries, _seed = data.draw(corpora(k), label="corpus")
    phase = data.draw(st.sampled_from(PHASES), label="phase")
    with (
        tempfile.TemporaryDirectory() as folder,
        mock.patch.object(simstore.index.costs, "CROWDED_PREFIX", 0 if crowded else 1 << 40),
    ):
        store = build(str(Path(folder) / "oracle.simstore"), k, blocks, stored, phase)
        with store:
            if blocks is not None:
                assert store._engine.tableset.crowded == crowded
            check_against_brute(store, stored, queries)


@pytest.mark.parametrize("phase", PHASES)
def test_oracle_after_removals_and_replacements(store_path: str, phase: str) -> None:
    """Removing and re-fingerprinting documents (in the delta and in the tables) keeps
    every answer equal to the brute-force scan of what is left."""
    rng = np.random.default_rng(11)
    k = 3
    bases = rng.integers(0, 2**64, 40, dtype=np.uint64).tolist()
    stored = list(bases)
    for base in bases:
        stored.extend(flip_random_bits(rng, base, d) for d in range(k + 2))
    model: dict[Key, int] = {}
    with build(store_path, k, None, stored, phase) as store:
        model.update((make_key(i), fp) for i, fp in enumerate(stored))
        for index in rng.choice(len(stored), size=40, replace=False).tolist():
            key = make_key(index)
            if index % 2:
                store.remove(key)
                del model[key]
            else:
                new_fp = flip_random_bits(rng, bases[index % len(bases)], int(rng.integers(0, 5)))
                store.add(key, fingerprint=new_fp)
                model[key] = new_fp
        keys = list(model)
        fps = np.array(list(model.values()), dtype=np.uint64)
        queries = bases + [flip_random_bits(rng, base, 2) for base in bases]
        for stage in ("before merge", "after merge"):
            results = store.query_many(np.array(queries, dtype=np.uint64))
            for query, result in zip(queries, results, strict=True):
                for qk in range(k + 1):
                    expected = brute(keys, fps, query, qk)
                    assert as_tuples(store.query(fingerprint=query, k=qk)) == expected, stage
                assert as_tuples(result) == brute(keys, fps, query, k), stage
            store.merge()
        assert store.check() == []


@pytest.mark.parametrize("merge_threshold", [1, 7, 64])
def test_oracle_with_automatic_merges(store_path: str, merge_threshold: int) -> None:
    """Single adds and batches that cross merge_threshold (and so merge on their own, or go
    straight to the tables) still answer exactly."""
    rng = np.random.default_rng(merge_threshold)
    bases = rng.integers(0, 2**64, 30, dtype=np.uint64).tolist()
    stored = [flip_random_bits(rng, base, d) for base in bases for d in range(5)]
    keys = [make_key(i) for i in range(len(stored))]
    with simstore.open(store_path, k=3, sync=False, merge_threshold=merge_threshold) as store:
        position = 0
        while position < len(stored):
            step = int(rng.integers(1, 20))
            chunk = slice(position, position + step)
            if step % 2:
                store.add_many(keys[chunk], stored[chunk])
            else:
                for key, fp in zip(keys[chunk], stored[chunk], strict=True):
                    store.add(key, fingerprint=fp)
            position += step
            assert store.stats().delta_docs < merge_threshold
        fps = np.array(stored, dtype=np.uint64)
        results = store.query_many(np.array(bases, dtype=np.uint64), k=3)
        for base, result in zip(bases, results, strict=True):
            assert as_tuples(result) == brute(keys, fps, base, 3)
        assert store.check() == []


def test_empty_store_and_empty_batch(store: simstore.Store) -> None:
    """An empty store answers nothing; an empty batch gives an empty list."""
    assert store.query(fingerprint=0) == []
    assert store.query_many(np.array([], dtype=np.uint64)) == []
    assert store.query_many([1, 2]) == [[], []]
