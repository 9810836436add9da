"""Fixtures for the reliability tests: the worker zygote, the brute-force oracle, a
digest of a store's contents, and the counts reported at the end of a run.

Soak variants are marked ``slow`` and run only with ``SIMSTORE_SOAK=1`` in the
environment (or when ``-m`` selects ``slow``); the default run keeps their short
versions, within the suite's time budget.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import _counts
import numpy as np
import pytest

import simstore

from . import _workload

TESTS_DIR = str(Path(__file__).resolve().parent.parent)
HERE = Path(__file__).resolve().parent

# Counts of what the suite did, printed at the end of the run (see NOTES.md;
# tests/conftest.py gathers them from every xdist worker).
COUNTS = _counts.COUNTS


def soak_enabled(config: pytest.Config) -> bool:
    return bool(os.environ.get("SIMSTORE_SOAK")) or "slow" in (config.option.markexpr or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if soak_enabled(config):
        return
    skip = pytest.mark.skip(reason="soak variant: set SIMSTORE_SOAK=1 (or -m slow) to run it")
    for item in items:
        if HERE in Path(str(item.path)).parents and item.get_closest_marker("slow"):
            item.add_marker(skip)


# -- the zygote ----------------------------------------------------------------------------


class Zygote:
    """A pre-imported interpreter that forks workers on request (see _workload)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _workload.ZYGOTE_SCRIPT, TESTS_DIR],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._read() == "ready"

    def _read(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the worker zygote died"
        return line.strip()

    def _send(self, line: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self._read()

    def start(self, cfg: dict[str, Any]) -> int:
        answer = self._send("run " + json.dumps(cfg))
        assert answer.startswith("pid ")
        return int(answer.split()[1])

    def wait(self, pid: int) -> int:
        """The raw wait status of worker ``pid``, once it has ended."""
        answer = self._send(f"wait {pid}")
        return int(answer.split()[1])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    started = Zygote()
    yield started
    started.close()


class Worker:
    """One worker process, forked by the zygote or started fresh, and its log."""

    def __init__(self, cfg: dict[str, Any], zygote: Zygote | None) -> None:
        self.cfg = cfg
        self.log_path = cfg["log"]
        Path(self.log_path).write_text("")
        self.zygote = zygote
        self.process: subprocess.Popen[bytes] | None = None
        if zygote is not None:
            self.pid = zygote.start(cfg)
        else:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _workload.SINGLE_SCRIPT, TESTS_DIR, json.dumps(cfg)],
                stdout=subprocess.DEVNULL,
                stderr=open(self.log_path + ".err", "wb"),  # noqa: SIM115 - closed with the process
            )
            self.pid = self.process.pid

    def lines(self) -> list[str]:
        return Path(self.log_path).read_text().splitlines()

    def wait_for(self, predicate: Any, timeout: float = 60.0) -> list[str]:
        """Poll the log until ``predicate(lines)`` holds; fail if the worker ends first."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.lines()
            if predicate(lines):
                return lines
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"worker ended early: {self.errors()}")
            if lines and lines[-1].startswith("E "):
                raise AssertionError(f"worker failed: {lines[-1]}\n{self.errors()}")
            if lines and lines[-1] == "C":
                raise AssertionError("worker finished before the condition held")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for the worker; log ends {lines[-3:]}")
            time.sleep(0.002)

    def errors(self) -> str:
        path = Path(self.log_path + ".err")
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self) -> int:
        """SIGKILL the worker; returns its exit code (negative: the signal that ended it)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        return self.join()

    def join(self) -> int:
        """Wait for the worker; its exit code, negative for the signal that ended it."""
        if self.process is not None:
            return self.process.wait(timeout=60)
        assert self.zygote is not None
        return os.waitstatus_to_exitcode(self.zygote.wait(self.pid))


# -- the oracle and digests ------------------------------------------------------------------


def rank(key: _workload.Key) -> tuple[int, _workload.Key]:
    """The documented order of mixed key types: ints, then bytes, then str."""
    if isinstance(key, int):
        return (0, key)
    if isinstance(key, bytes):
        return (1, key)
    return (2, key)


def oracle(
    items: list[tuple[_workload.Key, int]], queries: Iterable[int], k: int
) -> list[list[tuple[_workload.Key, int, int]]]:
    """Brute force: every stored (key, distance, fingerprint) within k, in the documented order."""
    keys = [key for key, _ in items]
    fps = np.array([fp for _, fp in items], dtype=np.uint64)
    answers = []
    for query in queries:
        distances = np.bitwise_count(fps ^ np.uint64(query)) if len(fps) else np.array([], dtype=np.uint8)
        hits = [(keys[i], int(distances[i]), int(fps[i])) for i in np.flatnonzero(distances <= k).tolist()]
        answers.append(sorted(hits, key=lambda hit: (hit[1], rank(hit[0]))))
    return answers


def query_sample(items: list[tuple[_workload.Key, int]], seed: int, count: int = 24) -> list[int]:
    """Queries at and near stored fingerprints, and a few random ones."""
    rng = np.random.default_rng(seed)
    queries = [int(rng.integers(0, 2**64, dtype=np.uint64)) for _ in range(4)]
    if items:
        for index in rng.integers(0, len(items), count).tolist():
            fp = items[index][1]
            for bit in rng.choice(64, int(rng.integers(0, 5)), replace=False).tolist():
                fp ^= 1 << bit
            queries.append(fp)
    return queries


def assert_queries_match_oracle(store: simstore.Store, seed: int) -> int:
    """query and query_many equal the brute-force oracle over the stored fingerprints;
    returns how many queries were compared."""
    items = list(store.items())
    queries = query_sample(items, seed)
    expected = oracle(items, queries, store.k)
    batch = store.query_many(np.array(queries, dtype=np.uint64))
    assert [[(m.key, m.distance, m.fingerprint) for m in row] for row in batch] == expected
    for query, want in zip(queries[:6], expected[:6], strict=True):
        assert [(m.key, m.distance, m.fingerprint) for m in store.query(fingerprint=query)] == want
        smaller = [hit for hit in want if hit[1] <= 1]
        assert [(m.key, m.distance, m.fingerprint) for m in store.query(fingerprint=query, k=1)] == smaller
    COUNTS["queries_vs_oracle"] += len(queries) + 12
    return len(queries)


def contents_digest(store: simstore.Store) -> str:
    """A digest of everything a user can observe: keys in order, fingerprints, metadata,
    sizes (documents, delta, table entries) and the answers to fixed queries."""
    items = list(store.items())
    stats = store.stats()
    hasher = hashlib.sha256()
    hasher.update(repr(items).encode())
    hasher.update(repr([store.get(key) for key, _ in items]).encode())
    hasher.update(repr((stats.docs, stats.delta_docs, stats.table_entries)).encode())
    queries = [fp for _, fp in items[:8]] + [0, 2**64 - 1]
    hasher.update(repr(store.query_many(np.array(queries, dtype=np.uint64))).encode())
    return hasher.hexdigest()


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter: a crash or a hang fails the test, not the run."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def file_digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()
