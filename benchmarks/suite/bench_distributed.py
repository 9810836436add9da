"""Ray (and Dask) beside one machine, in one run on the same cores.

1. Text, end to end: ``simstore dedup corpus.parquet -o kept.parquet`` (the
   command line, one machine) against ``simstore.ray.dedup_dataset`` on
   ``ray.data.read_parquet`` (``order_column="id"``, as Ray Data 2.60 reads
   the row groups of one file out of order) with the kept rows written by
   ``Dataset.write_parquet``, on a local Ray of ``--cpus`` CPUs. Both wall
   times include reading, fingerprinting, clustering and writing; Ray's start
   (``ray.init``) is timed apart. The run fails unless both keep the same ids
   in the same order.
2. Fingerprints: ``simstore.ray.near_duplicate_pairs`` and
   ``simstore.ray.clusters`` (and, up to ``--dask-up-to`` rows,
   ``simstore.dask``'s on a ``LocalCluster`` of ``--cpus`` single-threaded
   workers) against ``Store.near_duplicate_pairs`` and ``Store.clusters`` on a
   store of the same rows, k = 3 and the store's tables on every side (the
   distributed sides twice on the same cluster: the first run starts Ray's
   workers or imports simstore in Dask's). The
   run fails unless every side finds the same pairs (SHA-256 of the sorted
   ``(a, b, distance)``) and the same clusters.

Every measured operation runs in a fresh ``spawn`` process (a fresh Ray or
Dask cluster for the distributed ones). Peak RSS is each process's own
``VmHWM`` (``ru_maxrss`` would carry the benchmark's own memory over ``fork``
and ``exec``): the measuring process for one machine (the command line's main
process, without any fingerprinting processes it starts), and every Ray or
Dask worker process, read before the cluster stops. A Ray worker's counts the
pages of the shared object store it touched; an LMDB reader's the pages of
the store file it touched.

Run (from the repository root, with the ``ray``, ``dask`` and ``parquet`` extras)::

    python benchmarks/suite/bench_distributed.py --docs 1_000_000 --fingerprints 1_000_000,10_000_000 \\
        --dask-up-to 1_000_000 --block-rows 250_000 --output benchmarks/results/distributed_1M_10M.md
    python benchmarks/suite/bench_distributed.py --docs 1_000_000 --fingerprints '' --block-rows 250_000 \\
        --output benchmarks/results/distributed_text_1M.md

The committed results were taken on the project's 2-core VM (shared with other jobs;
each file gives its load average). ``--quick`` is the smoke run (``run_suite.py
--quick --all``): 2,000 documents and 10,000 fingerprints in blocks of 1,000, one Ray
started for every Ray row (Ray's start and its first Dataset take most of its 25-35 s
here), and no Dask rows unless ``--dask-up-to`` is given (a Dask cluster, kept for
every Dask row, adds 15-20 s; ``bench_dask.py``'s smoke run covers ``simstore.dask``).
A side whose package is missing is left out, saying so: Ray without ``ray``, Dask
without ``dask``, ``distributed`` or ``pandas``, the text section without ``pyarrow``.

Data. Text: ``--docs`` rows (``id``, ``text``), each text 60 words drawn from
a 20,000-word vocabulary (seeded), except 10% that copy an earlier row with 1
or 2 words replaced and 2% exact copies; written as Parquet in row groups of
``--block-rows``. Fingerprints: seeded random 64-bit values with 1% planted
near-copies of an earlier row (0-3 bits flipped), int keys ``0 .. N-1``, in
blocks of ``--block-rows`` rows. Temporary files go to ``--dir`` and are
deleted at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import (
    Report,
    fmt,
    have,
    load_average,
    parse_count,
    parse_with_quick,
    run_isolated,
    skip_peer,
    source_state,
    versions,
)

ROOT = Path(__file__).resolve().parents[2]
K = 3
# Set by --quick: one Ray and one Dask LocalCluster for all their rows (started by
# the first, stopped at the end), as each start costs seconds whatever the size.
KEEP_CLUSTERS = False
_DASK: list[Any] = []  # under --quick: the LocalCluster and its Client, once started


# -------------------------------------------------------------------- data


def write_corpus(path: str, docs: int, block_rows: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{index}" for index in range(20_000)], dtype=object)
    words = rng.integers(0, len(vocabulary), size=(docs, 60))
    kind = rng.random(docs)
    for row in np.flatnonzero(kind < 0.12).tolist():
        if row == 0:
            continue
        words[row] = words[int(rng.integers(0, row))]
        if kind[row] >= 0.02:  # a near copy: 1 or 2 words replaced
            for _ in range(int(rng.integers(1, 3))):
                words[row, int(rng.integers(0, 60))] = int(rng.integers(0, len(vocabulary)))
    with pq.ParquetWriter(path, pa.schema([("id", pa.int64()), ("text", pa.string())])) as writer:
        for start in range(0, docs, block_rows):
            chunk = words[start : start + block_rows]
            texts = [" ".join(vocabulary[row]) for row in chunk]
            ids = np.arange(start, start + len(chunk), dtype=np.int64)
            writer.write_table(pa.table({"id": ids, "text": texts}))


def fingerprints(count: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**64 - 1, size=count, dtype=np.uint64, endpoint=True)
    planted = np.flatnonzero(rng.random(count) < 0.01)
    planted = planted[planted > 0]
    sources = (rng.random(len(planted)) * planted).astype(np.int64)
    copies = values[sources]
    for _ in range(3):
        flip = rng.random(len(planted)) < 0.5
        bits = rng.integers(0, 64, size=len(planted)).astype(np.uint64)
        copies = np.where(flip, copies ^ (np.uint64(1) << bits), copies)
    values[planted] = copies
    return values


def vm_hwm_mib() -> float:
    """This process's peak RSS (``VmHWM``, MiB). Unlike ``ru_maxrss``, which
    Linux carries over ``fork`` and ``exec``, it starts afresh in a new
    program, so a worker is not charged with its parent's memory."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


