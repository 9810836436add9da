"""Several processes creating one store at the same moment.

What is promised, and proven here: processes that open one path with mode "c" (or "n",
or "c" on an LMDB file nothing was written to) at the same time agree on one store, and
every document any of them was told was added is there afterwards, under its own key,
with its own fingerprint, findable by a query. A creator whose parameters differ from
the store that won is refused and removes nothing. A reader that comes while the store
is being made finds no store (``StoreNotFoundError``), never a half-made one.

Before the fix, the second creator wrote a fresh meta record and state over the first's
(`issue 18`): in 15 of 20 rounds ``check()`` found keys whose records belonged to the
other process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import lmdb
import pytest

import simstore

from . import _workload
from .conftest import COUNTS, Worker, Zygote, assert_queries_match_oracle

ROUNDS = 24
DOCS_EACH = 20


def race(tmp_path: Path, zygote: Zygote, round_no: int, creators: list[dict[str, object]]) -> list[Worker]:
    """Start the creators (and a polling reader) at one moment; wait for them all."""
    path = str(tmp_path / f"race-{round_no}.simstore")
    start_at = time.monotonic() + 0.15
    workers = []
    for index, extra in enumerate([*creators, {"mode": "r", "tag": "reader"}]):
        cfg = {
            "worker": "creator",
            "path": path,
            "start_at": start_at,
            "count": DOCS_EACH,
            "tag": f"P{index}",
            "log": str(tmp_path / f"race-{round_no}-{index}.log"),
            **extra,
        }
        workers.append(Worker(cfg, zygote))
    for worker in workers:
        assert worker.join() == 0, worker.errors() + "\n".join(worker.lines()[-3:])
    return workers


def acknowledged(workers: list[Worker]) -> dict[str, int]:
    """Every key a creator was told it added, with its fingerprint."""
    added = {}
    for worker in workers:
        for line in worker.lines():
            if line.startswith("A "):
                key = line.split()[1]
                tag, index = key.rsplit("-", 1)
                added[key] = _workload.creator_fp(tag, int(index))
    return added


def assert_all_there(path: str, added: dict[str, int]) -> None:
    with simstore.open(path, "r") as store:
        assert store.check() == []
        assert len(store) == len(added) == len(store.keys())
        assert dict(store.items()) == added
        for key, fingerprint in added.items():
            assert key in [match.key for match in store.query(fingerprint=fingerprint, k=0)]
        assert_queries_match_oracle(store, round(len(added)))


def reader_saw_no_half_store(worker: Worker) -> None:
    """The polling reader either found no store or a whole one, and ended on a whole one."""
    lines = worker.lines()
    assert lines[-1] == "C"
    assert lines[-2].startswith("O ")
    assert all(line in ("N",) or line.startswith("O ") for line in lines[:-1]), lines[:5]


@pytest.mark.parametrize("mode", ["c", "n"])
def test_two_processes_creating_one_store_lose_nothing(tmp_path: Path, zygote: Zygote, mode: str) -> None:
    rounds = ROUNDS if mode == "c" else ROUNDS // 3
    for round_no in range(rounds):
        workers = race(tmp_path, zygote, round_no, [{"mode": "c"}, {"mode": mode}])
        added = acknowledged(workers)
        if mode == "c":
            assert len(added) == 2 * DOCS_EACH
        # mode "n" may replace the other's store: what it promises is a sound store
        # holding at least its own documents.
        else:
            assert {f"P1-{index}" for index in range(DOCS_EACH)} <= set(added)
            with simstore.open(workers[0].cfg["path"], "r") as store:
                added = {key: fp for key, fp in added.items() if key in store}
        assert_all_there(str(workers[0].cfg["path"]), added)
        reader_saw_no_half_store(workers[-1])
        leftovers = [name for name in os.listdir(tmp_path) if name.endswith((".creating", ".creating-lock"))]
        assert leftovers == []
        COUNTS["creation_races"] += 1


def test_creators_on_an_lmdb_file_nothing_was_written_to(tmp_path: Path, zygote: Zygote) -> None:
    """An earlier simstore created stores in place, so a file may be an empty LMDB
    environment when several processes come to create the store in it."""
    for round_no in range(ROUNDS // 2):
        path = str(tmp_path / f"race-{round_no}.simstore")
        lmdb.open(path, subdir=False).close()
        workers = race(tmp_path, zygote, round_no, [{"mode": "c"}, {"mode": "c"}, {"mode": "c"}])
        added = acknowledged(workers)
        assert len(added) == 3 * DOCS_EACH
        assert_all_there(path, added)
        COUNTS["creation_races"] += 1


def test_a_creator_with_other_parameters_is_refused_and_removes_nothing(
    tmp_path: Path, zygote: Zygote
) -> None:
    """Two creators asking for different k: one store is made, the other creator gets
    ParameterMismatchError and leaves the winner's store (and its lock file) alone."""
    for round_no in range(ROUNDS // 3):
        workers = race(tmp_path, zygote, round_no, [{"mode": "c", "k": 3}, {"mode": "c", "k": 4}])
        refused = [worker for worker in workers[:2] if worker.lines()[0].startswith("F ")]
        assert [worker.lines()[0] for worker in refused] == ["F ParameterMismatchError"]
        added = acknowledged(workers)
        assert len(added) == DOCS_EACH
        path = str(workers[0].cfg["path"])
        assert os.path.exists(path + "-lock")
        assert_all_there(path, added)
        COUNTS["creation_races"] += 1


def test_reader_of_a_never_written_lmdb_file_finds_no_store(tmp_path: Path) -> None:
    path = str(tmp_path / "empty-lmdb.simstore")
    lmdb.open(path, subdir=False).close()
    for mode in ("r", "w"):
        with pytest.raises(simstore.StoreNotFoundError, match="nothing was written"):
            simstore.open(path, mode)


def test_creation_without_hard_links_still_agrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the file system cannot link, the store is created in place."""

    def no_links(source: str, target: str) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    path = str(tmp_path / "nolink.simstore")
    with simstore.open(path, "c", k=3) as store:
        store.add("a", fingerprint=1)
    with simstore.open(path, "r") as store:
        assert (list(store.items()), store.check()) == ([("a", 1)], [])
    assert sorted(os.listdir(tmp_path)) == [
        "nolink.simstore",
        "nolink.simstore-lock",
        "nolink.simstore-writers",  # where sync=True writers meet (simstore.commit.mailbox)
    ]


def test_creating_in_a_missing_folder_says_so(tmp_path: Path) -> None:
    path = tmp_path / "no-such-folder" / "store.simstore"
    with pytest.raises(simstore.StoreNotFoundError, match="no-such-folder"):
        simstore.open(path, "c")
