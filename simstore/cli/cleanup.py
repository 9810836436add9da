"""What a command that fails, or is interrupted, leaves behind: nothing it made.

- A store a command created (``add``, ``import``, ``dedup --store``) and
  never committed a document to is removed again
  (:func:`remove_unused_store`), with the files that came with it, unless
  another process has it open.
- Temporary files and ``dedup``'s scratch folder (its temporary store,
  stdin copied to a file) are made with Ctrl-C and ``SIGTERM`` held back
  (:func:`signals_held`), inside the ``try`` whose ``finally`` removes them;
  a removal that an interrupt cuts short (or that it falls on as it is
  called) is done again in full before the interrupt goes on. (One
  interrupt, that is: a second Ctrl-C exits at once, see :mod:`simstore.cli`.)
- A run killed with ``SIGKILL`` cannot remove its scratch folder: each
  folder holds a lock its run keeps (the kernel lets it go when the process
  dies), and the next ``dedup`` removes the folders whose lock nobody holds.
- A store's creation that ``SIGKILL`` cut short leaves a hidden
  ``.NAME.PID.HEX.creating`` file (see :func:`simstore.store.opening._create_beside`);
  the next command that creates a store there removes those of processes
  that are gone (:func:`remove_stale_creations`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from types import FrameType

from simstore.errors import SimstoreError
from simstore.store.opening import exclusive_lock_file

try:
    import fcntl
except ImportError:  # Windows: no flock; scratch folders of killed runs stay
    fcntl = None  # type: ignore[assignment]

#: The files that may come with a store: LMDB's lock file, the write-ahead
#: log and the writers' mailbox.
STORE_SIDECARS = ("-lock", "-log", "-writers")
#: The name of ``dedup``'s scratch folders under ``$TMPDIR``.
SCRATCH_PREFIX = "simstore-dedup-"
#: The file in a scratch folder whose lock says its run is alive.
SCRATCH_LOCK = ".simstore-run"

_HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and ``SIGTERM`` wait until the block is done, and are
    delivered then: for steps that must not be cut in two. (Their handlers
    are swapped for ones that note them: blocking them with
    ``pthread_sigmask`` holds them back from this thread only, and the
    threads of numpy's BLAS take them instead.) Only in the main thread,
    where Python runs signal handlers; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        noted.append(signum)

    previous = {}
    for signum in _HELD:
        handler = signal.getsignal(signum)
        # Ignored stays ignored; None is a handler set from C, which could not be put back.
        if handler is not signal.SIG_IGN and handler is not None:
            previous[signum] = signal.signal(signum, note)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for noted_signal in dict.fromkeys(noted):
            os.kill(os.getpid(), noted_signal)  # delivered now, to the handler it would have met


# A clean-up that an interrupt cuts short is run again in full, then the
# interrupt goes on. The try must be in the frame that calls the clean-up:
# an interrupt that falls as a function is entered is raised before any try
# inside it, so a helper doing this would lose one that fell on the helper's
# own call (the scratch folder of a run interrupted as it ended stayed).


def remove_file(path: str) -> None:
    """Remove the file at ``path`` if it is there."""
    with contextlib.suppress(OSError):
        os.remove(path)


def existing_files(path: str) -> set[str]:
    """Which of a store's file and its sidecars exist now."""
    return {name for name in (path, *(path + suffix for suffix in STORE_SIDECARS)) if os.path.lexists(name)}


def remove_unused_store(path: str, existed_before: set[str], documents: int | None) -> bool:
    """Remove the store a command created at ``path`` (with the sidecars of
    it that were not in ``existed_before``), because it failed before it
    committed a document. ``documents`` is how many the store holds, as
    this process last saw (``None``: not known, it is looked at here).

    Nothing is removed if the store holds documents or another process has
    it open (it created the store at the same moment, or adopted ours and
    writes to it). Returns whether it was removed."""
    if path in existed_before or not os.path.exists(path):
        return False
    try:
        if documents is None:
            from simstore.store.opening import open as open_store

            with open_store(path, "r") as store:
                documents = len(store)
        if documents:
            return False
        with exclusive_lock_file(path, "it is in use"):
            for name in (path, *(path + suffix for suffix in STORE_SIDECARS)):
                if name not in existed_before:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(name)
    except (SimstoreError, OSError):
        return False
    return True