_CLI_WITH_PEAK = (
    "import os, sys\n"
    "from simstore.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "finally:\n"
    "    with open('/proc/self/status') as status, open(os.environ['PEAK_FILE'], 'w') as out:\n"
    "        out.write([line for line in status if line.startswith('VmHWM:')][0].split()[1])\n"
    "sys.exit(code)\n"
)


def digest(rows: list[tuple[Any, ...]]) -> str:
    return hashlib.sha256(repr(sorted(rows)).encode()).hexdigest()[:16]


def cluster_digest(rows: list[tuple[Any, Any, Any]]) -> str:
    """Of ``(cluster id, member, representative)`` rows: the clusters as
    (members, representative), whatever their ids."""
    members: dict[Any, list[int]] = {}
    representative: dict[Any, int] = {}
    for cluster, member, kept in rows:
        members.setdefault(cluster, []).append(int(member))
        representative[cluster] = int(kept)
    return digest([(tuple(sorted(group)), representative[cluster]) for cluster, group in members.items()])


# ------------------------------------------------------------- one machine


def cli_dedup(corpus: str, output: str) -> dict[str, Any]:
    """``simstore dedup corpus -o output``: wall seconds, and the main
    process's peak RSS (not that of any fingerprinting processes it starts)."""
    peak_file = output + ".peak"
    started = time.perf_counter()
    command = [sys.executable, "-c", _CLI_WITH_PEAK, "dedup", corpus, "-o", output, "-q"]
    subprocess.run(command, check=True, env={**os.environ, "PEAK_FILE": peak_file})
    seconds = time.perf_counter() - started
    with open(peak_file, encoding="ascii") as peak:
        return {"seconds": seconds, "peak_mib": int(peak.read()) / 1024}


