"""The files beside a store after a crash or a restart: a copy put in place of the
store, a FIFO or a folder where the log or the lock file should be, a store whose
meta pages were zeroed, a log this user may not write."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
from pathlib import Path

import lmdb
import pytest

import simstore
from simstore.engine import wal
from simstore.engine.writelog import WriteLog

NEW_BOOT = b"another boot...."


def _write_and_stop(path: str, count: int) -> None:
    wal.CHECKPOINT_INTERVAL = 3600.0  # records pile up after the checkpoint
    store = simstore.open(path, "w")
    for number in range(count):
        store.add(f"orig{number}", fingerprint=(number * 104729) << 10)
    os._exit(0)  # killed: its records after the checkpoint are the log's


def _reopen_after_restart(path: str, report: Path) -> None:
    wal.boot_id = lambda: NEW_BOOT
    try:
        with simstore.open(path, "w") as store:
            keys = list(map(str, store.keys()))
            problems = store.check()
        copies = sum(key.startswith("copy") for key in keys)
        originals = sum(key.startswith("orig") for key in keys)
        report.write_text(f"ok {len(keys)} {copies} {originals} {len(problems)}")
    except simstore.SimstoreError as exc:
        report.write_text(f"error {type(exc).__name__}: {exc}")
    os._exit(0)


def test_a_copy_with_a_history_of_its_own_put_in_place_keeps_its_documents(tmp_path: Path) -> None:
    """A store P is copied to X; P is killed with records after its checkpoint; X goes
    on committing; X is copied over P in place (same inode, same salt). After the
    restart P's log must not roll X's file back to P's checkpoint."""
    original, copy = str(tmp_path / "s.simstore"), str(tmp_path / "other.simstore")
    with simstore.open(original, "c", k=3) as store:
        for number in range(10):
            store.add(f"base{number}", fingerprint=number * 1000003)
    shutil.copyfile(original, copy)
    context = multiprocessing.get_context("fork")
    writer = context.Process(target=_write_and_stop, args=(original, 2500))
    writer.start()
    writer.join()
    log = WriteLog.open(wal.log_path(original), writable=False)
    checkpoint = log.checkpoint()
    assert checkpoint is not None
    last_record = [txn_id for txn_id, _, _ in log.records(checkpoint)][-1]
    log.close()
    target = (checkpoint.txn_id + last_record) // 2  # inside the original's replay range
    with simstore.open(copy, "w") as store:
        number = 0
        while store._engine.env.last_txn_id() < target:
            store.add(f"copy{number}", fingerprint=(number * 7919) << 20)
            number += 1
        copy_documents = len(store)
    inode = os.stat(original).st_ino
    shutil.copyfile(copy, original)
    assert os.stat(original).st_ino == inode
    os.unlink(original + "-lock")
    report = tmp_path / "report"
    reopen = context.Process(target=_reopen_after_restart, args=(original, report))
    reopen.start()
    reopen.join()
    assert reopen.exitcode == 0
    assert report.read_text() == f"ok {copy_documents} {copy_documents - 10} 0 0"


def _open_read_only(path: str) -> None:
    with simstore.open(path, "r") as store:
        assert len(store) == 1
    os._exit(0)


def test_a_fifo_at_the_log_does_not_block_a_read_only_open(tmp_path: Path) -> None:
    path = str(tmp_path / "s.simstore")
    with simstore.open(path, "c", k=3) as store:
        store.add("a", fingerprint=1)
    os.unlink(wal.log_path(path))
    os.mkfifo(wal.log_path(path))
    reader = multiprocessing.get_context("fork").Process(target=_open_read_only, args=(path,))
    reader.start()
    reader.join(60)  # (an open takes milliseconds; a blocked one never returns)
    if reader.exitcode is None:
        os.kill(reader.pid, signal.SIGKILL)
        reader.join()
        pytest.fail("a read-only open blocked on a FIFO at the log's name")
    assert reader.exitcode == 0
    with simstore.open(path, "w") as store:  # a writer treats it as no log, and leaves it
        store.add("b", fingerprint=2)
    assert Path(wal.log_path(path)).is_fifo()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
@pytest.mark.parametrize("mode", ["r", "w", "c"])
def test_a_fifo_or_folder_at_the_lock_file_is_refused_by_name(tmp_path: Path, kind: str, mode: str) -> None:
    path = str(tmp_path / "s.simstore")
    with simstore.open(path, "c", k=3) as store:
        store.add("a", fingerprint=1)
    os.unlink(path + "-lock")
    if kind == "fifo":
        os.mkfifo(path + "-lock")
    else:
        os.mkdir(path + "-lock")
    with pytest.raises(simstore.StoreLockedError, match=f"(?i)is a {kind}"):
        simstore.open(path, mode)


