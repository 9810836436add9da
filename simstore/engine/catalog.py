"""The run catalog: which runs make up the permutation tables now.

Every table holds the same runs (a merge writes one run into every table in
one transaction), oldest first, each with its geometry in every table (see
:mod:`simstore.engine.runs`). A compaction under way joins some adjacent runs into a
new one, a table at a time and a key range at a time: tables before
``Compaction.table`` hold the new run in place of its inputs; table
``Compaction.table`` holds the new run for permuted keys below
``Compaction.cursor`` and the inputs from there on; the tables after it hold
the inputs. :meth:`Catalog.view` says which runs answer for a key.

The catalog is one msgpack record in the meta sub-database, rewritten by every
transaction that changes the runs. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from simstore.engine.format import unpack_bounded
from simstore.engine.runs import MAX_RUN_ID, Geometry
from simstore.errors import CorruptStoreError

KEY_SPACE = 1 << 64
MAX_CATALOG_BYTES = 16 << 20


@dataclass(frozen=True)
class Run:
    """One run: its id, the documents written into it (an upper bound once
    removals took some out), and per table its geometry and the bits of its
    occupancy bitmaps (0: none)."""

    run_id: int
    entries: int
    geometries: tuple[Geometry, ...]
    bitmap_bits: tuple[int, ...]

    def as_list(self) -> list[Any]:
        return [self.run_id, self.entries, [g.as_list() for g in self.geometries], list(self.bitmap_bits)]

    @classmethod
    def from_list(cls, raw: object) -> Run:
        if not isinstance(raw, list) or len(raw) != 4:
            raise CorruptStoreError(f"a run in the catalog is damaged: {raw!r}")
        run_id, entries, geometries, bits = raw
        if not isinstance(run_id, int) or not 0 <= run_id <= MAX_RUN_ID:
            raise CorruptStoreError(f"a run id in the catalog is damaged: {run_id!r}")
        if not isinstance(entries, int) or entries < 0 or not isinstance(geometries, list):
            raise CorruptStoreError(f"run {run_id} in the catalog is damaged")
        if not isinstance(bits, list) or len(bits) != len(geometries):
            raise CorruptStoreError(f"run {run_id} in the catalog is damaged")
        if not all(isinstance(value, int) and 0 <= value <= 64 for value in bits):
            raise CorruptStoreError(f"run {run_id}'s bitmap sizes in the catalog are damaged")
        return cls(run_id, entries, tuple(Geometry.from_list(g) for g in geometries), tuple(bits))


@dataclass(frozen=True)
class Compaction:
    """A compaction under way: ``inputs`` (adjacent runs, oldest first) become
    ``output``; tables below ``table`` are done, and table ``table`` is done
    for permuted keys below ``cursor``."""

    inputs: tuple[int, ...]
    output: Run
    table: int
    cursor: int

    def as_list(self) -> list[Any]:
        return [list(self.inputs), self.output.as_list(), self.table, self.cursor]

    @classmethod
    def from_list(cls, raw: object) -> Compaction:
        if not isinstance(raw, list) or len(raw) != 4:
            raise CorruptStoreError("the compaction in the catalog is damaged")
        inputs, output, table, cursor = raw
        if not isinstance(inputs, list) or not all(isinstance(run_id, int) for run_id in inputs):
            raise CorruptStoreError("the compaction's inputs in the catalog are damaged")
        if not isinstance(table, int) or not isinstance(cursor, int) or not 0 <= cursor <= KEY_SPACE:
            raise CorruptStoreError("the compaction's progress in the catalog is damaged")
        return cls(tuple(inputs), Run.from_list(output), table, cursor)


@dataclass(frozen=True)
class Catalog:
    """The runs of every table, oldest first, and the compaction under way."""

    runs: tuple[Run, ...] = ()
    #: Run ids start at 1: 0 is the bitmaps' (occupancy.BITMAP_RUN).
    next_run_id: int = 1
    compaction: Compaction | None = None

    def encode(self) -> bytes:
        record = {
            "runs": [run.as_list() for run in self.runs],
            "next": self.next_run_id,
            "compaction": None if self.compaction is None else self.compaction.as_list(),
        }
        packed: bytes = msgpack.packb(record, use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, raw: bytes | None, table_count: int) -> Catalog:
        """Parse and check a stored catalog; ``None`` is a store with no runs yet."""
        if raw is None:
            return cls()
        record = unpack_bounded(raw, MAX_CATALOG_BYTES, "run catalog")
        if not isinstance(record, dict) or not isinstance(record.get("runs"), list):
            raise CorruptStoreError("the run catalog is damaged")
        next_run_id = record.get("next")
        if not isinstance(next_run_id, int) or not 1 <= next_run_id <= MAX_RUN_ID + 1:
            raise CorruptStoreError("the run catalog's next run id is damaged")
        runs = tuple(Run.from_list(run) for run in record["runs"])
        raw_compaction = record.get("compaction")
        compaction = None if raw_compaction is None else Compaction.from_list(raw_compaction)
        catalog = cls(runs, next_run_id, compaction)
        catalog.validate(table_count)
        return catalog

    def validate(self, table_count: int) -> None:
        """Raise ``CorruptStoreError`` unless the catalog is consistent."""
        seen: set[int] = set()
        candidates = list(self.runs) + ([self.compaction.output] if self.compaction else [])
        for run in candidates:
            if run.run_id in seen or not 1 <= run.run_id < self.next_run_id:
                raise CorruptStoreError(f"the run catalog names run {run.run_id} twice or out of turn")
            seen.add(run.run_id)
            if len(run.geometries) != table_count:
                raise CorruptStoreError(
                    f"run {run.run_id} has {len(run.geometries)} tables, not {table_count}"
                )
        if self.compaction is not None:
            compaction = self.compaction
            ids = [run.run_id for run in self.runs]
            if not compaction.inputs or not set(compaction.inputs) <= set(ids):
                raise CorruptStoreError("the compaction under way names runs the catalog lacks")
            first = ids.index(compaction.inputs[0])
            if tuple(ids[first : first + len(compaction.inputs)]) != compaction.inputs:
                raise CorruptStoreError("the compaction under way joins runs that are not adjacent")
            if not 0 <= compaction.table < table_count:
                raise CorruptStoreError("the compaction under way is at a table the store lacks")

    # -- views -----------------------------------------------------------------------------

    def table_runs(self, table: int) -> list[tuple[Run, int, int]]:
        """Table ``table``'s runs, oldest first, each with the permuted key
        range ``[low, high)`` it answers for."""
        compaction = self.compaction
        if compaction is None or table > compaction.table:
            return [(run, 0, KEY_SPACE) for run in self.runs]
        views: list[tuple[Run, int, int]] = []
        placed = False
        for run in self.runs:
            if run.run_id not in compaction.inputs:
                views.append((run, 0, KEY_SPACE))
            elif table < compaction.table:
                if not placed:
                    views.append((compaction.output, 0, KEY_SPACE))
                    placed = True
            else:
                if not placed:
                    views.append((compaction.output, 0, compaction.cursor))
                    placed = True
                views.append((run, compaction.cursor, KEY_SPACE))
        return [(run, low, high) for run, low, high in views if low < high]

    def with_run(self, run: Run) -> Catalog:
        """The catalog with ``run`` added as the newest (its id taken)."""
        return replace(self, runs=(*self.runs, run), next_run_id=max(self.next_run_id, run.run_id + 1))

    def new_run_id(self) -> int:
        if self.next_run_id > MAX_RUN_ID:
            raise CorruptStoreError("the store has used every run id")
        return self.next_run_id

    def run(self, run_id: int) -> Run:
        for run in self.runs:
            if run.run_id == run_id:
                return run
        if self.compaction is not None and self.compaction.output.run_id == run_id:
            return self.compaction.output
        raise CorruptStoreError(f"the run catalog lacks run {run_id}")


def finish_compaction(catalog: Catalog) -> Catalog:
    """The catalog once the compaction under way is done in every table."""
    compaction = catalog.compaction
    if compaction is None:
        return catalog
    runs: list[Run] = []
    for run in catalog.runs:
        if run.run_id not in compaction.inputs:
            runs.append(run)
        elif run.run_id == compaction.inputs[0]:
            runs.append(compaction.output)
    return Catalog(tuple(runs), catalog.next_run_id, None)


def plan_compaction(
    sizes: Sequence[int], *, fanout: int = 4, width: float = 3.0, most: int = 6
) -> tuple[int, int] | None:
    """Which adjacent runs to join next, as ``(first, end)`` indexes into
    ``sizes`` (the runs' entries, oldest first); ``None`` when none should.

    Size-tiered, as LevelDB's successors call it: the newest runs whose sizes
    are within ``width`` times the total of the runs newer than them form a
    tier, joined once it has ``fanout`` runs (each document is rewritten once
    a tier, about log_fanout(N / merge size) times in all), or as soon as
    there are more than ``most`` runs (queries probe every run).

    ``width`` 3 rather than 2 joins a large run sooner: simulated over ten
    10M batches and then 2M single adds in 64K merges, runs were rewritten
    2.1 times a document in the batches (1.1 at width 2) but 3.1 times in the
    single adds (9.6: at width 2 the most-runs rule kept joining small runs
    into large ones), and queries met at most 3 runs after a batch (4).

    With more than ``most`` runs and no newest tier to join, the tier that
    takes away the most runs for the entries it rewrites is joined, wherever
    it lies; only where no two adjacent runs make a tier are the newest two
    joined. A small run just merged after a tier of large ones no longer
    drags the newest large run into a join at every merge: a store grown to
    100M in 10M batches, then given single adds, rewrote its last 10M run for
    every 32K documents merged (5-45 s a merge).

    >>> plan_compaction([100, 10, 10, 10])
    >>> plan_compaction([400, 10, 10, 10, 10])
    (1, 5)
    >>> plan_compaction([100, 10, 10, 10, 10])
    (0, 5)
    >>> plan_compaction([100, 50, 30, 10, 5, 2, 1])
    (0, 7)
    >>> plan_compaction([64, 1])
    >>> plan_compaction([400, 100, 100, 100, 100, 100, 100, 1])
    (0, 7)
    """
    if len(sizes) < 2:
        return None
    end = len(sizes)
    first = _tier_start(sizes, end, width)
    if end - first >= fanout:
        return first, end
    if len(sizes) > most:
        return _cheapest_tier(sizes, width) or (min(first, end - 2), end)
    return None


def _tier_start(sizes: Sequence[int], end: int, width: float) -> int:
    """Where the tier of runs ending at ``end`` (excluded) begins: back from
    the newest while a run is within ``width`` times the total after it."""
    first = end - 1
    total = sizes[first]
    while first > 0 and sizes[first - 1] <= width * total:
        first -= 1
        total += sizes[first]
    return first


def _cheapest_tier(sizes: Sequence[int], width: float) -> tuple[int, int] | None:
    """Of the tiers of two runs or more (each ending where its newest run
    is), the one that takes away the most runs per entry joined."""
    best: tuple[int, int] | None = None
    best_rate = 0.0
    for end in range(2, len(sizes) + 1):
        first = _tier_start(sizes, end, width)
        if end - first < 2:
            continue
        rate = (end - first - 1) / max(sum(sizes[first:end]), 1)
        if rate > best_rate:
            best, best_rate = (first, end), rate
    return best