def build_store(path: str, count: int) -> float:
    import simstore

    started = time.perf_counter()
    with simstore.open(path, "n", k=K, sync=False) as store:
        store.add_many(np.arange(count, dtype=np.int64), fingerprints(count))
    return time.perf_counter() - started


def store_pairs(path: str) -> tuple[float, str, int, float]:
    import simstore

    with simstore.open(path, "r") as store:
        started = time.perf_counter()
        found = [(pair.key_a, pair.key_b, pair.distance) for pair in store.near_duplicate_pairs()]
        seconds = time.perf_counter() - started
    return seconds, digest(found), len(found), vm_hwm_mib()


def store_clusters(path: str) -> tuple[float, str, int, float]:
    import simstore

    with simstore.open(path, "r") as store:
        started = time.perf_counter()
        found = store.clusters(linkage="components")
        seconds = time.perf_counter() - started
    rows = [(c.cluster_id, member, c.representative) for c in found for member in c.members]
    return seconds, cluster_digest(rows), len(found), vm_hwm_mib()


def store_tables(path: str) -> tuple[Any, ...]:
    import simstore

    with simstore.open(path, "r") as store:
        return tuple(store.tables)


# --------------------------------------------------------------------- Ray


def _ray_start(cpus: int) -> float:
    """Start a local Ray; its seconds (0 under ``--quick`` once one is running)."""
    import ray

    started = time.perf_counter()
    if not (KEEP_CLUSTERS and ray.is_initialized()):
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    # The rows in the order generated, so that "first" means the same on every side.
    context.execution_options.preserve_order = True
    return time.perf_counter() - started


def _ray_stop() -> None:
    import ray

    if not KEEP_CLUSTERS:
        ray.shutdown()


class WorkerMemory:
    """``with WorkerMemory() as memory: ...`` then ``memory.peaks()``: each Ray
    worker process's largest anonymous RSS (``RssAnon``, MiB) seen while the
    block ran, largest first. Anonymous pages are the memory a worker holds
    itself; the shared object store's pages it maps are not counted (they
    are in ``VmHWM``, which :meth:`hwm` gives). Sampled every 0.2 s, with
    psutil (installed with ``distributed``); without it nothing is sampled."""

    def __init__(self) -> None:
        import threading

        self._anon: dict[int, float] = {}
        self._hwm: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        if not have("psutil"):
            return
        while not self._stop.wait(0.2):
            self._sample()

    def _sample(self) -> None:
        if not have("psutil"):
            return
        import psutil

        for process in psutil.Process(os.getpid()).children(recursive=True):
            try:
                if not process.name().startswith("ray::"):
                    continue
                with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
                    fields = dict(line.split(":", 1) for line in status if ":" in line)
            except (psutil.Error, OSError):
                continue
            anon = int(fields.get("RssAnon", "0 kB").split()[0]) / 1024
            hwm = int(fields.get("VmHWM", "0 kB").split()[0]) / 1024
            self._anon[process.pid] = max(self._anon.get(process.pid, 0.0), anon)
            self._hwm[process.pid] = max(self._hwm.get(process.pid, 0.0), hwm)

    def peaks(self) -> list[float]:
        return sorted(self._anon.values(), reverse=True)

    def hwm(self) -> list[float]:
        return sorted(self._hwm.values(), reverse=True)


def ray_text(corpus: str, output: str, cpus: int) -> dict[str, Any]:
    import ray

    import simstore.ray as sr

    start = _ray_start(cpus)
    try:
        with WorkerMemory() as memory:
            started = time.perf_counter()
            kept, _ = sr.dedup_dataset(ray.data.read_parquet(corpus), "text", "id", order_column="id")
            kept.write_parquet(output)
            seconds = time.perf_counter() - started
    finally:
        _ray_stop()
    return {
        "start": start,
        "seconds": seconds,
        "worker_peaks": memory.peaks(),
        "worker_hwm": memory.hwm(),
        "driver_peak": vm_hwm_mib(),
    }


