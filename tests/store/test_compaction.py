"""Merges write a new run of every table in one transaction; compaction joins runs a key
range of one table at a time (see simstore.engine.tableset and simstore.engine.catalog). At every step,
after a step cut short by an exception or a kill, and whatever writes come between the
steps, every answer must equal brute force, check() must pass, and later writes or
compact() must finish the compaction."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from _merge_faults import StepInterruptedError, compaction_under_way, failing_after, run_count
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
import simstore.engine.occupancy
import simstore.index.costs
import simstore.store.maintenance
from simstore.engine.catalog import plan_compaction
from simstore.engine.format import State
from simstore.engine.tableset import TableSet
from simstore.store.facade import Store

K = 3
BLOCKS = 5  # ten tables


@contextlib.contextmanager
def small_steps(entries: int) -> Iterator[None]:
    """Compaction steps of about ``entries`` entries, and no compaction unless asked."""
    with (
        mock.patch.object(TableSet.compaction_step, "__defaults__", (entries,)),
        mock.patch.object(simstore.store.maintenance, "COMPACTION_CREDIT", 0),
    ):
        yield


@pytest.fixture(autouse=True)
def small_chunks() -> Iterator[None]:
    """Bitmap chunks of 64 bits, so that small runs take several steps too (a stored
    format setting: every store of these tests is made and read with it)."""
    with mock.patch.object(simstore.engine.occupancy, "CHUNK_BITS", 6):
        yield


def build(
    path: Path, runs: int, per_run: int, in_delta: int = 0, seed: int = 1
) -> tuple[Store, dict[int, int]]:
    """A store of ``runs`` runs of ``per_run`` documents and ``in_delta`` more in the delta,
    a third of them near-duplicates of the one before; and its model ``{key: fingerprint}``.
    Nothing is compacted."""
    rng = np.random.default_rng(seed)
    total = runs * per_run + in_delta
    fingerprints = rng.integers(0, 2**64, total, dtype=np.uint64)
    for index in range(1, total, 3):  # planted neighbours, 1 to K+1 bits away
        flips = rng.choice(64, size=1 + index % (K + 1), replace=False)
        fingerprints[index] = fingerprints[index - 1] ^ np.uint64(sum(1 << int(bit) for bit in flips))
    store = simstore.open(
        str(path), k=K, blocks=BLOCKS, sync=False, merge_threshold=10**9, merge_on_close=False
    )
    model = {key: int(fp) for key, fp in enumerate(fingerprints.tolist())}
    with mock.patch.object(simstore.store.maintenance, "COMPACTION_CREDIT", 0):
        for run in range(runs):
            keys = list(range(run * per_run, (run + 1) * per_run))
            store.add_many(keys, fingerprints=fingerprints[keys[0] : keys[-1] + 1])
            store.merge()
        for key in range(runs * per_run, total):
            store.add(key, fingerprint=model[key])
    return store, model


def assert_exact(store: Store, model: dict[int, int], queries: int = 40) -> None:
    """Every k up to the store's, on stored fingerprints and their neighbours, equals brute force."""
    rng = np.random.default_rng(queries)
    stored = list(model.values())
    probes = [int(fp) for fp in rng.integers(0, 2**64, 5, dtype=np.uint64)]
    if stored:
        probes += [
            stored[int(i)] ^ (1 << int(bit))
            for i, bit in zip(
                rng.integers(0, len(stored), queries), rng.integers(0, 64, queries), strict=True
            )
        ]
    for k in range(K + 1):
        answers = store.query_many(np.array(probes, dtype=np.uint64), k=k)
        for probe, answer in zip(probes, answers, strict=True):
            expected = sorted(
                ((fp ^ probe).bit_count(), key) for key, fp in model.items() if (fp ^ probe).bit_count() <= k
            )
            assert [(match.distance, match.key) for match in answer] == expected
            assert [(match.distance, match.key) for match in store.query(probe, k=k)] == expected


def test_state_round_trips() -> None:
    assert State.decode(State(5, 7, 9, 3).encode()) == State(5, 7, 9, 3)
    assert len(State().encode()) == 32
    with pytest.raises(simstore.CorruptStoreError):
        State.decode(b"\0" * 24)


