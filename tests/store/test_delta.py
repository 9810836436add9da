"""The in-memory delta against a brute-force model: both tiers (recent dicts and sorted
numpy arrays), folds between them, replacements, removals, log replay; and the store
with a tiny recent tier, so that the sorted tier carries real workloads."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from test_reopen import WRITER, run_child
from test_state_machine import StoreMachine

import simstore
import simstore.engine._lmdb
import simstore.engine.delta
import simstore.options
import simstore.store.maintenance
from simstore.engine.delta import Delta, encode_add, encode_remove, encode_seq
from simstore.index.permute import MAX_FINGERPRINT, Table
from simstore.layout.choose import LayoutRequest, choose_layout

# Fingerprints cluster around a few centres, so that queries find neighbours.
CENTRES = (0, MAX_FINGERPRINT, 0x0123_4567_89AB_CDEF, 1 << 63)
fingerprints = st.one_of(
    st.integers(0, MAX_FINGERPRINT),
    st.builds(
        lambda centre, bits: centre ^ sum(1 << bit for bit in bits),
        st.sampled_from(CENTRES),
        st.frozensets(st.integers(0, 63), max_size=4),
    ),
)
doc_ids = st.integers(0, 60)


def tables_for(k: int, blocks: int) -> tuple[Table, ...]:
    return choose_layout(LayoutRequest(k, blocks, None, None, None))[1]


def brute(model: dict[int, int], query: int, k: int) -> dict[int, int]:
    found = {doc_id: (fp ^ query).bit_count() for doc_id, fp in model.items()}
    return {doc_id: distance for doc_id, distance in found.items() if distance <= k}


class DeltaMachine(RuleBasedStateMachine):
    """A ``Delta`` and a dict ``{doc_id: fingerprint}`` driven by the same operations."""

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[int, int] = {}
        self.delta = Delta(tables_for(3, 5))
        self.k = 3
        self.seq = 0

    @initialize(k=st.integers(0, 4), extra_blocks=st.integers(1, 3), recent_limit=st.integers(1, 70))
    def make(self, k: int, extra_blocks: int, recent_limit: int) -> None:
        self.k = k
        self.delta = Delta(tables_for(k, k + extra_blocks), recent_limit=recent_limit)

    @rule(doc_id=doc_ids, fingerprint=fingerprints)
    def put(self, doc_id: int, fingerprint: int) -> None:
        self.delta.put(doc_id, fingerprint)
        self.model[doc_id] = fingerprint

    @rule(batch=st.dictionaries(doc_ids, fingerprints, max_size=45))
    def put_many(self, batch: dict[int, int]) -> None:
        self.delta.put_many(list(batch), np.array(list(batch.values()), dtype=np.uint64))
        self.model.update(batch)

    @rule(doc_id=doc_ids)
    def discard(self, doc_id: int) -> None:
        self.delta.discard(doc_id)
        self.model.pop(doc_id, None)

    @rule(ops=st.lists(st.tuples(doc_ids, st.one_of(st.none(), fingerprints)), max_size=45))
    def apply_log(self, ops: list[tuple[int, int | None]]) -> None:
        records = []
        for doc_id, fingerprint in ops:
            op = encode_remove(doc_id) if fingerprint is None else encode_add(doc_id, fingerprint)
            records.append((encode_seq(self.seq), op))
            self.seq += 1
            if fingerprint is None:
                self.model.pop(doc_id, None)
            else:
                self.model[doc_id] = fingerprint
        self.delta.apply(records)
        if records:
            assert self.delta.next_seq == self.seq

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def query_near_a_member(self, data: st.DataObject) -> None:
        centre = data.draw(st.sampled_from(sorted(self.model.values())))
        bits = data.draw(st.frozensets(st.integers(0, 63), max_size=self.k + 1))
        self._check_query(centre ^ sum(1 << bit for bit in bits), data.draw(st.integers(0, self.k)))

    @rule(query=fingerprints, k=st.integers(0, 4))
    def query(self, query: int, k: int) -> None:
        self._check_query(query, min(k, self.k))

    def _check_query(self, query: int, k: int) -> None:
        permuted = [table.permute(query) for table in self.delta.tables]
        assert self.delta.matches(permuted, query, k) == brute(self.model, query, k)

    @rule()
    def clear(self) -> None:
        self.delta.clear()
        self.model.clear()

    @invariant()
    def contents_match(self) -> None:
        delta = self.delta
        assert len(delta) == len(self.model)
        assert delta.as_dict() == self.model
        doc_ids_held, fingerprints_held = delta.arrays()
        assert sorted(zip(doc_ids_held.tolist(), fingerprints_held.tolist(), strict=True)) == sorted(
            self.model.items()
        )
        for doc_id in range(0, 61, 7):
            assert (doc_id in delta) == (doc_id in self.model)
            assert delta.get(doc_id) == self.model.get(doc_id)


DeltaMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDeltaMachine = DeltaMachine.TestCase


@given(
    recent_limit=st.integers(1, 40),
    batches=st.lists(st.lists(st.tuples(st.integers(0, 200), fingerprints), max_size=60), max_size=8),
    replacements=st.lists(st.tuples(st.integers(0, 200), fingerprints), max_size=300),
)
@settings(max_examples=60, deadline=None)
def test_sorted_tier_survives_replacement_storms(
    recent_limit: int, batches: list[list[tuple[int, int]]], replacements: list[tuple[int, int]]
) -> None:
    """Documents folded into the sorted tier and then replaced many times leave dead
    rows behind, which are rebuilt away; answers stay exact throughout."""
    tables = tables_for(3, 5)
    delta = Delta(tables, recent_limit=recent_limit)
    model: dict[int, int] = {}
    for batch in batches:
        distinct = dict(batch)
        delta.put_many(list(distinct), np.array(list(distinct.values()), dtype=np.uint64))
        model.update(distinct)
    for doc_id, fingerprint in replacements:
        delta.put(doc_id, fingerprint)
        model[doc_id] = fingerprint
    assert delta.as_dict() == model
    for query in [*model.values(), *CENTRES][:40]:
        permuted = [table.permute(query) for table in tables]
        assert delta.matches(permuted, query, 3) == brute(model, query, 3)


def test_a_large_delta_is_held_compactly() -> None:
    """A delta of 100K documents in ten tables sits in numpy arrays: well under the
    ~850 bytes a document that per-table dicts cost, and queries stay exact."""
    tables = tables_for(3, 5)
    rng = np.random.default_rng(7)
    count = 100_000
    fps = rng.integers(0, 2**64, size=count, dtype=np.uint64)
    delta = Delta(tables)
    delta.put_many(list(range(count)), fps)
    for doc_id, fingerprint in enumerate(fps[:1000].tolist()):
        delta.put(count + doc_id, fingerprint ^ 1)  # recent tier, near a sorted one
    assert len(delta) == count + 1000
    assert delta.sorted_bytes() / count < 160
    query = int(fps[5]) ^ 0b110
    permuted = [table.permute(query) for table in tables]
    assert delta.matches(permuted, query, 3) == {5: 2, count + 5: 3}


# ---------------------------------------------------------------- the store


@pytest.fixture
def tiny_recent_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simstore.engine.delta, "RECENT_LIMIT", 3)


class TinyRecentTierStoreMachine(StoreMachine):
    """The store state machine with a recent tier of 3 documents, so that almost every
    delta document lives in the sorted tier (and folds, replacements and removals in
    it meet merges and reopens)."""

    def __init__(self) -> None:
        super().__init__()
        self._saved_limit = simstore.engine.delta.RECENT_LIMIT
        simstore.engine.delta.RECENT_LIMIT = 3

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            simstore.engine.delta.RECENT_LIMIT = self._saved_limit


TinyRecentTierStoreMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTinyRecentTierStoreMachine = TinyRecentTierStoreMachine.TestCase


@pytest.mark.usefixtures("tiny_recent_tier")
def test_an_open_store_catches_up_through_the_sorted_tier(store_path: str) -> None:
    """A store replays another process's log records (adds, replacements, removals)
    into its sorted tier, and answers exactly."""
    rng = np.random.default_rng(3)
    fps = rng.integers(0, 2**64, size=200, dtype=np.uint64).tolist()
    with simstore.open(store_path, k=3) as store:
        store.add_many(range(100), fps[:100])
    with simstore.open(store_path, "r") as reader:
        run_child(WRITER, store_path, {"add": [(key, fps[key]) for key in range(100, 200)]})
        assert reader.stats().delta_docs == 100
        replaced = {key: fps[key] ^ 0b101 for key in range(0, 200, 3)}  # 2 bits from the old
        removed = list(range(1, 200, 5))
        run_child(WRITER, store_path, {"add": list(replaced.items()), "remove": removed})
        live = {key: replaced.get(key, fp) for key, fp in enumerate(fps) if key not in removed}
        for query in fps[:80]:
            expected = sorted(
                (key, (fp ^ query).bit_count()) for key, fp in live.items() if (fp ^ query).bit_count() <= 3
            )
            got = sorted((match.key, match.distance) for match in reader.query(fingerprint=query))
            assert got == expected
        assert reader.check() == []


def test_the_default_threshold_and_an_explicit_one(store_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no merge_threshold, the delta merges at DEFAULT_MERGE_THRESHOLD whatever the
    tables hold (a merge writes a new run: its cost grows with the delta alone); a batch
    that fills the delta goes straight to the tables; an explicit merge_threshold wins."""
    monkeypatch.setattr(simstore.options, "DEFAULT_MERGE_THRESHOLD", 10)
    monkeypatch.setattr(simstore.store.maintenance, "DEFAULT_MERGE_THRESHOLD", 10)
    rng = np.random.default_rng(11)
    with simstore.open(store_path, k=3, merge_on_close=False) as store:
        for key in range(9):
            store.add(key, fingerprint=int(rng.integers(0, 2**63)))
        assert store.stats().delta_docs == 9
        store.add(9, fingerprint=1)
        assert store.stats().delta_docs == 0
        store.add_many(range(10, 810), rng.integers(0, 2**64, size=800, dtype=np.uint64))
        assert store.stats().table_entries[0] == 810  # a batch past the threshold goes straight in
        for key in range(810, 819):
            store.add(key, fingerprint=int(rng.integers(0, 2**63)))
        assert store.stats().delta_docs == 9  # the same threshold, however big the tables
        store.add(819, fingerprint=2)
        assert store.stats().delta_docs == 0
    with simstore.open(store_path, merge_threshold=5, merge_on_close=False) as store:
        for key in range(1000, 1005):
            store.add(key, fingerprint=key)
        assert store.stats().delta_docs == 0


