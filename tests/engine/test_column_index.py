"""Format 3's tables as a state machine: runs added, documents taken out or
given new fingerprints, runs joined by plan or at random, the catalog read
back as after a restart; at every step a search (filtered by what is live,
as the store filters by its records) equals a brute-force scan of the live
documents, at every k the scheme answers."""

from __future__ import annotations

import os
import tempfile

import lmdb
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from simstore.engine import scratch
from simstore.engine.column_index import UNSTAMPED, ColumnCatalog, ColumnIndex, RunEntry
from simstore.engine.column_tables import view_run
from simstore.errors import CorruptStoreError
from simstore.index.multi_index import MultiIndex, exact_schemes

SCHEMES = [MultiIndex((21, 21, 22), (1, 1, 1)), MultiIndex((32, 32), (0, 1)), next(iter(exact_schemes(8)))]
fingerprints_strategy = st.lists(
    st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 2**64 - 1, 0x0123456789ABCDEF])),
    min_size=1,
    max_size=30,
)


class ColumnIndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.env = lmdb.open(self.folder.name, max_dbs=8, map_size=1 << 26)
        self.scheme_index = 0
        self.in_scratch = False  # every value built in a scratch file, or none
        self.live: dict[int, int] = {}  # id -> its current fingerprint
        self.next_id = 1
        self.catalog = ColumnCatalog()
        self.removals = 0  # as the store counts them: entries left stale
        self._open()

    def _open(self) -> None:
        scheme = SCHEMES[self.scheme_index]
        make = (
            scratch.in_directory_of(os.path.join(self.folder.name, "data.mdb"), threshold=0)
            if self.in_scratch
            else bytearray
        )
        self.index = ColumnIndex(
            scheme, [self.env.open_db(f"t{i}".encode()) for i in range(scheme.tables)], make
        )

    @rule(in_scratch=st.booleans())
    def build_values_in_scratch_files(self, in_scratch: bool) -> None:
        self.in_scratch = in_scratch
        self._open()

    def _is_live(self, ids: np.ndarray, fingerprints: np.ndarray) -> np.ndarray:
        return np.array(
            [
                self.live.get(int(doc)) == int(fp)
                for doc, fp in zip(ids.tolist(), fingerprints.tolist(), strict=True)
            ],
            dtype=bool,
        )

    @rule(scheme=st.integers(0, len(SCHEMES) - 1))
    def choose_scheme_while_empty(self, scheme: int) -> None:
        if not self.catalog.runs:
            self.scheme_index = scheme
            self._open()

    @rule(values=fingerprints_strategy, near=st.booleans())
    def add_run(self, values: list[int], near: bool) -> None:
        if near and self.live:
            # Near-duplicates of stored documents: a few bits flipped.
            base = list(self.live.values())
            values = [base[i % len(base)] ^ (value & 0x8421) for i, value in enumerate(values)]
        ids = np.arange(self.next_id, self.next_id + len(values), dtype=np.uint64)
        self.next_id += len(values)
        with self.env.begin(write=True) as txn:
            self.catalog = self.index.write_run(
                txn, self.catalog, np.array(values, dtype=np.uint64), ids, self.removals
            )
        self.live.update(zip(ids.tolist(), values, strict=True))

    @precondition(lambda self: self.live)
    @rule(data=st.data(), replace=st.booleans())
    def take_out_or_replace(self, data: st.DataObject, replace: bool) -> None:
        doc = data.draw(st.sampled_from(sorted(self.live)))
        self.removals += 1
        if replace:
            # A new fingerprint: the store writes it in a new run.
            value = data.draw(st.integers(0, 2**64 - 1))
            with self.env.begin(write=True) as txn:
                self.catalog = self.index.write_run(
                    txn,
                    self.catalog,
                    np.array([value], dtype=np.uint64),
                    np.array([doc], dtype=np.uint64),
                    self.removals,
                )
            self.live[doc] = value
        else:
            del self.live[doc]

    def _join(self, first: int, end: int, in_place: bool) -> None:
        # As the store joins: runs stamped with the current count of
        # removals hold no stale entry and are joined unchecked.
        fresh = all(run.removals == self.removals for run in self.catalog.runs[first:end])
        live = None if fresh else (lambda _run, ids, fingerprints: self._is_live(ids, fingerprints))
        source = self.env.begin(buffers=True) if in_place else None
        try:
            with self.env.begin(write=True) as txn:
                self.catalog = self.index.join(txn, self.catalog, first, end, live, self.removals, source)
        finally:
            if source is not None:
                source.abort()

    @rule(in_place=st.booleans())
    def join_by_plan(self, in_place: bool) -> None:
        planned = self.index.plan(self.catalog)
        if planned is not None:
            self._join(*planned, in_place)

    @precondition(lambda self: self.catalog.runs)
    @rule(data=st.data(), in_place=st.booleans())
    def join_some(self, data: st.DataObject, in_place: bool) -> None:
        first = data.draw(st.integers(0, len(self.catalog.runs) - 1))
        end = data.draw(st.integers(first + 1, len(self.catalog.runs)))
        self._join(first, end, in_place)

    @rule()
    def reopen(self) -> None:
        self.catalog = ColumnCatalog.decode(self.catalog.encode())
        self.env.close()
        self.env = lmdb.open(self.folder.name, max_dbs=8, map_size=1 << 26)
        self._open()

    @invariant()
    def search_equals_brute_force(self) -> None:
        scheme = self.index.scheme
        stored = np.array(list(self.live.values()), dtype=np.uint64)
        ids = np.array(list(self.live.keys()), dtype=np.uint64)
        queries = np.concatenate([stored[:5], stored[:5] ^ np.uint64(0b1011), np.array([7], dtype=np.uint64)])
        with self.env.begin(buffers=True) as txn:
            snapshot = self.index.snapshot(txn, self.catalog)
            for k in sorted({0, scheme.k // 2, scheme.k}):
                matches = snapshot.search(queries, k)
                # As the store does: a found document counts if it is still
                # there and its current fingerprint (its record's) is near.
                got = sorted(
                    {
                        (row, doc)
                        for row, doc in zip(matches.queries.tolist(), matches.ids.tolist(), strict=True)
                        if doc in self.live and (self.live[doc] ^ int(queries[row])).bit_count() <= k
                    }
                )
                distances = np.bitwise_count(queries[:, np.newaxis] ^ stored[np.newaxis, :])
                rows, columns = np.nonzero(distances <= k)
                assert got == sorted(zip(rows.tolist(), ids[columns].tolist(), strict=True)), k

    @invariant()
    def scratch_files_leave_nothing_behind(self) -> None:
        assert sorted(os.listdir(self.folder.name)) == ["data.mdb", "lock.mdb"]

    @invariant()
    def runs_stay_few_enough_to_count(self) -> None:
        assert self.catalog.entries >= len(self.live)

    @invariant()
    def stamped_runs_hold_only_live_entries(self) -> None:
        # The premise of joining unchecked: a run stamped with the current
        # count holds no entry a record would not back.
        with self.env.begin(buffers=True) as txn:
            for run in self.catalog.runs:
                if run.removals != self.removals:
                    continue
                viewed = view_run(txn, self.index.databases, self.index.scheme, run.run_id, run.entries)
                assert self._is_live(viewed.ids, viewed.fingerprints).all()
                assert (
                    len(set(zip(viewed.ids.tolist(), viewed.fingerprints.tolist(), strict=True)))
                    == run.entries
                )

    def teardown(self) -> None:
        self.env.close()
        self.folder.cleanup()


ColumnIndexMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)
TestColumnIndex = ColumnIndexMachine.TestCase


def test_a_damaged_catalog_is_corruption_not_a_crash() -> None:
    catalog = ColumnCatalog((RunEntry(1, 10, 0), RunEntry(3, 5, 7)), 4)
    assert ColumnCatalog.decode(catalog.encode()) == catalog
    assert ColumnCatalog.decode(None) == ColumnCatalog()
    # A version-1 catalog (no stamps) is read: its runs are checked at a join.
    assert ColumnCatalog.decode(b"\x93\x01\x04\x91\x92\x01\x0a").runs == (RunEntry(1, 10, UNSTAMPED),)
    for raw in (
        b"\xc1",
        b"\x93\x03\x04\x90",
        b"\x93\x02\x04\x91\x92\x01\x0a",
        b"\x93\x02\x04\x91\x93\x01\x0a\xfe",
        b"\x93\x01\x04\x91\x92\x05\x01",
        b"\x93\x01\x04\x92\x92\x01\x01\x92\x01\x02",
    ):
        with pytest.raises(CorruptStoreError):
            ColumnCatalog.decode(raw)
