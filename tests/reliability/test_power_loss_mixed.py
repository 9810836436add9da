"""A power loss while writers of every ``sync`` mode and a maintainer share a store.

Each writer is a forked process of its own: ``sync=True``, ``sync=False`` and
``sync="interval"`` writers add and remove single documents (with a bulk
``add_many`` now and then), and a maintainer merges, compacts and re-lays the
store out. They write one after another or all at once, and stop without
closing. What the disk holds after the power loss is simulated for the store
file and its write-ahead log alike: every ``fdatasync`` of either file keeps a
copy of it as it was then (what that flush put on the disk), and the power loss
takes that copy with any share of the pages written since (the kernel writes
dirty pages back in any order, meta pages included).

After a "restart" (another boot id) the store must open, ``check()`` clean, and
hold every write a ``sync=True`` writer was told of, and every write of the
other writers that a ``flush()`` of theirs returned after. It holds no document
nobody added.
"""

from __future__ import annotations

import fcntl
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
from simstore.engine import wal

PAGE = 4096
SYNC_MODES: dict[str, Any] = {"durable": True, "fast": False, "interval": "interval"}


class DurableCopies:
    """In a writer process: after each ``fdatasync`` of the store file or its
    log, a copy of that file as it is (what a power loss keeps at least)."""

    def __init__(self, store_path: str) -> None:
        log = wal.log_path(store_path)
        self.files = {store_path: store_path + ".durable", log: log + ".durable"}
        self.lock_path = store_path + ".copies-lock"

    def install(self) -> None:
        real_fdatasync = os.fdatasync
        copies = self

        def fdatasync(descriptor: int) -> None:
            real_fdatasync(descriptor)
            copies.after_flush(descriptor)

        os.fdatasync = fdatasync

    def after_flush(self, descriptor: int) -> None:
        flushed = os.fstat(descriptor)
        for path, copy in self.files.items():
            try:
                status = os.stat(path)
            except FileNotFoundError:
                continue
            if (status.st_dev, status.st_ino) != (flushed.st_dev, flushed.st_ino):
                continue
            # One copy at a time across the writers, so the newest flush's copy
            # is the one left (each flush covers every write before it began).
            with open(self.lock_path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                shutil.copyfile(path, copy + ".part")
                os.replace(copy + ".part", copy)


def _writer(store_path: str, role: str, seed: int, steps: int, start: Any) -> None:
    """One writer: logs each write once its call returned (``ack``) and, for
    the writers that do not flush each commit, once a flush of theirs returned
    (``durable``); then stops without closing the store."""
    DurableCopies(store_path).install()
    wal.CHECKPOINT_INTERVAL = random.Random(seed).choice([0.01, 0.2, 3600.0])
    rng = random.Random(seed)
    start.wait()
    journal = open(f"{store_path}.{role}.journal", "w")  # noqa: SIM115 - kept to the end
    if role == "maintainer":
        store = simstore.open(store_path, "w")
        for _step in range(steps // 10):
            choice = rng.random()
            if choice < 0.4:
                store.merge()
            elif choice < 0.8:
                store.compact()
            else:
                store.relayout(expected_docs=rng.choice([1000, 100_000]))
            journal.write("maintained\n")
            journal.flush()
        os._exit(0)
    sync = SYNC_MODES[role]
    store = simstore.open(store_path, "w", sync=sync, sync_interval=0.05, merge_threshold=64)
    live: list[str] = []
    unflushed: list[str] = []

    def note(line: str) -> None:
        journal.write(line + "\n")
        if sync is True:
            journal.write("D " + line + "\n")
        else:
            unflushed.append(line)
        journal.flush()

    for step in range(steps):
        roll = rng.random()
        if roll < 0.03:
            keys = [f"{role}-bulk-{step}-{n}" for n in range(20)]
            fingerprints = [rng.getrandbits(64) for _ in keys]
            store.add_many(keys, np.array(fingerprints, dtype=np.uint64))
            for key, fingerprint in zip(keys, fingerprints, strict=True):
                note(f"A {key} {fingerprint}")
            live += keys
        elif roll < 0.18 and live:
            key = live.pop(rng.randrange(len(live)))
            store.remove(key)
            note(f"R {key}")
        elif roll < 0.22 and sync is not True:
            store.flush()
            journal.writelines(f"D {line}\n" for line in unflushed)
            journal.flush()
            unflushed.clear()
        else:
            key, fingerprint = f"{role}-one-{step}", rng.getrandbits(64)
            store.add(key, fingerprint=fingerprint)
            note(f"A {key} {fingerprint}")
            live.append(key)
    os._exit(0)


def _power_loss(path: Path, durable_copy: Path, keep: float, rng: random.Random) -> None:
    """Replace ``path`` with what a power loss could leave of it."""
    written = path.read_bytes()
    if not durable_copy.exists():
        disk = bytearray(len(written))  # never flushed: any page may be missing
    else:
        disk = bytearray(durable_copy.read_bytes().ljust(len(written), b"\0"))[: len(written)]
    for start in range(0, len(written), PAGE):
        if written[start : start + PAGE] != disk[start : start + PAGE] and rng.random() < keep:
            disk[start : start + PAGE] = written[start : start + PAGE]
    path.write_bytes(bytes(disk))


def _reopen(path: str, found_path: str) -> None:
    wal.boot_id = lambda: b"another boot...."  # the machine restarted
    try:
        with simstore.open(path, "w") as store:
            problems = store.check()
            items = {str(key): str(fp) for key, fp in store.items()}
        result: dict[str, Any] = {"problems": problems, "items": items}
    except simstore.SimstoreError as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    with open(found_path, "w") as file:
        json.dump(result, file)


def _journals(folder: Path, name: str) -> tuple[dict[str, int], set[str], dict[str, int]]:
    """What every writer was told: the documents whose last write was promised
    durable (an add: present with that fingerprint; a remove: absent), and
    every document ever added. A key written again after its last promised
    write may be found in either state."""
    durable: dict[str, int] = {}
    removed: set[str] = set()
    added: dict[str, int] = {}
    for journal in folder.glob(f"{name}.*.journal"):
        writes: dict[str, int] = {}  # writes acknowledged so far, per key
        promised: dict[str, tuple[str, int, int]] = {}  # the last promised: kind, fp, writes then
        for line in journal.read_text().splitlines():
            words = line.split()
            if words[0] == "D":
                kind, key, *rest = words[1:]
                promised[key] = (kind, int(rest[0]) if rest else 0, writes[key])
            elif words[0] in ("A", "R"):
                kind, key, *rest = words
                writes[key] = writes.get(key, 0) + 1
                if kind == "A":
                    added[key] = int(rest[0])
        for key, (kind, fingerprint, writes_then) in promised.items():
            if writes[key] != writes_then:
                continue  # written again since, without a promise
            if kind == "A":
                durable[key] = fingerprint
            else:
                removed.add(key)
    return durable, removed, added


def _run(tmp_path: Path, roles: list[str], together: bool, seed: int, keep: float) -> None:
    store_path = tmp_path / "crawl.simstore"
    simstore.open(str(store_path), "c", k=3).close()
    context = multiprocessing.get_context("fork")
    steps = 120
    if together:
        start = context.Event()
        children = [
            context.Process(target=_writer, args=(str(store_path), role, seed + n, steps, start))
            for n, role in enumerate(roles)
        ]
        for child in children:
            child.start()
        start.set()
        for child in children:
            child.join()
            assert child.exitcode == 0
    else:
        for n, role in enumerate(roles):
            start = context.Event()
            start.set()
            child = context.Process(target=_writer, args=(str(store_path), role, seed + n, steps, start))
            child.start()
            child.join()
            assert child.exitcode == 0
    rng = random.Random(seed)
    log = Path(wal.log_path(str(store_path)))
    _power_loss(store_path, Path(str(store_path) + ".durable"), keep, rng)
    _power_loss(log, Path(str(log) + ".durable"), keep, rng)
    found_path = tmp_path / "found.json"
    # Reopened in a child: a store damaged past LMDB's checks would abort the process.
    reopen = context.Process(target=_reopen, args=(str(store_path), str(found_path)))
    reopen.start()
    reopen.join()
    assert reopen.exitcode == 0, f"reopening after the power loss killed the process ({reopen.exitcode})"
    found = json.loads(found_path.read_text())
    assert "error" not in found, found.get("error")
    assert found["problems"] == []
    items = {key: int(fp) for key, fp in found["items"].items()}
    durable, removed, added = _journals(tmp_path, store_path.name)
    missing = {key for key in durable if items.get(key) != durable[key]}
    assert not missing, f"{len(missing)} writes promised durable are missing, e.g. {sorted(missing)[:5]}"
    assert not removed & set(items), "a durable remove came undone"
    assert all(added.get(key) == fp for key, fp in items.items()), "a document nobody added"


@pytest.mark.parametrize(
    ("roles", "seed", "keep"),
    [
        (["durable", "fast"], 1, 0.5),  # the repro: a crashed sync=True writer, then sync=False
        (["durable", "fast"], 2, 1.0),
        (["durable", "interval"], 3, 0.5),
        (["fast", "durable", "interval"], 4, 0.3),
        (["interval", "durable", "fast"], 5, 0.8),
        (["durable", "maintainer", "fast"], 6, 0.5),
    ],
)
def test_one_writer_after_another(tmp_path: Path, roles: list[str], seed: int, keep: float) -> None:
    _run(tmp_path, roles, together=False, seed=seed, keep=keep)


@pytest.mark.parametrize(
    ("seed", "keep"),
    [
        (11, 0.3),
        pytest.param(12, 0.6, marks=pytest.mark.soak),
        pytest.param(13, 0.9, marks=pytest.mark.soak),
        (14, 0.0),
    ],
)
def test_writers_of_every_mode_and_a_maintainer_at_once(tmp_path: Path, seed: int, keep: float) -> None:
    _run(tmp_path, ["durable", "fast", "interval", "maintainer"], together=True, seed=seed, keep=keep)
