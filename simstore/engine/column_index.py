"""Format 3's tables: a multi-index scheme's runs, their catalog, their
joins, and the snapshot a query reads.

The runs are immutable (:mod:`simstore.engine.column_tables`). A document
taken out of the store, or given a new fingerprint, keeps its old entry until
a join rewrites its run: the caller says which entries are still live
(``live``: its records decide) and filters what a snapshot finds the same
way. Joins follow the size-tiered plan of the format-2 tables
(:func:`simstore.engine.catalog.plan_compaction`): few runs, each document
rewritten about log4(N / batch) times.

The catalog is one msgpack record the caller stores; every function here
that changes the runs returns the catalog that describes them after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack
import numpy as np
import numpy.typing as npt

from simstore.engine import column_tables
from simstore.engine._lmdb import Database, Txn
from simstore.engine.catalog import plan_compaction
from simstore.engine.columns import MakeValue
from simstore.engine.runs import MAX_RUN_ID
from simstore.errors import CorruptStoreError
from simstore.index.column_search import IdArray, Snapshot
from simstore.index.multi_index import MultiIndex
from simstore.index.permute import U64Array

#: Version 2 stamps each run with the store's removals count when it was
#: written; version 1 (no stamps) is still read.
CATALOG_VERSION = 2
#: The stamp of a run whose writing was not counted (a version-1 catalog's):
#: its entries are checked at a join.
UNSTAMPED = -1

#: ``live(run, ids, fingerprints)``: which of a run's entries still stand for
#: their documents (a boolean per entry; ``None``: every one).
Live = Callable[["RunEntry", IdArray, U64Array], npt.NDArray[np.bool_] | None]


class RunEntry(NamedTuple):
    """One run of the catalog: its id, its number of entries, and the
    store's count of removals (:func:`simstore.engine.column_tableset`) when
    it was written: a run whose count is still the store's holds no stale
    entry, and a join of such runs checks none against the records."""

    run_id: int
    entries: int
    removals: int = UNSTAMPED


@dataclass(frozen=True)
class ColumnCatalog:
    """The runs, oldest first; the next run's id; and the join planned in this
    transaction, as ``(first, end)`` run indexes (never stored: a join is
    one step)."""

    runs: tuple[RunEntry, ...] = ()
    next_run_id: int = 1
    compaction: tuple[int, int] | None = None

    @property
    def entries(self) -> int:
        return sum(run.entries for run in self.runs)

    def encode(self) -> bytes:
        encoded: bytes = msgpack.packb([CATALOG_VERSION, self.next_run_id, [list(run) for run in self.runs]])
        return encoded

    @classmethod
    def decode(cls, raw: bytes | None) -> ColumnCatalog:
        """The catalog ``raw`` encodes (``None``: no runs yet).

        Raises:
            CorruptStoreError: ``raw`` is not a catalog this simstore wrote.
        """
        if raw is None:
            return cls()
        try:
            value: Any = msgpack.unpackb(raw, use_list=True, strict_map_key=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
            raise CorruptStoreError("the format-3 run catalog is damaged") from exc
        if not (isinstance(value, list) and len(value) == 3 and value[0] in (1, CATALOG_VERSION)):
            raise CorruptStoreError(f"the format-3 run catalog is damaged or newer: {str(value)[:80]}")
        version, next_run_id, runs = value
        fields = 2 if version == 1 else 3
        if (
            not isinstance(next_run_id, int)
            or not 1 <= next_run_id <= MAX_RUN_ID + 1
            or not isinstance(runs, list)
        ):
            raise CorruptStoreError("the format-3 run catalog is damaged")
        parsed: list[RunEntry] = []
        for run in runs:
            if not (
                isinstance(run, list)
                and len(run) == fields
                and all(isinstance(number, int) for number in run)
                and 1 <= run[0] < next_run_id
                and run[1] >= 0
                and run[fields - 1] >= UNSTAMPED
            ):
                raise CorruptStoreError(f"a run in the format-3 catalog is damaged: {run!r}")
            parsed.append(RunEntry(*run))
        if len({run.run_id for run in parsed}) != len(parsed):
            raise CorruptStoreError("the format-3 run catalog names a run twice")
        return cls(tuple(parsed), next_run_id)


class ColumnIndex:
    """The tables of one multi-index scheme: one sub-database each."""

    def __init__(
        self, scheme: MultiIndex, databases: Sequence[Database], make: MakeValue = bytearray
    ) -> None:
        column_tables.check_tables(databases, scheme)
        self.scheme = scheme
        self.databases = tuple(databases)
        #: Gives the buffers the values written are built in (:mod:`simstore.engine.scratch`).
        self.make = make

    def write_run(
        self, txn: Txn, catalog: ColumnCatalog, fingerprints: U64Array, ids: IdArray, removals: int
    ) -> ColumnCatalog:
        """Add a run of ``fingerprints`` (``ids[j]`` the id of ``fingerprints[j]``),
        newest, stamped with the store's count of ``removals``."""
        if not len(fingerprints):
            return catalog
        run_id = next_id(catalog)
        entries = column_tables.write_run(
            txn, self.databases, self.scheme, run_id, fingerprints, ids, self.make
        )
        return ColumnCatalog((*catalog.runs, RunEntry(run_id, entries, removals)), run_id + 1)

    def plan(self, catalog: ColumnCatalog) -> tuple[int, int] | None:
        """The adjacent runs to join next, as ``(first, end)`` indexes, or ``None``."""
        return plan_compaction([run.entries for run in catalog.runs])

    def join(
        self,
        txn: Txn,
        catalog: ColumnCatalog,
        first: int,
        end: int,
        live: Live | None,
        removals: int,
        source: Txn | None = None,
    ) -> ColumnCatalog:
        """Join runs ``first`` to ``end`` (indexes, ``end`` excluded) into one
        in their place, keeping the entries ``live`` keeps (``None``: every
        one), stamped with ``removals``; a join that keeps nothing leaves no
        run. The runs are read from ``source`` (a transaction that reads
        buffers and sees them: in place) or else from ``txn`` (copies)."""
        if not 0 <= first < end <= len(catalog.runs):
            raise ValueError(f"no runs {first}..{end} among {len(catalog.runs)}")
        joined = catalog.runs[first:end]
        reader = txn if source is None else source
        sources = [
            column_tables.view_run(reader, self.databases, self.scheme, run.run_id, run.entries)
            for run in joined
        ]
        kept = [
            None if live is None else live(entry, run.ids, run.fingerprints)
            for entry, run in zip(joined, sources, strict=True)
        ]
        run_id = next_id(catalog)
        entries = column_tables.join_run(txn, self.databases, self.scheme, run_id, sources, kept, self.make)
        del sources  # views of values the drops below free (when read from txn)
        for run in joined:
            column_tables.drop_run(txn, self.databases, run.run_id)
        runs = list(catalog.runs[:first])
        next_run_id = catalog.next_run_id
        if entries:
            runs.append(RunEntry(run_id, entries, removals))
            next_run_id = run_id + 1
        return ColumnCatalog((*runs, *catalog.runs[end:]), next_run_id)

    def snapshot(self, txn: Txn, catalog: ColumnCatalog) -> Snapshot:
        """What a query of ``catalog``'s runs reads, in place (``txn`` reads
        buffers; the snapshot is valid while it stays open)."""
        return column_tables.snapshot_in_place(txn, self.databases, self.scheme, catalog.runs)


def next_id(catalog: ColumnCatalog) -> int:
    """The id the next run written takes (``CorruptStoreError`` once every id is used)."""
    if catalog.next_run_id > MAX_RUN_ID:
        raise CorruptStoreError("the store has used every run id; compact it into a new file")
    return catalog.next_run_id
