"""Opening a store file: modes, creation, refusal of foreign files, and the
checks of requested parameters against stored ones."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

from simstore.commit.group import GroupCommit, group_commit
from simstore.engine import _lmdb
from simstore.engine.core import Engine, open_in_this_process, release_inherited
from simstore.engine.format import (
    LOG_KEY,
    META_KEY,
    MULTI_INDEX_KIND,
    STATE_KEY,
    State,
    StoredParams,
    check_requested,
    decode_meta,
    encode_meta,
)
from simstore.engine.wal import WRITE_AHEAD_LOG, LogWriter, Rollback, log_path, new_log_state
from simstore.engine.writelog import WriteLog
from simstore.errors import (
    AccessDeniedError,
    CorruptStoreError,
    FormatVersionError,
    InvalidTypeError,
    InvalidValueError,
    NotAStoreError,
    ParameterMismatchError,
    StoreFullError,
    StoreLockedError,
    StoreNotFoundError,
)
from simstore.fingerprinting.algorithms import UNRECORDED_SETTINGS
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.fingerprinting.segmenter import segmenter_info
from simstore.fingerprinting.sketch import check_similarity
from simstore.index.permute import validate_k
from simstore.layout.choose import (
    DEFAULT_MIN_SIMILARITY,
    LayoutRequest,
    check_bands,
    choose_layout,
    is_multi_index,
    layout_name,
    layout_tables,
)
from simstore.layout.presets import ExactThreshold, named_threshold, verification_threshold
from simstore.options import Options
from simstore.store import writes
from simstore.store.facade import Store
from simstore.version import __version__

MODES = ("r", "w", "c", "n")
OPEN_RETRIES = 3
# A store file with two names is looked at this many times, this far apart,
# before it is refused: creation links a new store into place, then removes
# its temporary name.
HARD_LINK_CHECKS = 20
HARD_LINK_WAIT_SECONDS = 0.025


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
    min_similarity: float | None = None,
    bands: bool | int | None = None,
    **options: Any,
) -> Store:
    """Open (or create) a store file.

    Args:
        path: the store file; LMDB's lock file sits beside it as ``path + "-lock"``.
        mode: as for :func:`dbm.open`: ``"r"`` read-only, ``"w"`` an existing
            store, ``"c"`` create if missing (the default), ``"n"`` always a
            new, empty store (an existing simstore store is replaced; a file
            that is not a store is refused, never deleted).
        k: the largest Hamming distance the store answers (for a new store,
            default 5, or what ``min_similarity`` needs). ``None`` on an
            existing store means "the file decides"; an explicit value that
            differs raises ``ParameterMismatchError``.
        blocks: how many blocks the 64 bits are cut into, for Manku's
            one-level layout (format 2; ``None``, the default: a multi-index
            scheme, below).
        layout: a :class:`simstore.layout.planner.Layout` (from :func:`simstore.plan`)
            for a new store, instead of ``blocks``; or ``"multi-index"``: a
            format-3 store, whose few tables are searched with many probes
            (for k = 5, three tables of 21-22 bits at radius 1; the scheme
            chosen for ``expected_docs``, default 10M): about 90 bytes a
            document instead of 224, queries 2x and batches 7x faster than
            Manku's 21 tables at 1M (docs/format3.md); a new store with
            neither ``layout`` nor ``blocks`` is laid out so, at every k.
            On an existing store it must equal the stored layout.
        expected_docs: the corpus size a new store's multi-index scheme is
            chosen for (default 10M; ``simstore.plan`` ranks Manku's layouts
            for a size).
            Ignored for an existing store (its layout is in the file).
        readonly: open without write access (implied by mode ``"r"``).
        fingerprinter: the text fingerprinting settings (default
            ``Fingerprinter()`` for a new store). They are stored in the file;
            ``None`` on an existing store means "the file decides".
        min_similarity: for a new store, the similarity (0 to 1, of word
            3-shingles) of the near-duplicates it is to find. Without ``k``
            it gets the default k = 5 and a band table of 8 bands a width
            (16 below 0.9), and verifies matches from an estimate a little
            below it (:func:`simstore.layout.presets.verification_threshold`:
            0.862 for 0.9, 0.75 for 0.8), since the sketch's estimate of a
            pair just above the threshold falls below it about half the
            time; ``Store.min_similarity`` is that threshold, which text
            queries, ``add_if_new``, pairs and clusters apply unless a call
            passes its own (see :meth:`Store.query`). Without a band table
            (``bands=False``, ``blocks`` or a Manku layout) the ``k`` at which
            97 % of real pairs that similar were found
            (``simstore.layout.planner.K_FOR_SIMILARITY``). An
            :class:`~simstore.layout.presets.ExactThreshold` is kept as it
            is. Stored; on an existing store, ``None`` means "the file
            decides", and a value must name the stored threshold.
        bands: a band table beside a multi-index layout (kept by default
            where k is 5 or more),
            so that ``query`` and ``add_if_new`` also find the documents
            whose sketches share a band with the text's and reach the
            threshold, however far apart the fingerprints (a one-word edit
            of a short text): ``None`` (the default) or ``True`` keeps
            ``simstore.layout.choose.DEFAULT_BANDS_PER_WIDTH`` bands of
            each width a document where documents keep sketches, an int
            that many, ``False`` none. On an existing store, ``True`` or
            ``False`` must match the file.
        **options: per-open settings, see :class:`simstore.Options`.

    Raises:
        StoreNotFoundError: modes "r"/"w" and no file.
        NotAStoreError: the file is not a simstore store (it is not modified).
        FormatVersionError: the file was written in a newer format, or in
            format 1 (convert it with ``simstore migrate``).
        ParameterMismatchError: explicit parameters differ from stored ones.
    """
    if mode not in MODES:
        raise InvalidValueError(f"mode must be one of 'r', 'w', 'c', 'n', got {mode!r}")
    if not isinstance(readonly, bool):
        raise InvalidTypeError(f"readonly must be True or False, got {readonly!r}")
    readonly = readonly or mode == "r"
    check_bands(bands)  # (a new store's choice is checked in full by choose_layout)
    if readonly and mode == "n":
        raise InvalidValueError("mode 'n' creates a new store and cannot be read-only")
    if k is not None:
        k = validate_k(k)
    if fingerprinter is not None and not isinstance(fingerprinter, Fingerprinter):
        raise InvalidTypeError(
            f"fingerprinter must be a simstore.Fingerprinter, got {type(fingerprinter).__name__}"
        )
    exact_threshold = isinstance(min_similarity, ExactThreshold)
    if min_similarity is not None:
        min_similarity = check_similarity(min_similarity)
        if fingerprinter is not None and fingerprinter.sketch is None:
            raise InvalidValueError("min_similarity needs sketches; the fingerprinter has sketch=None")
    opts = Options.from_kwargs(options)
    if not opts.lock and not readonly:
        raise InvalidValueError("lock=False opens a store read-only only: use mode 'r' with it")
    # The file's own name, once: LMDB locks a store through the lock file beside
    # the name it is opened by, so a symlink's name would lock another lock
    # file than the target's (two writers at once), and a relative name would
    # name another file after os.chdir.
    path_str = os.path.realpath(_path_text(path))
    if os.path.isdir(path_str):
        raise NotAStoreError(f"{path_str} is a directory; a store is a single file")
    exists = os.path.exists(path_str)
    if not exists and mode in ("r", "w"):
        raise StoreNotFoundError(2, f"no simstore store at {path_str} (use mode 'c' to create one)")
    if exists and _file_size(path_str) == 0:
        # Not one simstore made: a new store appears under its name whole
        # (see _create_beside), so an empty file is someone else's.
        raise NotAStoreError(f"{path_str} is an empty file, not a simstore store; it is left as it is")
    if exists:
        _check_one_name(path_str)
    if exists and not readonly:
        _check_writable(path_str, mode)
    if opts.map_size is not None and not readonly:
        _check_map_room(path_str, opts.map_size)
    requested = LayoutRequest(
        k,
        blocks,
        fingerprinter,
        layout,
        expected_docs,
        min_similarity,
        bands,
        exact_threshold=exact_threshold,
    )
    if exists and mode == "n":
        choose_layout(requested)  # refuse bad parameters before deleting anything
        _replace_store(path_str, requested, opts)
        exists = True
    if not exists:
        choose_layout(requested)  # refuse bad parameters before making anything
        _create_beside(path_str, requested, opts)
    if mode in ("r", "w") and _file_size(path_str) == 0:
        raise NotAStoreError(f"{path_str} is an empty file, not a simstore store")

    release_inherited(path_str)  # a forked child's inherited store: only once the open is due
    try:
        env = _lmdb.Environment(
            path_str,
            readonly=readonly,
            sync=opts.sync_each_commit,
            map_size=opts.map_size,
            max_map_size=opts.max_map_size,
            defer_meta_sync=opts.sync_each_commit,  # simstore.commit.group flushes the meta page
            lock=opts.lock,
            wal=WRITE_AHEAD_LOG,
        )
    except NotAStoreError as exc:
        _refuse_as_damaged_if_logged(path_str, exc)
        raise
    try:
        for attempt in range(1, OPEN_RETRIES + 1):
            params, raw_meta = _load_or_create(env, path_str, mode, requested)
            if attempt == 1:
                env.use_writable_map()  # a store now: it may be extended
            try:
                handles = env.open_existing(params.stored_tables, params.generation)
                break
            except CorruptStoreError:
                # A re-layout by another process may have dropped these
                # tables since the meta record was read; read it again.
                if attempt == OPEN_RETRIES:
                    raise
    except NotAStoreError as exc:
        # A refused foreign file's folder is left as it was found: no new
        # lock file. The path itself is never removed: it existed before
        # this open (or another process linked its new store there).
        env.fail_open()
        _refuse_as_damaged_if_logged(path_str, exc)
        raise
    except BaseException:
        # The file is a store, which other processes may have open: its lock
        # file stays, or two of them could end up locking different files.
        env.close()
        raise
    engine: Engine | None = None
    try:
        engine = Engine(path_str, env, handles, params, opts, raw_meta, GroupCommit(writes.body_of))
        if env.rollback is not None:
            _replay(engine)
        return Store(engine)
    except BaseException:
        # Interrupted (Ctrl-C) or failed on the way out: the file is not left
        # open in this process, where opening it again would be refused.
        if engine is None:
            env.close()
        elif not engine.closed:
            engine.close()
        raise


def _refuse_as_damaged_if_logged(path: str, refusal: NotAStoreError) -> None:
    """A file that does not read as a store, but whose write-ahead log beside
    it names this very file (its device and inode), is a simstore store that
    was damaged (its meta pages zeroed, its tree torn): say so, rather than
    call it another program's.

    Raises:
        CorruptStoreError: the log names the file.
    """
    try:
        log = WriteLog.open(log_path(path), writable=False)
    except (OSError, ValueError):
        return
    try:
        checkpoint = log.checkpoint()
        status = os.stat(path)
    except OSError:
        return
    finally:
        log.close()
    if checkpoint is not None and checkpoint.store_identity == (status.st_dev, status.st_ino):
        raise CorruptStoreError(
            f"{path} is a damaged simstore store (its write-ahead log {log_path(path)} names it): {refusal}"
        ) from refusal


def _replay(engine: Engine) -> None:
    """After a restart rolled the file back to its log's checkpoint (see
    :mod:`simstore.engine.wal`): commit the logged writes again, checkpoint,
    and let the log's lock go. A failure leaves the file rolled back, and the
    next open replays again."""
    env = engine.env
    rollback, env.rollback = env.rollback, None
    assert isinstance(rollback, Rollback)  # (the environment holds it as _lmdb.Recovered)
    try:
        with engine.lock:
            replayer = LogWriter.for_replay(env, rollback, engine.handles.meta)
            ordinary, env.log_writer = env.log_writer, replayer
            try:
                group_commit(engine).replay(engine, rollback.records)
                replayer.finish_replay()
            except BaseException:
                env.log_writer = ordinary
                replayer.let_pin_go()
                engine.close()
                raise
            env.log_writer = ordinary
    finally:
        rollback.release()


def _create_beside(path: str, requested: LayoutRequest, opts: Options) -> None:
    """Make a new, empty store at ``path``, unless another process makes one
    there first, in which case that one is left to be opened.

    The store is built under a temporary name in the same folder and then
    hard-linked to ``path``, which fails if ``path`` exists. So ``path``
    never shows a store in the making: two processes creating one store
    agree on one of them (two creations in place used to reset each other's
    documents), a reader that comes too early finds no file, and a refused
    or interrupted creation leaves ``path`` as it was. A process killed
    while creating may leave its temporary ``.NAME.PID.HEX.creating`` file
    (and its ``-lock``) behind; nothing else does.

    Where the file system has no hard links, the store is created in place
    instead, in one write transaction that first looks again for a store
    (see :func:`_create`).
    """
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.creating")
    try:
        descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    except FileNotFoundError as exc:
        raise StoreNotFoundError(
            errno.ENOENT, f"cannot create {path}: the folder {directory or '.'} does not exist"
        ) from exc
    except PermissionError as exc:
        raise AccessDeniedError(
            errno.EACCES, f"cannot create {path}: no permission to write in the folder {directory or '.'}"
        ) from exc
    os.close(descriptor)
    try:
        env = _lmdb.Environment(
            temporary,
            readonly=False,
            sync=bool(opts.sync),
            map_size=None,
            max_map_size=opts.max_map_size,
            wal=WRITE_AHEAD_LOG,
        )
        try:
            _create(env, requested)
        finally:
            env.close()
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # another process made the store first: it is the one to open
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            return  # created in place by the caller's open, see _create
        if opts.sync:
            fsync_path(directory or ".")
    finally:
        for leftover in (temporary, _lmdb.lock_path(temporary)):
            with contextlib.suppress(OSError):
                os.remove(leftover)


# errno values of a file system that cannot make hard links.
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV, errno.ENOSYS)


def fsync_path(path: str) -> None:
    """Flush a file, or a folder's entries (so that a new name in it survives a
    power loss), by its path."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _load_or_create(
    env: _lmdb.Environment, path: str, mode: str, requested: LayoutRequest
) -> tuple[StoredParams, bytes]:
    """The stored parameters and the raw meta record they come from."""
    stored = _read_meta(env, path)
    if stored is None:
        if env.readonly or mode == "w":
            # Made by an earlier simstore, which created stores in place: a
            # creation under way or cut short. Not a store yet, nor foreign.
            raise StoreNotFoundError(
                errno.ENOENT,
                f"no simstore store at {path} yet: it is an LMDB file nothing was written to "
                "(a creation under way, or one that was interrupted); use mode 'c' to create the store",
            )
        created = _create(env, requested)
        if created is not None:
            return created
        stored = _read_meta(env, path)  # another process created it first
        if stored is None:
            raise CorruptStoreError(f"{path} lost its meta record")
    params = decode_meta(stored)
    fingerprinter = requested.fingerprinter
    requested_settings = fingerprinter.settings() if fingerprinter is not None else None
    requested_tables = None
    if is_multi_index(requested.layout):
        if params.scheme is None:
            raise ParameterMismatchError({"layout": (layout_name(params.k, params.layout), MULTI_INDEX_KIND)})
    elif requested.layout is not None:
        requested_tables = tuple(layout_tables(requested.layout, params.k)[1])
    if requested.bands is not None and (
        (params.bands is not None) != bool(requested.bands)
        or (not isinstance(requested.bands, bool) and params.bands != requested.bands)
    ):
        raise ParameterMismatchError({"bands": (params.bands, requested.bands)})
    check_requested(
        params,
        {
            "k": requested.k,
            "blocks": requested.blocks,
            "fingerprinter": requested_settings,
            "tables": requested_tables,
            "min_similarity": _asked_threshold(params, requested.min_similarity),
        },
    )
    return params, stored


