"""All near-duplicate pairs and clusters at N fingerprints, k=3, on Dask against one machine:
``simstore.dask.near_duplicate_pairs`` and ``simstore.dask.clusters`` on a
``distributed.LocalCluster`` (2 worker processes, 1 thread each), beside the
single-machine batch path (``Store.near_duplicate_pairs`` and ``Store.clusters``
on a store holding the same rows, and ``simstore.index.pairs.all_pairs`` on the numpy
array), in one run.

Run (from the repository root, with the ``dask`` extra installed)::

    python benchmarks/suite/bench_dask.py --n 1_000_000 --partitions 4 --shards 4 --sweep 2,20,80,320 \\
        --output benchmarks/results/bench_dask_1M.md
    python benchmarks/suite/bench_dask.py --n 10_000_000 --partitions 40 --repeats 2 --shards 4 \\
        --output benchmarks/results/bench_dask_10M.md

Both write a ``.json`` beside the ``.md`` with every repeat; the analysis is in
``benchmarks/results/dask_notes.md`` (also the "Dask" section of ``RESULTS.md``).
The 10M run took 18 minutes on the 2-core machine of the committed results, and
needs about 10 GB free in ``--dir`` (the 3.2 GB store, the shards, the shuffle's
spill).

Data: ``N`` rows in ``--partitions`` equal partitions; row ``i`` has the key
``"doc-i"`` and a seeded random 64-bit fingerprint, except ``--planted`` (1%) of
the rows, which copy the random fingerprint of a random earlier row (of any
partition) with 0-3 random bits flipped, as in ``bench_pairs.py``. A row's fingerprint is a
pure function of its index and its partition's seed, so Dask builds every
partition inside a worker (``dask.dataframe.from_map``) and the driver never
holds the rows; the single-machine side concatenates the same function's
partitions, so both sides see exactly the same rows in the same order.

Measured, ``--repeats`` times each, median (min-max):

- Dask: ``compute()`` of each result to the driver, each run on a fresh
  LocalCluster so every worker's peak RSS (``ru_maxrss``, read with
  ``client.run``) is that run's own (``client.restart()`` between runs hung
  here after a p2p shuffle: the workers never reconnected). The Dask times
  include generating the rows in the workers; that step alone is timed too.
  Tasks run and compute seconds per task prefix come from
  ``distributed.get_task_stream``; bytes the p2p shuffles moved from the
  scheduler's ``cumulative_worker_metrics``.
- One machine: each operation in a fresh ``spawn`` process (so its peak RSS is
  its own); the store is built once beforehand (timed, not part of the
  measured operations) with ``add_many`` in one transaction, ``sync=False``.
- ``--shards S``: also ``simstore.dask.build_stores`` of the rows into ``S``
  store files, beside the single store's build.

The run fails (exit status 1) unless the Dask pair set equals the
single-machine one and ``all_pairs``'s (compared as the SHA-256 of the sorted
``(index_a, index_b, distance)`` triples, where ``key = f"doc-{index}"``), every
planted pair still within k is found, and the Dask clusters (members and
representatives) equal ``Store.clusters``'.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import (
    Report,
    Stopwatch,
    fmt,
    fmt_range,
    parse_with_quick,
    peak_rss_mib,
    run_isolated,
    source_state,
    versions,
)

import simstore
from simstore.index.pairs import all_pairs
from simstore.index.permute import one_level_tables

ROOT = Path(__file__).resolve().parents[2]
K = 3
BLOCKS = 5
TABLES = one_level_tables(K, BLOCKS)
GIB = 1024**3


# ------------------------------------------------------------------ the data


def _mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a fixed, well-mixed uint64 for every uint64."""
    z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def base_fingerprints(indexes: np.ndarray, seed: int) -> np.ndarray:
    """The random fingerprint of each row index before any near-duplicate is planted."""
    return _mix64(indexes.astype(np.uint64) ^ _mix64(np.array([seed], dtype=np.uint64)))


