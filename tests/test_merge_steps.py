"""A merge writes one table per transaction. Between its steps, after a crash part-way,
and after a merge refused for lack of room, every answer must equal brute force, check()
must pass, and the next write must leave the store whole (see Store.merge)."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from _merge_faults import StepInterruptedError, failing_after, merged_tables
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.format import State
from simstore.store import Store

K = 3
BLOCKS = 5  # ten tables


def build(path: Path, tabled: int, in_delta: int, seed: int = 1) -> tuple[Store, dict[int, int]]:
    """A store with ``tabled`` documents in the tables and ``in_delta`` in the delta, some of
    them near-duplicates of others; returns it with its model ``{key: fingerprint}``."""
    rng = np.random.default_rng(seed)
    fingerprints = rng.integers(0, 2**64, tabled + in_delta, dtype=np.uint64)
    for index in range(1, len(fingerprints), 3):  # planted neighbours, 1 to K+1 bits away
        flips = rng.choice(64, size=1 + index % (K + 1), replace=False)
        fingerprints[index] = fingerprints[index - 1] ^ np.uint64(sum(1 << int(bit) for bit in flips))
    store = simstore.open(
        str(path), k=K, blocks=BLOCKS, sync=False, merge_threshold=10**9, merge_on_close=False
    )
    model = {key: int(fp) for key, fp in enumerate(fingerprints.tolist())}
    store.add_many(list(range(tabled)), fingerprints=fingerprints[:tabled])
    store.merge()
    for key in range(tabled, tabled + in_delta):
        store.add(key, fingerprint=model[key])
    return store, model


def assert_exact(store: Store, model: dict[int, int], queries: int = 40) -> None:
    """Every k up to the store's, on stored fingerprints and their neighbours, equals brute force."""
    rng = np.random.default_rng(queries)
    stored = list(model.values())
    probes = [
        stored[int(i)] ^ (1 << int(bit))
        for i, bit in zip(rng.integers(0, len(stored), queries), rng.integers(0, 64, queries), strict=True)
    ]
    probes += [int(fp) for fp in rng.integers(0, 2**64, 5, dtype=np.uint64)]
    for k in range(K + 1):
        answers = store.query_many(np.array(probes, dtype=np.uint64), k=k)
        for probe, answer in zip(probes, answers, strict=True):
            expected = sorted(
                (
                    ((fp ^ probe).bit_count(), key)
                    for key, fp in model.items()
                    if (fp ^ probe).bit_count() <= k
                )
            )
            assert [(match.distance, match.key) for match in answer] == expected
            single = store.query(probe, k=k)
            assert [(match.distance, match.key) for match in single] == expected


def test_state_record_at_rest_is_unchanged_and_a_merge_under_way_round_trips() -> None:
    assert State(5, 7, 9).encode() == State(5, 7, 9, 0).encode()
    assert len(State(5, 7, 9).encode()) == 24
    assert State.decode(State(5, 7, 9, 3).encode()) == State(5, 7, 9, 3)
    with pytest.raises(simstore.CorruptStoreError):
        State.decode(b"\0" * 28)


def test_answers_stay_exact_between_the_steps(tmp_path: Path) -> None:
    store, model = build(tmp_path / "s.simstore", 300, 120)
    steps: list[tuple[int, tuple[int, ...]]] = []
    real_write = store._write

    def write(body: Any, *, merge_step: bool = False) -> Any:
        result = real_write(body, merge_step=merge_step)
        if merge_step:  # after each step's commit, with the lock released
            assert_exact(store, model, queries=10)
            assert store.check() == []
            steps.append((merged_tables(store), store.stats().table_entries))
        return result

    with mock.patch.object(store, "_write", write):
        assert store.merge() == 120
    tables = len(store.tables)
    assert [merged for merged, _ in steps] == [*range(1, tables), 0]
    for merged, entries in steps[:-1]:
        assert entries == (420,) * merged + (300,) * (tables - merged)
    assert steps[-1][1] == (420,) * tables
    assert store.stats().delta_docs == 0
    store.close()


def fingerprint_in_one_later_table(tables: tuple[Any, ...], query: int, rng: random.Random) -> int:
    """A fingerprint K bits from ``query`` that shares its prefix in exactly one
    table, not among the first two."""
    while True:
        fingerprint = query
        for bit in rng.sample(range(64), K):
            fingerprint ^= 1 << bit
        sharing = [
            index
            for index, table in enumerate(tables)
            if table.permute(fingerprint) >> table.suffix_bits == table.permute(query) >> table.suffix_bits
        ]
        if len(sharing) == 1 and sharing[0] >= 2:
            return fingerprint