@pytest.mark.parametrize("crowded", [False, True], ids=["one-at-a-time", "crowded"])
def test_answers_stay_exact_at_every_step(tmp_path: Path, crowded: bool) -> None:
    """Queries are exact at every step of a compaction, probed a run at a time
    or with every bucket read first (as crowded prefixes are)."""
    with mock.patch.object(simstore.index.costs, "CROWDED_PREFIX", 0 if crowded else 1 << 40):
        check_every_step(tmp_path, crowded)


def check_every_step(tmp_path: Path, crowded: bool) -> None:
    store, model = build(tmp_path / "s.simstore", 4, 150, in_delta=40)
    assert store._engine.tableset.crowded == crowded
    seen: list[tuple[int, int]] = []
    real_step = simstore.store.maintenance.compaction_step

    def step(engine: Any, *, everything: bool = False) -> int | None:
        moved = real_step(engine, everything=everything)
        under_way = compaction_under_way(store)
        if under_way is not None:
            seen.append((under_way.table, under_way.cursor))
        assert store.check() == []
        assert_exact(store, model, queries=6)
        return moved

    with small_steps(40), mock.patch.object(simstore.store.maintenance, "compaction_step", step):
        store.compact()
    assert run_count(store) == 1
    assert compaction_under_way(store) is None
    assert len({table for table, _ in seen}) == len(store.tables)  # every table in steps
    assert len(seen) > 2 * len(store.tables)  # several steps a table
    assert store.stats().table_entries == (len(model),) * len(store.tables)
    store.close()


def test_merges_make_runs_and_compaction_keeps_them_few(tmp_path: Path) -> None:
    """Single adds with a small merge threshold: every merge adds a run, and the
    compaction credit of the documents written keeps the runs few."""
    rng = np.random.default_rng(3)
    model: dict[int, int] = {}
    with simstore.open(str(tmp_path / "s.simstore"), k=K, sync=False, merge_threshold=50) as store:
        counts = []
        for key in range(3000):
            model[key] = int(rng.integers(0, 2**64, dtype=np.uint64))
            store.add(key, fingerprint=model[key])
            if key % 50 == 49:
                counts.append(run_count(store))
        assert max(counts) <= simstore.store.maintenance.URGENT_RUNS + 1
        assert store.check() == []
        assert_exact(store, model)


FOLLOW_UPS = [
    "add",
    "replace_tabled_doc_in_output",
    "replace_tabled_doc_in_input",
    "remove_tabled_doc",
    "remove_delta_doc",
    "add_many_into_tables",
    "add_many_replacing",
    "add_if_new",
    "merge",
    "relayout",
    "compact",
]


