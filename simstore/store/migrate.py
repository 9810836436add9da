"""Convert a format-1 store (simstore 0.1) into a new store of today's format.

Format 1 kept one LMDB node per table entry; format 2 packs them in runs
(``simstore.engine.runs``). The document records, keys and metadata are the same in
both, so a migration reads those from the old file, read-only, and adds them
to a new store with the old store's parameters (k, layout, fingerprinter):
the new store answers every query exactly as the old one did. The old file
is never written; the new path must not exist yet.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import lmdb
import numpy as np

from simstore.engine import _lmdb
from simstore.engine.format import LEGACY_FORMAT_VERSION, META_KEY, StoredParams, decode_meta
from simstore.engine.records import decode_id, decode_record
from simstore.errors import (
    FormatVersionError,
    InvalidValueError,
    NotAStoreError,
    SimstoreError,
    StoreNotFoundError,
)
from simstore.fingerprinting.algorithms import UNRECORDED_SETTINGS
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.index.permute import MAX_TABLES
from simstore.keys import unpack_key, unpack_meta
from simstore.layout.planner import from_spec
from simstore.store.opening import open as open_store

#: Documents added to the new store per transaction.
MIGRATE_BATCH = 1_000_000

Document = tuple[Any, int, dict[str, Any] | None]


def migrate(
    old_path: str | os.PathLike[str],
    new_path: str | os.PathLike[str],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Copy every document of the format-1 store at ``old_path`` into a new
    store at ``new_path``, with the same parameters; the documents copied.

    Args:
        progress: called as ``progress(done, total)`` after each batch.

    Raises:
        StoreNotFoundError: ``old_path`` does not exist.
        InvalidValueError: ``new_path`` exists already (nothing is replaced).
        NotAStoreError: ``old_path`` is not a simstore store.
        FormatVersionError: ``old_path`` is not in format 1 (a store of
            today's format needs no migration).
    """
    old_path, new_path = os.fspath(old_path), os.fspath(new_path)
    if not os.path.exists(old_path):
        raise StoreNotFoundError(f"no store at {old_path}")
    if os.path.lexists(new_path):
        raise InvalidValueError(f"{new_path} exists already; migrate writes a new store and replaces nothing")
    env = _open_old(old_path)
    try:
        with env.begin() as txn:
            params = _legacy_params(env, txn, old_path)
            total = int(txn.stat(env.open_db(_lmdb.DB_DOCS, txn=txn, create=False))["entries"])
            new_store = open_store(new_path, "n", **_creation_options(params))
            copied = 0
            try:
                with new_store:
                    for keys, fingerprints, metas in _batches(env, txn):
                        new_store.add_many(keys, fingerprints, metas=metas)
                        copied += len(keys)
                        if progress is not None:
                            progress(copied, total)
                    new_store.merge()
            except BaseException:
                # A half-copied store must not pass for a migrated one.
                for leftover in (new_path, _lmdb.lock_path(new_path)):
                    if os.path.exists(leftover):
                        os.remove(leftover)
                raise
    finally:
        env.close()
    return copied


def _open_old(path: str) -> lmdb.Environment:
    try:
        return lmdb.open(
            path,
            subdir=False,
            readonly=True,
            lock=True,
            max_dbs=len(_lmdb.FIXED_DB_NAMES) + 2 * MAX_TABLES,
            max_spare_txns=0,
        )
    except lmdb.InvalidError as exc:
        raise NotAStoreError(f"{path} is not an LMDB file, so not a simstore store") from exc
    except lmdb.Error as exc:
        raise _lmdb.translate(exc, path) from exc


def _legacy_params(env: lmdb.Environment, txn: _lmdb.Txn, path: str) -> StoredParams:
    try:
        meta_db = env.open_db(_lmdb.DB_META, txn=txn, create=False)
    except lmdb.NotFoundError as exc:
        raise NotAStoreError(f"{path} has no simstore meta record") from exc
    raw = txn.get(META_KEY, db=meta_db)
    if raw is None:
        raise NotAStoreError(f"{path} has no simstore meta record")
    try:
        return decode_meta(raw, accept=LEGACY_FORMAT_VERSION)
    except FormatVersionError:
        raise
    except SimstoreError as exc:
        raise type(exc)(f"{path}: {exc}") from exc


def _creation_options(params: StoredParams) -> dict[str, Any]:
    options: dict[str, Any] = {"k": params.k}
    if params.layout is not None:
        options["layout"] = from_spec(params.k, params.layout)
    else:
        options["blocks"] = params.blocks
    # A store that recorded no settings was fingerprinted with the settings
    # of its day (UNRECORDED_SETTINGS), not with today's defaults.
    options["fingerprinter"] = Fingerprinter.from_settings(params.fingerprinter or UNRECORDED_SETTINGS)
    return options


def _batches(
    env: lmdb.Environment, txn: _lmdb.Txn
) -> Iterator[tuple[list[Any], np.ndarray, list[dict[str, Any] | None]]]:
    """The old store's documents in id order, ``MIGRATE_BATCH`` at a time."""
    docs = env.open_db(_lmdb.DB_DOCS, txn=txn, create=False)
    docmeta = env.open_db(_lmdb.DB_DOCMETA, txn=txn, create=False)
    meta_cursor = txn.cursor(docmeta)
    keys: list[Any] = []
    fingerprints: list[int] = []
    metas: list[dict[str, Any] | None] = []
    for id_bytes, raw in txn.cursor(docs):
        decode_id(id_bytes)  # refuses a damaged id
        fingerprint, packed_key = decode_record(raw)
        keys.append(unpack_key(packed_key))
        fingerprints.append(fingerprint)
        metas.append(unpack_meta(meta_cursor.get(id_bytes)))
        if len(keys) == MIGRATE_BATCH:
            yield keys, np.array(fingerprints, dtype=np.uint64), metas
            keys, fingerprints, metas = [], [], []
    if keys:
        yield keys, np.array(fingerprints, dtype=np.uint64), metas
