"""Sustained online inserts, one document per call, into an index that already
holds N documents: simstore (delta merges included) beside its peers.

Run (from the repository root)::

    python benchmarks/suite/bench_online.py --n 1_000_000 --output benchmarks/results/online_1M.md
    python benchmarks/suite/bench_online.py --n 10_000_000 --repeats 2 \\
        --output benchmarks/results/online_10M.md

``--store PATH`` reuses an existing simstore store of the same N random
fingerprints (e.g. one left by ``bench_peers.py --keep-store``) instead of
building one. The figures are written as JSON beside ``--output``, under its
name (``online_1M.md``: ``online_1M.json``).

Systems, each in its own process, all starting from the same N seeded random
fingerprints (ids 0..N-1; ``bench_store.base_fingerprints``) and adding the
same new ones (``bench_store.online_fingerprints``):

- **simstore, sync=False**: a copy of the N-document store (flushed to disk
  before the clock starts, so that the kernel's write-back of the copy does
  not land in the timed calls), opened ``"w"`` with the default
  ``merge_threshold`` and ``merge_on_close=False``;
  ``store.add(key, fingerprint=fp)`` ``--adds`` times (default: exactly
  enough for ``--merges`` automatic merges, the last add triggering the last
  merge, so the run holds whole merge cycles). docs/s is adds over the wall
  time of all of them, merges included; the merge pauses are the ``merges``
  slowest calls and are listed apart. The peak anonymous RSS (sampled every
  0.1 s) and the delta's bytes per document at its fullest are recorded;
- **simstore, sync=True** (the default: every ``add`` is durable against
  power loss): ``--sync-adds`` single adds, fewer because each costs an
  fsync; no merge falls inside them, so its docs/s adds the sync=False
  run's median merge pause amortised over the threshold;
- **raw py-lmdb floor**: one write transaction with 10 puts (one per table)
  per document into the floor loaded with N (``bench_store.raw_floor``),
  sync=False: what a direct LMDB table insert costs, without a delta;
- **faiss** ``IndexBinaryMultiHash`` 4x16 / 2x32 and ``IndexBinaryFlat``:
  ``index.add`` of one code per call, in memory (nothing persisted);
- **simhash** ``SimhashIndex.add`` (pure Python, in memory), up to
  ``--simhash-max-n``, in the ``simhash`` venv (see ``bench_peers.py``).

Per-call latencies are p50 / p99 / p99.9 of the calls that did not merge.

**Concurrent writers** (``--systems writers``, issue 23): the same single
adds from 1 thread, ``--threads`` threads of one process and ``--processes``
processes of one thread, ``--writer-adds`` adds in all per configuration,
into a fresh copy of the N store each time, for simstore ``sync=True`` (group
commit: one transaction and one flush per group of concurrent adds),
simstore ``sync=False``, and the stdlib ``sqlite3`` in WAL mode with the
same flush policy (``synchronous=FULL``: the WAL is fsynced at every commit;
``OFF``: never), one row per document (an integer key as primary key, an
index on the fingerprint), loaded with the same N rows, one autocommit
``INSERT OR REPLACE`` per document and a connection per thread. The writers
start together; docs/s is all adds over the wall time from the start to the
last writer's end; latencies are every call's. Two A/B rows run the same
code with one part switched off in the writer processes: the mailbox (each
process commits alone) and the leaders' gathering (a leader commits whoever
is there, without waiting for the writers the last group held). For example::

    python benchmarks/suite/bench_online.py --systems writers --output benchmarks/results/writers_1M.md

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import (
    AnonPeakSampler,
    Report,
    fmt_range,
    have,
    load_average,
    machine,
    parse_with_quick,
    run_isolated,
    skip_peer,
    source_state,
    summary,
    versions,
    write_result_json,
)
from bench_peers import SIMHASH_WORKER, _codes, _faiss_index
from bench_store import base_fingerprints, online_fingerprints, raw_floor

import simstore
from simstore.commit import group as commit
from simstore.commit import mailbox
from simstore.options import DEFAULT_MERGE_THRESHOLD, Options
from simstore.store import maintenance

ROOT = Path(__file__).resolve().parents[2]


def merge_thresholds(n: int, merges: int) -> list[int]:
    """The automatic merge thresholds of the first ``merges`` merges into a store of ``n``."""
    explicit = Options().merge_threshold
    thresholds: list[int] = []
    tabled = n
    for _ in range(merges):
        threshold = explicit if explicit is not None else DEFAULT_MERGE_THRESHOLD
        thresholds.append(threshold)
        tabled += threshold
    return thresholds


def build_store(path: str, n: int) -> float:
    started = time.perf_counter()
    with simstore.open(path, "n", k=3, sync=False) as store:  # the k of its floor and faiss rows
        store.add_many(range(n), base_fingerprints(n))
    return time.perf_counter() - started


def simstore_adds(base_path: str, work_path: str, n: int, count: int, sync: bool) -> dict[str, Any]:
    """Single adds into a copy of the N store; latencies in µs."""
    shutil.copyfile(base_path, work_path)
    descriptor = os.open(work_path, os.O_RDONLY)
    os.fsync(descriptor)
    os.close(descriptor)
    new = online_fingerprints(count).tolist()
    store = simstore.open(work_path, "w", sync=sync, merge_on_close=False)
    threshold = maintenance.merge_threshold(store._engine)
    first_epoch = store._engine.delta.merge_epoch
    add = store.add
    clock = time.perf_counter_ns
    latencies = np.empty(count, dtype=np.int64)
    largest_delta = (0, 0)
    with AnonPeakSampler(interval=0.1) as sampler:
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        for offset, fingerprint in enumerate(new):
            before = clock()
            add(n + offset, fingerprint=fingerprint)
            latencies[offset] = clock() - before
            if offset % 65_536 == 65_535 and len(store._engine.delta) > largest_delta[0]:
                largest_delta = (len(store._engine.delta), store._engine.delta.sorted_bytes())
        seconds = time.perf_counter() - started
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_seconds = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    merges = store._engine.delta.merge_epoch - first_epoch
    delta_left = store.stats().delta_docs
    store.close()
    os.remove(work_path)
    if os.path.exists(work_path + "-lock"):
        os.remove(work_path + "-lock")
    return {
        "seconds": seconds,
        "cpu seconds": cpu_seconds,
        "add us": latencies / 1000,
        "threshold": threshold,
        "merges": merges,
        "delta left": delta_left,
        "peak anon MiB": sampler.peak_mib,
        "largest delta": largest_delta[0],
        "delta sorted-tier bytes per doc": largest_delta[1] / largest_delta[0] if largest_delta[0] else None,
    }


def floor_adds(path: str, n: int, count: int) -> dict[str, Any]:
    queries = base_fingerprints(n)[:10]
    found = raw_floor(path, n, queries, 1, 1, count)
    for leftover in (path, path + "-lock"):
        if os.path.exists(leftover):
            os.remove(leftover)
    return {"add us": found["insert us"], "seconds": float(found["insert us"].sum()) / 1e6}


def faiss_adds(kind: str, n: int, count: int) -> dict[str, Any]:
    import faiss

    faiss.omp_set_num_threads(1)
    index = _faiss_index(kind)
    index.add(_codes(base_fingerprints(n)))
    new = _codes(online_fingerprints(count))
    rows = [new[position : position + 1] for position in range(count)]
    add = index.add
    clock = time.perf_counter_ns
    latencies = np.empty(count, dtype=np.int64)
    started = time.perf_counter()
    for position, row in enumerate(rows):
        before = clock()
        add(row)
        latencies[position] = clock() - before
    return {"add us": latencies / 1000, "seconds": time.perf_counter() - started}


def simhash_adds(python: str, work: str, n: int, count: int) -> dict[str, Any]:
    data, new = os.path.join(work, "fps.npy"), os.path.join(work, "new.npy")
    np.save(data, base_fingerprints(n))
    np.save(new, online_fingerprints(count))
    completed = subprocess.run(
        [python, str(SIMHASH_WORKER), "online", "--data", data, "--new", new],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(completed.stdout)
    latencies = np.asarray(found["add us"])
    return {
        "add us": latencies,
        "seconds": float(latencies.sum()) / 1e6,
        "peak RSS MiB": found["peak RSS MiB"],
    }


SQLITE_SCHEMA = (
    "CREATE TABLE docs (key INTEGER PRIMARY KEY, fingerprint INTEGER NOT NULL)",
    "CREATE INDEX docs_fingerprint ON docs (fingerprint)",
)
# The configurations of the concurrent-writer table.
WRITER_SHAPES = ("1 thread", "threads", "processes")


def _signed(fingerprints: np.ndarray) -> np.ndarray:
    """uint64 fingerprints as the signed 64-bit integers SQLite stores."""
    return fingerprints.view(np.int64)


def build_sqlite(path: str, n: int) -> float:
    """The N base fingerprints as rows of a WAL-mode SQLite database."""
    started = time.perf_counter()
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute(SQLITE_SCHEMA[0])
    connection.execute("BEGIN")
    fingerprints = _signed(base_fingerprints(n)).tolist()
    connection.executemany("INSERT INTO docs VALUES (?, ?)", enumerate(fingerprints))
    connection.execute("COMMIT")
    connection.execute(SQLITE_SCHEMA[1])
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    return time.perf_counter() - started


def _copy_flushed(source: str, target: str) -> None:
    """Copy ``source`` and flush the copy, so that the kernel's write-back of
    the copy does not land in the timed calls."""
    shutil.copyfile(source, target)
    descriptor = os.open(target, os.O_RDONLY)
    os.fsync(descriptor)
    os.close(descriptor)


def _writer(
    system: str, path: str, n: int, first: int, count: int, sync: bool, threads: int, start_at: float
) -> dict[str, Any]:
    """One writer process: ``threads`` threads add the new documents ``first``
    .. ``first + count - 1`` (after the ``n`` stored) one call each, from
    ``start_at`` (``time.time()``); per-call latencies in µs and the wall clock
    of the end."""
    fingerprints = online_fingerprints(first - n + count)[first - n :]
    shares = np.array_split(np.arange(count), threads)
    latencies = [np.empty(len(share), dtype=np.int64) for share in shares]
    store = None
    if system == "simstore-alone":
        # The A/B: writer processes without the mailbox, each committing alone
        # (as before simstore.commit.mailbox; a benchmark-only switch).
        mailbox.Mailbox.open = classmethod(lambda cls, path: None)  # type: ignore[method-assign,assignment]
        system = "simstore"
    if system == "simstore-nogather":
        # The other A/B: leaders commit whoever is there, without waiting for
        # the writers the last group held (as before; a benchmark-only switch).
        commit.GroupCommit._gather = lambda self, engine, queue: None  # type: ignore[method-assign]
        commit.GroupCommit._expects_more = staticmethod(lambda box: False)  # type: ignore[method-assign]
        system = "simstore"
    if system == "simstore":
        store = simstore.open(path, "w", sync=sync, merge_on_close=False)
    barrier = threading.Barrier(threads)

    def work(index: int) -> None:
        share = shares[index]
        mine = latencies[index]
        clock = time.perf_counter_ns
        keys = (first + share).tolist()
        if store is not None:
            add = store.add
            fps = fingerprints[share].tolist()
            barrier.wait()
            for position, (key, fingerprint) in enumerate(zip(keys, fps, strict=True)):
                before = clock()
                add(key, fingerprint=fingerprint)
                mine[position] = clock() - before
            return
        connection = sqlite3.connect(path, isolation_level=None, timeout=600, check_same_thread=False)
        connection.execute(f"PRAGMA synchronous={'FULL' if sync else 'OFF'}")
        rows = list(zip(keys, _signed(fingerprints[share]).tolist(), strict=True))
        execute = connection.execute
        barrier.wait()
        for position, row in enumerate(rows):
            before = clock()
            execute("INSERT OR REPLACE INTO docs VALUES (?, ?)", row)
            mine[position] = clock() - before
        connection.close()

    time.sleep(max(0.0, start_at - time.time()))
    workers = [threading.Thread(target=work, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    ended = time.time()
    if store is not None:
        store.close()
    return {"add us": np.concatenate(latencies) / 1000, "ended": ended}


def concurrent_adds(
    system: str, base_path: str, work_path: str, n: int, total: int, sync: bool, threads: int, processes: int
) -> dict[str, Any]:
    """``total`` single adds into a fresh copy of ``base_path`` from
    ``processes`` processes of ``threads`` threads each."""
    _copy_flushed(base_path, work_path)
    context = multiprocessing.get_context("spawn")
    shares = np.array_split(np.arange(n, n + total), processes)
    try:
        with context.Pool(processes) as pool:
            pool.map(time.sleep, [0] * processes)  # the workers are up
            start_at = time.time() + 1.0
            pending = [
                pool.apply_async(
                    _writer, (system, work_path, n, int(share[0]), len(share), sync, threads, start_at)
                )
                for share in shares
            ]
            found = [result.get() for result in pending]
        if system.startswith("simstore"):
            with simstore.open(work_path, "r") as store:
                assert len(store) == n + total, "an acknowledged add is missing"
    finally:
        for suffix in ("", "-lock", "-writers", "-wal", "-shm"):
            leftover = work_path + suffix
            if os.path.exists(leftover):
                os.remove(leftover)
    seconds = max(run["ended"] for run in found) - start_at
    return {"add us": np.concatenate([run["add us"] for run in found]), "seconds": seconds}


def writers_rows(
    base_paths: dict[str, str], work: str, n: int, args: argparse.Namespace, note: Any
) -> tuple[list[list[object]], dict[str, Any]]:
    """The concurrent-writer table: every system, flush policy and shape."""
    table: list[list[object]] = []
    figures: dict[str, Any] = {}
    shapes = {"1 thread": (1, 1), "threads": (args.threads, 1), "processes": (1, args.processes)}
    for system, sync, label in (
        ("simstore", True, "simstore, sync=True (group commit)"),
        ("simstore-nogather", True, "simstore, sync=True, leaders do not wait for the last group's writers"),
        ("simstore-alone", True, "simstore, sync=True, no mailbox (processes commit alone)"),
        ("sqlite", True, "sqlite3 WAL, synchronous=FULL"),
        ("simstore", False, "simstore, sync=False"),
        ("sqlite", False, "sqlite3 WAL, synchronous=OFF"),
    ):
        for shape in WRITER_SHAPES:
            threads, processes = shapes[shape]
            writers = (
                f"{threads} threads" if threads > 1 else f"{processes} processes" if processes > 1 else "1"
            )
            note(f"writers: {label}, {writers}")
            load = load_average()
            runs = []
            for _ in range(args.writer_repeats):
                work_path = os.path.join(work, f"writers.{system}")
                base_path = base_paths[system.split("-")[0]]
                runs.append(
                    concurrent_adds(
                        system, base_path, work_path, n, args.writer_adds, sync, threads, processes
                    )
                )
            rates = [args.writer_adds / run["seconds"] for run in runs]
            tails = [summary(run["add us"] / 1000) for run in runs]
            table.append(
                [
                    label,
                    writers,
                    args.writer_adds,
                    fmt_range(rates),
                    fmt_range([tail["p50"] for tail in tails]),
                    fmt_range([tail["p99"] for tail in tails]),
                    fmt_range([tail["p99.9"] for tail in tails]),
                    fmt_range([tail["max"] for tail in tails]),
                    load,
                ]
            )
            figures[f"{label}, {writers}"] = {
                "docs/s": rates,
                "add ms": {name: [tail[name] for tail in tails] for name in ("p50", "p99", "p99.9", "max")},
                "load average at start": load,
            }
    return table, figures


def row_of(
    label: str, runs: list[dict[str, Any]], merges: int, count: int
) -> tuple[list[object], dict[str, Any]]:
    rates = [count / run["seconds"] for run in runs]
    pauses: list[float] = []
    steady: list[float] = []
    tails: list[dict[str, float]] = []
    for run in runs:
        ordered = np.sort(run["add us"])
        if merges:
            pauses += (ordered[-merges:] / 1e6).tolist()
            ordered = ordered[:-merges]
        steady.append(count / (float(ordered.sum()) / 1e6) if len(ordered) else float("nan"))
        tails.append(summary(ordered))
    row = [
        label,
        count,
        fmt_range(rates),
        fmt_range(steady),
        fmt_range([tail["p50"] for tail in tails]),
        fmt_range([tail["p99"] for tail in tails]),
        fmt_range([tail["p99.9"] for tail in tails]),
        merges * len(runs) if merges else "-",
        fmt_range(pauses) if pauses else "-",
        runs[0].get("peak RSS MiB"),
    ]
    figures = {
        "label": label,
        "adds": count,
        "docs/s": rates,
        "docs/s without merges": steady,
        "add us": {name: [tail[name] for tail in tails] for name in ("p50", "p99", "p99.9", "max")},
        "merge pause s": pauses,
        "peak RSS MiB": runs[0].get("peak RSS MiB"),
    }
    return row, figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=lambda value: int(value.replace("_", "")), default=1_000_000)
    parser.add_argument("--merges", type=int, default=2, help="automatic merges in a simstore run")
    parser.add_argument(
        "--adds", type=int, default=None, help="adds per run (default: --merges merges' worth)"
    )
    parser.add_argument("--sync-adds", type=int, default=5_000)
    parser.add_argument("--floor-adds", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--store", default=None, help="an existing store of the N base fingerprints")
    parser.add_argument(
        "--systems",
        default="simstore,simstore-sync,lmdb-floor,faiss-mh-4x16,faiss-mh-2x32,faiss-flat,simhash",
    )
    parser.add_argument("--threads", type=int, default=8, help="writer threads (systems: writers)")
    parser.add_argument("--processes", type=int, default=4, help="writer processes (systems: writers)")
    parser.add_argument(
        "--writer-adds", type=int, default=20_000, help="adds per concurrent-writer configuration"
    )
    parser.add_argument("--writer-repeats", type=int, default=1)
    parser.add_argument("--simhash-python", default="/tmp/simhash-venv/bin/python")
    parser.add_argument("--simhash-max-n", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--output", default=None)
    parser.add_argument(
        "--update",
        action="store_true",
        help="merge the systems measured now into the existing JSON beside --output instead of replacing it",
    )
    args = parse_with_quick(
        parser,
        {
            "n": 5000,
            "adds": 2000,
            "merges": 1,
            "sync_adds": 20,
            "floor_adds": 200,
            "repeats": 1,
            "threads": 2,
            "processes": 1,
            "writer_adds": 100,
        },
    )
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    if not have("faiss") and any(system.startswith("faiss") for system in systems):
        skip_peer("faiss", "faiss-cpu is not installed: pip install -e '.[bench]'")
        systems = [system for system in systems if not system.startswith("faiss")]
    n = args.n
    if args.adds is None:
        args.adds = sum(merge_thresholds(n, args.merges))
    work = tempfile.mkdtemp(prefix="bench_online_", dir=args.dir)
    report = Report()
    report.header(
        f"Sustained online inserts into an index of {n:,}", data_dir=work, code=source_state(ROOT, "simstore")
    )
    rows: list[list[object]] = []
    writer_rows: list[list[object]] = []
    figures: dict[str, Any] = {}
    load_at: dict[str, str] = {}
    wall = time.perf_counter()
    started_load = load_average()

    def note(text: str) -> None:
        print(f"  [{time.strftime('%H:%M:%S')}] {text} (load {load_average()})", file=sys.stderr)

    try:
        base_path = args.store
        build_s = None
        if base_path is None and {"simstore", "simstore-sync", "writers"} & set(systems):
            base_path = os.path.join(work, "base.simstore")
            note("building the base store")
            build_s, _, _ = run_isolated(build_store, base_path, n)
        work_path = os.path.join(work, "work.simstore")
        merge_pause = None
        for name in systems:
            note(f"{name} ...")
            load_at[name] = load_average()
            runs: list[dict[str, Any]] = []
            merges = 0
            if name == "simstore":
                for _ in range(args.repeats):
                    found, peak, _ = run_isolated(simstore_adds, base_path, work_path, n, args.adds, False)
                    runs.append({**found, "peak RSS MiB": peak})
                merges = runs[0]["merges"]
                row, fig = row_of("simstore `add`, sync=False (merges included)", runs, merges, args.adds)
                fig["threshold"] = runs[0]["threshold"]
                fig["docs per CPU-second"] = [args.adds / run["cpu seconds"] for run in runs]
                for name_of_figure in (
                    "merges",
                    "peak anon MiB",
                    "largest delta",
                    "delta sorted-tier bytes per doc",
                ):
                    fig[name_of_figure] = [run[name_of_figure] for run in runs]
                if fig["merge pause s"]:
                    merge_pause = float(np.median(fig["merge pause s"]))
            elif name == "simstore-sync":
                for _ in range(args.repeats):
                    found, peak, _ = run_isolated(
                        simstore_adds, base_path, work_path, n, args.sync_adds, True
                    )
                    runs.append({**found, "peak RSS MiB": peak})
                row, fig = row_of(
                    "simstore `add`, sync=True (default; no merge in the run)", runs, 0, args.sync_adds
                )
                if merge_pause is not None:
                    threshold = runs[0]["threshold"]
                    amortised = [
                        1 / (1 / rate + merge_pause / threshold) for rate in fig["docs/s without merges"]
                    ]
                    fig["docs/s with amortised merge"] = amortised
                    row[0] += f"; with the sync=False merge pause amortised: {fmt_range(amortised)} docs/s"
            elif name == "writers":
                sqlite_path = os.path.join(work, "base.sqlite")
                note("building the base SQLite database")
                run_isolated(build_sqlite, sqlite_path, n)
                assert base_path is not None
                writer_rows, writer_figures = writers_rows(
                    {"simstore": base_path, "sqlite": sqlite_path}, work, n, args, note
                )
                figures[name] = writer_figures
                note(f"{name} done")
                continue
            elif name == "lmdb-floor":
                found, peak, _ = run_isolated(
                    floor_adds, os.path.join(work, "floor.lmdb"), n, args.floor_adds
                )
                runs.append({**found, "peak RSS MiB": peak})
                row, fig = row_of(
                    "raw py-lmdb floor: 1 write txn + 10 puts per doc, sync=False", runs, 0, args.floor_adds
                )
            elif name.startswith("faiss"):
                for _ in range(args.repeats):
                    found, peak, _ = run_isolated(faiss_adds, name, n, args.adds)
                    runs.append({**found, "peak RSS MiB": peak})
                label = {
                    "faiss-mh-4x16": "faiss IndexBinaryMultiHash 4x16 `add` (in memory)",
                    "faiss-mh-2x32": "faiss IndexBinaryMultiHash 2x32 `add` (in memory)",
                    "faiss-flat": "faiss IndexBinaryFlat `add` (in memory)",
                }[name]
                row, fig = row_of(label, runs, 0, args.adds)
            elif name == "simhash":
                if n > args.simhash_max_n or not os.path.exists(args.simhash_python):
                    note(f"simhash skipped (N > {args.simhash_max_n:,} or no venv)")
                    continue
                runs.append(simhash_adds(args.simhash_python, work, n, args.adds))
                row, fig = row_of("simhash SimhashIndex `add` (pure Python, in memory)", runs, 0, args.adds)
            else:
                parser.error(f"unknown system {name}")
            row.append(load_at[name])
            rows.append(row)
            fig["load average at start"] = load_at[name]
            figures[name] = fig
            note(f"{name} done")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    report.add(
        f"Versions: {', '.join(f'{k} {v}' for k, v in versions('faiss-cpu', 'lmdb', 'numpy').items())}\n"
    )
    if writer_rows:
        report.heading(f"Concurrent writers: single adds into an index of {n:,}")
        report.table(
            [
                "system",
                "writers",
                "adds",
                "docs/s",
                "add p50 ms",
                "add p99 ms",
                "add p99.9 ms",
                "add max ms",
                "load at start",
            ],
            writer_rows,
        )
        report.add(
            f"Each configuration adds into a fresh copy of the {n:,}-document store (database); "
            f"median (min-max) over {args.writer_repeats} run(s). docs/s is all adds over the wall time "
            "from the common start to the last writer's end; latencies are every call's.\n"
        )
    report.heading(f"Single adds into an index of {n:,}")
    report.table(
        [
            "system",
            "adds per run",
            "docs/s (all calls)",
            "docs/s (without merge calls)",
            "add p50 µs",
            "add p99 µs",
            "add p99.9 µs",
            "merges",
            "merge pause s",
            "peak RSS MiB",
            "load at start",
        ],
        rows,
    )
    report.add(
        f"Median (min-max) over {args.repeats} runs (floor and simhash: 1 run). Percentiles exclude the "
        "merge calls; merge pauses are listed apart. faiss and simhash are in memory: nothing is durable.\n"
    )
    simstore_figures = figures.get("simstore")
    if simstore_figures is not None:
        per_doc = [value for value in simstore_figures["delta sorted-tier bytes per doc"] if value]
        report.add(
            f"simstore sync=False: first merge threshold {simstore_figures['threshold']:,} "
            f"(planned thresholds {', '.join(f'{t:,}' for t in merge_thresholds(n, args.merges))}); "
            f"merges per run {simstore_figures['merges']}; "
            f"docs per CPU-second of the process (user + system; less sensitive to other load on "
            f"the machine than wall time) {fmt_range(simstore_figures['docs per CPU-second'])}; "
            f"peak anonymous RSS "
            f"{fmt_range(simstore_figures['peak anon MiB'])} MiB; largest delta sampled "
            f"{fmt_range(simstore_figures['largest delta'])} documents, its sorted tier "
            f"{fmt_range(per_doc) if per_doc else '-'} bytes per document.\n"
        )
    report.add(
        f"Total wall time {time.perf_counter() - wall:.0f} s; load average at the end {load_average()}."
    )
    result = {
        "n": n,
        "adds": args.adds,
        "systems": figures,
        "base store build s": build_s,
        "load average": [started_load, load_average()],
        "machine": machine(),
        "versions": versions("simstore", "faiss-cpu", "lmdb", "numpy"),
        "code": source_state(ROOT, "simstore"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    if args.output:
        report.write(args.output)
        # Beside the report, under its name: online_1M.md -> online_1M.json.
        write_result_json(Path(args.output).with_suffix(".json"), result, update=args.update)
    return 0


if __name__ == "__main__":
    sys.exit(main())