@pytest.mark.parametrize("follow_up", FOLLOW_UPS)
def test_a_compaction_cut_short_is_taken_up_later(tmp_path: Path, follow_up: str) -> None:
    path = tmp_path / "s.simstore"
    store, model = build(path, 3, 200, in_delta=50)
    with small_steps(60):
        with failing_after(20, StepInterruptedError()), pytest.raises(StepInterruptedError):
            store.compact()
        under_way = compaction_under_way(store)
        assert under_way is not None
        assert under_way.table > 0  # cut in a later table, part-way through it
        assert store.check() == []
        assert_exact(store, model)
        store.close()

        with simstore.open(str(path), "r") as reader:  # another process's view, read-only
            assert reader.check() == []
            assert_exact(reader, model)
        store = simstore.open(str(path), sync=False, merge_threshold=10**9)
        neighbour = model[310] ^ 1
        if follow_up == "add":
            store.add(10_000, fingerprint=neighbour)
            model[10_000] = neighbour
        elif follow_up.startswith("replace_tabled_doc"):
            # A document the compacted tables hold in the new run, or one still in an input.
            key = 0 if follow_up.endswith("output") else 599
            store.add(key, fingerprint=model[key] ^ (1 << 60) ^ 1)
            model[key] ^= (1 << 60) ^ 1
        elif follow_up == "remove_tabled_doc":
            for key in (0, 17, 333, 599):
                store.remove(key)
                del model[key]
        elif follow_up == "remove_delta_doc":
            store.remove(610)
            del model[610]
        elif follow_up == "add_many_into_tables":
            fps = np.arange(1, 2001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            store.add_many(list(range(20_000, 22_000)), fingerprints=fps)
            model.update(zip(range(20_000, 22_000), fps.tolist(), strict=True))
            store.merge()
        elif follow_up == "add_many_replacing":
            keys = list(range(0, 600, 3))
            fps = np.array([model[key] ^ 0xF0F0 for key in keys], dtype=np.uint64)
            store.add_many(keys, fingerprints=fps)
            model.update(zip(keys, fps.tolist(), strict=True))
        elif follow_up == "add_if_new":
            assert store.add_if_new(10_001, fingerprint=neighbour) != []
            assert store.add_if_new(10_002, fingerprint=neighbour ^ 0xFFFF) == []
            model[10_002] = neighbour ^ 0xFFFF
        elif follow_up == "merge":
            for key in range(10_100, 10_105):
                store.add(key, fingerprint=neighbour ^ (key << 20))
                model[key] = neighbour ^ (key << 20)
            assert store.merge() == 5
        elif follow_up == "relayout":
            store.relayout(blocks=K + 1)
            assert compaction_under_way(store) is None
        else:
            store.compact()
            assert compaction_under_way(store) is None
        assert store.check() == []
        assert_exact(store, model)
        store.compact()
        assert (compaction_under_way(store), run_count(store)) == (None, 1)
        assert store.stats().table_entries == (len(model),) * len(store.tables)
        assert store.check() == []
        assert_exact(store, model)
        store.close()


def test_a_step_refused_for_room_changes_nothing_and_a_later_write_goes_on(tmp_path: Path) -> None:
    store, model = build(tmp_path / "s.simstore", 3, 200)
    with small_steps(60):
        with failing_after(5, simstore.StoreFullError("no room")), pytest.raises(simstore.StoreFullError):
            store.compact()
        cut = compaction_under_way(store)
        assert cut is not None
        store._engine.compaction_credit = 10**6  # as if this process had written much: it owes steps
        with failing_after(0, simstore.StoreFullError("no room")), pytest.warns(simstore.StoreFullWarning):
            store.add(10_000, fingerprint=123)  # committed, though its step found no room
        model[10_000] = 123
        assert compaction_under_way(store) == cut
        assert store.check() == []
        assert_exact(store, model)
        store.add(10_001, fingerprint=321)  # room again: its step goes on
        model[10_001] = 321
        assert compaction_under_way(store) != cut
        assert store.check() == []
        assert_exact(store, model)
        store.close()


def test_any_error_after_a_committed_write_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    """A merge or step that fails after the write committed (here a RuntimeError, as a
    thread pool raises at interpreter shutdown) must not make the write look failed: a
    MaintenanceWarning, the document stored, and a later write goes on."""
    store, model = build(tmp_path / "s.simstore", 3, 200)
    shutdown = RuntimeError("cannot schedule new futures after interpreter shutdown")
    with small_steps(60):
        with failing_after(5, simstore.StoreFullError("no room")), pytest.raises(simstore.StoreFullError):
            store.compact()  # leaves a compaction under way: later writes owe steps
        store._engine.compaction_credit = 10**6
        with failing_after(0, shutdown), pytest.warns(simstore.MaintenanceWarning, match="the write stands"):
            store.add(10_000, fingerprint=123)
        model[10_000] = 123
        assert store.check() == []
        assert_exact(store, model)
        store.add(10_001, fingerprint=321)
        model[10_001] = 321
        assert store.check() == []
        assert_exact(store, model)
    store.close()


def test_a_process_killed_in_a_step_leaves_a_store_another_process_finishes(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    store, model = build(path, 3, 200)
    store.close()
    script = textwrap.dedent(
        """
        import os, sys
        import simstore
        from simstore.engine import occupancy
        from simstore.engine.tableset import TableSet
        occupancy.CHUNK_BITS = 6  # as the test's small_steps() has it
        real = TableSet.compaction_step
        taken = []
        def step(self, txn, catalog, budget=60):
            result = real(self, txn, catalog, 60)
            if len(taken) == 9:
                os._exit(3)  # inside the step's transaction: no commit, no abort, as a kill
            taken.append(1)
            return result
        TableSet.compaction_step = step
        store = simstore.open(sys.argv[1], sync=False)
        store.compact()
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 3, completed.stderr
    with simstore.open(str(path), sync=False) as reopened:
        under_way = compaction_under_way(reopened)
        assert under_way is not None
        assert reopened.check() == []
        assert_exact(reopened, model)
        reopened.compact()
        assert (compaction_under_way(reopened), run_count(reopened)) == (None, 1)
        assert reopened.check() == []
        assert_exact(reopened, model)


@settings(max_examples=25, deadline=None)
@given(
    steps=st.integers(0, 40),
    step_entries=st.sampled_from([1, 13, 90, 1000]),
    removed=st.sets(st.integers(0, 649), max_size=12),
    replaced=st.sets(st.integers(0, 649), max_size=12),
    seed=st.integers(0, 2**16),
)
def test_any_cut_then_removals_and_replacements_match_brute_force(
    tmp_path_factory: pytest.TempPathFactory,
    steps: int,
    step_entries: int,
    removed: set[int],
    replaced: set[int],
    seed: int,
) -> None:
    path = tmp_path_factory.mktemp("cut") / "s.simstore"
    store, model = build(path, 3, 200, in_delta=50, seed=seed)
    with small_steps(step_entries):
        with failing_after(steps, StepInterruptedError()), contextlib.suppress(StepInterruptedError):
            store.compact()
        assert_exact(store, model, queries=8)
        for key in sorted(replaced):
            model[key] ^= 0b1011 << (key % 60)
            store.add(key, fingerprint=model[key])
        for key in sorted(removed):
            store.remove(key)
            del model[key]
        assert store.check() == []
        assert_exact(store, model, queries=8)
        store.compact()
        assert store.check() == []
        assert_exact(store, model, queries=8)
    store.close()


def test_a_near_duplicate_in_another_run_is_found_whatever_the_crowded_skip(tmp_path: Path) -> None:
    """A stored document that one table's probe alone finds, and a document in another
    run on the query itself: the skip of a table on a seen candidate must not hide the
    stored one (it holds only when one run holds the slot, and that run's slot holds
    one entry)."""
    rng = np.random.default_rng(4)
    with small_steps(1000):
        store = simstore.open(
            str(tmp_path / "s.simstore"), k=K, blocks=BLOCKS, sync=False, merge_threshold=10**9
        )
        tables = store.tables
        for _ in range(30):
            query = int(rng.integers(0, 2**64, dtype=np.uint64))
            while True:
                stored = query
                for bit in rng.choice(64, K, replace=False).tolist():
                    stored ^= 1 << bit
                sharing = [
                    index
                    for index, table in enumerate(tables)
                    if table.permute(stored) >> table.suffix_bits == table.permute(query) >> table.suffix_bits
                ]
                if len(sharing) == 1 and sharing[0] >= 2:
                    break
            others = rng.integers(0, 2**64, 300, dtype=np.uint64)
            store.add_many([f"s{query}", *(f"o{query}-{i}" for i in range(300))], [stored, *others.tolist()])
            store.merge()
            store.add(f"q{query}", fingerprint=query)
            store.merge()  # a run of its own
            store.query_many(others)  # every bitmap read
            found = [(match.distance, match.key) for match in store.query(query)]
            assert (0, f"q{query}") in found
            assert (K, f"s{query}") in found
        store.close()


def test_plan_compaction_tiers() -> None:
    assert plan_compaction([]) is None
    assert plan_compaction([5]) is None
    assert plan_compaction([100, 10, 10, 10]) is None
    assert plan_compaction([400, 10, 10, 10, 10]) == (1, 5)
    assert plan_compaction([100, 10, 10, 10, 10]) == (0, 5)  # 100 is within 3x the tier's 40
    assert plan_compaction([10_000, 3_000, 800, 200, 50, 1, 1]) == (5, 7)  # more than six runs
    # A tier is never joined for being a tier of fewer than four runs ...
    assert plan_compaction([100, 30, 10]) is None
    # ... and whatever the sizes, a plan always joins at least two adjacent runs.
    for sizes in ([7, 1, 1, 1, 1, 1, 1], [1, 2, 4, 8, 16, 32, 64], [64, 32, 16, 8, 4, 2, 1]):
        first, end = plan_compaction(sizes) or (0, 0)
        assert end - first >= 2
        assert end == len(sizes)
    assert plan_compaction([10, 10, 10, 10]) == (0, 4)
    # More than six runs, the newest one small (a merge of single adds into a
    # store grown in batches): the tier of large runs is joined, not the
    # newest large run with the small one, which was joined again at every
    # merge (12-30 s each at 100M: results/single_adds_100M.md).
    assert plan_compaction([40, 10, 10, 10, 10, 10, 10, 1]) == (0, 7)
    assert plan_compaction([1_000, 100, 100, 100, 3, 3, 3]) == (4, 7)  # the cheapest tier


def test_stats_report_runs_and_a_compaction_under_way(tmp_path: Path) -> None:
    with simstore.open(tmp_path / "s.simstore", "n", k=K, blocks=BLOCKS, merge_threshold=100) as store:
        with small_steps(40):
            for first in range(0, 500, 100):
                store.add_many(
                    range(first, first + 100), np.arange(first, first + 100, dtype=np.uint64) * 7919
                )
            assert store.stats().runs == 5
            assert not store.stats().compacting
            simstore.store.maintenance.compaction_step(
                store._engine
            )  # one small step of the compaction now due
            assert store.stats().compacting
        store.compact()
        stats = store.stats()
        assert (stats.runs, stats.compacting) == (1, False)


def test_live_bytes_fall_when_removals_free_pages(tmp_path: Path) -> None:
    """Stats.bytes_live counts the pages holding data; bytes_used (the highest page ever
    used) does not fall, so a user could not see what removals and compact() freed."""
    with simstore.open(tmp_path / "s.simstore", "n", k=3, sync=False) as store:
        store.add_many(range(60_000), np.random.default_rng(1).integers(0, 2**64, 60_000, dtype=np.uint64))
        full = store.stats()
        assert 0 < full.bytes_live <= full.bytes_used
        store.remove_many(range(30_000))
        store.compact()
        half = store.stats()
        assert half.bytes_used >= full.bytes_used
        assert half.bytes_live < full.bytes_live  # the key table and records halve
        assert store.check() == []


def test_compact_rewrites_a_lone_run_that_removals_thinned(tmp_path: Path) -> None:
    """A run keeps the buckets and bitmaps it was laid out with, whatever removals take
    out; compact() rewrites a lone run once a fifth of it is gone (exact at every step),
    laid out for what it holds, and leaves one that lost less alone."""
    store, model = build(tmp_path / "s.simstore", 1, 600)
    for key in range(0, 600, 2):  # half of the run
        store.remove(key)
        del model[key]
    before = store.stats()
    real_step = simstore.store.maintenance.compaction_step
    steps = 0

    def step(engine: Any, *, everything: bool = False) -> int | None:
        nonlocal steps
        moved = real_step(engine, everything=everything)
        steps += moved is not None
        assert store.check() == []
        assert_exact(store, model, queries=6)
        return moved

    with small_steps(40), mock.patch.object(simstore.store.maintenance, "compaction_step", step):
        moved = store.compact()
    assert moved == len(model) * len(store.tables)
    assert steps > len(store.tables)
    after = store.stats()
    assert after.runs == 1
    assert after.bytes_live < before.bytes_live
    assert store._engine.tableset.catalog.runs[0].entries == len(model)  # laid out for what it holds
    for key in range(1, 100, 2):  # a tenth of what is left: not worth a rewrite
        store.remove(key)
        del model[key]
    assert store.compact() == 0
    assert_exact(store, model)
    store.close()


def test_compact_leaves_a_lone_multi_index_run_and_the_file_as_they_are(tmp_path: Path) -> None:
    """A multi-index store of one run that lost nothing: compact() joins nothing and
    reserves no room for a join (the map's growth stayed in the file: 92 -> 127 bytes
    a document at 1M); once removals thinned the run, it is rewritten for what it holds."""
    fingerprints = np.random.default_rng(4).integers(0, 2**64, 50_000, dtype=np.uint64)
    with simstore.open(tmp_path / "s.simstore", "n", k=5, sync=False) as store:
        store.add_many(range(50_000), fingerprints)
        before = store.stats()
        [run] = store._engine.tableset.catalog.runs
        assert store.compact() == 0
        assert store.stats().bytes_on_disk == before.bytes_on_disk
        assert store._engine.tableset.catalog.runs == (run,)
        store.remove_many(range(0, 50_000, 3))
        store.compact()
        [joined] = store._engine.tableset.catalog.runs
        assert joined.run_id != run.run_id
        assert joined.entries == len(store) == 50_000 - len(range(0, 50_000, 3))
        assert store.check() == []
        assert [m.key for m in store.query(int(fingerprints[1]), k=0)] == [1]


def test_compact_of_several_runs_lays_the_output_out_for_what_they_hold(tmp_path: Path) -> None:
    """Joining every run, compact() sizes the output on the documents the runs hold,
    not on what was ever written into them."""
    store, model = build(tmp_path / "s.simstore", 3, 200)
    for key in range(0, 600, 4):
        store.remove(key)
        del model[key]
    store.compact()
    assert [run.entries for run in store._engine.tableset.catalog.runs] == [len(model)]
    assert store.check() == []
    assert_exact(store, model)
    store.close()