def _read_meta(env: _lmdb.Environment, path: str) -> bytes | None:
    """The raw meta record, or ``None`` for an LMDB file no transaction ever
    wrote (a store whose creation was interrupted, or a new file).

    Raises:
        NotAStoreError: the file holds data that is not a simstore store.
    """
    names, snapshot = env.named_databases()
    if not names:
        # LMDB writes transaction 0 when it makes a file; anything later was
        # someone's data, even if they deleted it again.
        if snapshot == 0:
            return None
        raise NotAStoreError(f"{path} is an LMDB file written by another program, not a simstore store")
    ours = set(names) & set(_lmdb.FIXED_DB_NAMES)
    if _lmdb.DB_META not in names:
        if len(ours) >= 3:
            raise CorruptStoreError(f"{path} is a damaged simstore store: it lacks its meta sub-database")
        raise NotAStoreError(f"{path} is an LMDB file written by another program, not a simstore store")
    raw = env.read_meta_record()
    if raw is None:
        if len(ours) >= 3:
            raise CorruptStoreError(f"{path} is a damaged simstore store: it lost its meta record")
        raise NotAStoreError(f"{path} has no simstore meta record")
    return raw


def _create(env: _lmdb.Environment, requested: LayoutRequest) -> tuple[StoredParams, bytes] | None:
    """Write a new store's meta record and state into an LMDB file nothing
    was written to; ``None`` if, by the time this process held the writer
    lock, another process had done so (the caller adopts that store).

    The look and the writes are one write transaction: two processes that
    both found the file empty cannot both create (the second would reset
    the first's counters while its documents stayed, and lose them).
    """
    chosen_k, tables, layout_spec, chosen_blocks = choose_layout(requested)
    fingerprinter = requested.fingerprinter or Fingerprinter()
    params = StoredParams(
        k=chosen_k,
        blocks=chosen_blocks,
        tables=tables,
        layout=layout_spec,
        fingerprinter=fingerprinter.settings(),
        segmenter=segmenter_info(),
        min_similarity=_new_threshold(requested, fingerprinter),
    )

    raw_meta = encode_meta(params, version=__version__)

    def body(txn: _lmdb.Txn) -> bool:
        if env.has_named_databases(txn):
            return False  # created meanwhile (or foreign: the caller's read says which)
        handles = env.create_handles(txn, params.stored_tables, sketches=fingerprinter.sketch is not None)
        txn.put(META_KEY, raw_meta, db=handles.meta)
        txn.put(STATE_KEY, State().encode(), db=handles.meta)
        # The store's own salt for its write-ahead log's records: a log another
        # store left under this name (its file deleted) never passes for this one's.
        txn.put(LOG_KEY, new_log_state(), db=handles.meta)
        return True

    if not env.write(body):
        return None
    return params, raw_meta


