"""Keeping the tables in shape: merges, compaction, re-layouts, and the map
room they need. Mixed into :class:`simstore.Store`; nothing here imports it.
"""

from __future__ import annotations

import operator
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from simstore import _lmdb
from simstore.catalog import Catalog, plan_compaction
from simstore.choose import LayoutRequest, choose_layout
from simstore.errors import CorruptStoreError, InvalidValueError, StoreFullError
from simstore.format import CATALOG_KEY, META_KEY, State, StoredParams, encode_meta
from simstore.params import COMPACTION_CREDIT, DEFAULT_MERGE_THRESHOLD, Options
from simstore.permute import Table, U64Array
from simstore.results import StoreFullWarning
from simstore.runs import filter_bits_for
from simstore.tables import TableSet, run_bytes
from simstore.version import __version__

if TYPE_CHECKING:
    from simstore.delta import Delta

T = TypeVar("T")

# With more runs than this (compaction fell behind the merges), every write
# takes a compaction step, credit or not: queries probe every run.
URGENT_RUNS = 8


@dataclass
class Change:
    """What a write transaction did to the delta (and the run catalog),
    applied to memory after commit."""

    puts: list[tuple[int, int]]
    removed: list[int]
    merged: bool = False
    catalog: Catalog | None = None


class MaintenanceMixin:
    """Merges, compaction and re-layouts, mixed into :class:`simstore.Store`."""

    if TYPE_CHECKING:
        path: str
        _env: _lmdb.Environment
        _handles: _lmdb.Handles
        _tables: tuple[Table, ...]
        _tableset: TableSet
        _delta: Delta
        _params: StoredParams
        _options: Options
        _lock: threading.RLock
        _compaction_credit: int

        @property
        def readonly(self) -> bool: ...

        @property
        def k(self) -> int: ...

        def __len__(self) -> int: ...

        def _check_usable(self) -> None: ...

        def _reload_layout(self) -> None: ...

        def _write(self, body: Callable[[_lmdb.Txn, State], tuple[T, State, Change]]) -> T: ...

    def merge(self) -> int:
        """Write the delta into the tables now, as a new run of every table.

        One write transaction: readers see the documents in the delta before
        it and in the tables after it, never half of it. Its work grows with
        the delta, not with the store (a delta of 64K documents takes about
        0.1 s). Runs are joined later by compaction (see :meth:`compact`).

        Returns:
            The number of documents merged.
        """
        self._reserve_for(0, 0, run_entries=len(self._delta))

        def body(txn: _lmdb.Txn, state: State) -> tuple[int, State, Change]:
            doc_ids, fingerprints = self._delta.arrays()
            if not len(doc_ids):
                return 0, state, Change([], [])
            catalog = self._tableset.write_run(txn, self._tableset.catalog, doc_ids, fingerprints)
            txn.drop(self._handles.delta, delete=False)
            merged = state._replace(merge_epoch=state.merge_epoch + 1)
            return len(doc_ids), merged, Change([], [], merged=True, catalog=catalog)

        merged = self._write(body)
        self._compaction_credit += merged * len(self._tables) * COMPACTION_CREDIT
        return merged

    def compact(self, *, copy_to: str | os.PathLike[str] | None = None) -> int:
        """Join every run of the tables into one, a key range at a time, and
        optionally write a compacted copy of the store.

        Each step is one write transaction of bounded size, so other writers
        and readers are held up for a step at most, never for the whole
        compaction; a compaction cut short by a crash or an exception is
        taken up again by the next write (or the next ``compact()``). Pages
        it frees (and pages removals freed) are reused by later writes; the
        file itself does not shrink, since other processes may have it
        mapped. To get the space back on disk, give ``copy_to``: a new file
        holding only the pages in use, which can replace the store once no
        process has it open.

        Args:
            copy_to: a path that does not exist yet.

        Returns:
            The number of table entries moved.

        Raises:
            InvalidValueError: ``copy_to`` exists (nothing is replaced).
        """
        if copy_to is not None:
            copy_to = os.fspath(copy_to)
            if os.path.lexists(copy_to):
                raise InvalidValueError(
                    f"{copy_to} exists already; compact writes a new file and replaces nothing"
                )
        self.merge()
        moved = 0
        while True:
            step = self._compaction_step(everything=True)
            if step is None:
                break
            moved += step
        if copy_to is not None:
            with self._lock:
                self._check_usable()
                self._env.copy_compacted(copy_to)
        return moved

    def _compaction_step(self, *, everything: bool = False) -> int | None:
        """One step of the compaction under way (starting one if due, or with
        ``everything`` one of all runs): the entries it moved, or ``None``
        when there was nothing to do."""
        known = self._tableset.catalog
        due = known.compaction is not None or plan_compaction([run.entries for run in known.runs]) is not None
        if not everything and not due:
            # Nothing due in the catalog last seen: no write transaction (and
            # no wait for the store's lock, which a group commit may hold) to
            # find that out again. Runs another process added since are
            # joined at a later call, once a read has brought the catalog in.
            return None

        def body(txn: _lmdb.Txn, state: State) -> tuple[int | None, State, Change]:
            tableset = self._tableset
            catalog = tableset.catalog
            if catalog.compaction is None:
                if everything and len(catalog.runs) > 1:
                    planned: Catalog | None = tableset.start_compaction(catalog, (0, len(catalog.runs)))
                else:
                    planned = tableset.plan(catalog)
                if planned is None:
                    return None, state, Change([], [])
                catalog = planned
            catalog, moved = tableset.compaction_step(txn, catalog)
            return moved, state, Change([], [], catalog=catalog)

        return self._write(body)

    def _maintain(self, documents: int, *, pay_all: bool = False) -> None:
        """After a write of ``documents``: merge a full delta, and do the
        compaction work those documents owe.

        Every document put into the tables earns ``COMPACTION_CREDIT`` entry
        moves per table; a step is taken while credit is left (one step per
        call, or all of them with ``pay_all``), so that compaction keeps pace
        with writes and no single call waits for more than one step. The
        write has committed by now: a merge or step that fails for lack of
        space must not make it look failed. The documents stay in the durable
        delta, queries still find them, and a later write tries again.
        """
        if self.readonly:
            return
        try:
            if len(self._delta) >= self._merge_threshold():
                self.merge()
            if documents and pay_all:
                self._compaction_credit = max(
                    self._compaction_credit, documents * len(self._tables) * COMPACTION_CREDIT
                )
            while self._compaction_credit > 0 or len(self._tableset.catalog.runs) > URGENT_RUNS:
                moved = self._compaction_step()
                if moved is None:  # nothing due: the credit is kept for the next compaction
                    break
                self._compaction_credit -= max(moved, 1)
                if not pay_all:
                    break
        except StoreFullError as exc:
            warnings.warn(
                f"{self.path}: the delta could not be merged or the tables compacted ({exc}); "
                "nothing is lost, and a later write tries again",
                StoreFullWarning,
                stacklevel=3,
            )

    def relayout(
        self,
        layout: Any = None,
        *,
        k: int | None = None,
        blocks: int | None = None,
        expected_docs: int | None = None,
    ) -> None:
        """Rebuild the permutation tables in a new layout.

        Give a :class:`simstore.planner.Layout`, or ``blocks`` for Manku's
        one-level layout, or ``expected_docs`` to let the planner choose; ``k``
        may change too. The new tables are built beside the old ones in one
        write transaction, and that transaction's commit switches the meta
        record over: readers keep answering from the old layout until then
        (and are never blocked), other writers wait, nothing is lost if the
        process dies part-way (the old layout simply stays), and other
        processes pick the new layout up at their next operation. The file
        does not shrink: the old tables' pages are reused by later writes.
        """
        if sum(option is not None for option in (layout, blocks, expected_docs)) > 1:
            raise InvalidValueError("pass one of layout=, blocks= or expected_docs=")
        # A layout carries its own k; otherwise k stays unless given. With
        # nothing else asked, choose_layout picks Manku's default blocks for k.
        new_k = k if k is not None or layout is not None else self.k
        requested = LayoutRequest(new_k, blocks, None, layout, expected_docs)
        chosen_k, tables, spec, chosen_blocks = choose_layout(requested)
        self._reserve_for(0, 0, run_entries=len(self), tables=tables)

        def body(txn: _lmdb.Txn, state: State) -> tuple[None, State, Change]:
            generation = self._params.generation + 1
            databases = self._env.create_tables(txn, len(tables), generation)
            doc_ids, fingerprints = self._all_documents(txn)
            tableset = TableSet(tables, databases, filter_bits_for(chosen_k))
            catalog = tableset.write_run(txn, Catalog(), doc_ids, fingerprints)
            for db in self._handles.tables:
                txn.drop(db, delete=True)
            txn.drop(self._handles.delta, delete=False)
            params = StoredParams(
                k=chosen_k,
                blocks=chosen_blocks,
                tables=tables,
                layout=spec,
                fingerprinter=self._params.fingerprinter,
                segmenter=self._params.segmenter,
                created_by=self._params.created_by,
                generation=generation,
                min_similarity=self._params.min_similarity,
            )
            txn.put(META_KEY, encode_meta(params, version=__version__), db=self._handles.meta)
            new_state = state._replace(merge_epoch=state.merge_epoch + 1)
            # Stored here, not through Change: the new catalog belongs to the
            # new layout, which this store adopts by reloading below.
            txn.put(CATALOG_KEY, catalog.encode(), db=self._handles.meta)
            new_state = new_state._replace(catalog_version=state.catalog_version + 1)
            return None, new_state, Change([], [], merged=True)

        self._write(body)
        with self._lock:
            # The dropped tables' handles died with the commit; adopt the new ones.
            self._reload_layout()

    def _all_documents(self, txn: _lmdb.Txn) -> tuple[U64Array, U64Array]:
        """Every document's ``(internal id, fingerprint)`` from the records."""
        # Two passes of C-level loops (join over the cursor's iterator), not
        # one Python loop: 0.48 s instead of 0.55 s for a million records.
        id_bytes = b"".join(txn.cursor(self._handles.docs).iternext(keys=True, values=False))
        fingerprints = self._stored_fingerprints(txn)
        if len(fingerprints) * 8 != len(id_bytes):
            raise CorruptStoreError("a document id is not 8 bytes; the store may be damaged")
        return np.frombuffer(id_bytes, dtype=">u8").astype(np.uint64), fingerprints

    def _stored_fingerprints(self, txn: _lmdb.Txn) -> U64Array:
        """Every document's fingerprint, in id order, from the records."""
        first_eight = operator.itemgetter(slice(0, 8))
        records = txn.cursor(self._handles.docs).iternext(keys=False, values=True)
        count = int(txn.stat(self._handles.docs)["entries"])
        fingerprint_bytes = b"".join(map(first_eight, records))
        if len(fingerprint_bytes) != 8 * count:
            raise CorruptStoreError("a document record is too short; the store may be damaged")
        return np.frombuffer(fingerprint_bytes, dtype=">u8").astype(np.uint64)

    def _reserve_for(
        self,
        documents: int,
        key_bytes: int,
        *,
        run_entries: int,
        tables: Sequence[Table] | None = None,
    ) -> None:
        """Grow the map ahead of a write of ``documents`` new documents (their
        keys ``key_bytes`` long in all) and a new run of ``run_entries``
        entries in every table (of ``tables``, the store's own unless given)."""
        # Per new document, its record and key-table entry: the key twice
        # and 40 bytes of ids, fingerprint and LMDB nodes (measured: 56 bytes
        # a document beside 8-byte keys); or its delta log entry, as much.
        # The map adds its own headroom (Environment.reserve).
        estimate = documents * 40 + 2 * key_bytes
        if run_entries:
            max_id = 2 * (len(self) + documents)  # the id width, roughly
            estimate += run_bytes(
                run_entries,
                self._tables if tables is None else tables,
                max_id,
                self._tableset.filter_bits if tables is None else filter_bits_for(self.k),
            )
        with self._lock:
            self._check_usable()
            if self.readonly:
                return
            self._env.reserve(estimate)

    def _merge_threshold(self) -> int:
        """The delta size at which the delta is merged into the tables."""
        explicit = self._options.merge_threshold
        return DEFAULT_MERGE_THRESHOLD if explicit is None else explicit