@pytest.mark.parametrize("seed", range(8))
def test_a_merge_under_way_hides_no_document_an_unwritten_table_holds(tmp_path: Path, seed: int) -> None:
    """A stored document that only a table the merge has not written yet can find, while
    a document in the merge sits on the query itself: the merge's document is in the
    written tables and not in the others, so a probe skipped on what a written table
    held (the crowded-slot skip) once lost the stored one, in the writer between steps
    and in a reader of the store left mid-merge."""
    path = str(tmp_path / "s.simstore")
    rng = random.Random(seed)
    store = simstore.open(path, k=K, blocks=BLOCKS, sync=False, merge_threshold=10**9, merge_on_close=False)
    query = rng.getrandbits(64)
    stored = fingerprint_in_one_later_table(store.tables, query, rng)
    others = [rng.getrandbits(64) for _ in range(200)]
    store.add_many(["stored", *range(len(others))], [stored, *others])
    store.merge()
    store.query_many(np.array(others, dtype=np.uint64))  # every table's bitmaps read
    store.add("merging", fingerprint=query)
    with failing_after(1, StepInterruptedError()), pytest.raises(StepInterruptedError):
        store.merge()
    assert merged_tables(store) == 1
    answers(store, query)
    store.close()
    with simstore.open(path, "r") as reader:
        reader.query_many(np.array(others, dtype=np.uint64))  # every table's bitmaps read
        answers(reader, query)


@settings(max_examples=30, deadline=None)
@given(
    tables_written=st.integers(1, 9),
    in_delta=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_any_cut_with_the_merge_near_stored_documents_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, tables_written: int, in_delta: int, seed: int
) -> None:
    """The merge's documents are near-duplicates of stored ones, every table's bitmaps
    are read before the cut, and the queries sit on and around the merge's documents:
    answers equal brute force in the writer and in a reader of the store left mid-merge."""
    path = tmp_path_factory.mktemp("near") / "s.simstore"
    rng = np.random.default_rng(seed)
    store, model = build(path, 300, 0, seed)
    store.query_many(np.array(list(model.values()), dtype=np.uint64))  # every table's bitmaps read
    for key in range(300, 300 + in_delta):
        near = model[int(rng.integers(0, 300))]
        for bit in rng.choice(64, size=int(rng.integers(1, K + 1)), replace=False):
            near ^= 1 << int(bit)
        model[key] = near
        store.add(key, fingerprint=near)
    with failing_after(tables_written, StepInterruptedError()), pytest.raises(StepInterruptedError):
        store.merge()
    probes = [model[key] for key in range(300, 300 + in_delta)]
    probes += [fp ^ (1 << int(bit)) for fp, bit in zip(probes, rng.integers(0, 64, len(probes)), strict=True)]
    assert_exact_at(store, model, probes)
    store.close()
    with simstore.open(str(path), "r") as reader:
        reader.query_many(np.array(list(model.values()), dtype=np.uint64))
        assert_exact_at(reader, model, probes)


def assert_exact_at(store: Store, model: dict[int, int], probes: list[int]) -> None:
    for k in range(K + 1):
        answers = store.query_many(np.array(probes, dtype=np.uint64), k=k)
        for probe, answer in zip(probes, answers, strict=True):
            expected = sorted(
                ((fp ^ probe).bit_count(), key) for key, fp in model.items() if (fp ^ probe).bit_count() <= k
            )
            assert [(match.distance, match.key) for match in answer] == expected
            assert [(match.distance, match.key) for match in store.query(probe, k=k)] == expected


def answers(store: Store, query: int) -> None:
    expected = [(0, "merging"), (K, "stored")]
    assert [(match.distance, match.key) for match in store.query(query)] == expected
    [batch] = store.query_many(np.array([query], dtype=np.uint64))
    assert [(match.distance, match.key) for match in batch] == expected


FOLLOW_UPS = [
    "add",
    "replace_delta_doc",
    "remove_delta_doc",
    "remove_tabled_doc",
    "add_many_into_tables",
    "add_if_new",
    "merge",
    "relayout",
]


