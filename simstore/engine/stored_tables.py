"""Which table set a store's meta record calls for: format 2's Manku tables
(:class:`simstore.engine.tableset.TableSet`) or format 3's multi-index
tables (:class:`simstore.engine.column_tableset.ColumnTableSet`), which keep
one contract."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from simstore.engine._lmdb import Database, Environment, Txn
from simstore.engine.column_tableset import BandSource, ColumnTableSet
from simstore.engine.format import StoredParams
from simstore.engine.runs import filter_bits_for
from simstore.engine.tableset import TableSet
from simstore.errors import CorruptStoreError
from simstore.fingerprinting.sketch import Sketch
from simstore.index.permute import U64Array
from simstore.index.scan_plan import ScanPlan


class StoredTables(Protocol):
    """What the engine, the merge, the writes and ``check()`` call on a
    store's tables (the catalog's type is each format's own)."""

    catalog: Any
    databases: list[Database]
    #: Whether :meth:`find` reads the query's permuted keys (else it is given none).
    reads_permuted_keys: bool

    @property
    def bitmaps_unread(self) -> bool: ...

    def decode_catalog(self, raw: bytes | None) -> Any: ...

    def adopt(self, catalog: Any) -> None: ...

    def release(self) -> None:
        """Let go of whatever views the map across calls (the caller holds the store's lock)."""

    def prepare(self) -> None:
        """Before a query's transaction begins: what it reads beside it."""

    def serves(self, txn: Txn) -> bool:
        """Whether what :meth:`prepare` made is in step with ``txn``."""
        ...

    def scan_plan(self) -> ScanPlan: ...

    def read_bitmaps(self, txn: Txn, count: int = 1) -> None: ...

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
        get: Callable[..., bytes | None] | None = None,
    ) -> None: ...

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
        get: Callable[..., bytes | None] | None = None,
    ) -> None: ...

    def write_run(
        self, txn: Txn, catalog: Any, doc_ids: U64Array, fingerprints: U64Array, given: Any = None
    ) -> Any: ...

    def delete(self, txn: Txn, catalog: Any, doc_ids: Sequence[int], fingerprints: Sequence[int]) -> None: ...

    def plan(self, catalog: Any) -> Any: ...

    def plan_span(self, catalog: Any) -> tuple[int, int] | None: ...

    def start_compaction(self, catalog: Any, span: tuple[int, int], entries: int | None = None) -> Any: ...

    def compaction_step(self, txn: Txn, catalog: Any) -> tuple[Any, int]: ...

    def band_entries(self, runs: Sequence[Any]) -> int | None: ...


def tableset_for(
    params: StoredParams,
    meta_record: bytes,
    tables: Sequence[Database],
    meta: Database,
    docs: Database,
    environment: Callable[[], Environment],
    lock: Callable[[], threading.RLock],
    sketches: Database | None = None,
) -> StoredTables:
    """The table set of a store laid out by ``params`` (decoded from
    ``meta_record``, the meta record's bytes), over its table sub-databases
    ``tables`` (and, for a band table, its ``sketches``)."""
    scheme = params.scheme
    if scheme is None:
        return TableSet(params.tables, tables, filter_bits_for(params.k))
    bands = None
    if params.bands is not None:
        sketch = None if params.fingerprinter is None else params.fingerprinter.get("sketch")
        if sketch is None or sketches is None:
            raise CorruptStoreError("the store keeps a band table but no sketches to band")
        bands = BandSource(params.bands, Sketch.from_settings(sketch), sketches)
    return ColumnTableSet(scheme, meta_record, tables, meta, docs, environment, lock, bands)
