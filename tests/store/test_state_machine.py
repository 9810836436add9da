"""A stateful test: random sequences of adds, replacements, batches, removals, queries,
merges and reopens, checked against an in-memory dict model after every step."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from _merge_faults import StepInterruptedError, compaction_under_way, failing_after, run_count
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import simstore
import simstore.index.costs
from simstore.engine.tableset import TableSet
from simstore.index.permute import MAX_FINGERPRINT

Key = str | bytes | int

# A few centres that fingerprints cluster around, so queries find neighbours.
CENTRES = (0, MAX_FINGERPRINT, 0x0123_4567_89AB_CDEF, 0xF0F0_F0F0_0F0F_0F0F, 1 << 63)

keys = st.one_of(
    st.text(alphabet="ab\u00e9\u4e2d", max_size=3),
    st.binary(max_size=2),
    st.integers(-3, 3),
    st.sampled_from([-(2**63), 2**64 - 1]),
    # long keys that are looked up by digest
    st.integers(0, 3).map(lambda n: "https://example.com/" + "x" * 480 + str(n)),
)
fingerprints = st.one_of(
    st.integers(0, MAX_FINGERPRINT),
    st.builds(
        lambda centre, bits: centre ^ sum(1 << bit for bit in bits),
        st.sampled_from(CENTRES),
        st.frozensets(st.integers(0, 63), max_size=3),
    ),
)
metas = st.one_of(st.none(), st.dictionaries(st.sampled_from(["a", "b"]), st.integers(-5, 5), max_size=2))

# Texts for the verified rules: a few bases and edits of each, so that text
# queries meet near-duplicates at many similarities (and bare fingerprints).
_WORDS = [f"w{index}" for index in range(60)]
TEXTS = [
    " ".join(
        _WORDS[base * 7 : base * 7 + 30][:position]
        + ["edit"] * edits
        + _WORDS[base * 7 + position + edits :][:20]
    )
    for base in range(3)
    for position, edits in ((10, 0), (10, 1), (5, 3), (20, 6))
]
TEXT_PRINTS, TEXT_SKETCHES = simstore.Fingerprinter().fingerprints_and_sketches(TEXTS)


def _start_rival_creator(path: str, options: dict[str, Any], docs: int) -> int:
    """Fork a process that opens ``path`` with mode "c" as soon as this one reads its
    signal, adds ``docs`` documents and exits; its pid."""
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the rival
        status = 1
        try:
            os.close(ready_write)
            os.read(ready_read, 1)
            with simstore.open(path, "c", **options) as rival:
                for index in range(docs):
                    rival.add(f"rival-{index}", fingerprint=CENTRES[index % len(CENTRES)] ^ index)
            status = 0
        finally:
            os._exit(status)
    os.close(ready_read)
    os.write(ready_write, b"go")
    os.close(ready_write)
    return pid


def _rank(key: Key) -> tuple[int, Key]:
    if isinstance(key, int):
        return (0, key)
    if isinstance(key, bytes):
        return (1, key)
    return (2, key)


class ModelMachine(RuleBasedStateMachine):
    """What the store state machines share: the store under test (``store``),
    its k, the model (``model``: key -> (fingerprint, meta) in first-add
    order, the documented iteration order of a store), queries drawn near
    the model's fingerprints and the brute-force answers to them."""

    store: simstore.Store | None
    model: dict[Key, tuple[int, dict[str, Any] | None]]
    k: int

    @property
    def live(self) -> simstore.Store:
        assert self.store is not None
        return self.store

    def _draw_query(self, data: st.DataObject) -> int:
        """Mostly a stored fingerprint moved by up to k+1 bits, so that answers are rarely empty."""
        if not self.model or data.draw(st.integers(0, 3), label="query kind") == 0:
            return data.draw(fingerprints, label="query")
        stored = sorted(fp for fp, _ in self.model.values())
        base = data.draw(st.sampled_from(stored), label="near")
        bits = data.draw(st.frozensets(st.integers(0, 63), max_size=self.k + 1), label="bits")
        return base ^ sum(1 << bit for bit in bits)

    def _expected(self, query: int, k: int) -> list[tuple[Key, int, int]]:
        hits = [
            (key, (fp ^ query).bit_count(), fp)
            for key, (fp, _meta) in self.model.items()
            if (fp ^ query).bit_count() <= k
        ]
        return sorted(hits, key=lambda hit: (hit[1], _rank(hit[0])))

    @rule(data=st.data())
    def query_many(self, data: st.DataObject) -> None:
        queries = [self._draw_query(data) for _ in range(data.draw(st.integers(0, 6), label="n"))]
        k = data.draw(st.one_of(st.none(), st.integers(0, self.k)), label="k")
        results = self.live.query_many(np.array(queries, dtype=np.uint64), k=k)
        assert len(results) == len(queries)
        for query, result in zip(queries, results, strict=True):
            got = [(m.key, m.distance, m.fingerprint) for m in result]
            assert got == self._expected(query, self.k if k is None else k)

    @rule()
    def check(self) -> None:
        assert self.live.check() == []