@pytest.mark.parametrize("follow_up", FOLLOW_UPS)
def test_a_merge_cut_short_is_finished_by_the_next_write(tmp_path: Path, follow_up: str) -> None:
    path = tmp_path / "s.simstore"
    store, model = build(path, 300, 150)
    with failing_after(4, StepInterruptedError()), pytest.raises(StepInterruptedError):
        store.merge()
    assert merged_tables(store) == 4
    assert store.stats().delta_docs == 150
    assert store.check() == []
    assert_exact(store, model)
    store.close()

    with simstore.open(str(path), "r") as reader:  # another process's view, read-only
        assert reader.check() == []
        assert_exact(reader, model)
    store = simstore.open(str(path), sync=False, merge_threshold=10**9)
    assert_exact(store, model)
    neighbour = model[310] ^ 1
    if follow_up == "add":
        store.add(10_000, fingerprint=neighbour)
        model[10_000] = neighbour
    elif follow_up == "replace_delta_doc":
        store.add(310, fingerprint=neighbour ^ (1 << 40))
        model[310] = neighbour ^ (1 << 40)
    elif follow_up == "remove_delta_doc":
        store.remove(310)
        del model[310]
    elif follow_up == "remove_tabled_doc":
        store.remove(10)
        del model[10]
    elif follow_up == "add_many_into_tables":
        fps = np.arange(1, 2001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        store.add_many(list(range(20_000, 22_000)), fingerprints=fps)
        model.update(zip(range(20_000, 22_000), fps.tolist(), strict=True))
        store.merge()
    elif follow_up == "add_if_new":
        assert store.add_if_new(10_001, fingerprint=neighbour) != []
        assert store.add_if_new(10_002, fingerprint=neighbour ^ 0xFFFF) == []
        model[10_002] = neighbour ^ 0xFFFF
    elif follow_up == "merge":
        assert store.merge() == 150
    else:
        store.relayout(blocks=K + 1)
    assert merged_tables(store) == 0
    entries = store.stats().table_entries
    assert len(set(entries)) == 1
    assert entries[0] + store.stats().delta_docs == len(model)
    assert store.check() == []
    assert_exact(store, model)
    store.close()


def test_a_merge_refused_for_room_is_undone(tmp_path: Path) -> None:
    store, model = build(tmp_path / "s.simstore", 300, 150)
    before = store.stats()
    with failing_after(6, simstore.StoreFullError("no room")), pytest.raises(simstore.StoreFullError):
        store.merge()
    after = store.stats()
    assert merged_tables(store) == 0
    assert (after.docs, after.delta_docs, after.table_entries) == (
        before.docs,
        before.delta_docs,
        before.table_entries,
    )
    assert store.check() == []
    assert_exact(store, model)
    assert store.merge() == 150  # the undone merge's untrusted bitmaps are rebuilt
    assert store.check() == []
    assert_exact(store, model)
    store.close()


def test_a_write_that_cannot_finish_an_old_merge_undoes_it_and_goes_on(tmp_path: Path) -> None:
    store, model = build(tmp_path / "s.simstore", 300, 150)
    with failing_after(3, StepInterruptedError()), pytest.raises(StepInterruptedError):
        store.merge()
    with (
        failing_after(0, simstore.StoreFullError("no room")),
        pytest.warns(simstore.StoreFullWarning, match="undone"),
    ):
        store.add(10_000, fingerprint=123)
    model[10_000] = 123
    assert merged_tables(store) == 0
    assert store.stats().delta_docs == 151
    assert store.check() == []
    assert_exact(store, model)
    store.close()


def test_a_process_killed_part_way_leaves_a_store_another_process_finishes(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    store, model = build(path, 300, 150)
    store.close()
    script = textwrap.dedent(
        """
        import os, sys
        import simstore
        from simstore.store import Store
        real = Store._write_table
        written = []
        def write_table(self, *args, **kwargs):
            if len(written) == 5:
                os._exit(3)  # no cleanup, no abort: as a kill would
            written.append(1)
            real(self, *args, **kwargs)
        Store._write_table = write_table
        store = simstore.open(sys.argv[1], sync=False)
        store.merge()
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 3, completed.stderr
    with simstore.open(str(path), sync=False) as reopened:
        assert merged_tables(reopened) == 5
        assert reopened.check() == []
        assert_exact(reopened, model)
        reopened.add(10_000, fingerprint=model[0] ^ 3)
        model[10_000] = model[0] ^ 3
        assert merged_tables(reopened) == 0
        assert reopened.stats().delta_docs == 1
        assert reopened.check() == []
        assert_exact(reopened, model)


@settings(max_examples=25, deadline=None)
@given(
    tables_written=st.integers(1, 9),
    in_delta=st.integers(1, 60),
    removed=st.sets(st.integers(0, 359), max_size=10),
    seed=st.integers(0, 2**16),
)
def test_any_cut_then_removals_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, tables_written: int, in_delta: int, removed: set[int], seed: int
) -> None:
    path = tmp_path_factory.mktemp("cut") / "s.simstore"
    store, model = build(path, 300, in_delta, seed)
    with failing_after(tables_written, StepInterruptedError()), pytest.raises(StepInterruptedError):
        store.merge()
    assert_exact(store, model, queries=8)
    for key in sorted(removed):
        if key in model:
            store.remove(key)
            del model[key]
    assert store.check() == []
    assert_exact(store, model, queries=8)
    store.close()