def _new_threshold(requested: LayoutRequest, fingerprinter: Fingerprinter) -> float | None:
    """A new store's threshold: the one that finds the similarity asked for
    (:func:`simstore.layout.presets.verification_threshold`; as it is if
    it is an :class:`~simstore.layout.presets.ExactThreshold`), else the
    default if it keeps sketches."""
    similarity = requested.min_similarity
    if fingerprinter.sketch is None:
        return None
    if similarity is None:
        return DEFAULT_MIN_SIMILARITY
    return (
        similarity
        if requested.exact_threshold
        else verification_threshold(similarity, fingerprinter.sketch.bins)
    )


def _asked_threshold(params: StoredParams, requested: float | None) -> float | None:
    """The stored threshold where a reopening's ``min_similarity`` names it
    (the one a new store asked for it verifies at, or the very value: a
    store made before presets lowered it, or an exact one); else the value
    asked for, which the mismatch then reports."""
    if requested is None or requested == params.min_similarity:
        return requested
    sketch = Fingerprinter.from_settings(params.fingerprinter or UNRECORDED_SETTINGS).sketch
    return named_threshold(requested, params.min_similarity, None if sketch is None else sketch.bins)


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError as exc:  # removed since it was seen (mode "n" elsewhere)
        raise StoreNotFoundError(errno.ENOENT, f"no simstore store at {path}") from exc