def test_options_accept_no_merge_threshold() -> None:
    assert simstore.Options().merge_threshold is None
    assert simstore.Options.from_kwargs({"merge_threshold": None}).merge_threshold is None


def test_a_merge_reserves_its_map_space_up_front(store_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge into full tables copies (and splits) every page it touches; the map is
    grown for that before the transaction starts, so it never fills part-way and runs
    again from the start."""
    rng = np.random.default_rng(5)
    grown: list[int] = []
    original_grow = simstore.engine._lmdb.Environment._grow

    def counting_grow(environment: simstore.engine._lmdb.Environment) -> None:
        grown.append(environment.map_size())
        original_grow(environment)

    with simstore.open(store_path, k=3, merge_threshold=10**6, merge_on_close=False, sync=False) as store:
        store.add_many(range(20_000), rng.integers(0, 2**64, size=20_000, dtype=np.uint64))
        store.merge()
        for key in range(20_000, 25_000):
            store.add(key, fingerprint=int(rng.integers(0, 2**63)))
    # A map no larger than the file: any room the merge needs must be made for it.
    tight = os.path.getsize(store_path)
    with simstore.open(store_path, map_size=tight, merge_threshold=10**6, sync=False) as store:
        monkeypatch.setattr(simstore.engine._lmdb.Environment, "_grow", counting_grow)
        assert store.merge() == 5_000
        assert grown == []
        assert store.check() == []