def _fingerprint_dataset(count: int, block_rows: int) -> Any:
    import pyarrow as pa
    import ray

    values = fingerprints(count)
    keys = np.arange(count, dtype=np.int64)
    tables = [
        pa.table({"key": keys[start : start + block_rows], "fingerprint": values[start : start + block_rows]})
        for start in range(0, count, block_rows)
    ]
    return ray.data.from_arrow(tables).materialize()


def ray_pairs(count: int, block_rows: int, tables: tuple[Any, ...], cpus: int, what: str) -> dict[str, Any]:
    import ray

    import simstore.ray as sr

    start = _ray_start(cpus)
    try:
        ds = _fingerprint_dataset(count, block_rows)
        runs = []
        memory = WorkerMemory()
        memory.__enter__()
        for _ in range(2):  # the first run starts the workers and imports simstore in them
            started = time.perf_counter()
            if what == "pairs":
                parts = ray.get(sr.near_duplicate_pairs(ds, k=K, layout=tables).to_arrow_refs())
                columns = ("key_a", "key_b", "distance")
            else:
                parts = ray.get(sr.clusters(ds, k=K, layout=tables, linkage="components").to_arrow_refs())
                columns = ("cluster_id", "key", "representative")
            runs.append(time.perf_counter() - started)
        rows = [row for part in parts for row in zip(*(part[c].to_pylist() for c in columns), strict=True)]
        size = len(rows) if what == "pairs" else len({row[0] for row in rows})
        memory.__exit__(None, None, None)
    finally:
        _ray_stop()
    seconds = runs
    found_digest = digest(rows) if what == "pairs" else cluster_digest(rows)
    return {
        "start": start,
        "seconds": seconds,
        "digest": found_digest,
        "size": size,
        "worker_peaks": memory.peaks(),
        "worker_hwm": memory.hwm(),
        "driver_peak": vm_hwm_mib(),
    }


# -------------------------------------------------------------------- Dask