def _path_text(path: object) -> str:
    """The store's path as text, or a simstore error for what is not a path."""
    try:
        path_text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError as exc:
        raise InvalidTypeError(
            f"a store path must be str, bytes or os.PathLike, got {type(path).__name__}"
        ) from exc
    if not isinstance(path_text, str):
        path_text = os.fsdecode(path_text)
    if "\0" in path_text or not path_text:
        raise InvalidValueError(f"a store path must be non-empty and hold no NUL byte, got {path_text!r}")
    try:
        os.fsencode(path_text)
    except UnicodeEncodeError as exc:
        # A lone surrogate (from a command line, say) names no file.
        raise InvalidValueError(
            f"a store path must be a name the file system can hold, got {path_text!r}"
        ) from exc
    return path_text


def _check_one_name(path: str) -> None:
    """Refuse a store file with more than one name (hard links).

    LMDB locks a store through the lock file beside the name it is opened by:
    processes opening it by two names would each take a writer lock of their
    own and write at once. A new store has two names for an instant (see
    :func:`_create_beside`), so a second name is looked at again first.

    Raises:
        StoreLockedError: the file still has several names.
    """
    for _ in range(HARD_LINK_CHECKS):
        try:
            if os.stat(path).st_nlink <= 1:
                return
        except FileNotFoundError:
            return  # removed meanwhile: the open that follows says so
        time.sleep(HARD_LINK_WAIT_SECONDS)
    raise StoreLockedError(
        f"{path} has {os.stat(path).st_nlink} names (hard links): processes opening it by different "
        "names would lock different lock files and write at once; remove the other names "
        "(a backup is a copy: `simstore compact STORE --copy-to NEW`)"
    )


