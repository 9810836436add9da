"""A stateful test of format 3 (``layout="multi-index"``): random sequences of adds,
batches, replacements, removals, queries, merges, joins (whole or interrupted),
reopens and checks, against an in-memory dict model after every step.

Format 3 writes nothing to its runs when a document is removed or given a new
fingerprint: stale entries wait for a join, and every answer is checked against
the records. The model here is brute force over the live documents, so a stale
entry that leaks into an answer, or a live one a join drops, fails a step.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from _merge_faults import SmallStretches
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from test_multi_index_store import MULTI_INDEX
from test_multi_index_store import compact as bounded_compact
from test_state_machine import Key, ModelMachine, _rank, fingerprints, keys, metas

import simstore
from simstore.engine.column_tableset import ColumnTableSet
from simstore.index.permute import MAX_FINGERPRINT


class JoinInterruptedError(Exception):
    """Stands in for a crash or a Ctrl-C inside a join, before its commit."""


class MultiIndexStoreMachine(ModelMachine):
    """The model is a dict key -> (fingerprint, meta) in first-add order, the
    documented iteration order of a store."""

    #: Give a document back a fingerprint it held before (while its key stayed),
    #: which an older run may still hold for it. (False: such a fingerprint is
    #: moved to the next one the document has not held.)
    REINSTATE_FINGERPRINTS = True

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="simstore-mi-sm-")
        self.path = str(Path(self.folder) / "machine.simstore")
        self.model: dict[Key, tuple[int, dict[str, Any] | None]] = {}
        # Every fingerprint each present key's document has held (its runs may hold them).
        self.held: dict[Key, set[int]] = {}
        self.store: simstore.Store | None = None
        self.k = 3
        self.threshold = 1

    # -- helpers ---------------------------------------------------------------

    def _open(self, merge_on_close: bool) -> None:
        self.store = simstore.open(
            self.path, "w", sync=False, merge_threshold=self.threshold, merge_on_close=merge_on_close
        )

    def _fingerprint_for(self, key: Key, fingerprint: int) -> int:
        """``fingerprint``, unless the document under ``key`` held it before and
        not now (see REINSTATE_FINGERPRINTS)."""
        if self.REINSTATE_FINGERPRINTS or key not in self.model:
            return fingerprint
        held, current = self.held[key], self.model[key][0]
        while fingerprint in held and fingerprint != current:
            fingerprint = (fingerprint + 1) & MAX_FINGERPRINT
        return fingerprint

    def _stored(self, key: Key, fingerprint: int, meta: dict[str, Any] | None) -> None:
        self.model[key] = (fingerprint, meta)
        self.held.setdefault(key, set()).add(fingerprint)

    def _forget(self, key: Key) -> None:
        del self.model[key]
        del self.held[key]

    # -- rules -----------------------------------------------------------------

    @initialize(
        k=st.one_of(st.integers(0, 6), st.integers(7, 12)),
        threshold=st.integers(1, 50),
        merge_on_close=st.booleans(),
    )
    def open_store(self, k: int, threshold: int, merge_on_close: bool) -> None:
        self.k = k
        self.threshold = threshold
        self.store = simstore.open(
            self.path,
            "n",
            k=k,
            layout=MULTI_INDEX,
            sync=False,
            merge_threshold=threshold,
            merge_on_close=merge_on_close,
        )
        stats = self.live.stats()
        assert stats.format_version in (3, 4)
        assert stats.layout_name.startswith(MULTI_INDEX)

    @rule(key=keys, fingerprint=fingerprints, meta=metas)
    def add(self, key: Key, fingerprint: int, meta: dict[str, Any] | None) -> None:
        fingerprint = self._fingerprint_for(key, fingerprint)
        assert self.live.add(key, fingerprint=fingerprint, meta=meta) == fingerprint
        self._stored(key, fingerprint, meta)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), fingerprint=fingerprints)
    def replace(self, data: st.DataObject, fingerprint: int) -> None:
        """An existing document gets a new fingerprint: its old entry turns stale."""
        key = data.draw(st.sampled_from(sorted(self.model, key=_rank)), label="existing key")
        fingerprint = self._fingerprint_for(key, fingerprint)
        self.live.add(key, fingerprint=fingerprint)
        self._stored(key, fingerprint, None)

    @precondition(
        lambda self: self.REINSTATE_FINGERPRINTS and any(len(held) > 1 for held in self.held.values())
    )
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        """A document gets back a fingerprint it held before (which a run may still hold)."""
        key = data.draw(
            st.sampled_from(sorted((key for key, held in self.held.items() if len(held) > 1), key=_rank)),
            label="key",
        )
        former = sorted(self.held[key] - {self.model[key][0]})
        fingerprint = data.draw(st.sampled_from(former), label="former fingerprint")
        self.live.add(key, fingerprint=fingerprint)
        self._stored(key, fingerprint, None)

    @rule(
        batch=st.lists(st.tuples(keys, fingerprints, metas), max_size=25),
        with_metas=st.booleans(),
        as_array=st.booleans(),
    )
    def add_many(
        self, batch: list[tuple[Key, int, dict[str, Any] | None]], with_metas: bool, as_array: bool
    ) -> None:
        # A key given twice keeps its last fingerprint: only that one is checked.
        last = {key: self._fingerprint_for(key, fp) for key, fp, _ in batch}
        chosen = [last[key] for key, _, _ in batch]
        fps: Any = np.array(chosen, dtype=np.uint64) if as_array else chosen
        batch_metas = [meta for _, _, meta in batch] if with_metas else None
        returned = self.live.add_many([key for key, _, _ in batch], fps, metas=batch_metas)
        assert returned.tolist() == chosen
        for key, fp, meta in zip([key for key, _, _ in batch], chosen, [m for _, _, m in batch], strict=True):
            self._stored(key, fp, meta if with_metas else None)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model, key=_rank)), label="key to remove")
        self.live.remove(key)
        self._forget(key)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove_many(self, data: st.DataObject) -> None:
        chosen = data.draw(
            st.lists(st.sampled_from(sorted(self.model, key=_rank)), max_size=40), label="keys to remove"
        )
        assert self.live.remove_many(chosen) == len(set(chosen))
        for key in set(chosen):
            self._forget(key)

    @rule(data=st.data())
    def query(self, data: st.DataObject) -> None:
        query = self._draw_query(data)
        k = data.draw(st.integers(0, self.k), label="k")
        got = [(m.key, m.distance, m.fingerprint) for m in self.live.query(fingerprint=query, k=k)]
        assert got == self._expected(query, k)
        limit = data.draw(st.one_of(st.none(), st.integers(1, 3)), label="limit")
        if limit is not None:
            limited = self.live.query(fingerprint=query, k=k, limit=limit)
            assert [(m.key, m.distance, m.fingerprint) for m in limited] == self._expected(query, k)[:limit]

    @rule()
    def merge(self) -> None:
        before = self.live.stats().delta_docs
        assert self.live.merge() == before
        assert self.live.stats().delta_docs == 0

    @rule()
    def compact(self) -> None:
        bounded_compact(self.live)
        stats = self.live.stats()
        assert stats.runs <= 1
        assert not stats.compacting
        assert stats.delta_docs == 0
        # One run is left, rewritten unless under a fifth of it is stale.
        for entries in stats.table_entries:
            assert stats.docs <= entries <= stats.docs * 5 // 4

    @precondition(lambda self: bool(self.model))
    @rule()
    def join_interrupted(self) -> None:
        """A join stopped before its commit (a crash or Ctrl-C inside it) leaves the
        runs as they were; a later compact() does it."""
        runs_before = self.live.stats().runs
        real = ColumnTableSet.compaction_step

        def interrupted(tableset: ColumnTableSet, txn: Any, catalog: Any) -> Any:
            real(tableset, txn, catalog)
            raise JoinInterruptedError

        with (
            mock.patch.object(ColumnTableSet, "compaction_step", interrupted),
            contextlib.suppress(JoinInterruptedError),
        ):
            self.live.compact()
        # (compact() merged the delta first, in a transaction of its own.)
        assert self.live.stats().runs >= min(runs_before, 1)

    @rule(merge_on_close=st.booleans(), reopen_merge_on_close=st.booleans())
    def reopen(self, merge_on_close: bool, reopen_merge_on_close: bool) -> None:
        self.live.close()
        self._open(merge_on_close)
        delta_before = self.live.stats().delta_docs
        self.live.close()
        self._open(reopen_merge_on_close)
        assert self.live.stats().delta_docs == (0 if merge_on_close else delta_before)
        assert self.live.k == self.k
        assert self.live.stats().format_version in (3, 4)

    # -- invariants ------------------------------------------------------------

    @invariant()
    def contents_match_the_model(self) -> None:
        if self.store is None:
            return
        store = self.store
        assert len(store) == len(self.model)
        assert list(store) == list(self.model)
        assert list(store.items()) == [(key, fp) for key, (fp, _) in self.model.items()]
        stats = store.stats()
        assert stats.docs == len(self.model)
        assert stats.delta_docs < self.threshold
        for key, (fp, meta) in self.model.items():
            assert store.get(key) == simstore.Record(key, fp, meta)

    def teardown(self) -> None:
        try:
            if self.store is not None and not self.store.closed:
                assert self.store.check() == []
                self.store.close()
                with simstore.open(self.path, "r") as reopened:
                    assert reopened.stats().format_version in (3, 4)
                    assert reopened.check() == []
                    assert list(reopened.items()) == [(key, fp) for key, (fp, _) in self.model.items()]
        finally:
            if self.store is not None:
                self.store.close()
            shutil.rmtree(self.folder, ignore_errors=True)


MultiIndexStoreMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestMultiIndexStoreMachine = MultiIndexStoreMachine.TestCase


class StretchedJoinMachine(SmallStretches, MultiIndexStoreMachine):
    """The same, with joins merging 3 entries at a time (instead of about
    4M), so that every join cuts its runs into many stretches: entries of one
    fingerprint in several runs, dropped ones and repeats on both sides of a cut."""

    STRETCH = 3


StretchedJoinMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestStretchedJoinMachine = StretchedJoinMachine.TestCase
