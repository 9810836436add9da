"""Concurrency: several processes on one file, threads sharing one Store, and fork().

What is promised, and proven here:

* One writer and any number of reader processes: a reader sees every document committed
  before its query began, never half of an ``add_many`` or of a replacement, never a
  merge half done (``check()`` stays clean on its snapshot), and never blocks the
  writer, not even a reader holding one snapshot for the whole run.
* Two writer processes both work: LMDB serialises their write transactions (the second
  waits for the first to commit; it never gets an error), and each picks up the other's
  commits, merges and re-layouts at its next operation.
* Threads: a ``Store`` may be shared by any number of threads for every operation;
  calls are serialised by the Store's lock. Closing it from one thread makes the others'
  later calls raise ``StoreClosedError``.
* fork(): a child may keep using the parent's ``Store`` object; it reopens the file on
  first use. The parent's Store is unaffected by anything the child does, including
  closing its copy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simstore

from . import _workload
from .conftest import COUNTS, Worker, Zygote, assert_queries_match_oracle, run_python

SECONDS = 3.0
SOAK_SECONDS = 30.0


def run_readers_and_writer(tmp_path: Path, zygote: Zygote, seconds: float) -> dict[str, Any]:
    path = str(tmp_path / "shared.simstore")
    seed = 11
    with simstore.open(path, "c", k=3, sync=False) as store:
        store.add_many(
            [f"mover-{mover}" for mover in range(_workload.MOVERS)],
            [_workload.mover_fps(seed, mover)[0] for mover in range(_workload.MOVERS)],
        )
        store.add("single-0", fingerprint=_workload.single_fp(0))
    start_at = time.monotonic() + 1.0
    common = {"path": path, "seed": seed, "start_at": start_at, "seconds": seconds}
    workers = [
        Worker(
            {**common, "worker": "writer", "log": str(tmp_path / "writer.log"), "merge_threshold": 100},
            zygote,
        ),
        Worker({**common, "worker": "holder", "log": str(tmp_path / "holder.log")}, zygote),
    ]
    for reader in range(3):
        cfg = {
            **common,
            "worker": "reader",
            "reader": reader,
            # one reader is a read-write Store that only reads
            "mode": "w" if reader == 2 else "r",
            "log": str(tmp_path / f"reader-{reader}.log"),
            "check_every": 0.7,
        }
        workers.append(Worker(cfg, zygote))
    for worker in workers:
        worker.wait_for(lambda lines: bool(lines) and lines[0] == "O", timeout=30)
    for worker in workers:
        worker.wait_for(lambda lines: lines[-1].startswith("C "), timeout=seconds + 60)
        assert worker.join() == 0, worker.errors()
    logs = {Path(worker.log_path).stem: worker.lines() for worker in workers}
    violations = [line for lines in logs.values() for line in lines if line.startswith("X ")]
    assert violations == []
    return {"path": path, "logs": logs}


def check_run(result: dict[str, Any]) -> None:
    logs = result["logs"]
    acked_at = {
        int(parts[1]): float(parts[2])
        for parts in (line.split() for line in logs["writer"])
        if parts[0] == "G"
    }
    groups, slowest, _median = logs["writer"][-1].split()[1:]
    assert int(groups) == len(acked_at) >= 20
    # Readers never block the writer: it kept committing while the holder held one
    # snapshot open for the whole run (a blocked writer would commit nothing in
    # between), ...
    held = {
        parts[0]: float(parts[1]) for parts in (line.split() for line in logs["holder"]) if parts[0] in "HR"
    }
    during_hold = sum(1 for at in acked_at.values() if held["H"] < at < held["R"])
    assert during_hold >= 10, f"only {during_hold} groups committed while a snapshot was held"
    # ... and no single write waited long: a generous bound, since the test shares
    # two cores with four other processes (a block would last the whole run).
    assert float(slowest) < 2.5, f"the writer waited {slowest} s"
    must_see = seen = queries = 0
    for name, lines in logs.items():
        if not name.startswith("reader"):
            continue
        assert int(lines[-1].split()[1]) >= 10, f"{name} hardly ran"
        assert "K" in lines, f"{name} never ran check()"
        for parts in (line.split() for line in lines):
            if parts[0] == "Q":
                queries += 1
                group, found, began = int(parts[1]), parts[2] == "1", float(parts[3])
                if group in acked_at and acked_at[group] < began:
                    must_see += 1
                    assert found, f"{name} missed group {group}, committed before its query began"
                seen += found
            elif parts[0] == "N":
                size, began = int(parts[1]), float(parts[2])
                committed = sum(1 for at in acked_at.values() if at < began)
                # movers + single-0 + the acknowledged groups, at least
                assert size >= _workload.MOVERS + 1 + committed * _workload.GROUP_SIZE
    assert must_see >= 10
    COUNTS["concurrent_reader_queries"] += queries
    COUNTS["concurrent_must_see_checks"] += must_see
    with simstore.open(result["path"], "r") as store:
        assert store.check() == []
        assert_queries_match_oracle(store, 5)
        COUNTS["docs_checked_concurrency"] += len(store)


def test_one_writer_three_readers_and_a_held_snapshot(tmp_path: Path, zygote: Zygote) -> None:
    """One writer (batches, replacements, single adds, merges), three reader processes and
    one raw LMDB reader that holds its snapshot for the whole run."""
    check_run(run_readers_and_writer(tmp_path, zygote, SECONDS))


@pytest.mark.slow
def test_soak_one_writer_three_readers(tmp_path: Path, zygote: Zygote) -> None:
    check_run(run_readers_and_writer(tmp_path, zygote, SOAK_SECONDS))


def test_two_writer_processes_both_work(tmp_path: Path, zygote: Zygote) -> None:
    """Two processes write one store at once (adds, batches, replacements, removals and
    merges of their own documents): both finish without an error, the store holds
    exactly the union of what each acknowledged, and check() is clean. The second writer
    never gets an error: LMDB makes it wait for the first one's transaction."""
    path = str(tmp_path / "two-writers.simstore")
    simstore.open(path, "c", k=3).close()
    start_at = time.monotonic() + 0.5
    workers = []
    for number in range(2):
        cfg = {
            "worker": "crash",
            "path": path,
            "log": str(tmp_path / f"writer-{number}.log"),
            "mode": "w",
            "k": None,
            "seed": 20 + number,
            "mix": "writer",
            "round": number,
            "live": [],
            # relayout under concurrent writes: see the relayout tests at the end
            "relayout": False,
            "sync": False,
            "merge_threshold": 60 + 90 * number,
            "max_ops": 10**7,
            "start_at": start_at,
            "seconds": 2.0,
        }
        workers.append(Worker(cfg, zygote))
    model: _workload.Model = {}
    for worker in workers:
        lines = worker.wait_for(lambda lines: bool(lines) and lines[-1].startswith(("C ", "E ")), timeout=120)
        assert worker.join() == 0, worker.errors()
        acked = sum(1 for line in lines if line.startswith("A "))
        assert acked >= 50
        stream = _workload.operations(
            worker.cfg["seed"], "writer", [], worker.cfg["round"], worker.cfg["relayout"]
        )
        for _ in range(acked):
            _workload.apply(model, next(stream), 3)
        COUNTS["two_writer_ops"] += acked
    with simstore.open(path, "r") as store:
        assert store.check() == []
        assert dict(store.items()) == {key: fp for key, (fp, _) in model.items()}
        assert_queries_match_oracle(store, 9)