def _check_map_room(path: str, map_size: int) -> None:
    """Refuse a ``map_size`` the disk cannot hold before anything is made: a
    writer allocates its whole map on the disk (see docs/how-it-works.md)."""
    folder = os.path.dirname(path) or "."
    try:
        status = os.statvfs(folder)
    except OSError:
        return  # a missing folder: the open that follows says so
    room = status.f_bavail * status.f_frsize + (_file_size(path) if os.path.exists(path) else 0)
    if map_size > room:
        raise StoreFullError(
            errno.ENOSPC,
            f"map_size={map_size:,} bytes cannot be allocated for {path}: the disk has {room:,} bytes "
            "for it. A writer's map is allocated on the disk whole; leave map_size out (the map grows "
            "as the store does) and give max_map_size for a ceiling",
        )


def _check_writable(path: str, mode: str) -> None:
    """Refuse to open for writing (or replace, for mode "n") a file this user
    may not write: LMDB's own error would name neither the file nor a way out."""
    if not os.access(path, os.W_OK):
        way_out = "it cannot be replaced" if mode == "n" else "open it with mode 'r' to read it"
        raise AccessDeniedError(errno.EACCES, f"{path} is not writable by this user: {way_out}")
    if mode == "n" and not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
        raise AccessDeniedError(
            errno.EACCES, f"{path} cannot be replaced: no permission to write in its folder"
        )