def remove_new_store(path: str, existed_before: set[str]) -> None:
    """:func:`remove_unused_store` of a closed store, done again in full if
    an interrupt cuts it short (or falls as it begins)."""
    try:
        remove_unused_store(path, existed_before, None)
    except KeyboardInterrupt:
        remove_unused_store(path, existed_before, None)
        raise


# ------------------------------------------------------------- scratch folders


@contextlib.contextmanager
def scratch_folder(prefix: str = SCRATCH_PREFIX) -> Iterator[str]:
    """A new folder under ``$TMPDIR``, removed with what it holds when the
    block ends, however it ends (a ``SIGKILL`` aside: see the module's
    docstring). Folders of earlier runs that were killed are removed first."""
    remove_abandoned_scratch(prefix)
    folder: str | None = None
    locks: list[int] = []
    try:
        # Made and named inside the try, with interrupts held: one that comes
        # after is raised where the finally below removes the folder.
        with signals_held():
            folder = tempfile.mkdtemp(prefix=prefix)
            locks.extend(_lock_scratch(folder))
        yield folder
    finally:
        # An interrupt cutting the removal short (or falling as it begins) is
        # raised after it has been done again in full.
        try:
            _remove_scratch(folder, locks)
        except KeyboardInterrupt:
            _remove_scratch(folder, locks)
            raise


def _remove_scratch(folder: str | None, locks: list[int]) -> None:
    """Remove ``folder`` and let its lock go (safe to call twice: the lock's
    descriptor leaves ``locks`` as it is closed)."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    while locks:
        os.close(locks.pop())


def _lock_scratch(folder: str) -> list[int]:
    """Take the lock that says ``folder``'s run is alive; its descriptor (none without flock)."""
    if fcntl is None:
        return []
    descriptor = os.open(os.path.join(folder, SCRATCH_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    return [descriptor]


def remove_abandoned_scratch(prefix: str = SCRATCH_PREFIX) -> list[str]:
    """Remove this user's scratch folders under ``$TMPDIR`` whose run is
    gone (nobody holds their lock); returns them. A folder without the lock
    file (made by an older simstore, or a run killed before it took its
    lock) is left alone."""
    removed: list[str] = []
    if fcntl is None:
        return removed
    root = tempfile.gettempdir()
    try:
        names = [name for name in os.listdir(root) if name.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        folder = os.path.join(root, name)
        try:
            if os.lstat(folder).st_uid != os.getuid() or not os.path.isdir(folder):
                continue
            descriptor = os.open(os.path.join(folder, SCRATCH_LOCK), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its run is alive
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(descriptor)
    return removed


# ------------------------------------------------------ interrupted creations


def remove_stale_creations(path: str) -> list[str]:
    """Remove the ``.NAME.PID.HEX.creating`` files (and their lock files)
    that creations of a store at ``path`` by processes now gone left beside
    it; returns them. One whose process is alive, or that some process has
    open, is left alone."""
    folder, name = os.path.split(os.path.abspath(path))
    pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\.[0-9a-f]+\.creating")
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for entry in names:
        found = pattern.fullmatch(entry)
        if found is None or _alive(int(found.group(1))):
            continue
        leftover = os.path.join(folder, entry)
        try:
            with exclusive_lock_file(leftover, "it is being created"):
                for name_of in (leftover, leftover + "-lock"):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(name_of)
        except (SimstoreError, OSError):
            continue
        removed.append(leftover)
    return removed


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (on this machine)."""
    if os.name == "nt":
        return True  # os.kill(pid, 0) there would send Ctrl-C
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's
    return True
