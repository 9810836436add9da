"""Opening a store file: modes, creation, refusal of foreign files, and the
checks of requested parameters against stored ones."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from simstore import _lmdb
from simstore.choose import LayoutRequest, choose_layout, layout_tables
from simstore.errors import (
    CorruptStoreError,
    FormatVersionError,
    InvalidTypeError,
    InvalidValueError,
    NotAStoreError,
    StoreNotFoundError,
)
from simstore.format import (
    META_KEY,
    STATE_KEY,
    State,
    StoredParams,
    check_requested,
    decode_meta,
    encode_meta,
)
from simstore.params import Options
from simstore.permute import validate_k
from simstore.simhash import Fingerprinter
from simstore.store import Store, __version__
from simstore.text import segmenter_info

MODES = ("r", "w", "c", "n")
OPEN_RETRIES = 3


def open(  # noqa: A001 - mirrors dbm.open, deliberately
    path: str | os.PathLike[str],
    mode: str = "c",
    *,
    k: int | None = None,
    blocks: int | None = None,
    readonly: bool = False,
    fingerprinter: Fingerprinter | None = None,
    layout: Any = None,
    expected_docs: int | None = None,
    **options: Any,
) -> Store:
    """Open (or create) a store file.

    Args:
        path: the store file; LMDB's lock file sits beside it as ``path + "-lock"``.
        mode: as for :func:`dbm.open`: ``"r"`` read-only, ``"w"`` an existing
            store, ``"c"`` create if missing (the default), ``"n"`` always a
            new, empty store (an existing simstore store is replaced; a file
            that is not a store is refused, never deleted).
        k: the largest Hamming distance the store answers (default 3 for a
            new store). ``None`` on an existing store means "the file decides";
            an explicit value that differs raises ``ParameterMismatchError``.
        blocks: how many blocks the 64 bits are cut into, for Manku's
            one-level layout (default ``k + 2``, or the planner's choice when
            ``expected_docs`` is given).
        layout: a :class:`simstore.planner.Layout` (from :func:`simstore.plan`)
            for a new store, instead of ``blocks``. On an existing store it
            must equal the stored layout.
        expected_docs: the corpus size a new store should be laid out for;
            the planner picks the layout with the lowest estimated query time.
            Ignored for an existing store (its layout is in the file).
        readonly: open without write access (implied by mode ``"r"``).
        fingerprinter: the text fingerprinting settings (default
            ``Fingerprinter()`` for a new store). They are stored in the file;
            ``None`` on an existing store means "the file decides".
        **options: per-open settings, see :class:`simstore.Options`.

    Raises:
        StoreNotFoundError: modes "r"/"w" and no file.
        NotAStoreError: the file is not a simstore store (it is not modified).
        FormatVersionError: the file was written by a newer format.
        ParameterMismatchError: explicit parameters differ from stored ones.
    """
    if mode not in MODES:
        raise InvalidValueError(f"mode must be one of 'r', 'w', 'c', 'n', got {mode!r}")
    if not isinstance(readonly, bool):
        raise InvalidTypeError(f"readonly must be True or False, got {readonly!r}")
    readonly = readonly or mode == "r"
    if readonly and mode == "n":
        raise InvalidValueError("mode 'n' creates a new store and cannot be read-only")
    if k is not None:
        k = validate_k(k)
    if fingerprinter is not None and not isinstance(fingerprinter, Fingerprinter):
        raise InvalidTypeError(
            f"fingerprinter must be a simstore.Fingerprinter, got {type(fingerprinter).__name__}"
        )
    opts = Options.from_kwargs(options)
    path_str = os.fspath(path)
    if not isinstance(path_str, str):
        path_str = os.fsdecode(path_str)
    if os.path.isdir(path_str):
        raise NotAStoreError(f"{path_str} is a directory; a store is a single file")
    exists = os.path.exists(path_str)
    if not exists and mode in ("r", "w"):
        raise StoreNotFoundError(2, f"no simstore store at {path_str} (use mode 'c' to create one)")
    requested = LayoutRequest(k, blocks, fingerprinter, layout, expected_docs)
    if exists and mode == "n":
        choose_layout(requested)  # refuse bad parameters before deleting anything
        _remove_store(path_str)
        exists = False
    if exists and os.path.getsize(path_str) == 0 and mode in ("r", "w"):
        raise NotAStoreError(f"{path_str} is an empty file, not a simstore store")

    env = _lmdb.Environment(
        path_str, readonly=readonly, sync=opts.sync, map_size=opts.map_size, max_map_size=opts.max_map_size
    )
    try:
        for attempt in range(1, OPEN_RETRIES + 1):
            params, raw_meta = _load_or_create(env, path_str, mode, requested)
            if attempt == 1:
                env.use_writable_map()  # a store now: it may be extended
            try:
                handles = env.open_existing(len(params.tables), params.generation)
                break
            except CorruptStoreError:
                # A re-layout by another process may have dropped these
                # tables since the meta record was read; read it again.
                if attempt == OPEN_RETRIES:
                    raise
    except BaseException:
        # A refused open leaves the folder as it found it: no new lock file,
        # and no half-made store file where there was none.
        env.fail_open()
        if not exists:
            with contextlib.suppress(OSError):
                os.remove(path_str)
        raise
    return Store(path_str, env, handles, params, opts, raw_meta)


def _load_or_create(
    env: _lmdb.Environment, path: str, mode: str, requested: LayoutRequest
) -> tuple[StoredParams, bytes]:
    """The stored parameters and the raw meta record they come from."""
    stored = _read_meta(env, path)
    if stored is None:
        if env.readonly or mode == "w":
            raise NotAStoreError(f"{path} is an LMDB file that was never written, not a simstore store")
        return _create(env, requested)
    params = decode_meta(stored)
    fingerprinter = requested.fingerprinter
    requested_settings = fingerprinter.settings() if fingerprinter is not None else None
    requested_tables = None
    if requested.layout is not None:
        requested_tables = tuple(layout_tables(requested.layout, params.k)[1])
    check_requested(
        params,
        {
            "k": requested.k,
            "blocks": requested.blocks,
            "fingerprinter": requested_settings,
            "tables": requested_tables,
        },
    )
    return params, stored


def _read_meta(env: _lmdb.Environment, path: str) -> bytes | None:
    """The raw meta record, or ``None`` for an LMDB file no transaction ever
    wrote (a store whose creation was interrupted, or a new file).

    Raises:
        NotAStoreError: the file holds data that is not a simstore store.
    """
    names = env.named_databases()
    if not names:
        # LMDB writes transaction 0 when it makes a file; anything later was
        # someone's data, even if they deleted it again.
        if env.last_txnid() == 0:
            return None
        raise NotAStoreError(f"{path} is an LMDB file written by another program, not a simstore store")
    if _lmdb.DB_META not in names:
        raise NotAStoreError(f"{path} is an LMDB file written by another program, not a simstore store")
    raw = env.read_meta_record()
    if raw is None:
        raise NotAStoreError(f"{path} has no simstore meta record")
    return raw


def _create(env: _lmdb.Environment, requested: LayoutRequest) -> tuple[StoredParams, bytes]:
    chosen_k, tables, layout_spec, chosen_blocks = choose_layout(requested)
    params = StoredParams(
        k=chosen_k,
        blocks=chosen_blocks,
        tables=tables,
        layout=layout_spec,
        fingerprinter=(requested.fingerprinter or Fingerprinter()).settings(),
        segmenter=segmenter_info(),
    )

    raw_meta = encode_meta(params, version=__version__)

    def body(txn: _lmdb.Txn) -> None:
        handles = env.create_handles(txn, len(tables))
        txn.put(META_KEY, raw_meta, db=handles.meta)
        txn.put(STATE_KEY, State().encode(), db=handles.meta)

    env.write(body)
    return params, raw_meta


def _remove_store(path: str) -> None:
    """Delete an existing store for mode "n", refusing files that are not stores.

    Only a file whose meta record names the simstore format (of any version)
    or an LMDB file nothing was ever written to is deleted; a foreign or
    unreadable file raises ``NotAStoreError`` and stays as it was.
    """
    if os.path.getsize(path) > 0:
        env = _lmdb.Environment(path, readonly=True, sync=False, map_size=None, max_map_size=None)
        try:
            raw = _read_meta(env, path)
            if raw is not None:
                decode_meta(raw)
        except FormatVersionError:
            env.close()  # a newer simstore's store is still simstore's to replace
        except (NotAStoreError, CorruptStoreError) as exc:
            env.fail_open()
            raise NotAStoreError(
                f"{path} is not a readable simstore store; mode 'n' will not delete it"
            ) from exc
        else:
            env.close()
    os.remove(path)
    lock = _lmdb.lock_path(path)
    if os.path.exists(lock):
        os.remove(lock)