# -- threads ------------------------------------------------------------------------------------


def test_threads_race_add_if_new_remove_and_close(tmp_path: Path) -> None:
    """Eight threads share one Store: add_if_new races on the same near-duplicates (exactly
    one insert each), adds and removals of their own keys, queries and merges; then one
    thread closes the store while the others keep calling, and those calls raise
    StoreClosedError (never another error, a hang or a crash)."""
    completed = run_python(
        """
        import sys, threading, random
        import simstore
        path = sys.argv[1]
        store = simstore.open(path, "c", k=3, sync=False, merge_threshold=40)
        barrier = threading.Barrier(8)
        first_phase_done = threading.Barrier(9)
        counter_lock = threading.Lock()
        inserted = [0] * 50
        errors = []
        closed_errors = [0]
        stop = threading.Event()

        def work(number):
            rng = random.Random(number)
            try:
                barrier.wait()
                for item in range(50):
                    fp = (item * 0x9E3779B97F4A7C15) % 2**64 ^ (1 << (number % 3))
                    if not store.add_if_new(f"dup-{item}-{number}", fingerprint=fp, k=3):
                        with counter_lock:
                            inserted[item] += 1
                    key = f"own-{number}-{item}"
                    store.add(key, fingerprint=rng.getrandbits(64))
                    if item % 3 == 0:
                        store.remove(key)
                    if item % 17 == 0:
                        store.merge()
                    store.query(fingerprint=fp)
                first_phase_done.wait()
                while not stop.is_set():
                    try:
                        store.query(fingerprint=1)
                        store.add(f"late-{number}", fingerprint=number)
                    except simstore.StoreClosedError:
                        closed_errors[0] += 1
                        return
            except BaseException as exc:
                errors.append(repr(exc))

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        import time
        first_phase_done.wait()
        time.sleep(0.2)
        store.close()
        for thread in threads:
            thread.join(30)
        stop.set()
        assert not any(t.is_alive() for t in threads), "a thread hangs"
        assert errors == [], errors
        assert inserted == [1] * 50, inserted
        with simstore.open(path, "r") as reopened:
            assert reopened.check() == []
            dups = [key for key in reopened if isinstance(key, str) and key.startswith("dup-")]
            assert len(dups) == 50, len(dups)
            own = [key for key in reopened if isinstance(key, str) and key.startswith("own-")]
            assert len(own) == 8 * 33, len(own)
        print(closed_errors[0])
        """,
        str(tmp_path / "threads.simstore"),
    )
    assert completed.returncode == 0, completed.stderr
    assert int(completed.stdout) == 8  # every thread saw StoreClosedError after the close


