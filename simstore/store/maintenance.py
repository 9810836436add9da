"""Keeping the tables in shape: merges, compaction, re-layouts, and the map
room they need, as functions of an open engine (:mod:`simstore.engine.core`).
"""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from simstore.engine import _lmdb, graves, prepared_join
from simstore.engine.column_tableset import ColumnTableSet
from simstore.engine.delta import Change
from simstore.engine.format import (
    CATALOG_KEY,
    META_KEY,
    State,
    StoredParams,
    encode_meta,
    multi_index_layout,
    scheme_of,
)
from simstore.engine.prepared_join import JOINING_KEY
from simstore.engine.reads import all_documents, document_count
from simstore.engine.stored_tables import tableset_for
from simstore.errors import InvalidTypeError, InvalidValueError, StoreFullError, StoreNotFoundError
from simstore.index.permute import validate_k
from simstore.layout.choose import LayoutRequest, band_table, choose_layout, is_multi_index
from simstore.options import COMPACTION_CREDIT, DEFAULT_MERGE_THRESHOLD
from simstore.results import MaintenanceWarning, StoreFullWarning
from simstore.store.room import reserve_for
from simstore.store.stepped_joins import (
    URGENT_RUNS,
    begin_join,
    drop_abandoned_join,
    let_go_of_join,
    step_join,
)
from simstore.version import __version__

if TYPE_CHECKING:
    from simstore.engine.core import Engine

# compact() rewrites a lone run once removals took out 1/THINNED_RUN_SHARE of
# the entries it was laid out for: its buckets and bitmaps shrink to fit.
THINNED_RUN_SHARE = 5


def merge(engine: Engine) -> int:
    """``Store.merge``: the delta written into the tables as a new run of
    every table, in one write transaction; the number of documents merged."""
    reserve_for(engine, 0, 0, run_entries=len(engine.delta))

    def body(txn: _lmdb.Txn, state: State) -> tuple[int, State, Change]:
        doc_ids, fingerprints = engine.delta.arrays()
        if not len(doc_ids):
            return 0, state, Change([], [])
        catalog = engine.tableset.write_run(txn, engine.tableset.catalog, doc_ids, fingerprints)
        txn.drop(engine.handles.delta, delete=False)
        merged = state._replace(merge_epoch=state.merge_epoch + 1)
        return len(doc_ids), merged, Change([], [], merged=True, catalog=catalog)

    merged = engine.write(body)
    engine.compaction_credit += merged * len(engine.tables) * COMPACTION_CREDIT
    return merged


def compact(engine: Engine, *, copy_to: str | os.PathLike[str] | None = None) -> int:
    """``Store.compact``: every run joined into one, a bounded step (one
    write transaction) at a time, then optionally a compacted copy written to
    ``copy_to``; the number of table entries moved."""
    if copy_to is not None:
        try:
            copy_to = os.fspath(copy_to)
        except TypeError as exc:
            raise InvalidTypeError(f"copy_to must be a path, got {type(copy_to).__name__}") from exc
        folder = os.path.dirname(os.path.abspath(copy_to))
        if not os.path.isdir(folder):
            raise StoreNotFoundError(
                errno.ENOENT, f"cannot write {copy_to}: the folder {folder} does not exist"
            )
        if os.path.lexists(copy_to):
            raise InvalidValueError(
                f"{copy_to} exists already; compact writes a new file and replaces nothing"
            )
    merge(engine)
    let_go_of_join(engine)  # every run is joined below, the prepared join's too
    drop_abandoned_join(engine)  # and what a process that died left of its join
    moved = 0
    while True:
        before = [run.entries for run in engine.tableset.catalog.runs]
        step = compaction_step(engine, everything=True)
        if step is None:
            break
        moved += step
        after = [run.entries for run in engine.tableset.catalog.runs]
        if len(after) == 1 and after == before and engine.tableset.catalog.compaction is None:
            break  # a lone run rewritten as long as it was: another pass would do the same
    if copy_to is not None:
        with engine.lock:
            engine.check_usable()
            engine.env.copy_compacted(copy_to)
    return moved


