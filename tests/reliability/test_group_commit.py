"""SIGKILL during group commits: writer threads of one process, and writer processes,
add pages with ``sync=True`` (their single adds sharing group commits, one thread
writing ``store.batch()`` blocks of ten) and log each page once its call has returned.
After each kill the store must open, ``check()`` must be clean, and every page any
writer acknowledged must be there with its fingerprint; pages in flight may or may not
be, but never anything else.

A kill cannot show what a power loss keeps: that is ``tests/commit/test_commit.py``'s counted
flushes and ``docs/durability.md``.
"""

from __future__ import annotations

import random
from pathlib import Path

import simstore

from . import _workload
from .conftest import COUNTS, Worker, Zygote


def acknowledged(worker: Worker) -> set[str]:
    return {line.split()[1] for line in worker.lines() if line.startswith("A ")}


def kill_rounds(tmp_path: Path, zygote: Zygote, *, processes: int, threads: int, rounds: int) -> None:
    path = str(tmp_path / "group.simstore")
    simstore.open(path, "c", k=3).close()
    rng = random.Random(f"group kills {processes} {threads}")
    expected: dict[str, int] = {}
    for round_no in range(rounds):
        workers = []
        for process in range(processes):
            tag = f"r{round_no}p{process}"
            cfg = {
                "worker": "group",
                "path": path,
                "log": str(tmp_path / f"{tag}.log"),
                "tag": tag,
                "threads": threads,
                "batches": process == 0,
                "merge_threshold": 200,  # merges and compaction steps fall among the kills
            }
            workers.append(Worker(cfg, zygote))
        wanted = rng.randrange(20, 400)
        for worker in workers:
            worker.wait_for(lambda lines, wanted=wanted: sum(line[:2] == "A " for line in lines) >= wanted)
        for worker in workers:
            worker.kill()
        for worker in workers:
            tag = worker.cfg["tag"]
            for key in acknowledged(worker):
                _, thread, number = key.rsplit("-", 2)
                expected[key] = _workload.group_fp(tag, int(thread), int(number))
        with simstore.open(path, "w") as store:
            assert store.check() == []
            stored = dict(store.items())
            missing = [key for key in expected if stored.get(key) != expected[key]]
            assert missing == [], f"round {round_no}: {len(missing)} acknowledged pages lost"
            for key, fingerprint in stored.items():
                assert isinstance(key, str)
                tag, thread, number = key.rsplit("-", 2)
                assert fingerprint == _workload.group_fp(tag, int(thread), int(number))
            expected = stored  # pages in flight that committed count from now on
        COUNTS["group-commit kills"] += 1


def test_kills_during_group_commits_from_threads(tmp_path: Path, zygote: Zygote) -> None:
    kill_rounds(tmp_path, zygote, processes=1, threads=6, rounds=6)


def test_kills_during_group_commits_from_processes(tmp_path: Path, zygote: Zygote) -> None:
    kill_rounds(tmp_path, zygote, processes=3, threads=3, rounds=4)


def _record(expected: dict[str, int], worker: Worker) -> None:
    tag = worker.cfg["tag"]
    for key in acknowledged(worker):
        _, thread, number = key.rsplit("-", 2)
        expected[key] = _workload.group_fp(tag, int(thread), int(number))


def test_killing_one_writer_process_at_a_time(tmp_path: Path, zygote: Zygote) -> None:
    """Writer processes share commits through the writers' mailbox. SIGKILL one at a
    time, leader or waiter, at any point of a commit: the others keep acknowledging
    pages (a dead leader's lead, slots and token are let go with it, and its group is
    settled by the next leader), and every page anyone acknowledged is stored."""
    path = str(tmp_path / "fleet.simstore")
    simstore.open(path, "c", k=3).close()
    rng = random.Random("one writer process at a time")
    expected: dict[str, int] = {}
    started = 0

    def start() -> Worker:
        nonlocal started
        tag = f"w{started}"
        started += 1
        cfg = {"worker": "group", "path": path, "log": str(tmp_path / f"{tag}.log"), "tag": tag}
        return Worker({**cfg, "threads": 1, "batches": False, "merge_threshold": 200}, zygote)

    def progressed(worker: Worker, more: int) -> None:
        done = len(acknowledged(worker))
        worker.wait_for(lambda lines: sum(line[:2] == "A " for line in lines) >= done + more)

    workers = [start() for _ in range(3)]
    for _ in range(8):
        for worker in workers:
            progressed(worker, rng.randrange(1, 40))
        victim = workers.pop(rng.randrange(len(workers)))
        victim.kill()
        _record(expected, victim)
        for worker in workers:
            progressed(worker, 20)  # not stuck behind the dead process
        workers.append(start())
    for worker in workers:
        worker.kill()
        _record(expected, worker)
    with simstore.open(path, "w") as store:
        assert store.check() == []
        stored = dict(store.items())
    missing = [key for key in expected if stored.get(key) != expected[key]]
    assert missing == [], f"{len(missing)} acknowledged pages lost"
    COUNTS["writer process kills"] += 8