# -- fork -------------------------------------------------------------------------------------------


def fork_and_run(body: Any) -> tuple[int, str]:
    """Run ``body()`` in a forked child; returns its exit code and what it wrote to a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(read_end)
            message = body()
            os.write(write_end, str(message).encode())
        except BaseException as exc:
            os.write(write_end, repr(exc).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        output = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output


def test_fork_child_reuses_the_parents_store(tmp_path: Path) -> None:
    """A forked child uses the parent's Store object as its own (reopened on first use):
    it sees merged and unmerged documents, writes, merges and closes; the parent carries
    on with its Store, sees the child's writes, and nothing is lost."""
    path = str(tmp_path / "fork.simstore")
    store = simstore.open(path, "c", k=3, sync=False, merge_threshold=10_000)
    try:
        store.add_many([f"merged-{i}" for i in range(100)], np.arange(100, dtype=np.uint64) * 7919)
        store.merge()
        store.add("unmerged", fingerprint=42, meta={"from": "parent"})

        def child() -> str:
            assert store.get("unmerged") == simstore.Record("unmerged", 42, {"from": "parent"})
            assert [m.key for m in store.query(fingerprint=7919 * 5, k=0)] == ["merged-5"]
            store.add("from-child", fingerprint=43)
            store.add_many(["c1", "c2"], [44, 45])
            store.remove("merged-7")
            store.merge()
            assert store.check() == []
            store.close()
            return "ok"

        code, output = fork_and_run(child)
        # the parent's Store is intact whatever the child did
        assert [m.key for m in store.query(fingerprint=7919 * 5, k=0)] == ["merged-5"]
        assert (code, output) == (0, "ok")
        assert store.get("from-child") == simstore.Record("from-child", 43, None)
        assert "merged-7" not in store
        assert len(store) == 100 + 1 + 3 - 1
        store.add("parent-after", fingerprint=46)
        assert store.check() == []
        assert_queries_match_oracle(store, 3)
    finally:
        store.close()