def compaction_step(engine: Engine, *, everything: bool = False) -> int | None:
    """One step of the compaction under way (starting one if due, or with
    ``everything`` one of all runs): the entries it moved, or ``None``
    when there was nothing to do."""
    known = engine.tableset.catalog
    planned_span = engine.tableset.plan_span(known)
    due = known.compaction is not None or planned_span is not None
    if not everything and not due:
        # Nothing due in the catalog last seen: no write transaction (and
        # no wait for the store's lock, which a group commit may hold) to
        # find that out again. Runs another process added since are
        # joined at a later call, once a read has brought the catalog in.
        return None
    if (
        not everything
        and planned_span is not None
        and isinstance(engine.tableset, ColumnTableSet)
        and sum(run.entries for run in known.runs[slice(*planned_span)]) >= prepared_join.STEPPED_JOIN_ENTRIES
    ):
        return begin_join(engine)
    if engine.params.scheme is not None:
        if everything and len(known.runs) <= 1 and _nothing_to_join(engine):
            # Nothing to join: no room reserved either (the map's growth
            # would stay in the file: 35 MB of a 1M-document store's 92).
            return None
        # A format-3 join is one transaction: room for its output first, or a
        # map that filled would rerun the whole join once per growth step.
        joined = known.runs if everything or planned_span is None else known.runs[slice(*planned_span)]
        reserve_for(
            engine,
            0,
            0,
            run_entries=sum(run.entries for run in joined),
            band_entries=engine.tableset.band_entries(joined),
        )

    def body(txn: _lmdb.Txn, state: State) -> tuple[int | None, State, Change]:
        tableset = engine.tableset
        catalog = tableset.catalog
        if catalog.compaction is None:
            planned: Any = None
            if everything:
                # Every run joined holds every document out of the delta: the
                # output is laid out for that many, which gives back the room
                # (buckets, bitmaps) of documents removed since it was written.
                tabled = _tabled(engine, txn)
                if _worth_joining_all(catalog.runs, tabled):
                    planned = tableset.start_compaction(catalog, (0, len(catalog.runs)), entries=tabled)
            else:
                planned = tableset.plan(catalog)
            if planned is None:
                return None, state, Change([], [])
            catalog = planned
        catalog, moved = tableset.compaction_step(txn, catalog)
        return moved, state, Change([], [], catalog=catalog)

    return engine.write(body)


def _tabled(engine: Engine, txn: _lmdb.Txn) -> int:
    """The documents out of the delta, in the snapshot ``txn`` reads."""
    return int(txn.stat(engine.handles.docs)["entries"]) - len(engine.delta)


def _worth_joining_all(runs: Sequence[Any], tabled: int) -> bool:
    """Whether ``compact()`` joins ``runs`` (``tabled`` documents out of the
    delta): several, or one that removals thinned (:func:`_thinned`)."""
    return len(runs) > 1 or (bool(runs) and _thinned(runs[0].entries, tabled))


def _nothing_to_join(engine: Engine) -> bool:
    """Whether ``compact()`` would leave the latest commit's runs as they
    are: no compaction under way, none worth joining."""
    with engine.read() as txn:
        catalog = engine.tableset.catalog
        return catalog.compaction is None and not _worth_joining_all(catalog.runs, _tabled(engine, txn))


def _thinned(written: int, holds: int) -> bool:
    """Whether a run laid out for ``written`` entries that ``holds`` now is
    worth rewriting on its own: removals took out a fifth of it or more."""
    return holds * THINNED_RUN_SHARE < written * (THINNED_RUN_SHARE - 1)


def maintain(engine: Engine, documents: int, *, pay_all: bool = False) -> None:
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
    if engine.readonly:
        return
    try:
        if len(engine.delta) >= merge_threshold(engine):
            merge(engine)
        if documents and pay_all:
            engine.compaction_credit = max(
                engine.compaction_credit, documents * len(engine.tables) * COMPACTION_CREDIT
            )
        while engine.compaction_credit > 0 or len(engine.tableset.catalog.runs) > URGENT_RUNS:
            moved = compaction_step(engine)
            if moved is None:  # nothing due: the credit is kept for the next compaction
                break
            engine.compaction_credit -= max(moved, 1)
            if not pay_all:
                break
        step_join(engine, documents)
    except StoreFullError as exc:
        warnings.warn(
            f"{engine.path}: the delta could not be merged or the tables compacted ({exc}); "
            "nothing is lost, and a later write tries again",
            StoreFullWarning,
            stacklevel=3,
        )
    except Exception as exc:
        # The write has committed: an error here must not make it look
        # failed (a caller would take the documents for not stored).
        warnings.warn(
            f"{engine.path}: the merge or compaction after a write failed "
            f"({type(exc).__name__}: {exc}); the write stands, and a later write tries again",
            MaintenanceWarning,
            stacklevel=3,
        )


