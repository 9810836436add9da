"""The permutation tables of one layout, at the LMDB boundary: writing runs,
taking documents out, compaction steps, and the probes of a query.

Each table is one LMDB sub-database holding runs of packed buckets (see
:mod:`simstore.engine.runs`) and, after them, each run's occupancy and crowded
bitmaps in chunks (see :mod:`simstore.engine.occupancy`). Which runs there are is the
:class:`simstore.engine.catalog.Catalog`, which the caller stores; every function
here that changes the runs returns the catalog that describes them after it.

Invariant (``check()`` verifies it): every document that is not in the delta
has exactly one entry in every table, in the run that answers for its
permuted key there; nothing else has an entry.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.engine import occupancy, runs
from simstore.engine._lmdb import Cursor, Database, Txn
from simstore.engine.builder import TableWrites
from simstore.engine.catalog import KEY_SPACE, Catalog, Compaction, Run, finish_compaction, plan_compaction
from simstore.errors import CorruptStoreError
from simstore.index import costs
from simstore.index.permute import FINGERPRINT_BITS, Table, U64Array
from simstore.index.scan_plan import ScanPlan, scan_plan

#: Entries a compaction step moves in one table (one write transaction):
#: 20-60 ms of work here, so that no other write waits long for one.
COMPACTION_STEP_ENTRIES = 1 << 16
#: Candidates a query remembers to skip later tables' probes on (see
#: :meth:`TableSet.find`); past this many (a crowded bucket) the rest are not
#: remembered, which only costs probes.
SEEN_LIMIT = 16
#: Batches at least this large take entries out bucket by bucket with numpy;
#: smaller ones one document at a time.
VECTOR_DELETE = 64
#: Buckets such a batch decodes and encodes together.
DELETE_SLICE_BUCKETS = 1 << 14

#: What a query needs of one run of one table, flat for the hot loop:
#: ``(database, run base, bucket shift, probe plan, bucket bits, low, high,
#: occupancy bitmap or None, crowded bitmap or None, bitmap shift, prefix
#: mask, filter mask)``. The run answers for permuted keys in ``[low,
#: high)``; its bucket key is ``run base | key >> bucket shift``; the masks
#: are :func:`simstore.engine.runs.probe_masks`'.
RunProbe = tuple[Database, int, int, runs.ProbePlan, int, int, int, bytes | None, bytes | None, int, int, int]

#: A run's bitmaps as a query uses them: ``(occupancy, crowded, shift)``.
Bitmaps = tuple[bytes, bytes, int]

#: The matches a query has found, to skip later tables' probes on (see
#: :meth:`TableSet.find`): ``[run base, fingerprint, permuted keys in every
#: table or None until needed]`` each.
Seen = list[list[Any]]

#: ``txn.get``, or a stand-in for it (:func:`sharing_records`).
Get = Callable[..., bytes | None]


class TableSet:
    """The tables of one layout and, per process, what queries need of them:
    the catalog last adopted and the bitmaps read so far."""

    #: A query's bucket keys are its permuted fingerprints.
    reads_permuted_keys = True

    def __init__(
        self,
        tables: tuple[Table, ...],
        databases: Sequence[Database],
        filter_bits: int = runs.MIN_FILTER_BITS,
    ) -> None:
        self.tables = tables
        # Bits past the prefix new runs record at least (runs.filter_bits_for).
        self.filter_bits = filter_bits
        self.databases = list(databases)
        self.catalog = Catalog()
        # Bitmaps of finished runs never change, so they are kept across
        # catalogs by (table, run id); None: read, and none stored.
        self._bitmaps: dict[tuple[int, int], Bitmaps | None] = {}
        self._unread: list[tuple[int, int]] = []
        self.probes: list[tuple[RunProbe, ...]] = [() for _ in tables]
        # Whether queries read their buckets first and search them together
        # (see find): when the runs' prefixes hold many entries each.
        self.crowded = False
        self._scan_plan: ScanPlan | None = None

    # ------------------------------------------------------------------ views

    def decode_catalog(self, raw: bytes | None) -> Catalog:
        return Catalog.decode(raw, len(self.tables))

    def release(self) -> None:
        """Nothing to let go of: format 2 keeps no view of the map between calls."""

    def prepare(self) -> None:
        """Nothing to prepare for a query (format 3 pins a snapshot here)."""

    def serves(self, txn: Txn) -> bool:
        """Always: format 2 reads its tables in the query's own transaction."""
        return True

    def adopt(self, catalog: Catalog) -> None:
        """Answer queries from ``catalog``'s runs from now on."""
        self.catalog = catalog
        present = {run.run_id for run in catalog.runs}
        self._bitmaps = {where: bitmaps for where, bitmaps in self._bitmaps.items() if where[1] in present}
        self._unread = [
            (index, run.run_id)
            for run in reversed(catalog.runs)
            for index in range(len(self.tables))
            if (index, run.run_id) not in self._bitmaps and run.bitmap_bits[index]
        ]
        self._build_probes()

    def _build_probes(self) -> None:
        building = self.catalog.compaction.output.run_id if self.catalog.compaction else -1
        probes: list[tuple[RunProbe, ...]] = []
        for index, db in enumerate(self.databases):
            entries = []
            for run, low, high in self.catalog.table_runs(index):
                geometry = run.geometries[index]
                plan = runs.probe_plan(geometry)
                # A run still being built has no whole bitmap yet: probed always.
                bitmaps = None if run.run_id == building else self._bitmaps.get((index, run.run_id))
                bitmap, crowded, shift = bitmaps if bitmaps is not None else (None, None, 0)
                entries.append(
                    (
                        db,
                        run.run_id << 32,
                        plan[0],
                        plan,
                        geometry.bucket_bits,
                        low,
                        high,
                        bitmap,
                        crowded,
                        shift,
                        *runs.probe_masks(plan),
                    )
                )
            probes.append(tuple(entries))
        self.probes = probes
        # Entries that share a query's prefix, summed over a table's runs, on
        # average over the tables.
        tabled = sum(run.entries for run in self.catalog.runs)
        sharing = tabled * sum(2.0**-table.prefix_bits for table in self.tables) / max(1, len(self.tables))
        self.crowded = bool(self.tables) and sharing >= costs.CROWDED_PREFIX

    def scan_plan(self) -> ScanPlan:
        """The order a query that may stop early visits the tables in (see
        :mod:`simstore.index.scan_plan`), made at its first use."""
        if self._scan_plan is None:
            self._scan_plan = scan_plan(self.tables)
        return self._scan_plan

    @property
    def bitmaps_unread(self) -> bool:
        return bool(self._unread)

    def read_bitmaps(self, txn: Txn, count: int = 1) -> None:
        """Read the bitmaps of up to ``count`` more (table, run) pairs.

        A pair at a time, after a query has its answer, so that a reopened
        store answers its first query at once (the default layout's bitmaps
        are 128 MiB at 10M documents); until a run's bitmaps are read, queries
        probe it. A damaged chunk only costs probes (``check()`` reports it).
        """
        for _ in range(min(count, len(self._unread))):
            index, run_id = self._unread.pop()
            bitmaps = None
            with contextlib.suppress(CorruptStoreError):
                bitmaps = self.load_bitmaps(txn, index, self.catalog.run(run_id))
            self._bitmaps[(index, run_id)] = bitmaps
        self._build_probes()

    def load_bitmaps(self, txn: Txn, index: int, run: Run) -> Bitmaps | None:
        bits = run.bitmap_bits[index]
        if not bits:
            return None
        parts = []
        for kind in (occupancy.OCCUPIED, occupancy.CROWDED):
            chunks = []
            for chunk in range(occupancy.chunk_count(bits)):
                key = occupancy.chunk_key(run.run_id, kind, chunk)
                value = txn.get(key, db=self.databases[index])
                if value is None:
                    raise CorruptStoreError(f"table {index} lacks bitmap chunk {key.hex()}")
                chunks.append(occupancy.decode_chunk(key, value, bits))
            parts.append(b"".join(chunks))
        return parts[0], parts[1], FINGERPRINT_BITS - bits

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
        ``found`` (``{doc_id: distance}``), and its record to ``records``.

        With ``settle``, the tables are visited in the order of
        :meth:`scan_plan`, and before each ``settle(tables_visited)`` may
        stop the search by returning true (a query that wants only its
        closest matches and has them, see :mod:`simstore.engine.closest`). Buckets
        and records are read through ``get`` if given (:func:`sharing_records`).

        Per table, the runs whose occupancy bitmap holds the query's slot are
        probed: their entries that share the query's prefix and whose filter
        bits are within ``k`` are candidates, each checked against the
        fingerprint in its record (``docs``). Documents already in ``found``
        (the delta's) are not checked again.

        A near-duplicate query finds the same document in most tables. Once a
        match's record is read, its permuted keys (``permute_all``) say
        where it sits in every table. A later table's run whose slot for the
        query is marked not crowded has held one entry there, ever; if a
        match found in that same run sits in that slot, that entry is the
        match, and the run is not probed (other runs holding the slot still
        are). A document's run is the same in every table except during a
        compaction, when the skip merely happens less often. At most
        ``SEEN_LIMIT`` matches are remembered; a rejected candidate is not,
        since it shares the query's prefix in a second table only by a
        further coincidence (its permuted keys cost about a microsecond).

        When the runs' prefixes are crowded (``costs.CROWDED_PREFIX`` entries or
        more share a prefix, as at k = 5 from about 1.2M documents) that skip
        never applies and testing entries one at a time dominates: the
        buckets are read first and searched together (:meth:`_find_crowded`).
        """
        if settle is not None:
            get = txn.get if get is None else get
            self._find_settling(get, permuted, query, k, found, records, docs, permute_all, settle)
            return
        if self.crowded:
            probes = zip(self.probes, permuted, strict=True)
            self._find_crowded(txn.get if get is None else get, probes, query, k, found, records, docs)
            return
        get = txn.get if get is None else get
        # (permuted keys in every table, the run's base) of each match
        seen: Seen = []
        rejected: set[int] = set()
        for table_index, (table_probes, query_key) in enumerate(zip(self.probes, permuted, strict=True)):
            for entry in table_probes:
                if not entry[5] <= query_key < entry[6]:
                    continue
                bitmap = entry[7]
                if bitmap is not None:
                    slot = query_key >> entry[9]
                    if not (bitmap[slot >> 3] >> (slot & 7)) & 1:
                        continue
                _scan(
                    get,
                    docs,
                    entry,
                    table_index,
                    query_key,
                    query,
                    k,
                    found,
                    records,
                    seen,
                    rejected,
                    permute_all,
                )

    def _find_settling(
        self,
        get: Get,
        permuted: Sequence[int],
        query: int,
        k: int,
        found: dict[int, int],
        records: dict[int, bytes],
        docs: Database,
        permute_all: Callable[[int], Sequence[int]],
        settle: Callable[[int], bool],
    ) -> None:
        """:meth:`find` a table at a time in the order of :meth:`scan_plan`,
        calling ``settle`` before each (the unlimited loop of :meth:`find`
        is kept apart: it is the single query's hot path)."""
        seen: Seen = []
        rejected: set[int] = set()
        for visited, table_index in enumerate(self.scan_plan().order):
            if settle(visited):
                return
            query_key = permuted[table_index]
            if self.crowded:
                probes = [(self.probes[table_index], query_key)]
                self._find_crowded(get, probes, query, k, found, records, docs, rejected)
                continue
            for entry in self.probes[table_index]:
                if not entry[5] <= query_key < entry[6]:
                    continue
                bitmap = entry[7]
                if bitmap is not None:
                    slot = query_key >> entry[9]
                    if not (bitmap[slot >> 3] >> (slot & 7)) & 1:
                        continue
                _scan(
                    get,
                    docs,
                    entry,
                    table_index,
                    query_key,
                    query,
                    k,
                    found,
                    records,
                    seen,
                    rejected,
                    permute_all,
                )

    def _find_crowded(
        self,
        get: Get,
        probes: Iterable[tuple[tuple[RunProbe, ...], int]],
        query: int,
        k: int,
        found: dict[int, int],
        records: dict[int, bytes],
        docs: Database,
        rejected: set[int] | None = None,
    ) -> None:
        """:meth:`find` by reading every bucket the query needs (``probes``:
        each table's runs and the query's key there), then searching them in
        one numpy pass (:func:`simstore.engine.runs.probe_buckets`). ``rejected``
        holds the candidates found too far (shared by calls of one query)."""
        reads: dict[tuple[int, int], _BucketReads] = {}
        for table_probes, query_key in probes:
            for entry in table_probes:
                # find()'s run and bitmap test, written out in both: a call a
                # probe would cost about 0.1 µs, 21 times a query at k = 5.
                if not entry[5] <= query_key < entry[6]:
                    continue
                bitmap = entry[7]
                if bitmap is not None:
                    slot = query_key >> entry[9]
                    if not (bitmap[slot >> 3] >> (slot & 7)) & 1:
                        continue
                db, base, bucket_shift, plan, bucket_bits = entry[:5]
                key = (base | query_key >> bucket_shift).to_bytes(8, "big")
                value = get(key, db=db)
                if value is None:
                    continue
                widths = (plan[4], plan[5])
                group = reads.get(widths)
                if group is None:
                    group = reads[widths] = _BucketReads()
                group.keys.append(key)
                group.values.append(value)
                group.query_tags.append(((query_key << bucket_bits) & MAX_KEY) >> plan[1])
                group.prefix_masks.append(entry[10])
                group.filter_masks.append(entry[11])
        _check_candidates(get, docs, reads, query, k, found, records, set() if rejected is None else rejected)

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
        """:meth:`find` for a batch: query ``i`` is ``queries[i]``, its permuted
        key in table ``t`` is ``columns[t][i]``, and its results go to
        ``founds[i]`` and ``records[i]``; ``settle(i, tables_visited)`` is
        query ``i``'s ``settle`` of :meth:`find`.

        Every run's occupancy test runs over the whole batch in numpy; only
        the (query, table, run) triples that pass it are visited in Python,
        in the order :meth:`find` visits them, so that the crowded skip works
        as it does there. Crowded prefixes are searched a query at a time
        as :meth:`find` does (reading a whole batch's buckets first and
        searching them together measured no faster than that).
        """
        if self.crowded:
            rows = zip(*(column.tolist() for column in columns), strict=True)
            for query_index, permuted in enumerate(rows):
                self.find(
                    txn,
                    permuted,
                    queries[query_index],
                    k,
                    founds[query_index],
                    records[query_index],
                    docs,
                    permute_all,
                    None if settle is None else functools.partial(settle, query_index),
                    get,
                )
            return
        hit_queries: list[npt.NDArray[np.int64]] = []
        hit_places: list[npt.NDArray[np.int64]] = []
        # (table, run, the table's place in the order visited)
        places: list[tuple[int, RunProbe, int]] = []
        tables = range(len(self.probes)) if settle is None else self.scan_plan().order
        for visited, table_index in enumerate(tables):
            column = columns[table_index]
            for entry in self.probes[table_index]:
                chosen = _passing(entry, column)
                hit_queries.append(chosen)
                hit_places.append(np.full(len(chosen), len(places), dtype=np.int64))
                places.append((table_index, entry, visited))
        if not places:
            return
        query_order = np.concatenate(hit_queries)
        place_order = np.concatenate(hit_places)
        # By query, then by table and run as find() visits them (places are
        # numbered in that order already).
        order = np.lexsort((place_order, query_order))
        query_order, place_order = query_order[order], place_order[order]
        key_lists = [column.tolist() for column in columns]
        get = txn.get if get is None else get
        current = -1
        seen: Seen = []
        rejected: set[int] = set()
        visiting = -1  # the current query's table being visited, by its place in the order
        stopped = False
        for query_index, place in zip(query_order.tolist(), place_order.tolist(), strict=True):
            if query_index != current:
                current = query_index
                seen = []
                rejected = set()
                visiting = -1
                stopped = False
            elif stopped:
                continue
            table_index, entry, visited = places[place]
            if settle is not None and visited != visiting:
                visiting = visited
                if settle(query_index, visited):
                    stopped = True
                    continue
            _scan(
                get,
                docs,
                entry,
                table_index,
                key_lists[table_index][query_index],
                queries[query_index],
                k,
                founds[query_index],
                records[query_index],
                seen,
                rejected,
                permute_all,
            )

    def buckets(
        self, txn: Txn, index: int, run: Run, low: int = 0, high: int = KEY_SPACE
    ) -> Iterator[tuple[bytes, bytes]]:
        """The stored ``(key, value)`` of every bucket of ``run`` in table
        ``index`` covering permuted keys in ``[low, high)``, unchecked."""
        first, past = bucket_span(run.run_id, run.geometries[index], low, high)
        cursor = txn.cursor(self.databases[index])
        if not cursor.set_range(first):
            return
        for key, value in cursor:
            if key >= past:
                break
            yield key, value

    def entries(
        self, txn: Txn, index: int, run: Run, low: int = 0, high: int = KEY_SPACE
    ) -> Iterator[tuple[bytes, U64Array, U64Array]]:
        """:meth:`buckets` decoded: ``(key, known keys, ids)`` each, checked."""
        geometry = run.geometries[index]
        for key, value in self.buckets(txn, index, run, low, high):
            keys, ids = runs.check_bucket(key, value, geometry)
            yield key, keys, ids

    # ----------------------------------------------------------------- writes

    def write_run(
        self, txn: Txn, catalog: Catalog, doc_ids: U64Array, fingerprints: U64Array, given: object = None
    ) -> Catalog:
        """Write documents as a new run into every table, with its bitmaps;
        the catalog with the run (``given`` sketches: no band table here)."""
        if not len(doc_ids):
            return catalog
        run_id = catalog.new_run_id()
        count = len(doc_ids)
        max_id = int(doc_ids.max())
        geometries = tuple(
            runs.choose_geometry(count, table.prefix_bits, max_id, filter_bits=self.filter_bits)
            for table in self.tables
        )
        bits = tuple(occupancy.bits_for(count, table.prefix_bits, len(self.tables)) for table in self.tables)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="simstore-sort") as sorter:
            known = [geometry.known_bits for geometry in geometries]
            writes = TableWrites(doc_ids, fingerprints, self.tables, sorter, known)
            for index, db in enumerate(self.databases):
                permuted, ids = writes.entries(index)
                cursor = txn.cursor(db)
                _put_all(cursor, runs.encode_buckets(run_id, geometries[index], permuted, ids))
                occupied, crowded = occupancy.built_with_crowded(bits[index], permuted)
                _put_all(cursor, occupancy.encode_chunks(run_id, occupancy.OCCUPIED, bits[index], occupied))
                _put_all(cursor, occupancy.encode_chunks(run_id, occupancy.CROWDED, bits[index], crowded))
        return catalog.with_run(Run(run_id, count, geometries, bits))

    def delete(self, txn: Txn, catalog: Catalog, doc_ids: Sequence[int], fingerprints: Sequence[int]) -> None:
        """Take tabled documents' entries out of every table.

        Raises:
            CorruptStoreError: a table lacks one of them.
        """
        if len(doc_ids) >= VECTOR_DELETE:
            ids = np.array(doc_ids, dtype=np.uint64)
            fps = np.array(fingerprints, dtype=np.uint64)
            for index in range(len(self.tables)):
                self._delete_many(txn, catalog, index, ids, self.tables[index].permute_array(fps))
            return
        for doc_id, fingerprint in zip(doc_ids, fingerprints, strict=True):
            for index, (table, db) in enumerate(zip(self.tables, self.databases, strict=True)):
                permuted_key = table.permute(fingerprint)
                if not self._delete_one(txn, catalog, index, db, doc_id, permuted_key):
                    raise CorruptStoreError(f"table {index} lacks document {doc_id}")

    def _delete_one(
        self, txn: Txn, catalog: Catalog, index: int, db: Database, doc_id: int, permuted_key: int
    ) -> bool:
        for run, low, high in catalog.table_runs(index):
            if not low <= permuted_key < high:
                continue
            geometry = run.geometries[index]
            key = runs.bucket_key(run.run_id, runs.bucket_of(permuted_key, geometry))
            value = txn.get(key, db=db)
            if value is None:
                continue
            rest = runs.without_entry(key, value, geometry, doc_id)
            if rest is False:
                continue
            if rest is None:
                txn.delete(key, db=db)
            else:
                txn.put(key, rest, db=db)  # type: ignore[arg-type]
            return True
        return False

    def _delete_many(
        self, txn: Txn, catalog: Catalog, index: int, doc_ids: U64Array, permuted: U64Array
    ) -> None:
        db = self.databases[index]
        left = np.ones(len(doc_ids), dtype=bool)
        for run, low, high in catalog.table_runs(index):
            chosen = np.flatnonzero(left & (permuted >= np.uint64(low)) & (permuted <= np.uint64(high - 1)))
            if not len(chosen):
                continue
            geometry = run.geometries[index]
            buckets = runs.buckets_of(permuted[chosen], geometry)
            # The buckets touched, a slice at a time, decoded, filtered and
            # encoded together: one numpy pass per slice, not one per bucket
            # (removing half of a 300K store took 32 s of per-bucket calls).
            order = np.argsort(buckets, kind="stable")
            chosen, buckets = chosen[order], buckets[order]
            touched = np.unique(buckets)
            for first in range(0, len(touched), DELETE_SLICE_BUCKETS):
                slice_buckets = touched[first : first + DELETE_SLICE_BUCKETS]
                # The documents to take out of these buckets only: the isin
                # below sorts what it is given, once per slice.
                in_slice = chosen[
                    np.searchsorted(buckets, slice_buckets[0]) : np.searchsorted(
                        buckets, slice_buckets[-1], side="right"
                    )
                ]
                bucket_keys = [runs.bucket_key(run.run_id, bucket) for bucket in slice_buckets.tolist()]
                present = [(key, value) for key in bucket_keys if (value := txn.get(key, db=db)) is not None]
                if not present:
                    continue
                keys, ids = runs.decode_buckets(
                    [key for key, _ in present], [value for _, value in present], geometry
                )
                going = np.isin(ids, doc_ids[in_slice])
                if not bool(going.any()):
                    continue
                left[in_slice[np.isin(doc_ids[in_slice], ids[going])]] = False
                rewritten = dict(runs.encode_buckets(run.run_id, geometry, keys[~going], ids[~going]))
                changed = {
                    runs.bucket_key(run.run_id, bucket)
                    for bucket in np.unique(runs.buckets_of(keys[going], geometry)).tolist()
                }
                for key in changed:
                    value = rewritten.get(key)
                    if value is None:
                        txn.delete(key, db=db)
                    else:
                        txn.put(key, value, db=db)
        if bool(left.any()):
            raise CorruptStoreError(f"table {index} lacks document {int(doc_ids[np.flatnonzero(left)[0]])}")

    # ------------------------------------------------------------- compaction

    def plan_span(self, catalog: Catalog) -> tuple[int, int] | None:
        """The runs a compaction would join next, as ``(first, end)`` indexes, or ``None``."""
        return plan_compaction([run.entries for run in catalog.runs])

    def plan(self, catalog: Catalog) -> Catalog | None:
        """The catalog with a new compaction under way, if one is due."""
        if catalog.compaction is not None:
            return None
        span = self.plan_span(catalog)
        if span is None:
            return None
        return self.start_compaction(catalog, span)

    def start_compaction(
        self, catalog: Catalog, span: tuple[int, int], entries: int | None = None
    ) -> Catalog:
        """The catalog with a compaction of ``catalog.runs[first:end]`` under way.

        The output is laid out for ``entries`` entries when the caller knows
        how many the inputs hold now; else for the sum of what was written
        into them, an upper bound once removals took some out.
        """
        first, end = span
        inputs = catalog.runs[first:end]
        count = sum(run.entries for run in inputs) if entries is None else entries
        geometries = []
        for index, table in enumerate(self.tables):
            id_bytes = max(run.geometries[index].id_bytes for run in inputs)
            known = min(run.geometries[index].known_bits for run in inputs)
            geometries.append(
                runs.choose_geometry(
                    count,
                    table.prefix_bits,
                    (1 << (8 * id_bytes)) - 1,
                    known_limit=known,
                    filter_bits=self.filter_bits,
                )
            )
        bits = tuple(occupancy.bits_for(count, table.prefix_bits, len(self.tables)) for table in self.tables)
        output = Run(catalog.new_run_id(), count, tuple(geometries), bits)
        compaction = Compaction(tuple(run.run_id for run in inputs), output, 0, 0)
        return replace(catalog, next_run_id=output.run_id + 1, compaction=compaction)

    def band_entries(self, runs: Sequence[Any]) -> int | None:
        """Format 2 keeps no band table."""
        return None

    def compaction_step(
        self, txn: Txn, catalog: Catalog, budget: int = COMPACTION_STEP_ENTRIES
    ) -> tuple[Catalog, int]:
        """Move up to about ``budget`` entries of the compaction under way
        into its output, in one table; the catalog after, and the entries moved."""
        compaction = catalog.compaction
        if compaction is None:
            return catalog, 0
        index, cursor_at = compaction.table, compaction.cursor
        inputs = [catalog.run(run_id) for run_id in compaction.inputs]
        output = compaction.output
        geometry = output.geometries[index]
        bits = output.bitmap_bits[index]
        # Steps end on boundaries of the output's buckets (each written once,
        # whole); an input bucket wider than a step gives up the entries in
        # the step's range and keeps the rest, and the output's bitmap chunks
        # that a step's range shares with the next are updated by both.
        align = geometry.bucket_bits
        unit = KEY_SPACE >> align
        per_unit = max(1, output.entries >> align)
        end = min(KEY_SPACE, cursor_at + max(1, budget // per_unit) * unit)
        db = self.databases[index]
        keys_parts: list[U64Array] = []
        id_parts: list[U64Array] = []
        for run in inputs:
            # Every bucket of the input that the step's range touches is read
            # and deleted; only the buckets at the range's two ends can hold
            # entries outside it, and those go back as the input's.
            run_geometry = run.geometries[index]
            bucket_keys, bucket_values = _take_range(
                txn, db, *bucket_span(run.run_id, run_geometry, cursor_at, end)
            )
            keys, ids = runs.decode_buckets(bucket_keys, bucket_values, run_geometry)
            inside = (keys >= np.uint64(cursor_at)) & (keys <= np.uint64(end - 1))
            keys_parts.append(keys[inside])
            id_parts.append(ids[inside])
            if not bool(inside.all()):
                outside = ~inside
                _put_all(
                    txn.cursor(db), runs.encode_buckets(run.run_id, run_geometry, keys[outside], ids[outside])
                )
        keys = np.concatenate(keys_parts) if keys_parts else np.zeros(0, dtype=np.uint64)
        ids = np.concatenate(id_parts) if id_parts else np.zeros(0, dtype=np.uint64)
        if geometry.known_bits < FINGERPRINT_BITS:
            keys &= np.uint64((MAX_KEY >> geometry.known_bits) ^ MAX_KEY)
        free_bits = FINGERPRINT_BITS - geometry.known_bits
        if free_bits and len(ids) and int(ids.max()).bit_length() <= free_bits:
            # Each key with its id in the bits the run does not record: one
            # in-place sort of one array (see merging.sorted_entries).
            low_mask = np.uint64((1 << free_bits) - 1)
            keys |= ids
            keys.sort()
            ids = keys & low_mask
            keys &= ~low_mask
        else:
            # Each input's part is sorted already: a stable sort (timsort
            # here) merges them; lexsort by (key, id) took most of a step.
            order = np.argsort(keys, kind="stable")
            keys, ids = keys[order], ids[order]
        cursor = txn.cursor(db)
        _put_all(cursor, runs.encode_buckets(output.run_id, geometry, keys, ids))
        if bits:
            first_chunk, past_chunk = occupancy.chunk_range(bits, cursor_at, end)
            built = occupancy.built_range(bits, keys, first_chunk, past_chunk)
            for kind, bitmap in zip((occupancy.OCCUPIED, occupancy.CROWDED), built, strict=True):
                self._or_stored_chunks(txn, index, output.run_id, kind, bits, bitmap, first_chunk)
                _put_all(cursor, occupancy.encode_chunks(output.run_id, kind, bits, bitmap, first_chunk))
        if end < KEY_SPACE:
            return replace(catalog, compaction=replace(compaction, cursor=end)), len(ids)
        for run in inputs:
            _delete_range(txn, db, *occupancy.run_chunk_bounds(run.run_id))
        if index + 1 < len(self.tables):
            return replace(catalog, compaction=replace(compaction, table=index + 1, cursor=0)), len(ids)
        return finish_compaction(catalog), len(ids)

    def _or_stored_chunks(
        self,
        txn: Txn,
        index: int,
        run_id: int,
        kind: bytes,
        bits: int,
        bitmap: occupancy.Bitmap,
        first_chunk: int,
    ) -> None:
        """OR into ``bitmap`` (chunks from ``first_chunk`` on) what earlier
        steps stored in those chunks."""
        size = occupancy.bitmap_bytes(min(bits, occupancy.CHUNK_BITS))
        for offset in range(0, len(bitmap), size):
            key = occupancy.chunk_key(run_id, kind, first_chunk + offset // size)
            stored = txn.get(key, db=self.databases[index])
            if stored is not None:
                bitmap[offset : offset + size] |= np.frombuffer(
                    occupancy.decode_chunk(key, stored, bits), np.uint8
                )


MAX_KEY = (1 << FINGERPRINT_BITS) - 1


def _scan(
    get: Callable[..., bytes | None],
    docs: Database,
    entry: RunProbe,
    table_index: int,
    query_key: int,
    query: int,
    k: int,
    found: dict[int, int],
    records: dict[int, bytes],
    seen: Seen,
    rejected: set[int],
    permute_all: Callable[[int], Sequence[int]],
) -> None:
    """Probe one run of one table whose occupancy bitmap holds the query's
    slot (see :meth:`TableSet.find`): skip it if a match already found
    in this run is that slot's only entry, else read the bucket and check
    its candidates against their records."""
    db, base, bucket_shift, plan, bucket_bits, _, _, bitmap, crowded, shift, _, _ = entry
    if seen and bitmap is not None and crowded is not None:
        slot = query_key >> shift
        if not (crowded[slot >> 3] >> (slot & 7)) & 1:
            # A plain loop: any() over a generator cost about a microsecond here.
            for match in seen:
                if match[0] == base:
                    keys = match[2]
                    if keys is None:
                        keys = match[2] = permute_all(match[1])
                    if keys[table_index] >> shift == slot:
                        return
    key = (base | query_key >> bucket_shift).to_bytes(8, "big")
    value = get(key, db=db)
    if value is None:
        return
    for doc_id in runs.probe(key, value, plan, query_key, bucket_bits, k):
        if doc_id in found or doc_id in rejected:
            continue
        fingerprint = _check_candidate(get, docs, doc_id, query, k, found, records, rejected)
        if doc_id in found and len(seen) < SEEN_LIMIT:
            # Permuted when a later table first needs it: a query that
            # stops early (closest.py) often never does.
            seen.append([base, fingerprint, None])


#: LMDB's cost of one bucket beside its bytes: the 8-byte key and a node header.
BUCKET_OVERHEAD = 16


def run_bytes(
    entries: int, tables: Sequence[Table], max_id: int, filter_bits: int = runs.MIN_FILTER_BITS
) -> int:
    """About the bytes a run of ``entries`` entries takes in every table, with
    its bitmaps: what a write must find room for."""
    total = 0
    for table in tables:
        geometry = runs.choose_geometry(entries, table.prefix_bits, max_id, filter_bits=filter_bits)
        buckets = min(entries, 1 << geometry.bucket_bits)
        bits = occupancy.bits_for(entries, table.prefix_bits, len(tables))
        total += entries * geometry.entry_bytes + buckets * (runs.HEADER.size + BUCKET_OVERHEAD)
        total += 2 * occupancy.bitmap_bytes(bits) if bits else 0
    return total


def bucket_span(run_id: int, geometry: runs.Geometry, low: int, high: int) -> tuple[bytes, bytes]:
    """The bucket keys of ``run_id`` covering permuted keys ``[low, high)``:
    the first one and the first one past them."""
    shift = FINGERPRINT_BITS - geometry.bucket_bits
    first = runs.bucket_key(run_id, low >> shift if geometry.bucket_bits else 0)
    if high >= KEY_SPACE:
        return first, runs.run_bounds(run_id)[1]
    past_bucket = -(-high >> shift) if geometry.bucket_bits else 1
    if past_bucket >= 1 << 32:
        return first, runs.run_bounds(run_id)[1]
    return first, runs.bucket_key(run_id, past_bucket)


def _put_all(cursor: Cursor, records: Iterable[tuple[bytes, bytes]]) -> None:
    """Put every record, a slice at a time (a run's records are never all
    held at once); refuse if LMDB took fewer."""
    iterator = iter(records)
    append: bool | None = None
    while batch := list(itertools.islice(iterator, PUT_SLICE)):
        if append is None:
            # Records past the table's last key are appended in full pages.
            append = not cursor.last() or cursor.key() < batch[0][0]
        _, added = cursor.putmulti(batch, append=append)
        if added != len(batch):
            raise CorruptStoreError(
                f"a table accepted {added} of {len(batch)} records; the store may be damaged"
            )


PUT_SLICE = 1 << 15


def _take_range(txn: Txn, db: Database, first: bytes, past: bytes) -> tuple[list[bytes], list[bytes]]:
    """Read and delete the records with keys in ``[first, past)``."""
    keys: list[bytes] = []
    values: list[bytes] = []
    cursor = txn.cursor(db)
    if not cursor.set_range(first):
        return keys, values
    while True:
        key = cursor.key()
        if not key or key >= past:  # b"": the cursor ran off the table's end
            break
        keys.append(key)
        values.append(cursor.value())
        if not cursor.delete():
            break
    return keys, values


def _delete_range(txn: Txn, db: Database, first: bytes, past: bytes) -> None:
    cursor = txn.cursor(db)
    if not cursor.set_range(first):
        return
    while (key := cursor.key()) and key < past:
        if not cursor.delete():
            break


class _BucketReads:
    """The buckets a query read from runs of one tag and id width: each
    bucket's key and value, the query's tag in it, and its run's masks (see
    :func:`simstore.engine.runs.probe_buckets`)."""

    __slots__ = ("filter_masks", "keys", "prefix_masks", "query_tags", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        self.query_tags: list[int] = []
        self.prefix_masks: list[int] = []
        self.filter_masks: list[int] = []


def _check_candidates(
    get: Callable[..., bytes | None],
    docs: Database,
    reads: dict[tuple[int, int], _BucketReads],
    query: int,
    k: int,
    found: dict[int, int],
    records: dict[int, bytes],
    rejected: set[int],
) -> None:
    """Search the buckets of ``reads`` for the query's candidates, read each
    candidate's record once, and add those within ``k`` of the query to
    ``found`` (``records`` gets the record) and the others to ``rejected``.
    Documents found already (the delta's) are not checked again."""
    for (tag_bytes, id_bytes), group in reads.items():
        doc_ids = runs.probe_buckets(
            group.keys,
            group.values,
            tag_bytes,
            id_bytes,
            group.query_tags,
            group.prefix_masks,
            group.filter_masks,
            k,
        )
        for doc_id in doc_ids:
            if doc_id not in found and doc_id not in rejected:
                _check_candidate(get, docs, doc_id, query, k, found, records, rejected)


def _check_candidate(
    get: Callable[..., bytes | None],
    docs: Database,
    doc_id: int,
    query: int,
    k: int,
    found: dict[int, int],
    records: dict[int, bytes],
    rejected: set[int],
) -> int:
    """Read candidate ``doc_id``'s record: within ``k`` of ``query`` it goes
    to ``found`` (its record to ``records``), else to ``rejected``. Returns
    its fingerprint."""
    raw = get(doc_id.to_bytes(8, "big"), db=docs)
    if raw is None:
        raise CorruptStoreError(f"document {doc_id} is indexed but has no record")
    fingerprint = int.from_bytes(raw[:8], "big")
    distance = (fingerprint ^ query).bit_count()
    if distance <= k:
        found[doc_id] = distance
        records[doc_id] = raw
    else:
        rejected.add(doc_id)
    return fingerprint


def _passing(entry: RunProbe, column: U64Array) -> npt.NDArray[np.int64]:
    """The queries (positions in ``column``, their permuted keys in the run's
    table) whose key the run answers for and whose slot its bitmap holds."""
    passed = np.ones(len(column), dtype=bool)
    if entry[5] > 0:
        passed &= column >= np.uint64(entry[5])
    if entry[6] < KEY_SPACE:
        passed &= column < np.uint64(entry[6])
    bitmap = entry[7]
    if bitmap is not None:
        slots = column >> np.uint64(entry[9])
        bytes_at = np.frombuffer(bitmap, dtype=np.uint8)[slots >> np.uint64(3)]
        passed &= ((bytes_at >> (slots & np.uint64(7)).astype(np.uint8)) & 1).astype(bool)
    return np.flatnonzero(passed)


def sharing_records(txn: Txn, docs: Database, shared: dict[bytes, bytes | None]) -> Get:
    """``txn.get`` that keeps the document records (``docs``) it reads in
    ``shared``, for the other queries of a batch in the same snapshot:
    documents that share boilerplate are candidates of many queries (19K
    distinct records were read 248K times by 10K queries of the benchmark in
    ``benchmarks/suite/bench_against.py``). Buckets are not kept: a batch of
    unrelated queries reads each once."""
    read = txn.get

    def get(key: bytes, db: Database) -> bytes | None:
        if db is not docs:
            return read(key, db=db)
        try:
            return shared[key]
        except KeyError:
            value = shared[key] = read(key, db=db)
            return value

    return get