def partition_bounds(n: int, partitions: int, number: int) -> tuple[int, int]:
    """The first and one-past-last row index of partition ``number``."""
    return n * number // partitions, n * (number + 1) // partitions


def partition_rows(
    number: int, n: int, partitions: int, planted: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Row indexes and fingerprints of partition ``number``: a ``planted`` share
    of its rows copy a random earlier row's base fingerprint with 0-3 bits flipped."""
    start, end = partition_bounds(n, partitions, number)
    indexes = np.arange(start, end, dtype=np.int64)
    fingerprints = base_fingerprints(indexes, seed)
    rng = np.random.default_rng([seed, number])
    candidates = indexes[indexes > 0]
    copies = min(len(candidates), round(len(indexes) * planted))
    targets = rng.choice(candidates, size=copies, replace=False)
    sources = (rng.random(copies) * targets).astype(np.int64)
    variants = base_fingerprints(sources, seed)
    for _ in range(K):
        flip = rng.random(copies) < 0.75
        bits = rng.integers(0, 64, copies).astype(np.uint64)
        variants ^= np.where(flip, np.uint64(1) << bits, np.uint64(0))
    fingerprints[targets - start] = variants
    return indexes, fingerprints


def partition_frame(number: int, n: int, partitions: int, planted: float, seed: int) -> pd.DataFrame:
    """Partition ``number`` as Dask gets it: ``key`` (``"doc-i"``) and ``fingerprint``."""
    indexes, fingerprints = partition_rows(number, n, partitions, planted, seed)
    keys = pd.Series([f"doc-{index}" for index in indexes.tolist()], dtype=object)
    return pd.DataFrame({"key": keys, "fingerprint": fingerprints})


def all_rows(n: int, partitions: int, planted: float, seed: int) -> np.ndarray:
    """Every row's fingerprint, in row order: the partitions concatenated."""
    return np.concatenate(
        [partition_rows(number, n, partitions, planted, seed)[1] for number in range(partitions)]
    )


def planted_pairs(n: int, partitions: int, planted: float, seed: int, fingerprints: np.ndarray) -> set:
    """``(source, target)`` of every planted copy still within k of its source."""
    found = set()
    for number in range(partitions):
        start, end = partition_bounds(n, partitions, number)
        indexes = np.arange(start, end, dtype=np.int64)
        rng = np.random.default_rng([seed, number])
        candidates = indexes[indexes > 0]
        copies = min(len(candidates), round(len(indexes) * planted))
        targets = rng.choice(candidates, size=copies, replace=False)
        sources = (rng.random(copies) * targets).astype(np.int64)
        close = np.bitwise_count(fingerprints[sources] ^ fingerprints[targets]) <= K
        found.update(zip(sources[close].tolist(), targets[close].tolist(), strict=True))
    return found


# ------------------------------------------------------- canonical digests


def key_indexes(keys: Any) -> np.ndarray:
    """``"doc-i"`` keys as the ints ``i``."""
    return np.array([int(key[4:]) for key in keys], dtype=np.int64)


def pairs_digest(index_a: np.ndarray, index_b: np.ndarray, distance: np.ndarray) -> dict[str, Any]:
    """Count and SHA-256 of the sorted ``(index_a, index_b, distance)`` triples;
    ``earlier_first`` says whether every ``index_a < index_b``."""
    triples = np.stack([index_a, index_b, distance.astype(np.int64)], axis=1).astype(np.int64)
    order = np.lexsort((triples[:, 2], triples[:, 1], triples[:, 0]))
    ordered = np.ascontiguousarray(triples[order])
    return {
        "pairs": len(ordered),
        "sha256": hashlib.sha256(ordered.tobytes()).hexdigest(),
        "earlier_first": bool(np.all(index_a < index_b)),
        "sample": [tuple(int(v) for v in row) for row in ordered[:3]],
    }


def clusters_digest(cluster_first: np.ndarray, member: np.ndarray, representative: np.ndarray) -> dict:
    """Count and SHA-256 of the sorted ``(first member, member, representative)``
    triples, one per member of every cluster (indexes, not keys)."""
    triples = np.stack([cluster_first, member, representative], axis=1).astype(np.int64)
    order = np.lexsort((triples[:, 2], triples[:, 1], triples[:, 0]))
    ordered = np.ascontiguousarray(triples[order])
    return {
        "clusters": len(np.unique(cluster_first)),
        "members": len(ordered),
        "largest": int(np.bincount(np.unique(cluster_first, return_inverse=True)[1]).max())
        if len(ordered)
        else 0,
        "sha256": hashlib.sha256(ordered.tobytes()).hexdigest(),
    }


# ------------------------------------------------- the single-machine side


def single_all_pairs(n: int, partitions: int, planted: float, seed: int) -> dict[str, Any]:
    """``all_pairs`` on the numpy array, in this (fresh) process."""
    fingerprints = all_rows(n, partitions, planted, seed)
    lefts, rights, distances = [], [], []
    with Stopwatch() as watch:
        for left, right, distance in all_pairs(fingerprints, TABLES, K):
            lefts.append(left)
            rights.append(right)
            distances.append(distance)
    first = np.minimum(np.concatenate(lefts), np.concatenate(rights))
    second = np.maximum(np.concatenate(lefts), np.concatenate(rights))
    digest = pairs_digest(first, second, np.concatenate(distances))
    found = set(zip(first.tolist(), second.tolist(), strict=True))
    missed = planted_pairs(n, partitions, planted, seed, fingerprints) - found
    return {"seconds": watch.seconds, "digest": digest, "planted": len(missed) == 0, "missed": len(missed)}


def single_build(path: str, n: int, partitions: int, planted: float, seed: int) -> dict[str, Any]:
    """Fill one store with every row, in row order, in one ``add_many``."""
    fingerprints = all_rows(n, partitions, planted, seed)
    keys = [f"doc-{index}" for index in range(n)]
    with Stopwatch() as watch, simstore.open(path, "n", k=K, blocks=BLOCKS, sync=False) as store:
        store.add_many(keys, fingerprints)
    return {"seconds": watch.seconds, "bytes": os.path.getsize(path)}


def single_pairs(path: str) -> dict[str, Any]:
    """``Store.near_duplicate_pairs``, consumed in full (``Pair`` objects built)."""
    with simstore.open(path, "r") as store, Stopwatch() as watch:
        found = list(store.near_duplicate_pairs())
    digest = pairs_digest(
        key_indexes(pair.key_a for pair in found),
        key_indexes(pair.key_b for pair in found),
        np.array([pair.distance for pair in found], dtype=np.int64),
    )
    return {"seconds": watch.seconds, "digest": digest}


def single_clusters(path: str) -> dict[str, Any]:
    """``Store.clusters`` (keep="first")."""
    with simstore.open(path, "r") as store, Stopwatch() as watch:
        found = store.clusters()
    firsts, members, representatives = [], [], []
    for cluster in found:
        indexes = key_indexes(cluster.members)
        firsts.append(np.full(len(indexes), indexes.min()))
        members.append(indexes)
        representatives.append(np.full(len(indexes), int(cluster.representative[4:])))
    digest = clusters_digest(np.concatenate(firsts), np.concatenate(members), np.concatenate(representatives))
    return {"seconds": watch.seconds, "digest": digest}


# ------------------------------------------------------------ the Dask side


def worker_peak_mib() -> float:
    return peak_rss_mib()


def dask_frame(args: argparse.Namespace) -> Any:
    import dask.dataframe as dd

    meta = pd.DataFrame({"key": pd.Series(dtype=object), "fingerprint": pd.Series(dtype="uint64")})
    return dd.from_map(
        partition_frame,
        range(args.partitions),
        n=args.n,
        partitions=args.partitions,
        planted=args.planted,
        seed=args.seed,
        meta=meta,
        enforce_metadata=False,
    )


def _shuffle_bytes(client: Any) -> dict[str, float]:
    """Bytes and counts the p2p shuffles reported since the last reset, summed by
    (activity, label, unit) over the scheduler's cumulative worker metrics."""

    def collect(dask_scheduler: Any) -> dict[str, float]:
        totals: dict[str, float] = defaultdict(float)
        for key, value in dask_scheduler.cumulative_worker_metrics.items():
            if isinstance(key, tuple) and key and key[0] == "p2p" and key[-1] in ("bytes", "count"):
                totals[" ".join(str(part) for part in key[1:])] += value
        return dict(totals)

    return client.run_on_scheduler(collect)


def timed_dask(cluster_options: dict[str, Any], build: Any, prefixes: dict[str, float]) -> dict[str, Any]:
    """Start a fresh LocalCluster (so each worker's peak RSS is this run's own),
    compute ``build()`` to the driver, and measure it."""
    from distributed import Client, LocalCluster, get_task_stream
    from distributed.utils import key_split

    with LocalCluster(**cluster_options) as cluster, Client(cluster) as client:
        collection = build()
        with get_task_stream(client) as stream, Stopwatch() as watch:
            result = collection.compute()
        peaks = client.run(worker_peak_mib)
        shuffle = _shuffle_bytes(client)
    compute_seconds: dict[str, float] = defaultdict(float)
    tasks = 0
    for task in stream.data:
        tasks += 1
        for span in task.get("startstops", ()):
            if span["action"] == "compute":
                compute_seconds[key_split(task["key"])] += span["stop"] - span["start"]
    for name, seconds in compute_seconds.items():
        prefixes[name] = prefixes.get(name, 0.0) + seconds
    return {
        "seconds": watch.seconds,
        "result": result,
        "worker_peak_mib": sorted(peaks.values()),
        "tasks": tasks,
        "compute_seconds": dict(compute_seconds),
        "shuffle": shuffle,
        "npartitions": collection.npartitions,
    }


class _BuildStores:
    """``simstore.dask.build_stores``, which runs at once, shaped like a collection."""

    def __init__(self, args: argparse.Namespace, template: str) -> None:
        self.args = args
        self.template = template
        self.npartitions = args.shards

    def compute(self) -> list[str]:
        import simstore.dask as sdask

        return sdask.build_stores(
            dask_frame(self.args), self.template, self.args.shards, k=K, blocks=BLOCKS, sync=False
        )


def dask_pairs_digest(frame: pd.DataFrame) -> dict[str, Any]:
    return pairs_digest(
        key_indexes(frame["key_a"].tolist()),
        key_indexes(frame["key_b"].tolist()),
        frame["distance"].to_numpy(dtype=np.int64),
    )


def dask_clusters_digest(frame: pd.DataFrame) -> dict[str, Any]:
    members = key_indexes(frame["key"].tolist())
    representative = key_indexes(frame["representative"].tolist())
    firsts = pd.Series(members).groupby(frame["cluster_id"].to_numpy()).transform("min").to_numpy()
    return clusters_digest(firsts, members, representative)


def entry_row_bytes() -> dict[str, float]:
    """Bytes per row of the frames the shuffles move, from a sample partition:
    the entries (one per document and table) and the packed keys with positions."""
    import pyarrow as pa

    from simstore.dask.partitioned import pack_keys, positions, table_entries

    sample = partition_frame(0, 1_000_000, 10, 0.01, 1)
    rows = len(sample)
    entries = table_entries(sample["fingerprint"].to_numpy(), positions(0, rows), TABLES)
    keyed = pd.DataFrame({"key": pack_keys(sample["key"]), "position": positions(0, rows)})
    return {
        "entry_pandas": entries.memory_usage(index=False, deep=True).sum() / len(entries),
        "entry_arrow": pa.Table.from_pandas(entries, preserve_index=False).nbytes / len(entries),
        "key_pandas": keyed.memory_usage(index=False, deep=True).sum() / rows,
        "key_arrow": pa.Table.from_pandas(keyed, preserve_index=False).nbytes / rows,
    }


# ---------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=lambda s: int(s.replace("_", "")), default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4, help="input partitions (from_map)")
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        default=None,
        help="near_duplicate_pairs/clusters npartitions (default: theirs, input partitions x tables/2)",
    )
    parser.add_argument("--planted", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="8GiB", help="per worker (LocalCluster memory_limit)")
    parser.add_argument("--shards", type=int, default=0, help="also time build_stores into this many shards")
    parser.add_argument(
        "--sweep",
        type=lambda s: [int(v) for v in s.split(",") if v],
        default=[],
        help="also run Dask near_duplicate_pairs once with each of these npartitions, e.g. 4,20,80",
    )
    parser.add_argument("--dir", default=None, help="folder for stores and worker spill (default: temp)")
    parser.add_argument("--output", default=None)
    args = parse_with_quick(parser, {"n": 20_000, "partitions": 2, "repeats": 1, "memory_limit": "1GiB"})
    import simstore.dask as sdask

    folder = tempfile.mkdtemp(prefix="bench_dask_", dir=args.dir)
    report = Report()
    report.header(
        f"simstore on Dask against one machine, N = {args.n:,}", folder, source_state(ROOT, "simstore")
    )
    load_start = os.getloadavg()
    tool_versions = versions("simstore", "dask", "distributed", "pandas", "pyarrow")
    report.add(
        "Versions: " + ", ".join(f"{name} {version}" for name, version in tool_versions.items()) + "\n"
    )
    copies = round(args.n * args.planted)
    shuffle_partitions = args.shuffle_partitions or args.partitions * (len(TABLES) // 2)
    report.add(
        f"k = {K}, {BLOCKS} blocks, {len(TABLES)} tables (the Dask default layout and the store's); "
        f"{copies:,} planted near-duplicates (0-3 bits from an earlier row), seed {args.seed}; "
        f"string keys `doc-i`; {args.partitions} input partitions, {shuffle_partitions} shuffle "
        f"partitions; {args.repeats} repeat(s) per measurement. LocalCluster: {args.workers} worker "
        f"processes x 1 thread, memory_limit {args.memory_limit} each, spill in {folder}.\n"
    )
    failures: list[str] = []
    results: dict[str, Any] = {
        "n": args.n,
        "partitions": args.partitions,
        "shuffle_partitions": shuffle_partitions,
        "repeats": args.repeats,
        "workers": args.workers,
        "memory_limit": args.memory_limit,
        "versions": tool_versions,
        "command": " ".join(sys.argv),
    }

    # ---- one machine
    single: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _ in range(args.repeats):
        outcome, peak, _ = run_isolated(single_all_pairs, args.n, args.partitions, args.planted, args.seed)
        single["all_pairs"].append({**outcome, "peak_mib": peak})
    store_path = os.path.join(folder, "single.simstore")
    outcome, peak, _ = run_isolated(
        single_build, store_path, args.n, args.partitions, args.planted, args.seed
    )
    single["build"].append({**outcome, "peak_mib": peak})
    for _ in range(args.repeats):
        outcome, peak, _ = run_isolated(single_pairs, store_path)
        single["pairs"].append({**outcome, "peak_mib": peak})
    for _ in range(args.repeats):
        outcome, peak, _ = run_isolated(single_clusters, store_path)
        single["clusters"].append({**outcome, "peak_mib": peak})
    os.remove(store_path)
    if os.path.exists(store_path + "-lock"):
        os.remove(store_path + "-lock")

    # ---- Dask
    spill = os.path.join(folder, "workers")
    dask_runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    prefixes: dict[str, dict[str, float]] = defaultdict(dict)
    import dask

    cluster_options = {
        "n_workers": args.workers,
        "threads_per_worker": 1,
        "processes": True,
        "memory_limit": args.memory_limit,
        "local_directory": spill,
        "dashboard_address": None,
    }
    results["shuffle_method"] = str(dask.config.get("dataframe.shuffle.method", None) or "p2p (default)")
    for _ in range(args.repeats):
        run = timed_dask(cluster_options, lambda: dask_frame(args).map_partitions(len), prefixes["generate"])
        run["rows"] = int(run.pop("result").sum())
        dask_runs["generate"].append(run)
    jobs = (
        ("pairs", sdask.near_duplicate_pairs, dask_pairs_digest),
        ("clusters", sdask.clusters, dask_clusters_digest),
    )
    for name, job, digest in jobs:
        for _ in range(args.repeats):
            run = timed_dask(
                cluster_options,
                lambda job=job: job(dask_frame(args), k=K, npartitions=shuffle_partitions),
                prefixes[name],
            )
            run["digest"] = digest(run.pop("result"))
            dask_runs[name].append(run)
    for repeat in range(args.repeats if args.shards else 0):
        template = os.path.join(folder, f"shards{repeat}", "shard-{shard:03d}.simstore")
        os.makedirs(os.path.dirname(template), exist_ok=True)
        job = _BuildStores(args, template)
        run = timed_dask(cluster_options, lambda job=job: job, prefixes["build_stores"])
        paths = run.pop("result")
        with simstore.ShardedStore(paths) as sharded:
            stored = len(sharded)
        if stored != args.n:
            failures.append(f"build_stores wrote {stored:,} documents, expected {args.n:,}")
        run["bytes"] = sum(os.path.getsize(path) for path in paths)
        dask_runs["build_stores"].append(run)
        shutil.rmtree(os.path.dirname(template))
    for partitions in args.sweep:
        run = timed_dask(
            cluster_options,
            lambda partitions=partitions: sdask.near_duplicate_pairs(
                dask_frame(args), k=K, npartitions=partitions
            ),
            prefixes[f"pairs, npartitions={partitions}"],
        )
        run["digest"] = dask_pairs_digest(run.pop("result"))
        run["shuffle_partitions"] = partitions
        dask_runs["sweep"].append(run)
    driver_peak = peak_rss_mib()

    # ---- checks
    reference = single["pairs"][0]["digest"]
    for name, runs in (("all_pairs", single["all_pairs"]), ("store pairs", single["pairs"])):
        for run in runs:
            if run["digest"]["sha256"] != reference["sha256"]:
                failures.append(f"{name} pair set {run['digest']} differs from the store's {reference}")
    for run in [*dask_runs["pairs"], *dask_runs["sweep"]]:
        if run["digest"]["sha256"] != reference["sha256"] or run["digest"]["pairs"] != reference["pairs"]:
            failures.append(f"Dask pair set {run['digest']} differs from the store's {reference}")
        if not run["digest"]["earlier_first"]:
            failures.append("Dask near_duplicate_pairs put a later row in key_a")
    if not all(run["planted"] for run in single["all_pairs"]):
        failures.append(f"all_pairs missed {single['all_pairs'][0]['missed']} planted pairs")
    cluster_reference = single["clusters"][0]["digest"]
    for run in [*single["clusters"], *dask_runs["clusters"]]:
        if run["digest"] != cluster_reference:
            failures.append(f"clusters {run['digest']} differ from Store.clusters' {cluster_reference}")
    for run in dask_runs["generate"]:
        if run["rows"] != args.n:
            failures.append(f"the Dask frame has {run['rows']:,} rows, expected {args.n:,}")

    # ---- report
    def seconds(runs: list[dict[str, Any]]) -> list[float]:
        return [run["seconds"] for run in runs]

    def throughput(runs: list[dict[str, Any]]) -> str:
        return f"{fmt(args.n / float(np.median(seconds(runs))))} docs/s"

    def single_row(label: str, runs: list[dict[str, Any]], result: str) -> list[object]:
        return [
            label,
            fmt_range(seconds(runs)),
            throughput(runs),
            result,
            fmt_range([r["peak_mib"] for r in runs]),
            "-",
        ]

    def dask_row(label: str, runs: list[dict[str, Any]], result: str) -> list[object]:
        per_worker = [max(run["worker_peak_mib"]) for run in runs]
        every = ", ".join(fmt(value) for value in runs[len(runs) // 2]["worker_peak_mib"])
        tasks = runs[0]["tasks"]
        return [
            label,
            fmt_range(seconds(runs)),
            throughput(runs),
            result,
            f"{fmt_range(per_worker)} ({every})",
            f"{tasks:,}",
        ]

    pair_count = reference["pairs"]
    clusters_found = cluster_reference["clusters"]
    rows = [
        single_row(
            "one machine: `all_pairs` on the numpy array (in memory)",
            single["all_pairs"],
            f"{pair_count:,} pairs",
        ),
        single_row("one machine: `Store.near_duplicate_pairs`", single["pairs"], f"{pair_count:,} pairs"),
        single_row("one machine: `Store.clusters`", single["clusters"], f"{clusters_found:,} clusters"),
        dask_row(
            "Dask: generate the rows only (`from_map`, `len` per partition)",
            dask_runs["generate"],
            f"{args.n:,} rows",
        ),
        dask_row(
            "Dask: `near_duplicate_pairs` (rows generated in the graph)",
            dask_runs["pairs"],
            f"{dask_runs['pairs'][0]['digest']['pairs']:,} pairs",
        ),
        dask_row(
            "Dask: `clusters` (rows generated in the graph)",
            dask_runs["clusters"],
            f"{dask_runs['clusters'][0]['digest']['clusters']:,} clusters",
        ),
    ]
    report.heading("All pairs and clusters within k")
    report.table(
        [
            "system",
            "seconds, median (min-max)",
            "throughput",
            "result",
            "peak RSS MiB: process / max worker (each worker)",
            "tasks run",
        ],
        rows,
    )
    build = single["build"][0]
    report.add(
        f"- one machine, store build (the prerequisite, not measured above): {fmt(build['seconds'])} s "
        f"({fmt(args.n / build['seconds'])} docs/s), peak RSS {fmt(build['peak_mib'])} MiB, "
        f"file {build['bytes'] / 2**20:,.0f} MiB; the single-machine rows are generated in each "
        "process before its timer starts"
    )
    if dask_runs["build_stores"]:
        runs = dask_runs["build_stores"]
        report.add(
            f"- Dask `build_stores` into {args.shards} shards: {fmt_range(seconds(runs))} s "
            f"({throughput(runs)}), max worker peak RSS "
            f"{fmt_range([max(r['worker_peak_mib']) for r in runs])} MiB, "
            f"files {runs[0]['bytes'] / 2**20:,.0f} MiB in all"
        )
    report.add(f"- driver (this process) peak RSS over the whole run: {fmt(driver_peak)} MiB")
    gen = float(np.median(seconds(dask_runs["generate"])))
    for name in ("pairs", "clusters"):
        dask_seconds = float(np.median(seconds(dask_runs[name])))
        single_seconds = float(np.median(seconds(single[name])))
        report.add(
            f"- Dask `{name}` / `Store.{'near_duplicate_pairs' if name == 'pairs' else 'clusters'}`: "
            f"{dask_seconds / single_seconds:.1f}x the time ({(dask_seconds - gen) / single_seconds:.1f}x "
            "without the Dask row generation)"
        )
    report.add(
        f"- checks: the Dask pair set equals `Store.near_duplicate_pairs`' and `all_pairs`' "
        f"(sha256 {reference['sha256'][:16]}, {pair_count:,} pairs), every planted pair still within k "
        f"is found, and the Dask clusters equal `Store.clusters`' ({clusters_found:,} clusters, "
        f"{cluster_reference['members']:,} members, largest {cluster_reference['largest']}): "
        + ("**FAILED**" if failures else "passed")
        + "\n"
    )

    sizes = entry_row_bytes()
    entries_rows = args.n * len(TABLES)
    report.heading("Shuffle volume")
    report.add(
        f"Entries (one row per document and table: `table` uint16, `prefix`, `fingerprint` uint64, "
        f"`position` int64): {entries_rows:,} rows = N x {len(TABLES)} tables, "
        f"{sizes['entry_pandas']:.1f} bytes a row in pandas, {sizes['entry_arrow']:.1f} in Arrow "
        f"(what p2p sends): {entries_rows * sizes['entry_arrow'] / GIB:.2f} GiB. `near_duplicate_pairs` "
        f"also joins the keys to the pairs by position, two merges that shuffle the N-row key "
        f"frame (packed key + position: {sizes['key_arrow']:.1f} bytes a row in Arrow, "
        f"{args.n * sizes['key_arrow'] / GIB:.2f} GiB) once per merge. Measured (p2p metrics, "
        "median run, bytes summed over both workers):\n"
    )
    shuffle_rows = []
    for name in ("pairs", "clusters"):
        runs = dask_runs[name]
        run = runs[len(runs) // 2]
        shuffle = run["shuffle"]
        row = [f"Dask `{name}`", f"{run['npartitions']:,}", f"{run['tasks']:,}"]
        for label in (
            "foreground shards",
            "background-comms process",
            "background-disk disk-write",
            "foreground disk-read",
        ):
            found = shuffle.get(f"{label} bytes")
            row.append("-" if found is None else f"{found / 2**20:,.0f}")
        shuffle_rows.append(row)
    report.table(
        [
            "run",
            "output partitions",
            "tasks run",
            "MiB split into shards",
            "MiB through the comms buffers",
            "MiB written to shuffle disk",
            "MiB read back",
        ],
        shuffle_rows,
    )
    if dask_runs["sweep"]:
        report.heading("`npartitions` of the shuffle (Dask `near_duplicate_pairs`, one run each)")
        report.table(
            ["npartitions", "seconds", "max worker peak RSS MiB", "tasks run", "MiB split into shards"],
            [
                [
                    f"{run['shuffle_partitions']:,}",
                    fmt(run["seconds"]),
                    fmt(max(run["worker_peak_mib"])),
                    f"{run['tasks']:,}",
                    f"{run['shuffle'].get('foreground shards bytes', 0) / 2**20:,.0f}",
                ]
                for run in dask_runs["sweep"]
            ],
        )
    report.heading("Where the Dask time goes")
    report.add("Compute seconds summed over both workers, by task prefix, over all repeats (top 8):\n")
    for name in ("pairs", "clusters", "build_stores"):
        if not prefixes.get(name):
            continue
        total = sum(prefixes[name].values())
        top = sorted(prefixes[name].items(), key=lambda item: -item[1])[:8]
        report.table(
            [f"`{name}` task prefix", "compute s", "share"],
            [[prefix, fmt(value), f"{value / total:.0%}"] for prefix, value in top],
        )
    report.add(
        f"Load average at the start: {' '.join(f'{v:.2f}' for v in load_start)}; at the end: "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}\n"
    )
    for failure in failures:
        report.add(f"- **FAILED**: {failure}")

    results.update(
        {
            "single": {name: list(runs) for name, runs in single.items()},
            "dask": dict(dask_runs),
            "prefix_compute_seconds": prefixes,
            "row_bytes": sizes,
            "entries_rows": entries_rows,
            "driver_peak_mib": driver_peak,
            "load_average": {"start": load_start, "end": os.getloadavg()},
            "failures": failures,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "code": source_state(ROOT, "simstore"),
        }
    )
    if args.output:
        report.write(args.output)
        Path(args.output).with_suffix(".json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