def test_fork_child_of_a_read_only_store_stays_read_only(tmp_path: Path) -> None:
    """The child's reopened copy of a read-only Store reads, and refuses writes with
    ReadOnlyError."""
    path = str(tmp_path / "fork-ro.simstore")
    with simstore.open(path, "c", sync=False) as creating:
        creating.add_many(["a", "b"], [1, 2])
    with simstore.open(path, "r") as store:

        def child() -> str:
            assert list(store.items()) == [("a", 1), ("b", 2)]
            try:
                store.add("c", fingerprint=3)
            except simstore.ReadOnlyError:
                return "read-only"
            return "wrote"

        assert fork_and_run(child) == (0, "read-only")


@pytest.mark.parametrize("mode", ["w", "r"])
def test_fork_child_that_never_uses_the_store_leaves_the_parent_alone(tmp_path: Path, mode: str) -> None:
    """Children that never use the inherited Store, that close it unused, or that collect
    garbage, and end with os._exit (as multiprocessing's children do), leave the parent's
    Store working."""
    path = str(tmp_path / "fork-close.simstore")
    with simstore.open(path, "c", sync=False) as creating:
        creating.add_many(["a", "b"], [1, 2])
    store = simstore.open(path, mode, sync=False)
    try:
        for action in ("close", "nothing", "gc"):

            def child(action: str = action) -> str:
                if action == "close":
                    store.close()
                elif action == "gc":
                    import gc

                    gc.collect()
                return action

            assert fork_and_run(child) == (0, action)
            assert [m.key for m in store.query(fingerprint=1, k=0)] == ["a"]
            assert store.check() == []
    finally:
        store.close()
    with simstore.open(path, "r") as reopened:
        assert list(reopened.items()) == [("a", 1), ("b", 2)]


def test_fork_child_exiting_normally_leaves_the_parent_alone(tmp_path: Path) -> None:
    """A plain os.fork() child that never touches the store and returns normally (running
    interpreter shutdown, unlike os._exit) must not break the parent's Store."""
    completed = run_python(
        """
        import os, sys
        import simstore
        store = simstore.open(sys.argv[1], "c", sync=False)
        store.add("a", fingerprint=1)
        len(store)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        assert store.get("a") == simstore.Record("a", 1, None)
        store.add("b", fingerprint=2)
        assert store.check() == []
        store.close()
        print("ok")
        """,
        str(tmp_path / "fork-exit.simstore"),
    )
    assert completed.returncode == 0, completed.stderr[-600:]
    assert completed.stdout.strip() == "ok"


