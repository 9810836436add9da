"""A power loss, simulated, for stores written through the write-ahead log.

A forked child writes with ``sync=True`` (single adds and removes, ``add_many``
and ``store.batch()`` blocks, which the log holds as markers and checkpoints),
logs each write once its call returned, keeps a copy of the store file as it was
right after each flush of it (what a checkpoint put on the disk), and stops
without closing the store. The disk a power loss leaves is then made of that
copy with any share of the pages written since (the kernel writes dirty pages
back in any order, meta pages included), beside the log as the child flushed
it. Reopened in a "new boot" (a different boot id), the store must hold
exactly what the child acknowledged, with ``check()`` clean.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simstore
from simstore.engine import _lmdb, wal

PAGE = 4096


def _write(path: str, copy_path: str, acknowledged_path: str, seed: int, interval: float) -> None:
    wal.CHECKPOINT_INTERVAL = interval
    flush_file = _lmdb.Environment.flush_file

    def flush_and_copy(env: _lmdb.Environment) -> None:
        flush_file(env)
        with open(path, "rb") as file:
            durable = file.read()
        with open(copy_path + ".part", "wb") as file:
            file.write(durable)
        os.replace(copy_path + ".part", copy_path)

    _lmdb.Environment.flush_file = flush_and_copy  # type: ignore[method-assign]
    rng = random.Random(seed)
    store = simstore.open(path, "w", merge_threshold=100)
    with open(acknowledged_path, "w") as log:
        live: list[str] = []
        for step in range(300):
            roll = rng.random()
            if roll < 0.02:
                keys = [f"bulk-{step}-{n}" for n in range(40)]
                fingerprints = [rng.getrandbits(64) for _ in keys]
                store.add_many(keys, np.array(fingerprints, dtype=np.uint64))
                log.writelines(f"A {key} {fp}\n" for key, fp in zip(keys, fingerprints, strict=True))
                live += keys
            elif roll < 0.04:
                keys = [f"batch-{step}-{n}" for n in range(5)]
                fingerprints = [rng.getrandbits(64) for _ in keys]
                with store.batch() as batch:
                    for key, fingerprint in zip(keys, fingerprints, strict=True):
                        batch.add(key, fingerprint=fingerprint)
                log.writelines(f"A {key} {fp}\n" for key, fp in zip(keys, fingerprints, strict=True))
                live += keys
            elif roll < 0.2 and live:
                key = live.pop(rng.randrange(len(live)))
                store.remove(key)
                log.write(f"R {key}\n")
            else:
                key, fingerprint = f"one-{step}", rng.getrandbits(64)
                store.add(key, fingerprint=fingerprint)
                log.write(f"A {key} {fingerprint}\n")
                live.append(key)
            log.flush()
    os._exit(0)  # no close: what a power loss keeps is made below


def _acknowledged(path: Path) -> dict[str, int]:
    expected: dict[str, int] = {}
    for line in path.read_text().splitlines():
        kind, key, *rest = line.split()
        if kind == "A":
            expected[key] = int(rest[0])
        else:
            del expected[key]
    return expected


def _power_loss(store_path: Path, copy_path: Path, keep: float, rng: random.Random) -> None:
    written = store_path.read_bytes()
    disk = bytearray(copy_path.read_bytes().ljust(len(written), b"\0"))
    for start in range(0, len(written), PAGE):
        if written[start : start + PAGE] != disk[start : start + PAGE] and rng.random() < keep:
            disk[start : start + PAGE] = written[start : start + PAGE]
    store_path.write_bytes(bytes(disk))


CASES = [
    # (seed, checkpoint interval: 3600 s means at markers only, share of later pages on the disk)
    *[(seed, 3600.0, keep) for seed in range(1, 7) for keep in (0.3, 0.7)],
    *[(seed, 0.01, keep) for seed in range(7, 10) for keep in (0.3, 0.7)],
    (10, 3600.0, 0.0),
    (11, 3600.0, 1.0),
    (12, 0.05, 0.0),
    (13, 0.05, 1.0),
]


@pytest.mark.parametrize(("seed", "interval", "keep"), CASES)
def test_every_acknowledged_write_survives_a_power_loss(
    tmp_path: Path, seed: int, interval: float, keep: float
) -> None:
    store_path = tmp_path / "crawl.simstore"
    simstore.open(str(store_path), "c", k=3).close()
    expected, found = _write_lose_power_and_reopen(store_path, seed, interval, keep)
    assert found["problems"] == []
    assert {key: int(fp) for key, fp in found["items"].items()} == expected
    assert {key: int(fp) for key, fp in found["items after"].items()} == expected


def test_a_store_written_over_in_place_does_not_take_its_old_log_for_its_own(tmp_path: Path) -> None:
    """A backup copied back over a store keeps the file's inode, and its commits start
    again from lower ids than its log's checkpoint: that log must neither hold back the
    file's checkpoints nor be replayed into it."""
    store_path = tmp_path / "crawl.simstore"
    with simstore.open(str(store_path), "c", k=3) as store:
        store.add("backed-up", fingerprint=3)
    backup = tmp_path / "backup.simstore"
    shutil.copyfile(store_path, backup)
    with simstore.open(str(store_path), "w") as store:
        for number in range(1000):  # more commits than the child below will make
            store.add(f"after-the-backup-{number}", fingerprint=number)
    inode = store_path.stat().st_ino
    shutil.copyfile(backup, store_path)
    assert store_path.stat().st_ino == inode
    expected, found = _write_lose_power_and_reopen(store_path, 4, 3600.0, 0.5)
    assert found["problems"] == []
    assert {key: int(fp) for key, fp in found["items"].items()} == {"backed-up": 3, **expected}