def test_zeroed_meta_pages_are_reported_as_damage(tmp_path: Path) -> None:
    """Its log names the file: it is a damaged store, not another program's."""
    path = tmp_path / "s.simstore"
    with simstore.open(str(path), "c", k=3) as store:
        store.add("a", fingerprint=1)
    raw = bytearray(path.read_bytes())
    raw[: 2 * 4096] = bytes(2 * 4096)
    path.write_bytes(bytes(raw))
    for mode in ("r", "w"):
        with pytest.raises(simstore.CorruptStoreError, match="damaged simstore store"):
            simstore.open(str(path), mode)
    foreign = tmp_path / "foreign.simstore"
    foreign.write_bytes(bytes(raw))  # the same bytes, with no log naming them
    with pytest.raises(simstore.NotAStoreError):
        simstore.open(str(foreign), "r")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_writer_that_cannot_write_the_log_is_refused(tmp_path: Path) -> None:
    """Every writer pins the log's checkpoint, or a power loss could not be undone:
    one that may not write the log is refused; a reader is let in."""
    path = str(tmp_path / "s.simstore")
    with simstore.open(path, "c", k=3) as store:
        store.add("a", fingerprint=1)
    os.chmod(wal.log_path(path), 0o444)
    with pytest.raises(simstore.AccessDeniedError, match="write-ahead log"):
        simstore.open(path, "w", sync=False)
    with simstore.open(path, "r") as store:
        assert "a" in store


def test_a_store_only_written_without_sync_keeps_no_log(tmp_path: Path) -> None:
    """sync=False writers of a store that never had a durable writer use no log (and
    pay for no pin): a restart finds nothing to roll back, as LMDB's own sync=False."""
    path = str(tmp_path / "s.simstore")
    with simstore.open(path, "c", k=3, sync=False) as store:
        store.add("fast", fingerprint=5)
        assert store._engine.env.log_writer is None
    with simstore.open(path, "w", sync=True) as store:  # a durable writer puts the log in use
        store.add("durable", fingerprint=6)
    with simstore.open(path, "w", sync=False) as store:  # and every later writer joins it
        assert store._engine.env.log_writer is not None
        store.add("fast again", fingerprint=7)


def _stop_without_closing(path: str, sync: object) -> None:
    store = simstore.open(path, "w", sync=sync)
    store.add("unclean", fingerprint=7)
    os._exit(0)


def _read_after_restart(path: str, report: Path) -> None:
    wal.boot_id = lambda: NEW_BOOT
    try:
        with simstore.open(path, "r") as store:
            report.write_text(f"read {len(store)}")
    except simstore.StoreLockedError:
        with simstore.open(path, "w") as store:
            count = len(store)
        with simstore.open(path, "r") as store:
            report.write_text(f"refused, then {count} {len(store)}")
    os._exit(0)


@pytest.mark.parametrize("sync", [True, False, "interval"])
def test_after_a_restart_a_store_left_unclean_is_rolled_back_before_it_is_read(
    tmp_path: Path, sync: object
) -> None:
    """In a store whose log is in use (a sync=True writer wrote it), whatever the sync
    of its writer, a store committed to after its last checkpoint may be torn by a
    power loss: a read-only open is refused until a writable one has rolled it back;
    a store closed cleanly reads at once."""
    path = str(tmp_path / "s.simstore")
    with simstore.open(path, "c", k=3) as store:
        store.add("clean", fingerprint=5)
    context = multiprocessing.get_context("fork")
    report = tmp_path / "report"
    reader = context.Process(target=_read_after_restart, args=(path, report))
    reader.start()
    reader.join()
    assert report.read_text() == "read 1"
    writer = context.Process(target=_stop_without_closing, args=(path, sync))
    writer.start()
    writer.join()
    reader = context.Process(target=_read_after_restart, args=(path, report))
    reader.start()
    reader.join()
    # sync=True replays its record; the others' add was not promised to survive
    # (here its record is still in the log: no power was lost).
    expected = {"refused, then 2 2"} if sync is True else {"refused, then 1 1", "refused, then 2 2"}
    assert report.read_text() in expected


@pytest.mark.parametrize(
    "failure",
    [wal.MapMovedError(), OSError(5, "Input/output error"), lmdb.MapResizedError("grown")],
)
def test_a_checkpoint_that_fails_at_close_still_closes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    """A close whose last checkpoint fails (another process grew the map meanwhile, an
    I/O error) must still close LMDB's environment: py-lmdb refuses to open a file
    again in a process that has it open (a layout reload opens it anew)."""
    path = str(tmp_path / "s.simstore")
    store = simstore.open(path, "c", k=3, merge_on_close=False)
    store.add("a", fingerprint=1)

    def fail(_writer: wal.LogWriter) -> None:
        raise failure

    monkeypatch.setattr(wal.LogWriter, "checkpoint", fail)
    store.close()
    monkeypatch.undo()
    with simstore.open(path, "w") as reopened:  # the record is in the log: nothing was lost
        assert reopened.get("a") is not None