def _not_open_elsewhere(path: str) -> contextlib.AbstractContextManager[None]:
    """Hold off every process from opening the store at ``path`` while mode
    "n" deletes it, after making sure none has it open now.

    Every process that has an LMDB file open holds a shared ``fcntl`` lock
    on the first byte of its lock file, and takes it before anything else
    when it opens; an exclusive lock on that byte can only be had while no
    other process has the file open, and keeps new ones waiting.

    Raises:
        StoreLockedError: this or another process has the store open.
    """
    if open_in_this_process(path):
        raise StoreLockedError(f"{path} is open in this process; close that Store before replacing the file")
    return exclusive_lock_file(
        path, "mode 'n' would delete documents that process has written; close it there first"
    )


@contextlib.contextmanager
def exclusive_lock_file(path: str, refusal: str) -> Iterator[None]:
    """Keep every other process from opening the store at ``path`` for the
    block, after making sure none has it open (see :func:`_not_open_elsewhere`).

    Raises:
        StoreLockedError: another process has the store open (``refusal``
            says what that would cost).
    """
    lock = _lmdb.lock_path(path)
    try:
        import fcntl
    except ImportError:  # Windows: LMDB locks otherwise there, and no check is made
        yield
        return
    try:
        descriptor = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        yield  # never opened (a store leaves its lock file behind when closed)
        return
    except PermissionError as exc:
        raise AccessDeniedError(errno.EACCES, f"{path} cannot be replaced: {lock} is not writable") from exc
    try:
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            raise StoreLockedError(f"{path} is open in another process: {refusal}") from exc
        yield
    finally:
        os.close(descriptor)  # and with it the lock


def _replace_store(path: str, requested: LayoutRequest, opts: Options) -> None:
    """Replace an existing store with a new, empty one for mode "n", refusing
    files that are not stores.

    Only a file whose meta record names the simstore format (of any version)
    or an LMDB file nothing was ever written to is replaced; a foreign or
    unreadable file raises ``NotAStoreError`` and stays as it was.

    The old file is removed and the new one made and put in its place while
    no other process can open the store, and its lock file is kept and set up
    afresh for the new file before they may: a process that began to open the
    store meanwhile waits on that lock file, and would otherwise lock one
    file while later openers lock another (two writers at once), or trust
    its record of the old file's last transaction.
    """
    if os.path.getsize(path) > 0:
        env = _lmdb.Environment(
            path, readonly=True, sync=False, map_size=None, max_map_size=None, wal=WRITE_AHEAD_LOG
        )
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
    with _not_open_elsewhere(path):
        os.remove(path)
        _create_beside(path, requested, opts)
        if os.path.exists(path):  # else made in place, see _create_beside
            _lmdb.rebuild_lock_file(path)
