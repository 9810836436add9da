"""All near-duplicate pairs: the pure batch-mode functions and Store.near_duplicate_pairs,
against a brute-force all-pairs scan."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import numpy as np
import pytest
from _oracles import pair_tuples, planted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simstore
from simstore.index.pairs import all_pairs, brute_force_pairs, group_by_prefix, prefix_mask, run_pairs
from simstore.index.permute import one_level_tables
from simstore.store.dedup import Pair


def found_pairs(
    fingerprints: np.ndarray, k: int, blocks: int, max_step: int | None = None
) -> list[tuple[int, int, int]]:
    return pair_tuples(all_pairs(fingerprints, one_level_tables(k, blocks), k, max_step=max_step))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    singles=st.integers(0, 60),
    clusters=st.integers(0, 8),
    size=st.integers(2, 6),
    k=st.integers(0, 4),
    extra_blocks=st.integers(1, 3),
)
def test_all_pairs_equals_brute_force(
    seed: int, singles: int, clusters: int, size: int, k: int, extra_blocks: int
) -> None:
    """Every pair within k, each exactly once, with its distance: for several layouts."""
    fingerprints = planted(seed, singles, clusters, size, k)
    found = found_pairs(fingerprints, k, k + extra_blocks)
    assert len(found) == len(set(found)), "a pair was reported twice"
    assert set(found) == brute_force_pairs(fingerprints, k)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), query_k=st.integers(0, 3), max_step=st.sampled_from([None, 1, 3]))
def test_smaller_k_and_chunked_steps(seed: int, query_k: int, max_step: int | None) -> None:
    """A k below the layout's k, and tiny numpy steps, change nothing but the work."""
    fingerprints = planted(seed, 40, 6, 5, 3)
    tables = one_level_tables(3, 5)
    found = set(pair_tuples(all_pairs(fingerprints, tables, query_k, max_step=max_step)))
    assert found == brute_force_pairs(fingerprints, query_k)


def test_degenerate_run_is_reported_in_full_without_a_matrix() -> None:
    """1,500 documents sharing one fingerprint: all 1,124,250 pairs, each once, every
    numpy step no larger than max_step."""
    fingerprints = np.concatenate(
        [np.full(1500, 0xDEADBEEF, dtype=np.uint64), np.arange(1, 50, dtype=np.uint64) << np.uint64(40)]
    )
    tables = one_level_tables(3, 5)
    total = 0
    largest_step = 0
    for left, _right, distance in all_pairs(fingerprints, tables, 3, max_step=4096):
        largest_step = max(largest_step, len(left))
        total += int(np.count_nonzero(distance == 0))
    assert total == 1500 * 1499 // 2
    assert largest_step <= 4096


def test_prefix_mask_matches_permuted_prefix() -> None:
    """Two fingerprints share a table's prefix exactly when their XOR misses its mask."""
    rng = np.random.default_rng(7)
    for table in one_level_tables(3, 5):
        mask = prefix_mask(table)
        a = int(rng.integers(0, 2**64, dtype=np.uint64))
        for bit in range(64):
            b = a ^ (1 << bit)
            same_prefix = table.permute(a) >> table.suffix_bits == table.permute(b) >> table.suffix_bits
            assert same_prefix == (((a ^ b) & mask) == 0)


def test_group_by_prefix_groups_runs() -> None:
    """group_by_prefix puts equal prefixes together and returns a permutation."""
    fingerprints = planted(3, 500, 20, 4, 3)
    table = one_level_tables(3, 5)[4]
    prefixes, order = group_by_prefix(fingerprints, table)
    assert sorted(order.tolist()) == list(range(len(fingerprints)))
    assert np.all(prefixes[1:] >= prefixes[:-1])
    expected = table.permute_array(fingerprints[order]) >> np.uint64(table.suffix_bits)
    assert np.array_equal(prefixes, expected)


def test_run_pairs_on_tiny_inputs() -> None:
    empty = np.zeros(0, dtype=np.uint64)
    assert list(run_pairs(empty, empty, 3)) == []
    one = np.ones(1, dtype=np.uint64)
    assert list(run_pairs(one, one, 3)) == []


# ---------------------------------------------------------------- the store


@pytest.fixture
def tmp_store_path() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        yield os.path.join(folder, "pairs.simstore")


def brute_force_key_pairs(keys: list[int], fingerprints: np.ndarray, k: int) -> set[tuple[int, int, int]]:
    return {(keys[i], keys[j], d) for i, j, d in brute_force_pairs(fingerprints, k)}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), split=st.integers(0, 100), removed=st.integers(0, 5))
def test_store_pairs_equal_brute_force(seed: int, split: int, removed: int) -> None:
    """Documents in the tables, in the delta and removed: the store reports exactly the
    brute-force pairs of what it holds, key_a the earlier added."""
    fingerprints = planted(seed, 60, 8, 5, 3)
    keys = list(range(len(fingerprints)))
    cut = split * len(keys) // 100
    with (
        tempfile.TemporaryDirectory() as folder,
        simstore.open(os.path.join(folder, "s.simstore"), k=3, merge_threshold=10**6) as store,
    ):
        store.add_many(keys[:cut], fingerprints[:cut])
        store.merge()
        store.add_many(keys[cut:], fingerprints[cut:])
        for key in keys[:removed]:
            store.remove(key)
        kept = keys[removed:]
        expected = brute_force_key_pairs(kept, fingerprints[removed:], 3)
        found = [tuple(pair)[:3] for pair in store.near_duplicate_pairs()]
        assert len(found) == len(set(found))
        assert set(found) == expected
        assert all(a < b for a, b, _ in found)  # keys were added in ascending order
        found_k1 = {tuple(pair)[:3] for pair in store.near_duplicate_pairs(k=1)}
        assert found_k1 == {pair for pair in expected if pair[2] <= 1}


