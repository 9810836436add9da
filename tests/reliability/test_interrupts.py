"""Ctrl-C while threads write: the main thread adds, a signal interrupts it at a random
moment (``KeyboardInterrupt``, from a handler of our own signal, sent to the main thread
or to the whole process), and three other threads add all the while, in every sync mode.

After every run each thread can still write, no thread saw an exception that was not its
own (``CommitInterruptedError`` is the one a thread may get for another's interrupt, when
its write's fate cannot be told), every add that returned is stored with its fingerprint
and found by a query, nothing is stored that no caller asked for, and ``check()`` is
clean. With ``sync=True`` a writer process adds beside them: an interrupt in this process,
holding the writers' mailbox's lead or waiting for it, never stalls that process.

The deterministic cases, one interrupt at each chosen point, are ``tests/commit/test_commit_interrupts.py``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import simstore
from simstore.commit import mailbox

from .conftest import COUNTS

ROUNDS = 80  # per sync mode
WORKERS = 3
# Generous: the machine is shared and busy; these bound a hang, not a speed.
PATIENCE = 60.0


def fingerprint_of(key: str) -> int:
    return random.Random(key).getrandbits(64)


class Interrupter:
    """Raises ``KeyboardInterrupt`` in the main thread when its signal arrives while
    armed; sends that signal after a delay, to the main thread or to the process."""

    SIGNAL = signal.SIGUSR1

    def __init__(self) -> None:
        self.armed = False
        self.sent = 0
        self.handled = 0
        self.main = threading.main_thread().ident

    def handler(self, _signum: int, _frame: FrameType | None) -> None:
        self.handled += 1
        if self.armed:
            raise KeyboardInterrupt

    def send(self, to_process: bool) -> None:
        self.sent += 1
        if to_process:
            os.kill(os.getpid(), self.SIGNAL)  # any thread may take it; the main one raises
        else:
            assert self.main is not None
            signal.pthread_kill(self.main, self.SIGNAL)

    def settle(self, timer: threading.Timer) -> None:
        """Once the call is over: no signal is on its way any more."""
        timer.cancel()
        timer.join()
        deadline = time.monotonic() + PATIENCE
        while self.handled < self.sent:
            assert time.monotonic() < deadline, "a signal was never handled"
            time.sleep(0.0005)


@pytest.fixture
def interrupter() -> Iterator[Interrupter]:
    made = Interrupter()
    previous = signal.signal(Interrupter.SIGNAL, made.handler)
    try:
        yield made
    finally:
        signal.signal(Interrupter.SIGNAL, previous)


class Writers:
    """Threads adding their own keys until told to stop; what each was told."""

    def __init__(self, store: simstore.Store) -> None:
        self.store = store
        self.stop = threading.Event()
        self.progress = threading.Condition()
        self.counts = [0] * WORKERS
        self.acknowledged: list[str] = []
        self.unknown: list[str] = []  # CommitInterruptedError: stored or not
        self.foreign: list[tuple[str, BaseException]] = []
        self.threads = [threading.Thread(target=self._run, args=(index,)) for index in range(WORKERS)]
        for thread in self.threads:
            thread.start()

    def _run(self, index: int) -> None:
        number = 0
        while not self.stop.is_set():
            number += 1
            key = f"w{index}-{number}"
            try:
                self.store.add(key, fingerprint=fingerprint_of(key))
                self.acknowledged.append(key)
            except simstore.CommitInterruptedError:
                self.unknown.append(key)
            except BaseException as exc:  # anything else was not this thread's
                self.foreign.append((key, exc))
                return
            with self.progress:
                self.counts[index] += 1
                self.progress.notify_all()

    def each_wrote_since(self, counts: list[int]) -> bool:
        with self.progress:
            return self.progress.wait_for(
                lambda: all(now > then for now, then in zip(self.counts, counts, strict=True)),
                timeout=PATIENCE,
            )

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=PATIENCE)
            assert not thread.is_alive(), "a writer thread hangs"


_CHILD = r"""
import os, sys
import simstore
path, stop = sys.argv[1], sys.argv[2]
out = sys.stdout
number = 0
with simstore.open(path, "w", sync=True) as store:
    while not os.path.exists(stop):
        number += 1
        key = f"p-{number}"
        try:
            store.add(key, fingerprint=int(sys.argv[3]) ^ number)
        except BaseException as exc:
            print("E", type(exc).__name__, exc, flush=True)
            raise
        print("A", key, flush=True)
