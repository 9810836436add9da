"""Give a store's free pages back to the file system: ``simstore.shrink``.

LMDB never shortens its file. Pages that removals, merges and compaction free
go to its free list and are reused by later writes, so a store that lost most
of its documents keeps the file it had at its largest. Only a copy holding
just the pages in use is smaller, and only while no process has the store
open may that copy take the store's place: a process with the old file
mapped would go on writing into it, and its writes would be lost.

So shrinking joins the tables' runs (``Store.compact``), then, holding the
lock file exclusively (no other process can have the store open, and openers
wait), writes the compacted copy beside the store, flushes it, renames it over
the store and has LMDB rebuild the lock file from the new file before anyone
else opens it. A crash before the rename leaves the store as it was (and
possibly the ``.NAME.PID.HEX.shrinking`` copy, which nothing else makes; the
next shrink of that store deletes it, holding the lock file, when no other
shrink can be writing one); after it, the new file, whole.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat

from simstore.engine import _lmdb
from simstore.engine.core import open_in_this_process
from simstore.errors import StoreLockedError, StoreNotFoundError
from simstore.results import Shrunk
from simstore.store.opening import _path_text, exclusive_lock_file, fsync_path
from simstore.store.opening import open as open_store


def shrink(path: str | os.PathLike[str]) -> Shrunk:
    """Join every run of the store at ``path`` into one and rewrite its file
    with only the pages in use, so that what removals freed goes back to the
    file system.

    Every process must have closed the store; openers that come while the file
    is rewritten wait for it. It needs free disk space for the new file
    (at most the size of the data in the store).

    Returns:
        The file's size before and after, in bytes.

    Raises:
        StoreNotFoundError: no file at ``path``.
        NotAStoreError: the file is not a simstore store (it is not modified).
        StoreLockedError: this or another process has the store open.
        StoreFullError: no room on the disk for the new file (the store is
            left as it was).
    """
    # The file itself, as open() resolves it: by a symlink's name, the swap
    # would replace the link with a file, and lock the link's lock file.
    path_str = os.path.realpath(_path_text(path))
    if not os.path.exists(path_str):
        raise StoreNotFoundError(errno.ENOENT, f"no simstore store at {path_str}")
    if open_in_this_process(path_str):
        raise StoreLockedError(f"{path_str} is open in this process; close that Store before shrinking it")
    refusal = "its map would go on writing to the old file; close it there first"
    # Looked at before the compaction too, which would otherwise rewrite a large
    # store's tables (holding up that process's writes) only to be refused.
    with exclusive_lock_file(path_str, refusal):
        pass
    with open_store(path_str, "w") as store:
        store.compact()
    before = os.path.getsize(path_str)
    directory, name = os.path.split(path_str)
    copy = os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.shrinking")
    with exclusive_lock_file(path_str, refusal):
        _remove_orphaned_copies(directory, name)
        try:
            _lmdb.copy_compacted_unlocked(path_str, copy)
            fsync_path(copy)
            _take_owner_and_mode(copy, os.stat(path_str))
            os.replace(copy, path_str)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(copy)
        fsync_path(directory or ".")
        _lmdb.rebuild_lock_file(path_str)
    return Shrunk(before, os.path.getsize(path_str))


def _remove_orphaned_copies(directory: str, name: str) -> None:
    """Delete the copies earlier shrinks of store ``name`` left when they
    were killed. Called holding the lock file alone: any shrink of this store
    writes its copy only while it holds it, so every copy found is an orphan.
    Only names that this module makes (``.NAME.PID.HEX.shrinking``) are
    touched, and only regular files."""
    pattern = re.compile(re.escape(f".{name}.") + r"[0-9]+\.[0-9a-f]{8}\.shrinking")
    with os.scandir(directory or ".") as entries:
        for entry in entries:
            if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(entry.path)


def _take_owner_and_mode(path: str, original: os.stat_result) -> None:
    """Give the new file the store's permission bits and, where this user may,
    its owner and group (root shrinking another user's store)."""
    os.chmod(path, stat.S_IMODE(original.st_mode))
    if (original.st_uid, original.st_gid) != (os.getuid(), os.getgid()):
        with contextlib.suppress(PermissionError):
            os.chown(path, original.st_uid, original.st_gid)
