"""A format-3 store's tables (:mod:`simstore.engine.column_index`) behind the
contract of format 2's :class:`simstore.engine.tableset.TableSet`, which the
engine, the delta's merge, the writes and ``check()`` call.

What differs from format 2:

- **Removals write no table entry.** Runs are immutable: a document taken
  out, or given a new fingerprint, keeps its old entry until a join, and the
  entry is recorded as stale (:mod:`simstore.engine.graves`). Every entry a
  search finds is checked against the document's record in the query's own
  transaction (as format 2 checks every candidate), so a stale entry is
  dropped there: a document with no record, or whose recorded fingerprint is
  not within ``k``, is no match. Joins drop the entries the graves name.
- **A pinned snapshot.** The runs' columns are read in place from LMDB's map
  (:func:`simstore.engine.column_tables.snapshot_in_place`) through a read
  transaction of their own that reads buffers (the *pin*), kept across
  queries: viewing the runs costs some 800 µs at 1M, a search 60-80. The pin
  is made or renewed by :meth:`ColumnTableSet.prepare` before the query's
  own transaction begins (a transaction begun while another is open could
  adopt a map another process grew, which ends every open transaction), and
  the reads retry until the two see the same catalog
  (:class:`simstore.engine.core.Reading`). A run the query's transaction
  names and the pin lacks (a write transaction's own run, a catalog another
  process committed in between) is viewed from that transaction, as copies.
  The pin is let go when the catalog changes, before this process changes
  the map's size or forks, when the store closes, and once it is
  :data:`PIN_SECONDS` old (by a timer when the store is idle: a snapshot
  held for ever would keep LMDB from reusing the pages freed since, and the
  file would grow under other processes' writes). Every use is under the
  store's lock, as the release is.
- **Compaction** is a join of the runs the size-tiered plan names: in one
  write when it is small, else prepared a step at a time across store calls
  and published in one small write (:mod:`simstore.engine.prepared_join`).
- **The band table** (format 4, :class:`BandSource`): each run's documents'
  band keys, written with the run from the sketches the same transaction
  holds, joined with it (the entries of documents the join drops are
  dropped), viewed in place through the pin like the columns.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from simstore.engine import graves, scratch
from simstore.engine._lmdb import Database, MapMovedError, Txn
from simstore.engine.band_tables import view_band_run, write_band_run, write_joined_band_run
from simstore.engine.column_index import UNSTAMPED, ColumnCatalog, ColumnIndex, Live, RunEntry, next_id
from simstore.engine.column_tables import Finished, drop_run, put_value, view_run
from simstore.engine.format import CATALOG_KEY, META_KEY, REMOVALS_KEY, LayoutChangedError
from simstore.engine.prepared_join import JOINING_KEY, Joining, Mask, PreparedJoin, sources_at
from simstore.engine.record_scan import id_and_fingerprint_arrays, sketch_rows
from simstore.errors import CorruptStoreError
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import Sketch, U8Array
from simstore.index.band_runs import BandRun, look_up, short_keys, sorted_band_run
from simstore.index.column_search import IdArray, Matches, Snapshot
from simstore.index.multi_index import MultiIndex
from simstore.index.permute import FINGERPRINT_BITS, U64Array
from simstore.index.scan_plan import ScanPlan

if TYPE_CHECKING:
    from simstore.engine._lmdb import Environment

#: A join of more entries than 1 / SCAN_SHARE of the records reads every
#: record at once to tell live entries from stale ones.
SCAN_SHARE = 2
#: Seconds a pinned snapshot serves queries before it is let go.
PIN_SECONDS = 1.0
#: Documents a run's band keys are read and made for at a time.
BAND_CHUNK = 1 << 16

#: ``txn.get``, or a stand-in for it (:func:`simstore.engine.tableset.sharing_records`).
Get = Callable[..., bytes | None]

# Every table is searched at once: a query's answer is settled when the
# search returns (simstore.engine.closest asks only for the last entry).
_SCAN_PLAN = ScanPlan((0,), (0, FINGERPRINT_BITS + 1))


@dataclass(frozen=True)
class GivenSketches:
    """The sketches a writer has in hand for the documents ``first_id`` to
    ``first_id + len(rows) - 1`` (row ``i`` is document ``first_id + i``'s;
    all zeros: none), the same as it writes into the ``sketches``
    sub-database: a run banded from them need not read them back."""

    first_id: int
    rows: U8Array

    def split(self, doc_ids: U64Array) -> tuple[U64Array, U8Array, U64Array]:
        """``(given ids, their rows, the other ids)`` of ``doc_ids``."""
        offsets = doc_ids - np.uint64(self.first_id)  # (wraps below first_id: out of range too)
        given = offsets < np.uint64(len(self.rows))
        return doc_ids[given], self.rows[offsets[given].astype(np.int64)], doc_ids[~given]


@dataclass(frozen=True)
class BandSource:
    """What a format-4 store's band table is made from: ``per_width`` bands
    of each width (:func:`simstore.fingerprinting.bands.band_keys`) of the
    ``sketch`` each document keeps in ``sketches``."""

    per_width: int
    sketch: Sketch
    sketches: Database

    def keys_of(self, rows: U8Array) -> tuple[npt.NDArray[np.int64], U64Array]:
        """``(rows, keys)``: the band keys of packed sketches, each with its row."""
        found = band_keys(rows, self.sketch, self.per_width)
        return found.rows, found.keys

    def stored_rows(self, txn: Txn, doc_ids: U64Array) -> tuple[U64Array, U8Array]:
        """``(doc_ids, rows)`` of the documents of ``doc_ids`` that keep a sketch, read in ``txn``."""
        return sketch_rows(txn, self.sketches, self.sketch, doc_ids)

    def entries(
        self, txn: Txn, doc_ids: U64Array, given: GivenSketches | None = None
    ) -> Iterator[tuple[U64Array, U64Array]]:
        """``(ids, keys)`` of the band keys of the documents ``doc_ids`` that
        keep a sketch in ``txn`` (key ``keys[j]`` is document ``ids[j]``'s),
        :data:`BAND_CHUNK` documents at a time (banding holds about 1 KiB a
        sketch); those ``given`` holds are banded from it, not read."""
        doc_ids = np.sort(np.asarray(doc_ids, dtype=np.uint64))  # chunks of nearby ids
        if given is not None:
            in_hand, rows, doc_ids = given.split(doc_ids)
            for start in range(0, len(in_hand), BAND_CHUNK):
                owners, keys = self.keys_of(rows[start : start + BAND_CHUNK])
                yield in_hand[start : start + BAND_CHUNK][owners], keys
        for start in range(0, len(doc_ids), BAND_CHUNK):
            found, rows = self.stored_rows(txn, doc_ids[start : start + BAND_CHUNK])
            owners, keys = self.keys_of(rows)
            yield found[owners], keys

    def run_of(self, txn: Txn, doc_ids: U64Array, given: GivenSketches | None = None) -> BandRun:
        """The band run of the documents ``doc_ids``, from their sketches in
        ``txn`` (or ``given``)."""
        keys: list[npt.NDArray[np.uint32]] = []
        ids: list[IdArray] = []
        for chunk_ids, chunk_keys in self.entries(txn, doc_ids, given):
            keys.append(short_keys(chunk_keys))
            ids.append(chunk_ids)
        if not keys:
            return sorted_band_run(np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.uint32))
        return sorted_band_run(np.concatenate(keys), _ids(np.concatenate(ids)))


class _Pin:
    """A read transaction that reads buffers, and the snapshot of the runs it sees."""

    __slots__ = ("band_runs", "born", "catalog_raw", "map_changes", "run_ids", "snapshot", "txn")

    def __init__(
        self,
        txn: Txn,
        catalog_raw: bytes | None,
        index: ColumnIndex,
        map_changes: int,
        bands: BandSource | None,
    ) -> None:
        self.txn = txn
        self.born = time.monotonic()
        self.map_changes = map_changes
        self.catalog_raw = catalog_raw
        catalog = ColumnCatalog.decode(catalog_raw)
        self.run_ids = frozenset(run.run_id for run in catalog.runs)
        self.snapshot = index.snapshot(txn, catalog) if catalog.runs else None
        self.band_runs: list[BandRun] = (
            []
            if bands is None
            else [view_band_run(txn, index.databases[0], run.run_id) for run in catalog.runs]
        )


class ColumnTableSet:
    """The tables of one multi-index scheme, as the engine uses them."""

    #: Probes are made from the query itself (the delta alone reads permuted keys).
    reads_permuted_keys = False

    @property
    def bitmaps_unread(self) -> bool:
        """Never: format 3 has no bitmaps (format 2's TableSet reads them lazily)."""
        return False

    def __init__(
        self,
        scheme: MultiIndex,
        meta_record: bytes,
        databases: Sequence[Database],
        meta: Database,
        docs: Database,
        environment: Callable[[], Environment],
        lock: Callable[[], threading.RLock],
        bands: BandSource | None = None,
    ) -> None:
        self.scheme = scheme
        self.bands = bands
        # Large values are built in scratch files beside the store, not in
        # anonymous memory (a 100M join's column is 800 MB).
        self.index = ColumnIndex(scheme, databases, scratch.in_directory_of(environment().path))
        self.databases = list(databases)
        self._meta = meta
        # The meta record of the layout these tables are: a pin taken after
        # another process re-laid the store out would read its catalog.
        self._meta_record = meta_record
        self.docs = docs
        # The store's environment and lock, as they are now (both are
        # replaced: after a fork, a reload).
        self._environment = environment
        self._lock = lock
        self.catalog = ColumnCatalog()
        self._pin: _Pin | None = None
        self._timer: threading.Timer | None = None
        #: The join this process is preparing a step at a time, if any.
        self.prepared: PreparedJoin | None = None

    # ------------------------------------------------------------------ views

    def decode_catalog(self, raw: bytes | None) -> ColumnCatalog:
        return ColumnCatalog.decode(raw)

    def adopt(self, catalog: ColumnCatalog) -> None:
        """Answer queries from ``catalog``'s runs from now on."""
        self.catalog = catalog
        self.release()

    def release(self) -> None:
        """Let go of the pinned snapshot, if any (the caller holds the store's lock)."""
        pin, self._pin = self._pin, None
        if pin is not None:
            pin.snapshot = None  # its views die with the transaction
            # (A transaction a change of the map ended already refuses this.)
            with contextlib.suppress(Exception):
                pin.txn.abort()

    def scan_plan(self) -> ScanPlan:
        return _SCAN_PLAN

    def read_bitmaps(self, txn: Txn, count: int = 1) -> None:
        """Nothing to read (format 2 reads its bitmaps here)."""

    # ------------------------------------------------------------------ reads

    def find(
        self,
        txn: Txn,
        permuted: Sequence[int],
        query: int,
        k: int,
        found: dict[int, int],
        records: dict[int, bytes],
        docs: Database,
        permute_all: Callable[[int], Sequence[int]],
        settle: Callable[[int], bool] | None = None,
        get: Get | None = None,
    ) -> None:
        """Add every tabled document within ``k`` bits of ``query`` to
        ``found`` (``{doc_id: distance}``) and its record (read in ``txn``) to
        ``records``; documents in ``found`` already (the delta's) are kept.
        ``settle`` is never called: the answer is whole when this returns."""
        self.find_many(txn, (), [query], k, [found], [records], docs, permute_all, None, get)

    def find_many(
        self,
        txn: Txn,
        columns: Sequence[U64Array],
        queries: Sequence[int],
        k: int,
        founds: Sequence[dict[int, int]],
        records: Sequence[dict[int, bytes]],
        docs: Database,
        permute_all: Callable[[int], Sequence[int]],
        settle: Callable[[int, int], bool] | None = None,
        get: Get | None = None,
    ) -> None:
        """:meth:`find` for a batch: query ``i``'s matches go to ``founds[i]``
        and ``records[i]`` (``columns``, the Manku keys, are not needed)."""
        if not self.catalog.runs or not len(queries):
            return
        hits = self._search(txn, queries, k)
        get = txn.get if get is None else get
        for query_index, doc_id in hits:
            found = founds[query_index]
            if doc_id in found:
                continue
            raw = get(doc_id.to_bytes(8, "big"), db=docs)
            if raw is None:
                continue  # taken out (its entry waits for a join), or merged after this snapshot
            distance = (int.from_bytes(raw[:8], "big") ^ queries[query_index]).bit_count()
            if distance <= k:
                found[doc_id] = distance
                records[query_index][doc_id] = raw

    def serves(self, txn: Txn) -> bool:
        """Whether the pin holds exactly the runs ``txn`` names."""
        pin = self._pin
        return pin is not None and txn.get(CATALOG_KEY, db=self._meta) == pin.catalog_raw

    def _search(self, txn: Txn, queries: Sequence[int], k: int) -> list[tuple[int, int]]:
        """``(query index, doc id)`` of every match in the pinned snapshot,
        and in any run ``txn`` names that the pin lacks (viewed from
        ``txn``: copies)."""
        raw, pin = self._pin_for(txn)
        hits: list[tuple[int, int]] = []
        snapshot = None if pin is None else pin.snapshot
        if snapshot is not None and len(queries) == 1:
            hits += [(0, doc_id) for doc_id in snapshot.search_one(queries[0], k)[0]]
        elif snapshot is not None:
            hits += _hits(snapshot.search(np.array(queries, dtype=np.uint64), k))
        if pin is None or raw != pin.catalog_raw:
            pinned = frozenset() if pin is None else pin.run_ids
            missing = [run for run in ColumnCatalog.decode(raw).runs if run.run_id not in pinned]
            if missing:
                runs = [
                    view_run(txn, self.databases, self.scheme, run.run_id, run.entries) for run in missing
                ]
                batch = np.array(queries, dtype=np.uint64)
                hits += _hits(Snapshot.of(self.scheme, runs).search(batch, k))
        return hits

    def _pin_for(self, txn: Txn) -> tuple[bytes | None, _Pin | None]:
        """The catalog ``txn`` reads, and the pin, renewed first if it was
        not prepared for this transaction (a write's, or a read that raced
        catalog changes): pinned now, at the latest commit. The pin may
        still lack runs ``txn`` names (its own, uncommitted)."""
        raw = txn.get(CATALOG_KEY, db=self._meta)
        pin = self._pin
        if pin is None or raw != pin.catalog_raw or pin.map_changes != self._environment().map_changes:
            # (After a re-layout txn's runs are viewed from txn itself.)
            with contextlib.suppress(MapMovedError, LayoutChangedError):
                self._renew(adopt_growth=False)
            pin = self._pin
        return raw, pin

    def band_candidates(self, txn: Txn, keys: U64Array) -> tuple[npt.NDArray[np.int64], U64Array]:
        """``(positions, doc_ids)``: the documents whose band keys in the
        runs ``txn`` names include ``keys[positions[j]]`` (on their top 32
        bits: :mod:`simstore.index.band_runs`), repeats included, read from
        the pin where it holds the runs, else from ``txn`` (copies). Stale
        entries are found too: the caller verifies each document's sketch."""
        if self.bands is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
        raw, pin = self._pin_for(txn)
        if pin is not None and raw == pin.catalog_raw:
            return look_up(pin.band_runs, keys)
        # (Views of txn's values: looked up before it ends.)
        runs = [view_band_run(txn, self.databases[0], run.run_id) for run in ColumnCatalog.decode(raw).runs]
        return look_up(runs, keys)

    def prepare(self) -> None:
        """Make or renew the pin if it is missing, old, or the map changed
        since it was made. Called with no transaction of this process open
        (the caller holds the store's lock)."""
        pin = self._pin
        if (
            pin is None
            or pin.map_changes != self._environment().map_changes
            or time.monotonic() - pin.born > PIN_SECONDS
        ):
            self._renew(adopt_growth=True)

    def _renew(self, *, adopt_growth: bool) -> None:
        """Pin the latest commit (``MapMovedError`` if another process grew
        the map and ``adopt_growth`` is false, ``LayoutChangedError`` if it
        re-laid the store out)."""
        self.release()
        environment = self._environment()
        txn = environment.begin_buffers(adopt_growth=adopt_growth)
        try:
            if txn.get(META_KEY, db=self._meta) != self._meta_record:
                raise LayoutChangedError
            raw = txn.get(CATALOG_KEY, db=self._meta)
            self._pin = _Pin(
                txn, None if raw is None else bytes(raw), self.index, environment.map_changes, self.bands
            )
        except BaseException:
            txn.abort()
            raise
        self._watch()

    def _watch(self) -> None:
        """Let an idle store's pin go once it is old (a daemon timer)."""
        if self._timer is not None and self._timer.is_alive():
            return
        self._timer = timer = threading.Timer(PIN_SECONDS, self._expire)
        timer.daemon = True
        timer.start()

    def _expire(self) -> None:
        self._timer = None
        lock = self._lock()
        if not lock.acquire(timeout=PIN_SECONDS):
            self._watch()  # busy: the next check comes later
            return
        try:
            pin = self._pin
            if pin is None:
                return
            if time.monotonic() - pin.born > PIN_SECONDS:
                self.release()
            else:
                self._watch()
        finally:
            lock.release()

    # ----------------------------------------------------------------- writes

    def write_run(
        self,
        txn: Txn,
        catalog: ColumnCatalog,
        doc_ids: U64Array,
        fingerprints: U64Array,
        given: GivenSketches | None = None,
    ) -> ColumnCatalog:
        """Write documents as a new run of every table (and their band keys,
        from their sketches in ``txn``, or ``given``); the catalog with it."""
        fingerprints = np.asarray(fingerprints, dtype=np.uint64)
        written = self.index.write_run(txn, catalog, fingerprints, _ids(doc_ids), self.removals(txn))
        if self.bands is not None and written is not catalog:
            band_run = self.bands.run_of(txn, np.asarray(doc_ids, dtype=np.uint64), given)
            write_band_run(txn, self.databases[0], written.runs[-1].run_id, band_run, self.index.make)
        return written

    def delete(
        self, txn: Txn, catalog: ColumnCatalog, doc_ids: Sequence[int], fingerprints: Sequence[int]
    ) -> None:
        """Record the entries of documents taken out (or given new
        fingerprints) as stale (:mod:`simstore.engine.graves`): the record
        check drops them from answers, and the next join of their runs from
        the tables."""
        if len(doc_ids):
            before = self.removals(txn)
            graves.bury(txn, self._meta, before, doc_ids, fingerprints)
            txn.put(REMOVALS_KEY, (before + len(doc_ids)).to_bytes(8, "big"), db=self._meta)

    def removals(self, txn: Txn) -> int:
        """Table entries left stale so far (runs are stamped with it)."""
        raw = txn.get(REMOVALS_KEY, db=self._meta)
        return 0 if raw is None else int.from_bytes(raw, "big")

    def plan(self, catalog: ColumnCatalog) -> ColumnCatalog | None:
        """``catalog`` with the next join planned, or ``None``."""
        planned = self.plan_span(catalog)
        return None if planned is None else replace(catalog, compaction=planned)

    def plan_span(self, catalog: ColumnCatalog) -> tuple[int, int] | None:
        """The runs to join next, as ``(first, end)`` indexes, or ``None``:
        among the runs newer than those of the join being prepared, if any
        (they are joined already, as far as the plan is concerned)."""
        prepared = self.prepared
        at = None if prepared is None else sources_at(catalog.runs, prepared.sources)
        if prepared is None or at is None:
            return self.index.plan(catalog)
        after = at + len(prepared.sources)
        span = self.index.plan(replace(catalog, runs=catalog.runs[after:]))
        return None if span is None else (span[0] + after, span[1] + after)

    def start_compaction(
        self, catalog: ColumnCatalog, span: tuple[int, int], entries: int | None = None
    ) -> ColumnCatalog:
        """``catalog`` with a join of runs ``span`` planned."""
        return replace(catalog, compaction=span)

    def compaction_step(self, txn: Txn, catalog: ColumnCatalog) -> tuple[ColumnCatalog, int]:
        """The planned join, whole: ``(catalog after it, entries read)``.

        Stale entries are dropped (:meth:`_live_in`). The runs are read in
        place through a read transaction of their own where one can be
        begun (it sees them: they were committed before this write), else
        copied. Graves older than every run are deleted."""
        assert catalog.compaction is not None
        first, end = catalog.compaction
        joined = catalog.runs[first:end]
        moved = sum(run.entries for run in joined)
        removals = self.removals(txn)
        live = self._live_in(txn, joined, removals)
        source = self._reader_of(joined)
        try:
            if self.bands is not None:
                # The bands first, under the id the joined run takes (the
                # join's arrays and theirs are not held at once).
                live = self._join_bands(
                    txn, txn if source is None else source, joined, live, catalog.next_run_id
                )
            joined_catalog = self.index.join(
                txn, replace(catalog, compaction=None), first, end, live, removals, source
            )
            if self.bands is not None and joined_catalog.next_run_id == catalog.next_run_id:
                drop_run(txn, self.databases, catalog.next_run_id)  # the join kept nothing: no run, no bands
        finally:
            if source is not None:
                source.abort()
        self._forget_joined_graves(txn, joined_catalog)
        return joined_catalog, moved

    def _live_in(self, txn: Txn, joined: Sequence[RunEntry], removals: int) -> Live | None:
        """Which entries of the runs ``joined`` still stand, with the store's
        count of ``removals`` at ``removals`` (``None``: all of them).

        A run's stale entries are those the graves written since the run
        name (:mod:`simstore.engine.graves`): runs written since the last
        removal have none, and no record is read. Only runs of a catalog
        written before runs were stamped are checked against the records."""
        stale = [run for run in joined if run.removals != removals]
        if not stale:
            return None
        unstamped = any(run.removals == UNSTAMPED for run in stale)
        checked = self.live(txn, sum(run.entries for run in joined)) if unstamped else None
        buried = graves.graves_since(txn, self._meta, min(run.removals for run in stale))

        def live(run: RunEntry, ids: IdArray, fingerprints: U64Array) -> npt.NDArray[np.bool_] | None:
            if run.removals == removals:
                return None
            if run.removals == UNSTAMPED:
                assert checked is not None
                return checked(ids, fingerprints)
            return graves.standing(ids, fingerprints, run.removals, buried)

        return live

    def _join_bands(
        self, txn: Txn, reader: Txn, joined: Sequence[RunEntry], live: Live | None, run_id: int
    ) -> Live | None:
        """Write under ``run_id`` the band run of a join of ``joined`` (read
        in ``reader``), without the entries of the documents ``live`` drops
        from each run; returns a ``live`` that answers the join from what
        was worked out here (each run's entries are judged once)."""
        kept, band_kept = self._masks(reader, joined, live)
        assert band_kept is not None
        band_runs = [view_band_run(reader, self.databases[0], run.run_id) for run in joined]
        write_joined_band_run(txn, self.databases[0], run_id, band_runs, band_kept, self.index.make)
        if live is None:
            return None

        by_run = {run.run_id: keep for run, keep in zip(joined, kept, strict=True)}

        def judged(run: RunEntry, ids: IdArray, fingerprints: U64Array) -> npt.NDArray[np.bool_] | None:
            return by_run[run.run_id]

        return judged

    # ------------------------------------------- joins prepared in steps

    def begin_join(
        self, txn: Txn, catalog: ColumnCatalog, span: tuple[int, int]
    ) -> tuple[ColumnCatalog, PreparedJoin] | None:
        """Begin preparing the join of runs ``span`` (in the write ``txn``):
        ``(catalog with the joined run's id taken, the join)``, or ``None``
        if it cannot begin now (another process prepares a join, or the runs
        cannot be read in place under this write). A record of a join nobody
        prepares any more is dropped with its values. The caller adopts the
        join once ``txn`` commits (:mod:`simstore.engine.prepared_join`)."""
        if not self.drop_abandoned(txn):
            return None
        first, end = span
        joined = catalog.runs[first:end]
        removals = self.removals(txn)
        live = self._live_in(txn, joined, removals)
        reader = self._reader_of(joined)
        if reader is None:
            return None
        try:
            kept, band_kept = self._masks(reader, joined, live)
        finally:
            reader.abort()
        run_id = next_id(catalog)
        joining = Joining(run_id, os.getpid(), tuple(run.run_id for run in joined))
        txn.put(JOINING_KEY, joining.encode(), db=self._meta)
        prepared = PreparedJoin(joining, joined, removals, self.scheme, kept, band_kept, self.index.make)
        return replace(catalog, next_run_id=run_id + 1), prepared

    def drop_abandoned(self, txn: Txn) -> bool:
        """Drop (in the write ``txn``) the values and record of a join that
        nobody prepares any more (:meth:`Joining.abandoned`); whether no
        other join is being prepared now, by this process or another."""
        raw = txn.get(JOINING_KEY, db=self._meta)
        if raw is None:
            return True
        record = Joining.decode(bytes(raw))
        if not record.abandoned(None if self.prepared is None else self.prepared.joining):
            return False
        self._drop_join(txn, record.run_id)
        return True

    def _masks(
        self, reader: Txn, joined: Sequence[RunEntry], live: Live | None
    ) -> tuple[list[Mask], list[Mask] | None]:
        """``(kept, band_kept)``: which entries of each run of ``joined``
        (read in ``reader``) the join keeps, in its columns and in its band
        run (``None``: all; ``band_kept`` is ``None`` without a band table)."""
        kept: list[Mask] = []
        band_kept: list[Mask] | None = None if self.bands is None else []
        for run in joined:
            if live is None:
                kept.append(None)
                if band_kept is not None:
                    band_kept.append(None)
                continue
            columns = view_run(reader, self.databases, self.scheme, run.run_id, run.entries)
            keep = live(run, columns.ids, columns.fingerprints)
            kept.append(keep)
            if band_kept is not None:
                gone = None if keep is None else columns.ids[~keep]
                band_ids = view_band_run(reader, self.databases[0], run.run_id).ids
                band_kept.append(None if gone is None or not len(gone) else ~np.isin(band_ids, gone))
            del columns
        return kept, band_kept

    def join_step(self) -> list[Finished] | None:
        """One step of the join being prepared, reading its runs through the
        pinned snapshot: the values it finished, or ``None`` if its runs are
        gone from the latest commit (another process joined them). Called
        under the store's lock with no transaction of this process open."""
        prepared = self.prepared
        assert prepared is not None
        try:
            self.prepare()
        except LayoutChangedError:
            return None  # re-laid out by another process: the runs are gone
        pin = self._pin
        if pin is None or sources_at(ColumnCatalog.decode(pin.catalog_raw).runs, prepared.sources) is None:
            return None
        runs = [
            view_run(pin.txn, self.databases, self.scheme, run.run_id, run.entries)
            for run in prepared.sources
        ]
        band_runs = (
            []
            if self.bands is None
            else [view_band_run(pin.txn, self.databases[0], run.run_id) for run in prepared.sources]
        )
        return prepared.step(runs, band_runs)

    def put_prepared(self, txn: Txn, puts: Sequence[Finished]) -> bool:
        """Put values a step finished under the prepared run's id (in the
        write ``txn``, the catalog synced to it); ``False`` (nothing put) if
        the join is no longer this process's to prepare (a re-layout or a
        ``compact()`` dropped it), or its runs left the catalog (another
        process joined them: then what it put is dropped)."""
        prepared = self.prepared
        if prepared is None or not self._preparing(txn, prepared):
            return False
        if sources_at(self.catalog.runs, prepared.sources) is None:
            self.abandon_join(txn)
            return False
        run_id = prepared.joining.run_id
        for table, kind, value in puts:
            put_value(txn, self.databases[table], table, run_id, kind, value)
        return True

    def publish_join(self, txn: Txn, catalog: ColumnCatalog) -> ColumnCatalog | None:
        """Publish the prepared join (in the write ``txn``, ``catalog`` the
        latest): the catalog with the joined run in its runs' place, or
        ``None`` if they are not side by side in it any more (the prepared
        values are dropped then)."""
        prepared = self.prepared
        assert prepared is not None
        assert prepared.entries is not None
        assert not prepared.finished, "every value is put before the join is published"
        mine = self._preparing(txn, prepared)
        at = sources_at(catalog.runs, prepared.sources) if mine else None
        run_id = prepared.joining.run_id
        if at is None:
            if mine:
                self.abandon_join(txn)
            return None
        for run in prepared.sources:
            drop_run(txn, self.databases, run.run_id)
        runs = list(catalog.runs[:at])
        if prepared.entries:
            runs.append(RunEntry(run_id, prepared.entries, prepared.stamp))
        else:
            drop_run(txn, self.databases, run_id)  # the join kept nothing: no run, no bands
        joined = ColumnCatalog((*runs, *catalog.runs[at + len(prepared.sources) :]), catalog.next_run_id)
        txn.delete(JOINING_KEY, db=self._meta)
        self._forget_joined_graves(txn, joined)
        return joined

    def abandon_join(self, txn: Txn) -> None:
        """Drop the prepared join's values and record (in the write ``txn``),
        if it is still this process's."""
        prepared = self.prepared
        if prepared is not None and self._preparing(txn, prepared):
            self._drop_join(txn, prepared.joining.run_id)

    def _drop_join(self, txn: Txn, run_id: int) -> None:
        """Drop a prepared join's values (under ``run_id``) and its record."""
        drop_run(txn, self.databases, run_id)
        txn.delete(JOINING_KEY, db=self._meta)

    def _forget_joined_graves(self, txn: Txn, catalog: ColumnCatalog) -> None:
        """After a join: delete the graves older than every run of ``catalog``
        (no run can hold an entry they name any more)."""
        stamps = [run.removals for run in catalog.runs]
        graves.forget_below(txn, self._meta, min(stamps) if stamps else None)

    def forget_join(self) -> None:
        """Let go of the join being prepared (its buffers), if any."""
        prepared, self.prepared = self.prepared, None
        if prepared is not None:
            prepared.close()

    def _preparing(self, txn: Txn, prepared: PreparedJoin) -> bool:
        """Whether ``txn`` records ``prepared`` as the join being prepared."""
        raw = txn.get(JOINING_KEY, db=self._meta)
        return raw is not None and Joining.decode(bytes(raw)) == prepared.joining

    def band_entries(self, runs: Sequence[RunEntry]) -> int | None:
        """How many band keys ``runs`` hold, read from their values' headers
        (no copy); ``None`` if this store keeps no band table or they cannot
        be read now (the map moved)."""
        if self.bands is None:
            return None
        try:
            reader = self._environment().begin_buffers(adopt_growth=False)
        except MapMovedError:
            return None
        try:
            return sum(len(view_band_run(reader, self.databases[0], run.run_id)) for run in runs)
        except CorruptStoreError:
            return None  # (not this snapshot's runs, or damaged: the estimate will do, the join will tell)
        finally:
            reader.abort()

    def _reader_of(self, runs: Sequence[RunEntry]) -> Txn | None:
        """A read transaction that reads buffers and sees ``runs``, or
        ``None`` (the map moved: a transaction begun now may not adopt it
        under the open write)."""
        try:
            reader = self._environment().begin_buffers(adopt_growth=False)
        except MapMovedError:
            return None
        try:
            committed = {
                run.run_id: run.entries
                for run in self.decode_catalog(reader.get(CATALOG_KEY, db=self._meta)).runs
            }
        except BaseException:
            reader.abort()
            raise
        if any(committed.get(run.run_id) != run.entries for run in runs):
            reader.abort()
            return None
        return reader

    def live(self, txn: Txn, joined: int) -> Callable[[IdArray, U64Array], npt.NDArray[np.bool_]]:
        """Which of a run's entries still stand for their documents, by the
        records ``txn`` reads: each looked up (about 1 µs), or, for a join
        of ``joined`` entries, more than 1 / :data:`SCAN_SHARE` of the
        records, all of them read at once (about 0.5 µs a record, no Python
        work per document)."""
        docs = self.docs
        scan = joined * SCAN_SHARE > int(txn.stat(docs)["entries"])
        recorded: list[_Recorded] = []

        def live(ids: IdArray, fingerprints: U64Array) -> npt.NDArray[np.bool_]:
            if scan:
                if not recorded:
                    recorded.append(_Recorded(*id_and_fingerprint_arrays(txn, docs)))
                return recorded[0].holds(ids.astype(np.uint64), fingerprints)
            kept = np.zeros(len(ids), dtype=bool)
            pairs = zip(ids.tolist(), fingerprints.tolist(), strict=True)
            for position, (doc_id, fingerprint) in enumerate(pairs):
                raw = txn.get(doc_id.to_bytes(8, "big"), db=docs)
                kept[position] = raw is not None and int.from_bytes(raw[:8], "big") == fingerprint
            return kept

        return live


class _Recorded:
    """Every record's fingerprint, to test many ``(id, fingerprint)`` at once.

    Held by id (a gather rather than a binary search per entry, 3x faster
    at 8M): ids are given in order, so the table is about as long as the
    records; sparse ids (most documents taken out) are searched instead.
    """

    def __init__(self, ids: U64Array, fingerprints: U64Array) -> None:
        self.top = int(ids[-1]) + 1 if len(ids) else 0
        self.dense = self.top <= 2 * len(ids) + (1 << 20)
        if self.dense:
            self.fingerprints = np.zeros(self.top, dtype=np.uint64)
            self.present = np.zeros(self.top, dtype=bool)
            self.fingerprints[ids] = fingerprints
            self.present[ids] = True
        else:
            self.ids, self.fingerprints = ids, fingerprints

    def holds(self, ids: U64Array, fingerprints: U64Array) -> npt.NDArray[np.bool_]:
        """Whether each document ``ids[j]`` is recorded with ``fingerprints[j]``."""
        if not self.top:
            return np.zeros(len(ids), dtype=bool)
        if self.dense:
            inside = ids < np.uint64(self.top)
            at = np.where(inside, ids, np.uint64(0))
            held: npt.NDArray[np.bool_] = inside & self.present[at] & (self.fingerprints[at] == fingerprints)
            return held
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        searched: npt.NDArray[np.bool_] = (self.ids[at] == ids) & (self.fingerprints[at] == fingerprints)
        return searched


def _hits(matches: Matches) -> list[tuple[int, int]]:
    return list(zip(matches.queries.tolist(), matches.ids.tolist(), strict=True))


def _ids(doc_ids: U64Array) -> IdArray:
    doc_ids = np.asarray(doc_ids, dtype=np.uint64)
    if not len(doc_ids) or int(doc_ids.max()) <= np.iinfo(np.uint32).max:
        return doc_ids.astype(np.uint32)
    return doc_ids
