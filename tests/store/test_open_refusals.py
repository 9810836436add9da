"""What simstore.open refuses, with a simstore error, leaving every file as it was:
replacing a store another process (or this one) has open, files this user may not
write, files that are not stores, and paths that are not paths."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _lmdb_files import last_transaction

import simstore
from simstore.engine.wal import WRITE_AHEAD_LOG
from simstore.store import opening


def _digest(path: Path) -> bytes:
    return path.read_bytes()


def test_mode_n_refuses_a_store_another_process_has_open(tmp_path: Path) -> None:
    """A store held open elsewhere is not deleted under that process: its acknowledged
    writes, before and after the refused replacement, are all kept. Once it is closed,
    mode "n" replaces it."""
    path = tmp_path / "held.simstore"
    holder = simstore.open(path)
    holder.add("before", fingerprint=1)
    code = (
        "import sys, simstore\n"
        "try:\n"
        "    simstore.open(sys.argv[1], mode='n').add('replacer', fingerprint=3)\n"
        "except simstore.StoreLockedError as exc:\n"
        "    print('refused:', exc)\n"
    )
    replacer = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert replacer.stdout.startswith("refused:"), replacer.stdout + replacer.stderr
    assert "open in another process" in replacer.stdout
    holder.add("after", fingerprint=2)
    holder.close()
    with simstore.open(path, "r") as reader:
        assert sorted(reader.keys()) == ["after", "before"]
    with simstore.open(path, "n") as fresh:
        assert len(fresh) == 0


def test_mode_n_refuses_a_store_this_process_has_open(tmp_path: Path) -> None:
    path = tmp_path / "mine.simstore"
    with simstore.open(path) as store:
        store.add("kept", fingerprint=1)
        with pytest.raises(simstore.StoreLockedError):
            simstore.open(path, "n")
        assert store.keys() == ["kept"]


def test_the_lock_check_finds_a_holder_in_another_process(tmp_path: Path) -> None:
    """The fcntl test itself, without the read-only probe before it: a process that has
    the store open is seen; with none, the lock is had (and let go again)."""
    path = tmp_path / "lock.simstore"
    simstore.open(path).close()
    with opening.exclusive_lock_file(str(path), "test"):
        pass  # nobody has it open
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, simstore; s = simstore.open(sys.argv[1]); print('open', flush=True); "
            "sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(simstore.StoreLockedError), opening.exclusive_lock_file(str(path), "test"):
            pass
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    with opening.exclusive_lock_file(str(path), "test"):
        pass


@pytest.mark.parametrize("mode", ["w", "c", "n"])
def test_a_file_this_user_may_not_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """As root every file is writable, so the permission test is stood in for: a store
    this user may not write is neither opened for writing nor replaced, and a reader
    still opens it."""
    path = tmp_path / "theirs.simstore"
    with simstore.open(path) as store:
        store.add("theirs", fingerprint=1)
    before = _digest(path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, how: False if how == os.W_OK else real_access(p, how))
    with pytest.raises(simstore.AccessDeniedError, match="not writable by this user"):
        simstore.open(path, mode)
    assert _digest(path) == before
    with simstore.open(path, "r") as reader:
        assert reader.keys() == ["theirs"]


def test_creating_in_a_folder_this_user_may_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's refusal stood in for (root may write anywhere): AccessDeniedError
    naming the folder, and nothing left in it."""
    real_open = os.open

    def refused(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(simstore.AccessDeniedError, match="no permission to write in the folder"):
        simstore.open(tmp_path / "new.simstore")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_a_folder_this_user_may_not_write(tmp_path: Path) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(simstore.AccessDeniedError):
            simstore.open(folder / "new.simstore")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


def test_an_empty_file_is_not_made_a_store(tmp_path: Path) -> None:
    """An empty file is someone else's (a new store appears whole under its name):
    every mode refuses it and leaves it empty, "n" too (it replaces stores only)."""
    path = tmp_path / "empty.simstore"
    path.write_bytes(b"")
    for mode in ("r", "w", "c", "n"):
        with pytest.raises(simstore.NotAStoreError, match="empty file"):
            simstore.open(path, mode)
        assert path.read_bytes() == b""
        assert not Path(f"{path}-lock").exists()


def test_a_lock_file_is_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    simstore.open(path).close()
    lock = Path(f"{path}-lock")
    before = _digest(lock)
    with pytest.raises(simstore.NotAStoreError):
        simstore.open(lock)
    assert _digest(lock) == before
    assert not Path(f"{lock}-lock").exists()


@pytest.mark.parametrize(
    ("path", "error"),
    [
        (3, simstore.InvalidTypeError),
        (None, simstore.InvalidTypeError),
        ("a\0b.simstore", simstore.InvalidValueError),
        ("", simstore.InvalidValueError),
        ("\ud800.simstore", simstore.InvalidValueError),  # a lone surrogate: no file's name
    ],
)
def test_what_is_not_a_path(path: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        simstore.open(path)  # type: ignore[arg-type]


def test_opening_adopts_a_map_another_process_grew(tmp_path: Path) -> None:
    """Another process growing the file while this one opens it: LMDB's MapResizedError
    from opening the sub-databases is met by adopting the new size, not raised."""
    import lmdb

    from simstore.engine import _lmdb

    path = str(tmp_path / "grown.simstore")
    with simstore.open(path, blocks=7) as store:  # format 2: 21 tables, 5 of them opened
        store.add("a", fingerprint=1)
    env = _lmdb.Environment(
        path, readonly=True, sync=False, map_size=None, max_map_size=None, wal=WRITE_AHEAD_LOG
    )
    real = env.env
    raised: list[str] = []

    class GrownOnce:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def open_db(self, *args: object, **kwargs: object) -> object:
            if len(raised) < 2:
                raised.append("resized")
                raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")
            return real.open_db(*args, **kwargs)

    env.env = GrownOnce()  # type: ignore[assignment]
    try:
        assert env.read_meta_record() is not None
        env.env = real
        raised.clear()
        env.env = GrownOnce()  # type: ignore[assignment]
        handles = env.open_existing(5)
        assert len(handles.tables) == 5
    finally:
        env.env = real
        env.close()
    assert raised == ["resized", "resized"]


@pytest.mark.parametrize("mode", ["r", "w"])
def test_opening_the_environment_adopts_a_map_grown_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Another process grew the map between LMDB reading the meta pages and
    beginning the transaction its open takes (seen in CI: a writer process
    failed to open with MDB_MAP_RESIZED). The open is begun again, mapping
    the file as long as it is now; an open that never settles is refused."""
    import lmdb

    from simstore.engine import _lmdb

    path = str(tmp_path / "grown.simstore")
    with simstore.open(path, k=3) as store:
        store.add("a", fingerprint=1)
    real_open = lmdb.open
    asked: list[int] = []

    def grown_twice(*args: object, **kwargs: object) -> object:
        asked.append(int(kwargs["map_size"]))  # type: ignore[call-overload]
        if len(asked) <= 2:
            raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(_lmdb.lmdb, "open", grown_twice)
    with simstore.open(path, mode) as store:
        assert store["a"].fingerprint == 1
    assert len(asked) >= 3
    assert asked[1] >= os.path.getsize(path)

    def always_grown(*args: object, **kwargs: object) -> object:
        raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")

    monkeypatch.setattr(_lmdb.lmdb, "open", always_grown)
    with pytest.raises(simstore.CorruptStoreError, match="kept changing size"):
        simstore.open(path, mode)


@pytest.mark.parametrize("raised", [KeyboardInterrupt, simstore.CorruptStoreError])
@pytest.mark.parametrize("mode", ["r", "w"])
def test_an_open_cut_short_once_lmdb_has_the_file_leaves_it_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: type[BaseException], mode: str
) -> None:
    """An interrupt (or a refusal, such as a truncated file) after LMDB opened
    the file closes it again: left open, every later open in the process was
    refused as "already open in this process" (seen in CI: Ctrl-C then left
    the command line unable to remove the empty store it had made)."""
    from simstore.engine import _lmdb

    path = str(tmp_path / "cut.simstore")
    with simstore.open(path, k=3) as store:
        store.add("a", fingerprint=1)
    real = _lmdb.Environment._check_not_truncated

    def cut_short(self: object, file_size: int) -> None:
        raise raised("cut short")

    monkeypatch.setattr(_lmdb.Environment, "_check_not_truncated", cut_short)
    with pytest.raises(raised) as caught:
        simstore.open(path, mode)
    monkeypatch.setattr(_lmdb.Environment, "_check_not_truncated", real)
    # Opened again while the error (its traceback holds the half-made
    # environment) is still being handled, as the command line's clean-up does.
    assert caught.traceback
    with simstore.open(path, mode) as store:
        assert store["a"].fingerprint == 1


# Mode "n" paused inside its hold on the lock file, once the new store is in place,
# until told to go on; then it adds a document of its own.
_PAUSED_REPLACE = """
import os, sys, time
import simstore, simstore.store.opening as opening
path, marker, go = sys.argv[1:4]
real_create = opening._create_beside
def create(*args):
    real_create(*args)
    open(marker, "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
opening._create_beside = create
with simstore.open(path, "n", k=3) as store:
    store.add("replacer", fingerprint=7)
"""

_WRITER = """
import sys, simstore
with simstore.open(sys.argv[1], "w") as store:
    store.add("waiter", fingerprint=9)
"""


@pytest.mark.parametrize("parity", [0, 1], ids=["even", "odd"])
def test_mode_n_keeps_a_waiting_opener_on_one_lock_file(tmp_path: Path, parity: int) -> None:
    """A process that opens the store while mode "n" replaces it waits, then writes into
    the new store: both processes lock one lock file, set up for the new file (with the
    old file's last transaction in it, the waiter read the new file's other meta page,
    an empty LMDB file, for one parity of that id)."""
    path = tmp_path / "s.simstore"
    with simstore.open(path, "n", k=3) as store:
        store.add("old", fingerprint=1)
    for index in range(4):
        if last_transaction(path) % 2 == parity:
            break
        with simstore.open(path, "w", merge_on_close=False) as store:  # one commit
            store.add(f"old-{index}", fingerprint=index + 2)
    assert last_transaction(path) % 2 == parity
    marker, go = tmp_path / "paused", tmp_path / "go"
    replacer = subprocess.Popen([sys.executable, "-c", _PAUSED_REPLACE, str(path), str(marker), str(go)])
    waiter = None
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert replacer.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.01)
        waiter = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)], stderr=subprocess.PIPE, text=True
        )
        time.sleep(0.5)
        assert waiter.poll() is None  # waiting for the replacement
        go.touch()
        assert replacer.wait(timeout=60) == 0
        _, errors = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, errors
    finally:
        go.touch()
        for process in (replacer, waiter):
            if process is not None and process.poll() is None:
                process.kill()
    with simstore.open(path, "r") as store:
        assert sorted(store.keys()) == ["replacer", "waiter"]
        assert store.check() == []


_ADDER = """
import sys, simstore
with simstore.open(sys.argv[1], "w", k=3) as store:
    for index in range(300):
        store.add(f"{sys.argv[2]}-{index}", fingerprint=index * 7919 + len(sys.argv[2]))
"""


def test_a_store_opened_by_a_symlink_is_locked_by_its_own_name(tmp_path: Path) -> None:
    """LMDB locks a store through the lock file beside the name it is opened by: two
    writers, one by a symlink, each took a writer lock of their own and corrupted the
    store. The name is resolved at open, so both lock the one lock file."""
    path = tmp_path / "s.simstore"
    simstore.open(path, k=3).close()
    link = tmp_path / "link.simstore"
    link.symlink_to(path)
    writers = [
        subprocess.Popen([sys.executable, "-c", _ADDER, str(name), tag])
        for name, tag in ((path, "real"), (link, "link"))
    ]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    # One lock file, one writers' mailbox and one write-ahead log, for both names.
    assert sorted(os.listdir(tmp_path)) == [
        "link.simstore",
        "s.simstore",
        "s.simstore-lock",
        "s.simstore-log",
        "s.simstore-writers",
    ]
    with simstore.open(link, "r") as store:
        assert store.path == str(path)
        assert len(store) == 600
        assert store.check() == []


def test_a_store_with_two_names_is_refused(tmp_path: Path) -> None:
    """A hard link cannot be resolved to one name: a store file with two is refused in
    every mode, and neither name is changed."""
    path = tmp_path / "s.simstore"
    with simstore.open(path, k=3) as store:
        store.add("a", fingerprint=1)
    other = tmp_path / "other.simstore"
    os.link(path, other)
    before = _digest(path)
    for name in (path, other):
        for mode in ("r", "w", "c", "n"):
            with pytest.raises(simstore.StoreLockedError, match="2 names"):
                simstore.open(name, mode)
    assert _digest(path) == before
    assert not Path(f"{other}-lock").exists()
    other.unlink()
    with simstore.open(path, "r") as store:
        assert store.keys() == ["a"]


def test_a_relative_name_keeps_naming_the_store_after_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The map grows by the store's name: taken as given, a relative one named another
    file (or none) once the process changed its working folder."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    with simstore.open("crawl.simstore", k=3, sync=False) as other:
        other.add("other", fingerprint=1)
    monkeypatch.chdir(second)
    store = simstore.open("crawl.simstore", k=3, sync=False)  # second/crawl.simstore
    monkeypatch.chdir(first)
    try:
        store.add_many(range(100_000), np.arange(100_000, dtype=np.uint64) * 7919)  # grows the map
        assert store.path == str(second / "crawl.simstore")
        assert store.check() == []
    finally:
        store.close()
    with simstore.open(first / "crawl.simstore", "r") as untouched:
        assert untouched.keys() == ["other"]


def test_a_forked_child_may_open_the_store_itself(tmp_path: Path) -> None:
    """A child forked while the parent has the store open opens it again (its own
    handle, as worker processes do); the store it inherited is closed in the child."""
    path = tmp_path / "s.simstore"
    parent = simstore.open(path, k=3)
    parent.add("parent", fingerprint=1)
    pid = os.fork()
    if pid == 0:  # the child: any failure is its exit status
        status = 1
        try:
            with simstore.open(path, "w") as own:
                own.add("child", fingerprint=2)
            try:
                parent.add("inherited", fingerprint=3)
            except simstore.StoreClosedError:
                status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent.add("parent-after", fingerprint=4)
    assert sorted(parent.keys()) == ["child", "parent", "parent-after"]
    assert parent.check() == []
    parent.close()


def test_a_map_size_the_disk_cannot_hold_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    """map_size is allocated on the disk whole: one past the free space is refused
    (it was halved until it fit, taking most of the disk without a word)."""
    path = tmp_path / "s.simstore"
    with pytest.raises(simstore.StoreFullError, match="map_size"):
        simstore.open(path, "c", map_size=2**62)
    assert os.listdir(tmp_path) == []
    with simstore.open(path, "c", k=3, map_size=4 << 20) as store:
        store.add("a", fingerprint=1)
    with pytest.raises(simstore.StoreFullError, match="map_size"):
        simstore.open(path, "w", map_size=2**62)
    with simstore.open(path, "r") as store:
        assert store.keys() == ["a"]