@contextmanager
def _dask_client(cpus: int) -> Iterator[Any]:
    """A Client of a LocalCluster of ``cpus`` single-threaded workers: a fresh one
    (closed on leaving), or under ``--quick`` the one kept across rows."""
    from distributed import Client, LocalCluster

    if KEEP_CLUSTERS and _DASK:
        yield _DASK[1]
        return
    cluster = LocalCluster(n_workers=cpus, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    if KEEP_CLUSTERS:
        _DASK.extend([cluster, client])
        yield client
        return
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def _dask_stop() -> None:
    while _DASK:
        _DASK.pop().close()  # the client, then the cluster


def dask_pairs(count: int, block_rows: int, tables: tuple[Any, ...], cpus: int, what: str) -> dict[str, Any]:
    import dask.dataframe as dd
    import pandas as pd

    import simstore.dask as sd

    values = fingerprints(count)
    frame = pd.DataFrame({"key": np.arange(count, dtype=np.int64), "fingerprint": values})
    with _dask_client(cpus) as client:
        ddf = dd.from_pandas(frame, chunksize=block_rows, sort=False)
        ddf = client.persist(ddf)
        runs = []
        for _ in range(2):  # the first run imports simstore (and pandas' pieces) in the workers
            started = time.perf_counter()
            if what == "pairs":
                found = sd.near_duplicate_pairs(ddf, "key", "fingerprint", k=K, layout=tables).compute()
                runs.append(time.perf_counter() - started)
                rows = list(zip(found["key_a"], found["key_b"], found["distance"].astype(int), strict=True))
                size = len(rows)
            else:
                found = sd.clusters(ddf, "key", "fingerprint", k=K, layout=tables).compute()
                runs.append(time.perf_counter() - started)
                rows = list(zip(found["cluster_id"], found["key"], found["representative"], strict=True))
                size = found["cluster_id"].nunique()
        peaks = client.run(vm_hwm_mib)
    rows = [tuple(int(value) for value in row) for row in rows]
    found_digest = digest(rows) if what == "pairs" else cluster_digest(rows)
    return {"seconds": runs, "digest": found_digest, "size": size, "worker_peaks": sorted(peaks.values())}


# --------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=parse_count, default=1_000_000)
    parser.add_argument("--fingerprints", default="1_000_000")
    parser.add_argument("--dask-up-to", type=parse_count, default=1_000_000)
    parser.add_argument("--block-rows", type=parse_count, default=50_000)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--output", default=None)
    args = parse_with_quick(
        parser, {"docs": 2_000, "fingerprints": "10_000", "dask_up_to": 0, "block_rows": 1_000}
    )
    global KEEP_CLUSTERS
    KEEP_CLUSTERS = bool(args.quick)
    args.ray = have("ray") and have("pyarrow")
    args.dask = all(have(module) for module in ("dask", "distributed", "pandas"))
    if not args.ray:
        skip_peer("Ray", "ray (or pyarrow) is not installed: pip install -e '.[ray]'")
    if not args.dask:
        skip_peer("Dask", "dask, distributed or pandas is not installed: pip install -e '.[dask]'")
    elif args.quick and not args.dask_up_to:
        skip_peer("Dask", "--quick leaves it out unless --dask-up-to is given; bench_dask.py smoke-tests it")
    if args.ray and not have("psutil"):
        skip_peer("Ray worker memory", "psutil is not installed (it comes with distributed)")
    report = Report()
    report.header("Ray and Dask beside one machine", args.dir, source_state(ROOT, "simstore"))
    report.add(f"Versions: {versions('ray', 'dask', 'distributed', 'pyarrow', 'numpy')}  ")
    report.add(f"Load average at start: {load_average()}\n")
    failures: list[str] = []
    scratch = tempfile.mkdtemp(prefix="bench-distributed-", dir=args.dir)
    try:
        if args.docs and not have("pyarrow"):
            skip_peer("the text section", "pyarrow is not installed: pip install -e '.[parquet]'")
        elif args.docs:
            failures += text_section(report, args, scratch)
        for count in [parse_count(item) for item in args.fingerprints.split(",") if item]:
            failures += fingerprint_section(report, args, scratch, count)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if KEEP_CLUSTERS and args.ray:
            import ray

            ray.shutdown()
        _dask_stop()
    report.add(f"Load average at end: {load_average()}\n")
    for failure in failures:
        report.add(f"**FAILED**: {failure}  ")
    if args.output:
        report.write(args.output)
    return 1 if failures else 0


def _ray_memory(on_ray: dict[str, Any], driver_peak: float) -> str:
    anon, shared = _peaks(on_ray["worker_peaks"]), _peaks(on_ray["worker_hwm"])
    return f"workers: {anon} anon, {shared} with shared pages; driver {fmt(driver_peak, 0)}"


def _peaks(values: list[float]) -> str:
    return ", ".join(fmt(value, 0) for value in values[:4]) + (" ..." if len(values) > 4 else "")


def text_section(report: Report, args: argparse.Namespace, scratch: str) -> list[str]:
    import pyarrow.parquet as pq

    corpus = os.path.join(scratch, "corpus.parquet")
    started = time.perf_counter()
    write_corpus(corpus, args.docs, args.block_rows)
    report.heading(f"Text dedup end to end, {args.docs:,} documents")
    report.add(f"Corpus written in {time.perf_counter() - started:.1f} s (not measured below).\n")
    single_out = os.path.join(scratch, "kept_single.parquet")
    ray_out = os.path.join(scratch, "kept_ray")
    single, _, _ = run_isolated(cli_dedup, corpus, single_out)
    single_ids = pq.read_table(single_out, columns=["id"])["id"].to_pylist()
    rows = [
        [
            "one machine: `simstore dedup` (CLI)",
            fmt(single["seconds"]),
            "1",
            f"{len(single_ids):,}",
            fmt(single["peak_mib"], 0),
        ]
    ]
    if not args.ray:
        report.table(["side", "wall s", "ratio to one machine", "kept rows", "peak RSS MiB"], rows)
        report.add("Ray: not installed, left out.\n")
        return []
    on_ray, _, _ = run_isolated(ray_text, corpus, ray_out, args.cpus)
    driver_peak = on_ray["driver_peak"]
    ray_ids = pq.read_table(ray_out, columns=["id"])["id"].to_pylist()
    ray_ids_sorted = sorted(ray_ids)
    same = single_ids == ray_ids_sorted
    rows.append(
        [
            f"Ray `dedup_dataset`, {args.cpus} CPUs",
            fmt(on_ray["seconds"]),
            fmt(on_ray["seconds"] / single["seconds"], 2),
            f"{len(ray_ids):,}",
            _ray_memory(on_ray, driver_peak),
        ]
    )
    report.table(["side", "wall s", "ratio to one machine", "kept rows", "peak RSS MiB"], rows)
    report.add(
        f"Ray start (`ray.init`, not in the wall time): {on_ray['start']:.1f} s. "
        f"Same kept ids: {same} (Ray's Parquet files are read back in name order and sorted).\n"
    )
    return [] if same else ["the Ray kept ids differ from the command line's"]


def fingerprint_section(report: Report, args: argparse.Namespace, scratch: str, count: int) -> list[str]:
    path = os.path.join(scratch, f"fp-{count}.simstore")
    build_seconds = build_store(path, count)
    tables = store_tables(path)
    report.heading(f"Pairs and clusters, {count:,} fingerprints, k = {K}, {len(tables)} tables")
    report.add(f"Store build (`add_many`, not measured below): {build_seconds:.1f} s.\n")
    rows = []
    failures = []
    for what, single_function in (("pairs", store_pairs), ("clusters", store_clusters)):
        (seconds, single_digest, size, peak), _, _ = run_isolated(single_function, path)
        rows.append(
            [
                f"one machine: `Store.{'near_duplicate_pairs' if what == 'pairs' else 'clusters'}`",
                fmt(seconds),
                "1",
                f"{size:,}",
                fmt(peak, 0),
            ]
        )
        if args.ray:
            on_ray, _, _ = run_isolated(ray_pairs, count, args.block_rows, tables, args.cpus, what)
            driver_peak = on_ray["driver_peak"]
            first, second = on_ray["seconds"]
            rows.append(
                [
                    f"Ray `{what}`, {args.cpus} CPUs (first run / second run)",
                    f"{fmt(first)} / {fmt(second)}",
                    f"{fmt(first / seconds, 2)} / {fmt(second / seconds, 2)}",
                    f"{on_ray['size']:,}",
                    _ray_memory(on_ray, driver_peak),
                ]
            )
            if on_ray["digest"] != single_digest:
                failures.append(f"Ray {what} at {count:,} differ from the store's")
        if args.dask and count <= args.dask_up_to:
            # In this process: a pool's daemonic child may not start the nannies.
            on_dask = dask_pairs(count, args.block_rows, tables, args.cpus, what)
            first, second = on_dask["seconds"]
            rows.append(
                [
                    f"Dask `{what}`, {args.cpus} workers (first run / second run)",
                    f"{fmt(first)} / {fmt(second)}",
                    f"{fmt(first / seconds, 2)} / {fmt(second / seconds, 2)}",
                    f"{on_dask['size']:,}",
                    f"workers: {_peaks(on_dask['worker_peaks'])}",
                ]
            )
            if on_dask["digest"] != single_digest:
                failures.append(f"Dask {what} at {count:,} differ from the store's")
    report.table(["operation", "seconds", "ratio to one machine", "pairs / clusters", "peak RSS MiB"], rows)
    os.remove(path)
    if os.path.exists(path + "-lock"):
        os.remove(path + "-lock")
    return failures


if __name__ == "__main__":
    sys.exit(main())