class StoreMachine(ModelMachine):
    """The model is a dict key -> (fingerprint, meta); dict order is first-add order,
    which is the documented iteration order of a store."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="simstore-sm-")
        self.path = str(Path(self.folder) / "machine.simstore")
        self.model: dict[Key, tuple[int, dict[str, Any] | None]] = {}
        # The sketch of each document added as text (None: added as a fingerprint).
        self.sketches: dict[Key, np.ndarray | None] = {}
        self.min_similarity = 0.0
        self.store: simstore.Store | None = None
        self.k = 3
        self.threshold = 1
        self.crowding: Any = None

    # -- helpers ---------------------------------------------------------------

    def _open(self, merge_on_close: bool) -> None:
        self.store = simstore.open(
            self.path, sync=False, merge_threshold=self.threshold, merge_on_close=merge_on_close
        )

    # -- rules -----------------------------------------------------------------

    @initialize(
        k=st.integers(0, 4),
        extra_blocks=st.integers(1, 3),
        threshold=st.integers(1, 50),
        merge_on_close=st.booleans(),
        rival_docs=st.one_of(st.none(), st.integers(0, 4)),
        min_similarity=st.sampled_from([0.0, 0.5, 0.8]),
        crowded=st.booleans(),
    )
    def open_store(
        self,
        k: int,
        extra_blocks: int,
        threshold: int,
        merge_on_close: bool,
        rival_docs: int | None,
        min_similarity: float,
        crowded: bool,
    ) -> None:
        """Create the store, alone or racing another process that creates the same
        store at the same moment and adds ``rival_docs`` documents before this one
        adds any (so that the model knows their order). With ``crowded``, queries
        read their buckets first and search them together, as they do when the
        runs' prefixes are crowded."""
        self.crowding = mock.patch.object(simstore.index.costs, "CROWDED_PREFIX", 0 if crowded else 1 << 40)
        self.crowding.start()
        self.k = k
        self.threshold = threshold
        self.min_similarity = min_similarity
        options: dict[str, Any] = {
            "k": k,
            "blocks": k + extra_blocks,
            "sync": False,
            "min_similarity": min_similarity,
        }
        rival = None if rival_docs is None else _start_rival_creator(self.path, options, rival_docs)
        self.store = simstore.open(
            self.path, merge_threshold=threshold, merge_on_close=merge_on_close, **options
        )
        if rival is not None:
            _, status = os.waitpid(rival, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            for index in range(rival_docs or 0):
                self.model[f"rival-{index}"] = (CENTRES[index % len(CENTRES)] ^ index, None)
                self.sketches[f"rival-{index}"] = None

    @rule(key=keys, fingerprint=fingerprints, meta=metas)
    def add(self, key: Key, fingerprint: int, meta: dict[str, Any] | None) -> None:
        assert self.live.add(key, fingerprint=fingerprint, meta=meta) == fingerprint
        self.model[key] = (fingerprint, meta)
        self.sketches[key] = None

    @rule(key=keys, text=st.integers(0, len(TEXTS) - 1), as_batch=st.booleans())
    def add_text(self, key: Key, text: int, as_batch: bool) -> None:
        if as_batch:
            self.live.add_many([key], texts=[TEXTS[text]])
        else:
            self.live.add(key, TEXTS[text])
        self.model[key] = (int(TEXT_PRINTS[text]), None)  # a replaced key keeps its place
        self.sketches[key] = TEXT_SKETCHES[text]

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), fingerprint=fingerprints)
    def replace(self, data: st.DataObject, fingerprint: int) -> None:
        key = data.draw(st.sampled_from(sorted(self.model, key=_rank)), label="existing key")
        self.live.add(key, fingerprint=fingerprint)
        self.model[key] = (fingerprint, None)
        self.sketches[key] = None

    @rule(
        batch=st.lists(st.tuples(keys, fingerprints, metas), max_size=25),
        with_metas=st.booleans(),
        as_array=st.booleans(),
    )
    def add_many(
        self, batch: list[tuple[Key, int, dict[str, Any] | None]], with_metas: bool, as_array: bool
    ) -> None:
        batch_keys = [key for key, _, _ in batch]
        fps: Any = [fp for _, fp, _ in batch]
        if as_array:
            fps = np.array(fps, dtype=np.uint64)
        batch_metas = [meta for _, _, meta in batch] if with_metas else None
        returned = self.live.add_many(batch_keys, fps, metas=batch_metas)
        assert returned.tolist() == [fp for _, fp, _ in batch]
        for key, fp, meta in batch:
            self.model[key] = (fp, meta if with_metas else None)
            self.sketches[key] = None

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model, key=_rank)), label="key to remove")
        self.live.remove(key)
        del self.model[key]
        del self.sketches[key]

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), missing=keys)
    def remove_many(self, data: st.DataObject, missing: Key) -> None:
        """Several documents in one transaction; with a missing key, none (unless missing_ok)."""
        chosen = data.draw(
            st.lists(st.sampled_from(sorted(self.model, key=_rank)), max_size=80), label="keys to remove"
        )
        if missing not in self.model:
            with pytest.raises(simstore.KeyNotFoundError):
                self.live.remove_many([*chosen, missing])
            chosen.append(missing)
        assert self.live.remove_many(chosen, missing_ok=True) == len({k for k in chosen if k in self.model})
        for key in chosen:
            self.model.pop(key, None)
            self.sketches.pop(key, None)

    @rule(key=keys)
    def remove_missing(self, key: Key) -> None:
        if key in self.model:
            return
        with pytest.raises(simstore.KeyNotFoundError) as caught:
            self.live.remove(key)
        assert isinstance(caught.value, KeyError)

    @rule(data=st.data())
    def query(self, data: st.DataObject) -> None:
        query = self._draw_query(data)
        k = data.draw(st.integers(0, self.k), label="k")
        got = [(m.key, m.distance, m.fingerprint) for m in self.live.query(fingerprint=query, k=k)]
        assert got == self._expected(query, k)

    @rule(data=st.data())
    def query_text(self, data: st.DataObject) -> None:
        """A text query: within k, and (where both have sketches) at least as
        similar as the threshold, the store's own when the call passes none."""
        text = data.draw(st.integers(0, len(TEXTS) - 1), label="text")
        k = data.draw(st.integers(0, self.k), label="k")
        threshold = data.draw(st.sampled_from([None, 0.0, 0.6, 0.9, 1.0]), label="min_similarity")
        applied = self.min_similarity if threshold is None else threshold
        query, sketch = int(TEXT_PRINTS[text]), TEXT_SKETCHES[text]
        expected = []
        for key, distance, fp in self._expected(query, k):
            stored = self.sketches[key]
            similarity = None if stored is None else float(simstore.estimate_jaccard(sketch, stored)[0])
            if similarity is None or similarity >= applied:
                expected.append((key, distance, fp, similarity))
        got = self.live.query(text=TEXTS[text], k=k, min_similarity=threshold)
        assert [(m.key, m.distance, m.fingerprint, m.similarity) for m in got] == expected

    @rule()
    def merge(self) -> None:
        before = self.live.stats().delta_docs
        assert self.live.merge() == before
        assert self.live.stats().delta_docs == 0

    @rule()
    def compact(self) -> None:
        self.live.compact()
        assert run_count(self.live) <= 1
        assert compaction_under_way(self.live) is None
        assert self.live.stats().delta_docs == 0

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def compaction_cut_short(self, data: st.DataObject) -> None:
        """A compaction stopped part-way, by a crash or Ctrl-C inside one of its steps:
        the steps before it stay, that step leaves nothing, and the compaction stays
        under way until later writes (or compact()) take it up."""
        steps = data.draw(st.integers(0, 12), label="steps taken")
        tiny = data.draw(st.sampled_from([1, 7, 100]), label="entries per step")
        with (
            mock.patch.object(simstore.engine.tableset, "COMPACTION_STEP_ENTRIES", tiny),
            mock.patch.object(TableSet.compaction_step, "__defaults__", (tiny,)),
            failing_after(steps, StepInterruptedError()),
            contextlib.suppress(StepInterruptedError),
        ):
            self.live.compact()

    @rule(merge_on_close=st.booleans(), reopen_merge_on_close=st.booleans())
    def reopen(self, merge_on_close: bool, reopen_merge_on_close: bool) -> None:
        # The first close honours the option the store was opened with; record what the
        # delta must hold afterwards by reopening with a known option.
        self.live.close()
        self._open(merge_on_close)
        delta_before = self.live.stats().delta_docs
        self.live.close()
        self._open(reopen_merge_on_close)
        expected_delta = delta_before if not merge_on_close else 0
        assert self.live.stats().delta_docs == expected_delta
        assert self.live.k == self.k
        assert self.live.check() == []

    # -- invariants ------------------------------------------------------------

    @invariant()
    def contents_match_the_model(self) -> None:
        if self.store is None:
            return
        store = self.store
        assert len(store) == len(self.model)
        assert list(store) == list(self.model)
        assert list(store.items()) == [(key, fp) for key, (fp, _) in self.model.items()]
        assert store.fingerprints().tolist() == [fp for fp, _ in self.model.values()]
        stats = store.stats()
        assert stats.docs == len(self.model)
        assert stats.delta_docs <= len(self.model)
        for key, (fp, meta) in self.model.items():
            assert key in store
            record = store.get(key)
            assert record == simstore.Record(key, fp, meta)
            assert type(record.key) is type(key)

    @invariant()
    def delta_stays_below_threshold(self) -> None:
        if self.store is None:
            return
        assert self.store.stats().delta_docs < self.threshold

    def teardown(self) -> None:
        if self.crowding is not None:
            self.crowding.stop()
        try:
            if self.store is not None and not self.store.closed:
                assert self.store.check() == []
                self.store.close()
                with simstore.open(self.path, "r") as reopened:
                    assert reopened.check() == []
                    assert list(reopened.items()) == [(key, fp) for key, (fp, _) in self.model.items()]
        finally:
            if self.store is not None:
                self.store.close()
            shutil.rmtree(self.folder, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=75,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestStoreMachine = StoreMachine.TestCase