def relayout(
    engine: Engine,
    layout: Any = None,
    *,
    k: int | None = None,
    blocks: int | None = None,
    expected_docs: int | None = None,
) -> None:
    """``Store.relayout``: the tables rebuilt in a new layout beside the old
    ones, in one write transaction whose commit switches the meta record over."""
    if sum(option is not None for option in (layout, blocks, expected_docs)) > 1 and not (
        is_multi_index(layout) and blocks is None
    ):
        raise InvalidValueError("pass one of layout=, blocks= or expected_docs=")
    if k is not None:
        k = validate_k(k)
    # A layout carries its own k; otherwise k stays unless given. With
    # nothing else asked, choose_layout picks Manku's default blocks for k.
    new_k = k if k is not None or (layout is not None and not is_multi_index(layout)) else engine.params.k
    requested = LayoutRequest(new_k, blocks, None, layout, expected_docs, bands=False)
    chosen_k, tables, spec, chosen_blocks = choose_layout(requested)
    scheme = scheme_of(spec)
    if scheme is not None:
        # A band table keeps its bands a width; a store without one gets what a
        # new store would (one, where documents keep sketches).
        sketches = engine.handles.sketches is not None
        kept = engine.params.bands
        bands = kept if kept is not None else band_table(replace(requested, bands=None, sketches=sketches))
        spec = multi_index_layout(scheme, bands)
    reserve_for(engine, 0, 0, run_entries=document_count(engine), tables=tables)

    def body(txn: _lmdb.Txn, state: State) -> tuple[None, State, Change]:
        generation = engine.params.generation + 1
        # Opened afresh in every attempt (see Environment.open_tables): a
        # first attempt that filled the map dropped, and so closed, them.
        old_tables = engine.env.open_tables(txn, engine.params.stored_tables, engine.params.generation)
        params = StoredParams(
            k=chosen_k,
            blocks=chosen_blocks,
            tables=tables,
            layout=spec,
            fingerprinter=engine.params.fingerprinter,
            segmenter=engine.params.segmenter,
            created_by=engine.params.created_by,
            generation=generation,
            min_similarity=engine.params.min_similarity,
        )
        databases = engine.env.create_tables(txn, params.stored_tables, generation)
        doc_ids, fingerprints = all_documents(engine, txn)
        handles = engine.handles
        meta_record = encode_meta(params, version=__version__)
        tableset = tableset_for(
            params,
            meta_record,
            databases,
            handles.meta,
            handles.docs,
            lambda: engine.env,
            lambda: engine.lock,
            handles.sketches,
        )
        catalog = tableset.write_run(txn, tableset.decode_catalog(None), doc_ids, fingerprints)
        for db in old_tables:
            txn.drop(db, delete=True)
        txn.delete(JOINING_KEY, db=engine.handles.meta)  # its values were in the old tables
        # The entries the graves name were in the old tables (simstore.engine.graves).
        graves.forget_below(txn, engine.handles.meta, None)
        txn.drop(engine.handles.delta, delete=False)
        txn.put(META_KEY, meta_record, db=engine.handles.meta)
        new_state = state._replace(merge_epoch=state.merge_epoch + 1)
        # Stored here, not through Change: the new catalog belongs to the
        # new layout, which this store adopts by reloading below.
        txn.put(CATALOG_KEY, catalog.encode(), db=engine.handles.meta)
        new_state = new_state._replace(catalog_version=state.catalog_version + 1)
        return None, new_state, Change([], [], merged=True)

    with engine.lock:
        # Held from the commit to the reload: the dropped tables' handles
        # died with the commit, and no other thread may use them meanwhile.
        engine.write(body)
        engine.reload_layout()


def merge_threshold(engine: Engine) -> int:
    """The delta size at which the delta is merged into the tables."""
    explicit = engine.options.merge_threshold
    return DEFAULT_MERGE_THRESHOLD if explicit is None else explicit