"""


class Process:
    """A writer process adding ``p-N`` keys (``sync=True``) until a stop file appears."""

    SALT = 0x5A5A_5A5A_5A5A_5A5A

    def __init__(self, path: str, stop: Path) -> None:
        self.stop = stop
        self.lines: list[str] = []
        self.grew = threading.Condition()
        self.child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, path, str(stop), str(self.SALT)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(target=self._read)
        self.reader.start()

    def _read(self) -> None:
        assert self.child.stdout is not None
        for line in self.child.stdout:
            with self.grew:
                self.lines.append(line.strip())
                self.grew.notify_all()

    def wrote_more_than(self, count: int) -> bool:
        with self.grew:
            return self.grew.wait_for(lambda: len(self.lines) > count, timeout=PATIENCE)

    def finish(self) -> dict[str, int]:
        self.stop.touch()
        assert self.child.wait(timeout=PATIENCE) == 0, self.lines[-3:]
        self.reader.join(timeout=PATIENCE)
        errors = [line for line in self.lines if not line.startswith("A ")]
        assert errors == []
        return {line.split()[1]: self.SALT ^ int(line.split()[1][2:]) for line in self.lines}


@pytest.mark.parametrize("sync", [True, False, "interval"])
def test_interrupts_among_writing_threads_leave_the_store_usable_and_as_told(
    tmp_path: Path, interrupter: Interrupter, sync: bool | str
) -> None:
    path = str(tmp_path / "s.simstore")
    rng = random.Random(f"interrupts {sync}")
    # A small merge threshold: merges and compaction steps come among the interrupts.
    store = simstore.open(path, "c", k=3, sync=sync, merge_threshold=500)
    process = None
    if sync is True and mailbox._OFD:
        process = Process(path, tmp_path / "stop")
        assert process.wrote_more_than(0)
    writers = Writers(store)
    acknowledged: list[str] = []
    maybe: list[str] = []  # the main thread's interrupted adds
    durations = [0.002]  # of adds that returned: the signal comes within about as long
    try:
        round_no = -1
        # ROUNDS rounds, and more (up to 4x) until a quarter of them were
        # interrupted: on a loaded machine an add's time varies, and more
        # signals land after the call returned.
        while (round_no := round_no + 1) < ROUNDS or (len(maybe) < ROUNDS // 4 and round_no < 4 * ROUNDS):
            key = f"m-{round_no}"
            typical = sorted(durations[-9:])[len(durations[-9:]) // 2]
            timer = threading.Timer(
                rng.uniform(0, 1.5 * typical), interrupter.send, args=(round_no % 2 == 0,)
            )
            timer.start()
            started = time.monotonic()
            interrupter.armed = True
            try:
                store.add(key, fingerprint=fingerprint_of(key))
                acknowledged.append(key)
            except KeyboardInterrupt:
                maybe.append(key)
            finally:
                interrupter.armed = False
            if acknowledged and acknowledged[-1] == key:
                durations.append(time.monotonic() - started)
            interrupter.settle(timer)
            if maybe and maybe[-1] == key:
                # Every thread (and the other process) still writes after it.
                assert writers.each_wrote_since(list(writers.counts)), "a writer thread stalled"
                if process is not None:
                    assert process.wrote_more_than(len(process.lines)), "the writer process stalled"
            assert writers.foreign == []
        store.add("last", fingerprint=fingerprint_of("last"))  # the main thread too
        acknowledged.append("last")
    finally:
        writers.finish()
        written_elsewhere = process.finish() if process is not None else {}
    assert writers.foreign == []
    COUNTS["interrupts among writing threads"] += len(maybe)
    # Interrupts landed often enough to mean something (most rounds, on any machine).
    assert len(maybe) >= ROUNDS // 4, f"only {len(maybe)} of {round_no} rounds were interrupted"

    told: dict[str, int] = {key: fingerprint_of(key) for key in [*acknowledged, *writers.acknowledged]}
    told.update(written_elsewhere)
    may_be: set[str] = {*maybe, *writers.unknown}
    try:
        stored: dict[Any, int] = dict(store.items())
        missing = sorted(key for key in told if stored.get(key) != told[key])
        assert missing == [], f"{len(missing)} acknowledged adds are missing"
        extra = sorted(key for key in stored if key not in told and key not in may_be)
        assert extra == []
        for key in may_be & stored.keys():
            assert stored[key] == fingerprint_of(key)
        # The delta is in step with the file: a query finds what the file holds.
        for key, fingerprint in rng.sample(sorted(stored.items()), min(400, len(stored))):
            assert key in [match.key for match in store.query(fingerprint=fingerprint, k=0)]
        assert store.check() == []
    finally:
        store.close()
    with simstore.open(path, "r") as reopened:
        assert dict(reopened.items()) == stored