def test_pair_fields_and_progress(tmp_store_path: str) -> None:
    """Pair(key_a, key_b, distance) with mixed key types; progress after every table."""
    calls: list[tuple[int, int]] = []
    with simstore.open(tmp_store_path, k=3) as store:
        store.add("late", fingerprint=0b111)
        store.add(b"raw", fingerprint=0b011)
        store.add(7, fingerprint=0xFFFF_0000_FFFF_0000)
        pairs = list(store.near_duplicate_pairs(progress=lambda done, total: calls.append((done, total))))
    assert pairs == [Pair("late", b"raw", 1)]
    assert pairs[0].key_a == "late"
    assert pairs[0].distance == 1
    total = calls[-1][1]
    assert calls == [(index, total) for index in range(1, total + 1)]


def test_k_is_checked_before_iteration(tmp_store_path: str) -> None:
    with simstore.open(tmp_store_path, k=2) as store:
        with pytest.raises(simstore.InvalidValueError, match="larger than the store's k=2"):
            store.near_duplicate_pairs(k=3)
        with pytest.raises(simstore.InvalidTypeError):
            store.near_duplicate_pairs(k="1")  # type: ignore[arg-type]


def test_pairs_of_an_empty_store(tmp_store_path: str) -> None:
    with simstore.open(tmp_store_path) as store:
        assert list(store.near_duplicate_pairs()) == []


def test_iterator_holds_a_snapshot_and_does_not_block_writers(tmp_store_path: str) -> None:
    """Writes made while an iterator is open neither block nor show up in it."""
    with simstore.open(tmp_store_path, k=3) as store:
        store.add_many(["a", "b", "c", "d"], [0, 1, 0xFFFF_FFFF_0000_0000, 0xFFFF_FFFF_0000_0001])
        iterator = store.near_duplicate_pairs()
        first = next(iterator)
        store.add("e", fingerprint=3)  # near a and b, but after the snapshot
        rest = list(iterator)
        assert {tuple(pair)[:3] for pair in [first, *rest]} == {("a", "b", 1), ("c", "d", 1)}
        later = {tuple(pair)[:3] for pair in store.near_duplicate_pairs()}
        assert ("a", "e", 2) in later
        assert ("b", "e", 1) in later


def test_read_only_store(tmp_store_path: str) -> None:
    with simstore.open(tmp_store_path, k=3, merge_on_close=False) as store:
        store.add_many(["a", "b"], [5, 4])
    with simstore.open(tmp_store_path, "r") as store:
        assert [tuple(pair)[:3] for pair in store.near_duplicate_pairs()] == [("a", "b", 1)]
        assert store.stats().delta_docs == 2


def test_closed_store_refuses(tmp_store_path: str) -> None:
    store = simstore.open(tmp_store_path)
    store.add_many(["a", "b"], [5, 4])
    iterator = store.near_duplicate_pairs()
    store.close()
    with pytest.raises(simstore.StoreClosedError):
        next(iterator)


def test_writes_during_the_iteration_that_grow_the_map(tmp_store_path: str) -> None:
    """The dedup loop: remove each pair's second document, and add more, while iterating.
    The writes grow the map, which ends the iteration's transaction; the iteration goes
    on in a newer one (it used to die with a raw lmdb.Error), reports each pair once, and
    leaves out pairs whose documents were removed since."""
    rng = np.random.default_rng(8)
    base = rng.integers(0, 2**64, 1500, dtype=np.uint64)
    with simstore.open(tmp_store_path, "n", k=3, sync=False) as store:
        store.add_many(list(range(3000)), np.concatenate([base, base ^ np.uint64(1)]))
        changes = store._engine.env.map_changes
        seen = []
        for step, pair in enumerate(store.near_duplicate_pairs()):
            seen.append((pair.key_a, pair.key_b))
            store.remove(pair.key_b)
            store.add_many([f"new-{step}-{i}" for i in range(3)], rng.integers(0, 2**64, 3, dtype=np.uint64))
        assert store._engine.env.map_changes > changes, "the map did not grow: nothing was tested"
        assert sorted(seen) == [(i, i + 1500) for i in range(1500)]
        assert store.check() == []


def test_a_renewed_snapshot_reports_the_pairs_of_documents_still_there(tmp_store_path: str) -> None:
    """Half the documents removed and the map grown after the first pair: no error, every
    pair reported is one of the store's, and every pair of documents not removed is
    reported (pairs differ in a random bit, so later tables find them after the renewal)."""
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2**64, 300, dtype=np.uint64)
    flips = np.uint64(1) << rng.integers(0, 64, 300).astype(np.uint64)
    with simstore.open(tmp_store_path, "n", k=3, sync=False) as store:
        store.add_many(list(range(600)), np.concatenate([base, base ^ flips]))
        true_pairs = {(i, i + 300) for i in range(300)}
        pairs = store.near_duplicate_pairs()
        reported = [next(pairs)]
        removed = set(rng.choice(600, 300, replace=False).tolist())
        for key in removed:
            store.remove(key)
        env = store._engine.env
        changes = env.map_changes
        with store._engine.lock:
            env.reserve(env.map_size() * 2)  # the map grows: the iteration's transaction ends
        assert env.map_changes > changes
        reported.extend(pairs)
    found = {(pair.key_a, pair.key_b) for pair in reported}
    assert len(found) == len(reported)
    assert found <= true_pairs
    assert {(a, b) for a, b in true_pairs if a not in removed and b not in removed} <= found