def test_fork_while_another_thread_is_inside_the_store(tmp_path: Path) -> None:
    """fork() while a parent thread is in the middle of a Store call, inside a read
    transaction: the child's first use must not deadlock on the lock it inherited
    locked. Waits on events, never on the clock: the call in flight holds until fork()
    has been called (a timer lets it go), however slow the machine."""
    completed = run_python(
        """
        import os, signal, sys, threading
        import numpy as np
        import simstore
        from simstore.engine import core as engine_module

        store = simstore.open(sys.argv[1], "c", sync=False)
        store.add_many([f"k{i}" for i in range(2000)], np.arange(2000, dtype=np.uint64) * 7919)
        store.merge()
        inside, let_go = threading.Event(), threading.Event()
        real_enter = engine_module.Reading.__enter__

        def enter_and_wait(reading):
            txn = real_enter(reading)
            if threading.current_thread().name == "busy":
                inside.set()
                let_go.wait()  # a read transaction open, the store's lock held
            return txn

        engine_module.Reading.__enter__ = enter_and_wait
        busy = threading.Thread(target=lambda: store.query(fingerprint=7919, k=3), name="busy")
        busy.start()
        inside.wait()
        threading.Timer(0.5, let_go.set).start()  # (fork() waits for the busy call to end)
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)  # a deadlock ends here, with SIGALRM
            try:
                store.query(fingerprint=5 * 7919, k=0)
            except simstore.SimstoreError:
                pass  # an error is an answer; only a hang fails this test
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        busy.join()
        store.close()
        print(os.waitstatus_to_exitcode(status))
        """,
        str(tmp_path / "fork-busy.simstore"),
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "0", "the child deadlocked after fork()"


@pytest.mark.parametrize("sync", ["True", "'interval'", "False"])
def test_fork_while_other_threads_write(tmp_path: Path, sync: str) -> None:
    """fork() again and again while two threads add with each sync mode: every child's
    first use reopens the store and answers (a durable group commit's flush, outside the
    store's lock, once left py-lmdb mid-call in 5 of 20 children, which then hung)."""
    completed = run_python(
        f"""
        import os, signal, sys, threading
        import simstore
        store = simstore.open(sys.argv[1], "c", sync={sync})
        stop = threading.Event()

        def writer(offset):
            step = 0
            while not stop.is_set():
                store.add(offset + step, fingerprint=(offset + step) * 0x9E3779B97F4A7C15 % 2**64)
                step += 1

        threads = [threading.Thread(target=writer, args=(offset,)) for offset in (0,)]
        for thread in threads:
            thread.start()
        outcomes = []
        for _ in range(60):
            pid = os.fork()
            if pid == 0:
                signal.alarm(5)  # a hang ends here, with SIGALRM
                os._exit(0 if len(store) >= 0 else 1)
            _, status = os.waitpid(pid, 0)
            outcomes.append(os.waitstatus_to_exitcode(status))
        stop.set()
        for thread in threads:
            thread.join()
        assert store.check() == []
        store.close()
        print(outcomes.count(0), "of", len(outcomes))
        """,
        str(tmp_path / "fork-writers.simstore"),
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "60 of 60", "a child hung (SIGALRM) or failed after fork()"


class _LockCheckingEnvironment:
    """An lmdb.Environment stand-in that records every call made while the store's lock
    is not held by the calling thread (fork() waits for that lock, so only such a call
    can be in flight in a forked child)."""

    def __init__(self, env: Any, locks: list[Any], outside: list[str]) -> None:
        self._env, self._locks, self._outside = env, locks, outside

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._env, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if not any(lock._is_owned() for lock in self._locks):
                self._outside.append(name)
            return attribute(*args, **kwargs)

        return call


@pytest.mark.parametrize("sync", [True, "interval"])
def test_no_lmdb_call_outside_the_stores_lock(tmp_path: Path, sync: Any) -> None:
    """Group commits from four threads (the leader's flush runs outside the store's lock),
    batches, bulk adds, merges and queries call LMDB's environment only with the store's
    lock held, or (the write-ahead log's checkpoints, from their own thread) the log
    writer's, which fork() waits for too: what makes fork() safe at any moment."""
    outside: list[str] = []
    with simstore.open(str(tmp_path / "locked.simstore"), "c", k=3, sync=sync, merge_threshold=300) as store:
        engine = store._engine
        logger = engine.env.log_writer
        locks = [engine.lock, *(logger.locks_over_fork() if logger is not None else [])]
        engine.env.env = _LockCheckingEnvironment(engine.env.env, locks, outside)

        def writer(offset: int) -> None:
            for step in range(200):
                store.add(offset + step, fingerprint=(offset + step) * 0x9E3779B97F4A7C15 % 2**64)
                store.query(fingerprint=step)

        threads = [
            threading.Thread(target=writer, args=(offset,)) for offset in (0, 10**6, 2 * 10**6, 3 * 10**6)
        ]
        for thread in threads:
            thread.start()
        with store.batch() as batch:
            batch.add("batched", fingerprint=7)
        store.add_many([f"bulk-{i}" for i in range(500)], np.arange(500, dtype=np.uint64))
        store.merge()
        for thread in threads:
            thread.join()
        store.flush()
        assert outside == []
        assert len(store) == 800 + 1 + 500


def test_fork_pool_workers_query_in_parallel(tmp_path: Path) -> None:
    """The documented pattern for parallel queries: open once, then fork worker processes
    (multiprocessing with the fork start method) that each query the inherited Store."""
    completed = run_python(
        """
        import multiprocessing, sys
        import numpy as np
        import simstore
        store = simstore.open(sys.argv[1], "c", sync=False, merge_threshold=500)
        fps = np.arange(3000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        store.add_many([f"k{i}" for i in range(3000)], fps)
        store.add("in-delta", fingerprint=12345)

        def lookup(index):
            return [m.key for m in store.query(fingerprint=int(fps[index]), k=0)]

        with multiprocessing.get_context("fork").Pool(2) as pool:
            found = pool.map(lookup, range(0, 3000, 7))
        assert found == [[f"k{i}"] for i in range(0, 3000, 7)], found[:3]
        assert store.query(fingerprint=12345, k=0)[0].key == "in-delta"
        assert store.check() == []
        store.close()
        print("ok")
        """,
        str(tmp_path / "pool.simstore"),
    )
    assert completed.returncode == 0, completed.stderr[-600:]
    assert completed.stdout.strip() == "ok"


# -- another process re-lays the store out ----------------------------------------------------------


@pytest.mark.skipif(not hasattr(simstore.Store, "relayout"), reason="Store.relayout() does not exist yet")
@pytest.mark.parametrize("call", ["query", "query_many", "add_if_new", "remove", "add", "get"])
@pytest.mark.parametrize("blocks", [4, 6])
def test_first_call_after_another_process_relayouts(tmp_path: Path, call: str, blocks: int) -> None:
    """A Store that stays open while another process re-lays the file out (to 4 or 20
    tables, from 10) gives exact answers and working writes at its very next call."""
    path = str(tmp_path / "relayout.simstore")
    rng = np.random.default_rng(blocks)
    fps = rng.integers(0, 2**64, 500, dtype=np.uint64)
    with simstore.open(path, "c", k=3, sync=False, merge_on_close=False) as store:
        store.add_many([f"k{i}" for i in range(500)], fps)
        store.merge()
        store.add("in-delta", fingerprint=int(fps[0]) ^ 0b11)
        assert len(store.query(fingerprint=int(fps[0]))) == 2
        completed = run_python(
            """
            import sys, simstore
            with simstore.open(sys.argv[1], "w") as other:
                other.relayout(blocks=int(sys.argv[2]))
                assert other.check() == []
            """,
            path,
            str(blocks),
        )
        assert completed.returncode == 0, completed.stderr[-600:]
        near = int(fps[0]) ^ 0b1
        expected = sorted(
            [("k0", 1, int(fps[0])), ("in-delta", 1, int(fps[0]) ^ 0b11)], key=lambda hit: hit[0]
        )
        if call == "query":
            got = [(m.key, m.distance, m.fingerprint) for m in store.query(fingerprint=near)]
            assert sorted(got) == sorted(expected)
        elif call == "query_many":
            rows = store.query_many([near, int(fps[7])])
            assert sorted((m.key, m.distance, m.fingerprint) for m in rows[0]) == sorted(expected)
            assert [m.key for m in rows[1]] == ["k7"]
        elif call == "add_if_new":
            assert [m.key for m in store.add_if_new("dup", fingerprint=near)] == ["in-delta", "k0"] or sorted(
                m.key for m in store.add_if_new("dup", fingerprint=near)
            ) == ["in-delta", "k0"]
            assert "dup" not in store
        elif call == "remove":
            store.remove("k3")
            assert "k3" not in store
        elif call == "add":
            store.add("new", fingerprint=int(fps[9]) ^ 1)
            assert {m.key for m in store.query(fingerprint=int(fps[9]))} == {"k9", "new"}
        else:
            assert store.get("k5") == simstore.Record("k5", int(fps[5]), None)
        assert store.tables != ()
        assert len(store.tables) == {4: 4, 6: 20}[blocks]
        assert store.check() == []
        assert_queries_match_oracle(store, blocks)


RELAYOUTER = """
import sys, time
import simstore
with simstore.open(sys.argv[1], "w", sync=False) as other:
    if sys.argv[2] == "stdin":
        for line in sys.stdin:
            if line.startswith("multi-index"):  # "multi-index" or "multi-index K"
                other.relayout(k=int(line.split()[1]) if " " in line else None, layout="multi-index")
            else:
                other.relayout(blocks=int(line))
            print("done", flush=True)
    else:
        started, count = time.monotonic(), 0
        while time.monotonic() - started < float(sys.argv[2]):
            other.relayout(blocks=(4, 5, 6)[count % 3])
            count += 1
        print(count)
"""


@pytest.mark.skipif(not hasattr(simstore.Store, "relayout"), reason="Store.relayout() does not exist yet")
def test_long_lived_store_survives_many_relayouts_by_another_process(tmp_path: Path) -> None:
    """A query server that stays open for weeks while a maintenance process re-lays the
    store out now and then (Manku's tables of two sizes, multi-index schemes of two k)
    keeps answering exactly."""
    path = str(tmp_path / "relayouts.simstore")
    fps = np.arange(200, dtype=np.uint64) * np.uint64(0x9E37_79B9_7F4A_7C15)
    with simstore.open(path, "c", k=3, layout="multi-index", sync=False) as store:
        store.add_many([f"k{i}" for i in range(200)], fps)
    other = subprocess.Popen(
        [sys.executable, "-c", RELAYOUTER, path, "stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert other.stdin is not None
    assert other.stdout is not None
    try:
        with simstore.open(path, "r") as server:
            for number in range(80):
                other.stdin.write(f"{(5, 'multi-index', 6, 'multi-index 4')[number % 4]}\n")
                other.stdin.flush()
                assert other.stdout.readline().strip() == "done"
                assert [m.key for m in server.query(fingerprint=int(fps[5]), k=0)] == ["k5"], number
    finally:
        other.stdin.close()
        other.wait(timeout=60)


@pytest.mark.skipif(not hasattr(simstore.Store, "relayout"), reason="Store.relayout() does not exist yet")
def test_calls_during_relayouts_by_another_process(tmp_path: Path) -> None:
    """Adds, queries and add_if_new for two seconds while another process re-lays the
    store out in a loop: every call succeeds and the result is exact."""
    path = str(tmp_path / "relayout-race.simstore")
    fps = np.random.default_rng(1).integers(0, 2**64, 2000, dtype=np.uint64)
    with simstore.open(path, "c", k=3, sync=False) as store:
        store.add_many([f"k{i}" for i in range(2000)], fps)
    other = subprocess.Popen(
        [sys.executable, "-c", RELAYOUTER, path, "2.0"], stdout=subprocess.PIPE, text=True
    )
    errors: list[str] = []
    try:
        with simstore.open(path, "w", sync=False, merge_threshold=50) as store:
            started = time.monotonic()
            number = 0
            while time.monotonic() - started < 2.0:
                try:
                    store.add(f"n{number}", fingerprint=number)
                    assert [m.key for m in store.query(fingerprint=int(fps[number % 2000]), k=0)] == [
                        f"k{number % 2000}"
                    ]
                    store.remove(f"n{number}")
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                number += 1
    finally:
        other.wait(timeout=60)
    assert errors == [], f"{len(errors)} failed calls, first: {errors[0]}"