def _write_lose_power_and_reopen(
    store_path: Path, seed: int, interval: float, keep: float
) -> tuple[dict[str, int], dict[str, Any]]:
    """Write in a child, make the disk a power loss leaves, reopen in a "new boot":
    what the child acknowledged, and what the reopened store holds."""
    folder = store_path.parent
    copy_path, acknowledged_path = folder / "durable-copy", folder / "acknowledged"
    context = multiprocessing.get_context("fork")
    child = context.Process(
        target=_write, args=(str(store_path), str(copy_path), str(acknowledged_path), seed, interval)
    )
    child.start()
    child.join()
    assert child.exitcode == 0
    expected = _acknowledged(acknowledged_path)
    _power_loss(store_path, copy_path, keep, random.Random(seed))
    # Reopened in a child: a store damaged past LMDB's checks aborts the process.
    found_path = folder / "found.json"
    reopen = context.Process(target=_reopen, args=(str(store_path), str(found_path)))
    reopen.start()
    reopen.join()
    assert reopen.exitcode == 0, f"reopening after the power loss failed (exit code {reopen.exitcode})"
    return expected, json.loads(found_path.read_text())


def _reopen(path: str, found_path: str) -> None:
    wal.boot_id = lambda: b"another boot...."  # the machine restarted
    with simstore.open(path, "w") as store:
        problems = store.check()
        items = {key: str(fp) for key, fp in store.items()}
    with simstore.open(path, "r") as store:  # the replay was checkpointed in this boot
        after = {key: str(fp) for key, fp in store.items()}
    with open(found_path, "w") as file:
        json.dump({"problems": problems, "items": items, "items after": after}, file)


def test_a_store_closed_cleanly_opens_read_only_after_a_restart(tmp_path: Path) -> None:
    """Closing checkpoints: nothing is left to replay, so a restart asks nothing of a
    read-only open; a store killed with records after its checkpoint must be opened
    for writing once first."""
    path = str(tmp_path / "s.simstore")
    with simstore.open(path, "c", k=3) as store:
        store.add("kept", fingerprint=5)
    context = multiprocessing.get_context("fork")
    opened = context.Process(target=_read_after_restart, args=(path, 0))
    opened.start()
    opened.join()
    assert opened.exitcode == 0
    killed = context.Process(target=_add_and_stop, args=(path,))
    killed.start()
    killed.join()
    refused = context.Process(target=_read_after_restart, args=(path, 1))
    refused.start()
    refused.join()
    assert refused.exitcode == 0


def _add_and_stop(path: str) -> None:
    store = simstore.open(path, "w")
    store.add("logged", fingerprint=6)
    os._exit(0)


def _read_after_restart(path: str, refusals: int) -> None:
    wal.boot_id = lambda: b"another boot...."
    try:
        with simstore.open(path, "r") as store:
            assert refusals == 0
            assert store.get("kept") is not None
    except simstore.StoreLockedError:
        assert refusals == 1
        with simstore.open(path, "w") as store:  # replays
            assert store.get("logged") is not None
        with simstore.open(path, "r") as store:
            assert store.get("logged") is not None
    os._exit(0)


def test_a_log_a_deleted_store_left_is_never_replayed_into_a_new_one(tmp_path: Path) -> None:
    """A store deleted by hand leaves its log; a store made anew under the name (the
    file system may even give it the same inode) has a salt of its own, so the old
    records, at the same positions, never pass for its own."""
    path = tmp_path / "s.simstore"
    with simstore.open(str(path), "c", k=3) as store:
        for number in range(20):
            store.add(f"old-{number}", fingerprint=number)
        old = wal.WriteLog.open(wal.log_path(str(path)))
        old_salt = old.checkpoint().salt  # type: ignore[union-attr]
        old.close()
    for leftover in (path, Path(str(path) + "-lock")):
        leftover.unlink()
    with simstore.open(str(path), "c", k=3) as store:
        store.add("new", fingerprint=1)
        log = wal.WriteLog.open(wal.log_path(str(path)))
        header = log.checkpoint()
        assert header is not None
        assert header.salt != old_salt
        assert [txn for txn, _, _ in log.records(header)] == [header.txn_id + 1]  # "new" alone
        log.close()
