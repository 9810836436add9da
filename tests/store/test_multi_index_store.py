"""Format 3 (``layout="multi-index"``) through the public API: every query and
query_many answer equals a brute-force scan for every k up to the store's, through
a store's life (the delta, runs, stale entries, joins, reopening); a k above the
store's is refused as in format 2; pairs and clusters equal format 2's; relayout
converts both ways; check() reports damage to the columns; a format-2 store is
not opened as format 3; and a reader in another process sees whole snapshots
while this one merges and joins."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from test_state_machine import TEXTS
from test_store_oracle import Expected, Key, as_tuples, brute, flip_random_bits, make_key

import simstore
import simstore.store.maintenance
from simstore.engine import columns, scratch
from simstore.engine._lmdb import MapMovedError
from simstore.engine.column_tableset import ColumnTableSet
from simstore.engine.format import CATALOG_KEY
from simstore.index.permute import MAX_FINGERPRINT

MULTI_INDEX = "multi-index"
# A few centres that fingerprints cluster around, so queries find neighbours.
CENTRES = (0, MAX_FINGERPRINT, 0x0123_4567_89AB_CDEF, 0xF0F0_F0F0_0F0F_0F0F, 1 << 63)
#: More compaction steps than compact() takes on these small stores: past it,
#: compact() is taken for one that never finishes.
COMPACTION_STEP_LIMIT = 200


class CompactionDidNotFinishError(AssertionError):
    """compact() kept taking steps: stands in for a compaction that never ends."""


@contextlib.contextmanager
def bounded_compaction(limit: int = COMPACTION_STEP_LIMIT) -> Iterator[None]:
    """Fail a compaction that takes more than ``limit`` steps, instead of hanging."""
    real = simstore.store.maintenance.compaction_step
    taken = 0

    def compaction_step(engine: Any, **kwargs: Any) -> int | None:
        nonlocal taken
        taken += 1
        if taken > limit:
            raise CompactionDidNotFinishError(f"compact() took more than {limit} steps")
        return real(engine, **kwargs)

    with mock.patch.object(simstore.store.maintenance, "compaction_step", compaction_step):
        yield


def compact(store: simstore.Store) -> int:
    """``store.compact()``, failing (not hanging) if it does not finish."""
    with bounded_compaction():
        return store.compact()


def run_count(store: simstore.Store) -> int:
    return store.stats().runs


# ---------------------------------------------------------------- the oracle


def clustered(rng: np.random.Generator, k: int, count: int) -> list[int]:
    """``count`` fingerprints within k+1 bits of the centres."""
    return [
        flip_random_bits(rng, CENTRES[index % len(CENTRES)], int(rng.integers(0, k + 2)))
        for index in range(count)
    ]


def query_set(rng: np.random.Generator, k: int, stored: list[int]) -> list[int]:
    """Centres, their neighbours at 1, k and k+1 bits (at large k, where each query
    costs more, at one of those), stored fingerprints and random ones."""
    queries = list(CENTRES)
    distances: tuple[int, ...] = (1, k, k + 1)
    if k >= 8:
        distances = (int(rng.choice(distances)),)
    queries += [flip_random_bits(rng, centre, distance) for centre in CENTRES for distance in distances]
    queries += [stored[int(at)] for at in rng.choice(len(stored), size=4, replace=False)]
    queries += rng.integers(0, 2**64, 3, dtype=np.uint64).tolist()
    return queries


def model_brute(model: dict[Key, int], query: int, k: int) -> Expected:
    keys = list(model)
    return brute(keys, np.array([model[key] for key in keys], dtype=np.uint64), query, k)


def assert_answers(store: simstore.Store, model: dict[Key, int], queries: list[int], stage: str) -> None:
    """query and query_many equal the brute-force scan for every k up to the store's;
    check() finds nothing."""
    keys = list(model)
    fps = np.array([model[key] for key in keys], dtype=np.uint64)
    batch = np.array(queries, dtype=np.uint64)
    # At large k a single query probes thousands of ranges: every other one is asked alone.
    singles = set(queries if store.k < 8 else queries[::2])
    for k in range(store.k + 1):
        results = store.query_many(batch, k=k)
        assert len(results) == len(queries)
        for query, result in zip(queries, results, strict=True):
            expected = brute(keys, fps, query, k)
            assert as_tuples(result) == expected, (stage, query, k)
            if query in singles:
                assert as_tuples(store.query(fingerprint=query, k=k)) == expected, (stage, query, k)
    for query, result in zip(queries, store.query_many(batch), strict=True):
        assert as_tuples(result) == brute(keys, fps, query, store.k), (stage, query)
    assert len(store) == len(model)
    assert store.check() == [], stage


def new_fingerprint(rng: np.random.Generator, k: int, held: set[int]) -> int:
    """A fingerprint near a centre that the document has not held before (one it held
    before is test_compact_finishes_when_a_document_gets_back_an_old_fingerprint's case)."""
    while True:
        fingerprint = clustered(rng, k, int(rng.integers(1, 6)))[-1]
        if fingerprint not in held:
            return fingerprint


@pytest.mark.parametrize("k", range(13))
def test_answers_equal_brute_force_through_a_stores_life(store_path: str, k: int) -> None:
    """For every k, a format-3 store answers exactly with everything in the delta,
    after a merge, with several runs, with stale entries (documents removed or given
    new fingerprints since their runs were written), after compact(), and reopened."""
    rng = np.random.default_rng(1000 + k)
    stored = clustered(rng, k, 160) + rng.integers(0, 2**64, 60, dtype=np.uint64).tolist()
    stored.append(stored[0])  # one fingerprint under two keys
    model: dict[Key, int] = {make_key(index): fp for index, fp in enumerate(stored)}
    held: dict[Key, set[int]] = {key: {fp} for key, fp in model.items()}
    keys = list(model)
    queries = query_set(rng, k, stored)
    with simstore.open(
        store_path, k=k, layout=MULTI_INDEX, sync=False, merge_threshold=10**9, merge_on_close=False
    ) as store:
        stats = store.stats()
        assert stats.format_version in (3, 4)
        assert stats.layout_name.startswith(MULTI_INDEX)
        assert store.k == k
        half = len(keys) // 2
        store.add_many(keys[:half], np.array([model[key] for key in keys[:half]], dtype=np.uint64))
        for key in keys[half:]:
            store.add(key, fingerprint=model[key])
        assert store.stats().delta_docs == len(model)
        assert_answers(store, model, queries, "all in the delta")

        assert store.merge() == len(model)
        assert store.stats().delta_docs == 0
        assert run_count(store) == 1
        assert_answers(store, model, queries, "one run")

        for round_ in range(3):
            fresh = [f"round{round_}-{index}" for index in range(12)]
            fps = clustered(rng, k, len(fresh))
            store.add_many(fresh, np.array(fps, dtype=np.uint64))
            model.update(zip(fresh, fps, strict=True))
            held.update((key, {fp}) for key, fp in zip(fresh, fps, strict=True))
            store.merge()
        assert run_count(store) >= 2
        assert_answers(store, model, queries, "several runs")

        order = list(model)
        for index in rng.choice(len(order), size=40, replace=False).tolist():
            key = order[index]
            if index % 3 == 0:
                store.remove(key)
                del model[key]
                del held[key]
            else:
                fingerprint = new_fingerprint(rng, k, held[key])
                store.add(key, fingerprint=fingerprint)
                model[key] = fingerprint
                held[key].add(fingerprint)
        removed_again = [key for key in keys if key in model][:5]
        assert store.remove_many(removed_again) == len(removed_again)
        for key in removed_again:
            del model[key]
            del held[key]
        readded = keys[:3]  # removed or not, back with new fingerprints (new documents if removed)
        for key in readded:
            fingerprint = new_fingerprint(rng, k, held.get(key, set()))
            store.add(key, fingerprint=fingerprint)
            model[key] = fingerprint
            held.setdefault(key, set()).add(fingerprint)
        assert store.stats().delta_docs > 0
        assert_answers(store, model, queries, "stale entries, replacements in the delta")

        store.merge()
        assert_answers(store, model, queries, "stale entries in the runs")

        compact(store)
        assert run_count(store) <= 1
        assert store.stats().table_entries == (len(model),) * store.stats().tables
        assert_answers(store, model, queries, "compacted")

        store.add("last", fingerprint=CENTRES[2])  # left in the delta across the reopen
        model["last"] = CENTRES[2]
    with simstore.open(store_path, "r") as reopened:
        assert reopened.stats().format_version in (3, 4)
        assert reopened.k == k
        assert reopened.stats().delta_docs == 1
        assert dict(reopened.items()) == model
        assert_answers(reopened, model, queries, "reopened read-only")
    with simstore.open(store_path, "w", layout=MULTI_INDEX) as writable:
        assert writable.stats().format_version in (3, 4)
        writable.merge()
        assert_answers(writable, model, queries, "reopened and merged")


@pytest.mark.parametrize(
    ("k", "merge_threshold", "in_scratch"), [(2, 1, False), (5, 7, False), (5, 7, True), (8, 16, False)]
)
def test_answers_equal_brute_force_with_automatic_merges_and_joins(
    store_path: str, k: int, merge_threshold: int, in_scratch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Single adds, batches, replacements and removals crossing a small merge_threshold
    merge on their own (and join runs as they go); answers stay exact, with
    every run value built in a scratch file too (none left beside the store)."""
    if in_scratch:
        monkeypatch.setattr(scratch, "SCRATCH_BYTES", 0)
    beside = set(Path(store_path).parent.iterdir())
    rng = np.random.default_rng(merge_threshold)
    model: dict[Key, int] = {}
    held: dict[Key, set[int]] = {}
    with simstore.open(
        store_path, k=k, layout=MULTI_INDEX, sync=False, merge_threshold=merge_threshold
    ) as store:
        for index in range(150):
            key = make_key(int(rng.integers(0, 120)))
            action = int(rng.integers(0, 10))
            if action == 0 and key in model:
                store.remove(key)
                del model[key]
                del held[key]
            elif action == 1:
                batch = [make_key(int(at)) for at in rng.integers(0, 120, 8)]
                fps = [new_fingerprint(rng, k, held.get(batch_key, set())) for batch_key in batch]
                # A key given twice keeps its last fingerprint: only that one is held.
                final = dict(zip(batch, fps, strict=True))
                fps = [final[batch_key] for batch_key in batch]
                store.add_many(batch, np.array(fps, dtype=np.uint64))
                for batch_key, fp in final.items():
                    model[batch_key] = fp
                    held.setdefault(batch_key, set()).add(fp)
            else:
                fp = new_fingerprint(rng, k, held.get(key, set()))
                store.add(key, fingerprint=fp)
                model[key] = fp
                held.setdefault(key, set()).add(fp)
            assert store.stats().delta_docs < merge_threshold
            if index % 50 == 49:
                assert_answers(store, model, query_set(rng, k, list(model.values())), f"step {index}")
        compact(store)
        assert_answers(store, model, query_set(rng, k, list(model.values())), "compacted")
    assert {path for path in Path(store_path).parent.iterdir() if path not in beside} <= {
        Path(store_path),
        Path(store_path + "-lock"),
    }


# ------------------------------------------------------- k above the store's


def _outcome(call: Callable[[], object]) -> tuple[str, str]:
    try:
        result = call()
        if isinstance(result, Iterator):
            list(result)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "returned", ""


@pytest.mark.parametrize("k", [0, 3, 5, 12])
def test_a_k_above_the_stores_is_refused_as_in_format_2(tmp_path: Path, k: int) -> None:
    """query, query_many, add_if_new, pairs and clusters refuse a k above the store's
    with format 2's error, and k=None means the store's k."""
    outcomes = {}
    for layout in (None, MULTI_INDEX):
        # (blocks: a new store is format 3 unless blocks are given; its band
        # table, format 4, is kept by default from k = 5.)
        blocks = k + 1 if layout is None else None
        path = str(tmp_path / f"{layout}.simstore")
        with simstore.open(path, k=k, blocks=blocks, layout=layout, sync=False) as store:
            assert store.stats().format_version == (2 if layout is None else 4 if k >= 5 else 3)
            store.add("a", fingerprint=CENTRES[2])
            store.merge()
            store.add("b", fingerprint=CENTRES[2] ^ 1)
            above = k + 1
            calls: dict[str, Callable[[], object]] = {
                "query": lambda: store.query(fingerprint=0, k=above),  # noqa: B023
                "query_many": lambda: store.query_many([0, 1], k=above),  # noqa: B023
                "query limit": lambda: store.query(fingerprint=0, k=above, limit=1),  # noqa: B023
                "add_if_new": lambda: store.add_if_new("c", fingerprint=0, k=above),  # noqa: B023
                "pairs": lambda: store.near_duplicate_pairs(k=above),  # noqa: B023
                "clusters": lambda: store.clusters(k=above),  # noqa: B023
            }
            outcomes[layout] = {name: _outcome(call) for name, call in calls.items()}
            assert "c" not in store
            assert [m.key for m in store.query(CENTRES[2])] == ["a", "b"][: 1 + (k >= 1)]
            assert store.query(CENTRES[2]) == store.query(CENTRES[2], k=k)
    assert outcomes[MULTI_INDEX] == outcomes[None]
    for kind, _message in outcomes[MULTI_INDEX].values():
        assert kind == "InvalidValueError"


# ------------------------------------------------------------- pairs, clusters


def _fill_alike(stores: list[simstore.Store], k: int, seed: int) -> None:
    """The same writes into each store: batches, single adds, texts, replacements,
    removals and merges, leaving several runs, stale entries and a delta."""
    rng = np.random.default_rng(seed)
    held: dict[str, set[int]] = {}
    plan: list[tuple[str, Any]] = []
    fps = clustered(rng, k, 120) + rng.integers(0, 2**64, 40, dtype=np.uint64).tolist()
    fps += fps[:3]  # exact repeats under other keys
    plan.append(("add_many", ([f"d{i}" for i in range(len(fps))], fps)))
    plan.append(("texts", ([f"t{i}" for i in range(len(TEXTS))], TEXTS)))
    plan.append(("merge", None))
    for index in range(len(fps)):
        held[f"d{index}"] = {fps[index]}
    for round_ in range(3):
        for index in rng.choice(len(fps), size=15, replace=False).tolist():
            key = f"d{index}"
            if key not in held:
                continue
            if index % 4 == 0:
                plan.append(("remove", key))
                del held[key]
            else:
                fp = new_fingerprint(rng, k, held[key])
                held[key].add(fp)
                plan.append(("add", (key, fp)))
        plan.append(("add_many", ([f"r{round_}-{i}" for i in range(10)], clustered(rng, k, 10))))
        if round_ < 2:
            plan.append(("merge", None))
    for store in stores:
        for action, argument in plan:
            if action == "add_many":
                store.add_many(argument[0], np.array(argument[1], dtype=np.uint64))
            elif action == "texts":
                store.add_many(argument[0], texts=argument[1])
            elif action == "merge":
                store.merge()
            elif action == "remove":
                store.remove(argument)
            else:
                store.add(argument[0], fingerprint=argument[1])


@pytest.mark.parametrize("k", [1, 4, 7])
def test_pairs_and_clusters_equal_format_2s(tmp_path: Path, k: int) -> None:
    """near_duplicate_pairs and clusters (both linkages, with and without a similarity
    threshold, at k = 0, k/2 and the store's k) are those of a format-2 store holding the same documents."""
    options: dict[str, Any] = {"k": k, "sync": False, "merge_threshold": 10**9}
    with (
        simstore.open(str(tmp_path / "two.simstore"), blocks=k + 2, **options) as two,
        simstore.open(str(tmp_path / "three.simstore"), layout=MULTI_INDEX, **options) as three,
    ):
        assert two.stats().format_version == 2
        assert three.stats().format_version in (3, 4)
        _fill_alike([two, three], k, seed=k)
        assert three.stats().runs >= 2
        assert three.stats().delta_docs > 0
        assert dict(two.items()) == dict(three.items())
        for stage in ("runs, stale entries and a delta", "compacted"):
            for pair_k in sorted({0, k // 2, k}):
                for threshold in (None, 0.9):
                    expected = Counter(two.near_duplicate_pairs(k=pair_k, min_similarity=threshold))
                    got = Counter(three.near_duplicate_pairs(k=pair_k, min_similarity=threshold))
                    assert got == expected, (stage, pair_k, threshold)
                    assert max(got.values(), default=1) == 1
                for linkage, keep in (("components", "first"), ("star", "first"), ("components", "longest")):
                    expected_clusters = two.clusters(k=pair_k, keep=keep, linkage=linkage)
                    got_clusters = three.clusters(k=pair_k, keep=keep, linkage=linkage)
                    assert got_clusters == expected_clusters, (stage, pair_k, linkage, keep)
            assert any(two.near_duplicate_pairs())
            two.compact()
            compact(three)
        assert three.check() == []


# ----------------------------------------------------------------- relayout


def test_relayout_to_multi_index_and_back(store_path: str) -> None:
    """A format-2 store converted in place to format 3 and back answers the same,
    keeps k, and is sound at each step; writes between the two find their way."""
    rng = np.random.default_rng(5)
    k = 4
    stored = clustered(rng, k, 300) + rng.integers(0, 2**64, 100, dtype=np.uint64).tolist()
    model: dict[Key, int] = {make_key(index): fp for index, fp in enumerate(stored)}
    keys = list(model)
    queries = query_set(rng, k, stored)
    with simstore.open(store_path, k=k, blocks=k + 2, sync=False, merge_threshold=10**9) as store:
        store.add_many(keys[:300], np.array(stored[:300], dtype=np.uint64))
        store.merge()
        for key in keys[300:]:
            store.add(key, fingerprint=model[key])  # in the delta
        store.remove(keys[0])
        del model[keys[0]]
        assert store.stats().format_version == 2
        before = {query: as_tuples(store.query(query)) for query in queries}
        assert_answers(store, model, queries, "format 2")

        store.relayout(layout=MULTI_INDEX)
        stats = store.stats()
        assert stats.format_version in (3, 4)
        assert stats.layout_name.startswith(MULTI_INDEX)
        assert store.k == k
        assert {query: as_tuples(store.query(query)) for query in queries} == before
        assert_answers(store, model, queries, "converted to format 3")

        # Writes in format 3, leaving stale entries and a delta behind.
        store.add(keys[1], fingerprint=new_fingerprint(rng, k, {model[keys[1]]}))
        model[keys[1]] = store[keys[1]].fingerprint
        store.merge()
        store.remove(keys[2])
        del model[keys[2]]
        store.add("new", fingerprint=CENTRES[0] ^ 3)
        model["new"] = CENTRES[0] ^ 3
        assert_answers(store, model, queries, "written in format 3")
        after = {query: as_tuples(store.query(query)) for query in queries}

        store.relayout(blocks=k + 2)
        stats = store.stats()
        assert stats.format_version == 2
        assert not stats.layout_name.startswith(MULTI_INDEX)
        assert store.k == k
        assert store.blocks == k + 2
        assert {query: as_tuples(store.query(query)) for query in queries} == after
        assert_answers(store, model, queries, "back in format 2")
    with simstore.open(store_path, "r") as reopened:
        assert reopened.stats().format_version == 2
        assert dict(reopened.items()) == model
        assert reopened.check() == []


# -------------------------------------------------------------------- damage

DOCS = 2000
HEADER = columns.HEADER


def _damaged_store(path: str) -> tuple[simstore.Store, np.ndarray]:
    fingerprints = np.random.default_rng(31).integers(0, 2**64, DOCS, dtype=np.uint64)
    store = simstore.open(path, "n", k=5, layout=MULTI_INDEX, sync=False)
    store.add_many(list(range(DOCS)), fingerprints)
    store.merge()
    assert store.check() == []
    return store, fingerprints


def _reseal(value: bytearray) -> bytearray:
    """The value with its header's CRC made right again."""
    kind, item_size, bits, _crc, count = HEADER.unpack_from(value)
    payload = bytes(value[HEADER.size : HEADER.size + item_size * count])
    HEADER.pack_into(value, 0, kind, item_size, bits, zlib.crc32(payload), count)
    return value


def _flip(offset: int, *, reseal: bool = False) -> Callable[[bytearray], bytearray]:
    def change(value: bytearray) -> bytearray:
        value[HEADER.size + offset] ^= 0x10
        return _reseal(value) if reseal else value

    return change


def _set_id(position: int, new_id: int) -> Callable[[bytearray], bytearray]:
    def change(value: bytearray) -> bytearray:
        item_size = HEADER.unpack_from(value)[1]
        at = HEADER.size + position * item_size
        value[at : at + item_size] = new_id.to_bytes(item_size, "little")
        return _reseal(value)

    return change


def _rewrite(store: simstore.Store, table: int, kind: int, change: Callable[[bytearray], bytearray]) -> None:
    """Rewrite one value of the first run behind simstore's back."""
    tableset = store._engine.tableset
    assert isinstance(tableset, ColumnTableSet)
    run = tableset.catalog.runs[0]
    database = tableset.databases[table]
    key = columns.run_key(run.run_id, kind)

    def body(txn: Any) -> None:
        value = txn.get(key, db=database)
        assert value is not None
        txn.put(key, bytes(change(bytearray(value))), db=database)

    store._engine.env.write(body)


@pytest.mark.parametrize(
    ("table", "kind", "change", "expected"),
    [
        (1, columns.KEYS, _flip(8 * 700 + 3), "CRC"),
        (0, columns.KEYS, _flip(8 * 700 + 3, reseal=True), "other fingerprints than table 0"),
        (2, columns.KEYS, _flip(8 * 5 + 7, reseal=True), "table 2"),
        (0, columns.IDS, _set_id(11, 12), "lack 1 documents"),
        (0, columns.IDS, _set_id(11, 10**7), "id never given"),
        (0, columns.IDS, lambda value: value[:8], "shorter than its header"),
        (1, columns.DIRECTORY, _flip(4 * 3, reseal=True), "directory"),
        (2, columns.DIRECTORY, lambda value: value[: HEADER.size + 4], "claims"),
        (0, columns.KEYS, lambda value: bytearray([9]) + value[1:], "header is damaged"),
    ],
    ids=[
        "keys-bit-flipped",
        "table-0-key-changed",
        "rotated-key-changed",
        "id-of-another-document",
        "id-never-given",
        "ids-cut-short",
        "directory-wrong",
        "directory-cut-short",
        "keys-header-wrong",
    ],
)
def test_check_reports_a_damaged_column(
    tmp_path: Path,
    table: int,
    kind: int,
    change: Callable[[bytearray], bytearray],
    expected: str,
) -> None:
    """One damaged column value: check() names the damage (it does not raise), and
    the store still closes."""
    store, fingerprints = _damaged_store(str(tmp_path / "s"))
    with store:
        _rewrite(store, table, kind, change)
        problems = store.check()
        assert problems
        assert all(isinstance(problem, str) for problem in problems)
        assert any(expected in problem for problem in problems), problems
        # Queries either still answer or refuse the damage as such, never crash otherwise.
        with contextlib.suppress(simstore.CorruptStoreError):
            store.query(int(fingerprints[5]))


def test_check_reports_a_damaged_catalog_and_stray_values(store_path: str) -> None:
    """A catalog that does not decode, and values of a run the catalog lacks."""
    store, _ = _damaged_store(store_path)
    with store:
        tableset = store._engine.tableset
        assert isinstance(tableset, ColumnTableSet)
        database = tableset.databases[1]
        stray = columns.run_key(999, columns.KEYS)
        store._engine.env.write(lambda txn: txn.put(stray, b"\0" * 64, db=database))
        assert store.check() == ["table 1 holds a value of run 999, which the catalog lacks"]
        store._engine.env.write(lambda txn: txn.delete(stray, db=database))
        assert store.check() == []
        meta = store._engine.handles.meta
        store._engine.env.write(lambda txn: txn.put(CATALOG_KEY, b"\xc1not msgpack", db=meta))
        problems = store.check()
        assert problems
        assert problems[0].startswith("run catalog:")


def test_check_reports_bytes_flipped_in_the_file(store_path: str) -> None:
    """Bytes of table 0's column flipped in the file itself (not through LMDB):
    check() reports it after a reopen."""
    store, fingerprints = _damaged_store(store_path)
    store.close()
    data = bytearray(Path(store_path).read_bytes())
    flipped = 0
    for fingerprint in fingerprints[100:110].tolist():
        # Table 0 keeps fingerprints little-endian; records keep them big-endian.
        needle = int(fingerprint).to_bytes(8, "little")
        at = data.find(needle)
        while at >= 0:
            data[at + 3] ^= 0x40
            flipped += 1
            at = data.find(needle, at + 1)
    assert flipped >= 10
    Path(store_path).write_bytes(bytes(data))
    with simstore.open(store_path, "r") as reopened:
        problems = reopened.check()
    assert problems
    assert any("CRC" in problem for problem in problems), problems


# ------------------------------------------------------- opening a format-2 store


@pytest.mark.parametrize("mode", ["c", "w", "r"])
def test_a_format_2_store_is_not_opened_as_multi_index(store_path: str, mode: str) -> None:
    """layout="multi-index" on an existing format-2 store raises ParameterMismatchError
    and leaves the file as it was."""
    with simstore.open(store_path, k=3, blocks=5, sync=False) as store:
        store.add_many(["a", "b"], [1, 2])
        store.merge()
        store.add("c", fingerprint=3)
    before = Path(store_path).read_bytes()
    with pytest.raises(simstore.ParameterMismatchError) as caught:
        simstore.open(store_path, mode, layout=MULTI_INDEX)
    assert "layout" in caught.value.differences
    assert isinstance(caught.value, ValueError)
    assert Path(store_path).read_bytes() == before
    with simstore.open(store_path, "r") as reopened:
        assert reopened.stats().format_version == 2
        assert dict(reopened.items()) == {"a": 1, "b": 2, "c": 3}
        assert reopened.check() == []


def test_a_format_3_store_keeps_its_parameters(store_path: str) -> None:
    """Reopening a format-3 store with its layout (or none) works; another k is refused."""
    with simstore.open(store_path, k=4, layout=MULTI_INDEX, sync=False) as store:
        store.add("a", fingerprint=1)
    with simstore.open(store_path, "w", layout=MULTI_INDEX) as same:
        assert same.stats().format_version in (3, 4)
    with simstore.open(store_path, k=4) as plain:
        assert plain.stats().format_version in (3, 4)
    with pytest.raises(simstore.ParameterMismatchError):
        simstore.open(store_path, k=5, layout=MULTI_INDEX)


# ------------------------------------------------ runs the pinned snapshot lacks


def test_every_run_answers_and_without_a_pinned_snapshot_too(store_path: str) -> None:
    """With joins held back, several runs answer together; with no pinned
    snapshot to be had (another process grew the map), every run is viewed
    from the query's own transaction and the answers are the same."""
    rng = np.random.default_rng(5)
    model: dict[Key, int] = {}
    with (
        mock.patch.object(ColumnTableSet, "plan", return_value=None),
        simstore.open(store_path, k=5, layout=MULTI_INDEX, merge_threshold=50, sync=False) as store,
    ):
        for round_number in range(4):
            batch = clustered(rng, 5, 60)
            keys = [f"r{round_number}-{index}" for index in range(60)]
            store.add_many(keys, fingerprints=np.array(batch, dtype=np.uint64))
            model.update(zip(keys, batch, strict=True))
            store.merge()
        assert run_count(store) == 4
        queries = query_set(rng, 5, list(model.values()))
        assert_answers(store, model, queries, "four runs")
        store._engine.tableset.release()
        with (
            mock.patch.object(ColumnTableSet, "prepare"),
            mock.patch.object(ColumnTableSet, "_renew", side_effect=MapMovedError),
        ):
            assert_answers(store, model, queries, "no pinned snapshot")


def test_an_unknown_layout_name_is_refused(store_path: str) -> None:
    with pytest.raises(simstore.InvalidValueError):
        simstore.open(store_path, layout="multi-indexes")


# -------------------------------------- a document given back an old fingerprint


def _back_to_an_old_fingerprint(store: simstore.Store) -> None:
    """A document given back a fingerprint an earlier run holds for it."""
    store.add("a", fingerprint=5)
    store.merge()
    store.add("a", fingerprint=6)
    store.merge()
    store.add("a", fingerprint=5)
    store.merge()


def test_compact_finishes_when_a_document_gets_back_an_old_fingerprint(store_path: str) -> None:
    with simstore.open(store_path, k=3, layout=MULTI_INDEX, sync=False, merge_threshold=10**9) as store:
        _back_to_an_old_fingerprint(store)
        compact(store)
        assert store.stats().runs == 1


def test_a_join_keeps_one_entry_a_document(store_path: str) -> None:
    with simstore.open(store_path, k=3, layout=MULTI_INDEX, sync=False, merge_threshold=10**9) as store:
        store.add_many([f"o{i}" for i in range(20)], [(i + 1) << 32 for i in range(20)])
        _back_to_an_old_fingerprint(store)
        compact(store)  # finishes: the duplicate is under a fifth of the entries
        assert store.check() == []
        assert [m.key for m in store.query(5, k=0)] == ["a"]
        assert store.stats().table_entries == (len(store),) * store.stats().tables


# ----------------------------------------------------- a reader in another process

READER = textwrap.dedent(
    """
    import json, os, sys, time
    import numpy as np
    import simstore

    path, queries_path, out_path, ready_path, stop_path = sys.argv[1:6]
    queries = json.loads(open(queries_path).read())
    batch = np.array(queries, dtype=np.uint64)
    rounds = 0
    with simstore.open(path, "r") as store, open(out_path, "w") as out:
        while True:
            stopping = os.path.exists(stop_path)
            answers = [[[m.key, m.distance] for m in result] for result in store.query_many(batch)]
            singles = [[[m.key, m.distance] for m in store.query(q)] for q in queries[:3]]
            out.write(json.dumps({"batch": answers, "singles": singles}) + "\\n")
            out.flush()
            rounds += 1
            if rounds == 1:
                open(ready_path, "w").close()
            if stopping and rounds >= 5:
                break
            time.sleep(0.002)
    """
)


def _answers(model: dict[Key, int], queries: list[int], k: int) -> list[list[list[Any]]]:
    return [[[key, distance] for key, distance, _ in model_brute(model, query, k)] for query in queries]


def _wait_for(path: Path, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"the reader exited early: {err.decode()}")
        assert time.monotonic() < deadline, "the reader did not start"
        time.sleep(0.01)


def test_a_reader_in_another_process_sees_whole_snapshots(tmp_path: Path) -> None:
    """A reader process querying while this one adds, replaces, removes, merges and
    joins runs: every query_many answer is the brute-force answer of one committed
    state, the states it sees never go back, and documents stored before it started
    are always found."""
    path = str(tmp_path / "shared.simstore")
    rng = np.random.default_rng(17)
    k = 4
    model: dict[Key, int] = {}
    held: dict[Key, set[int]] = {}
    base = clustered(rng, k, 60) + rng.integers(0, 2**64, 20, dtype=np.uint64).tolist()
    base_keys = [f"base{i}" for i in range(len(base))]
    with simstore.open(path, k=k, layout=MULTI_INDEX, sync=False, merge_threshold=25) as store:
        store.add_many(base_keys, np.array(base, dtype=np.uint64))
        store.merge()
        model.update(zip(base_keys, base, strict=True))
        queries = list(CENTRES) + base[:5] + [flip_random_bits(rng, centre, 2) for centre in CENTRES]
        states = [dict(model)]
        queries_path = tmp_path / "queries.json"
        queries_path.write_text(json.dumps(queries))
        out_path, ready, stop = tmp_path / "answers.jsonl", tmp_path / "ready", tmp_path / "stop"
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, path, str(queries_path), str(out_path), str(ready), str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_for(ready, reader, 60)
            for step in range(60):
                action = step % 6
                movable = [key for key in model if not str(key).startswith("base")]
                if action in (0, 1, 2):
                    batch = [f"new{step}-{i}" for i in range(int(rng.integers(1, 12)))]
                    batch += [
                        str(key) for key in rng.choice(movable, size=min(3, len(movable)), replace=False)
                    ]
                    fps = {key: new_fingerprint(rng, k, held.get(key, set())) for key in batch}
                    store.add_many(list(fps), np.array(list(fps.values()), dtype=np.uint64))
                    for key, fp in fps.items():
                        model[key] = fp
                        held.setdefault(key, set()).add(fp)
                elif action == 3 and movable:
                    gone = [str(key) for key in rng.choice(movable, size=min(4, len(movable)), replace=False)]
                    store.remove_many(gone)
                    for key in gone:
                        del model[key]
                        del held[key]
                elif action == 4:
                    store.merge()
                else:
                    compact(store)
                if states[-1] != model:
                    states.append(dict(model))
                time.sleep(0.003)
        finally:
            stop.touch()
            try:
                _, err = reader.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                reader.kill()
                reader.communicate()
                raise
        assert reader.returncode == 0, err.decode()
        assert store.check() == []
    expected_batches = [_answers(state, queries, k) for state in states]
    lines = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert len(lines) >= 5
    earliest = 0
    for number, line in enumerate(lines):
        matching = [at for at, expected in enumerate(expected_batches) if expected == line["batch"]]
        assert matching, f"answer {number} is no committed state's"
        later = [at for at in matching if at >= earliest]
        assert later, f"answer {number} shows a state older than answer {number - 1}'s"
        earliest = later[0]
        for query, single in zip(queries, line["singles"], strict=False):
            assert any(_answers(state, [query], k)[0] == single for state in states[earliest:]), number
        for key, fingerprint in zip(base_keys, base, strict=True):
            if fingerprint in queries:
                assert [key, 0] in line["batch"][queries.index(fingerprint)]
    assert lines[0]["batch"] == expected_batches[0]  # before the writes
    assert lines[-1]["batch"] == expected_batches[-1]  # after them


def test_a_new_store_at_the_default_k_is_format_3(tmp_path: Path) -> None:
    """Every k gets format 3 unless blocks or a layout are given, 4 with its
    band table where documents keep sketches and k is 5 or more (a store of
    fingerprints keeps none); relayout() with neither keeps a store in the
    layout a new one would get, blocks take it back to format 2."""
    with simstore.open(str(tmp_path / "default.simstore"), sync=False) as store:
        assert (store.k, store.stats().format_version) == (5, 4)
        store.add_many(range(50), np.arange(50, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        store.relayout()
        assert store.stats().format_version in (3, 4)
        store.relayout(blocks=7)
        assert (store.stats().format_version, store.blocks) == (2, 7)
        assert len(store) == 50
    for k, blocks, version in ((0, None, 3), (3, None, 3), (4, None, 3), (4, 6, 2), (5, 7, 2), (6, None, 4)):
        path = str(tmp_path / f"k{k}-{blocks}.simstore")
        with simstore.open(path, k=k, blocks=blocks, sync=False) as store:
            assert store.stats().format_version == version, (k, blocks)


def test_joins_drop_stale_entries_by_their_graves(store_path: str) -> None:
    """Removals and new fingerprints are recorded as graves: a join drops exactly
    the stale entries without reading a record, answers stay exact, and graves no
    run can hold are deleted."""
    from simstore.engine import graves

    rng = np.random.default_rng(3)
    k = 5
    stored = clustered(rng, k, 600)
    model: dict[Key, int] = {make_key(index): fp for index, fp in enumerate(stored)}
    keys = list(model)
    queries = query_set(rng, k, stored)
    with simstore.open(store_path, k=k, sync=False, merge_threshold=10**9) as store:
        store.add_many(keys[:300], np.array(stored[:300], dtype=np.uint64))
        store.add_many(keys[300:], np.array(stored[300:], dtype=np.uint64))
        for key in keys[:300:4]:
            store.remove(key)
            del model[key]
        store.remove_many(keys[300:400:5])
        for key in keys[300:400:5]:
            del model[key]
        moved_away = keys[1]
        old = model[moved_away]
        store.add(moved_away, fingerprint=new_fingerprint(rng, k, {old}))
        store.merge()
        store.add(moved_away, fingerprint=old)  # given its old fingerprint back
        store.add(keys[2], fingerprint=new_fingerprint(rng, k, {model[keys[2]]}))
        model[keys[2]] = store[keys[2]].fingerprint
        store.merge()
        tableset = store._engine.tableset
        assert isinstance(tableset, ColumnTableSet)
        with mock.patch.object(ColumnTableSet, "live", side_effect=AssertionError("a record was read")):
            store.compact()
        assert len(tableset.catalog.runs) == 1
        assert tableset.catalog.entries == len(model)  # every stale entry dropped, none live
        with store._engine.env.read() as txn:
            assert len(graves.graves_since(txn, store._engine.handles.meta, 0)[0]) == 0
        assert_answers(store, model, queries, "after a join by graves")


def test_stats_describe_the_tables_in_the_file(store_path: str) -> None:
    """A format-3 store's stats give one prefix and one bit order a stored table:
    the segment a probe fixes and the rotation its keys are sorted by."""
    from simstore.index.permute import Table

    fingerprints = np.random.default_rng(5).integers(0, 2**64, 200, dtype=np.uint64)
    with simstore.open(store_path, sync=False) as store:
        store.add_many(range(200), fingerprints)
        stats = store.stats(skew=True)
        scheme = store._engine.params.scheme
        assert scheme is not None
        assert stats.tables == len(stats.prefix_bits) == len(stats.layout) == scheme.tables
        assert stats.prefix_bits == tuple(scheme.widths)
        assert stats.skew is not None
        assert len(stats.skew) == scheme.tables
        for table, (bit_order, prefix) in enumerate(zip(stats.layout, stats.prefix_bits, strict=True)):
            permuted = Table(bit_order, prefix).permute_array(fingerprints)
            assert np.array_equal(permuted, scheme.rotate(fingerprints, table))
