"""simstore beside the near-duplicate indexes a Python user would install
instead: build, query latency, recall, size, memory and reopen, in one run.

Run (from the repository root; ``pip install -e '.[bench]'`` and the
``simhash`` venv below first)::

    python benchmarks/suite/bench_peers.py --n 100_000,1_000_000 --output benchmarks/results/peers_1M.md
    python benchmarks/suite/bench_peers.py --n 10_000_000 --repeats 2 --output benchmarks/results/peers_10M.md

Each N writes ``peers_<N>.json`` beside ``--output`` (``plot_results.py``
turns those into ``RESULTS.md`` and the plots). About 4 minutes at N = 1M and
25 at N = 10M on the machine of the committed results (2-core AMD EPYC VM,
shared; see each report's header).

Systems, all over the same seeded random 64-bit fingerprints (ids 0..N-1),
k = 3, each in its own process (``spawn``, or the ``simhash`` venv's
interpreter) so that its peak RSS is its own:

- **simstore**: ``add_many`` of N into a new store with the default options
  (``sync=True``: the build is durable when it returns), closed; then single
  ``query`` and ``query_many`` (batches of 1000) on the store reopened
  read-only in a fresh process;
- **faiss-cpu** ``IndexBinaryMultiHash`` 4x16 (``nflip=0``) and 2x32
  (``nflip=1``): both exact for k = 3 (4 blocks: one block is unchanged; 2
  blocks: one differs in at most 1 bit), and ``IndexBinaryFlat`` (exhaustive,
  SIMD popcount); ``range_search`` at radius k + 1 (faiss keeps distances
  strictly below the radius), one OpenMP thread (``--faiss-threads``) like
  every other system here; build is ``add`` of the codes, in memory;
- **simhash** (PyPI ``simhash``, ``SimhashIndex``), pure Python, needs
  ``numpy<2``, so it runs in ``--simhash-python`` (default
  ``/tmp/simhash-venv/bin/python``; make it with
  ``python -m venv /tmp/simhash-venv && /tmp/simhash-venv/bin/pip install "numpy<2" simhash``);
  its build runs at ~70K docs/s and holds ~900 MiB per 1M, so it is measured
  up to ``--simhash-max-n`` (1M);
- **numpy brute force**: ``np.bitwise_count(fps ^ q) <= k``, one scan per query
  over cache-sized chunks with preallocated buffers, the oracle for recall and
  the floor every index must beat;
- **raw py-lmdb floor** (from ``bench_store.py``): the same 10 permutation
  tables as dupsort sub-databases, sorted ``putmulti(append=True)``, probes
  with precomputed permuted keys: the floor for our storage layer.
- **simhash-py** (C++ core) is not measured: its sdist ships a Cython-0.2x
  generated ``simhash.cpp`` that includes ``longintrepr.h``, which CPython
  3.11 no longer provides, so it does not build here.

Queries: ``--queries`` (3000); 80% are stored fingerprints with 1, 2 or 3
random bits flipped (planted neighbours), 20% random. Every system's answer
to every query is compared with brute force (recall and precision; simstore
and the faiss indexes must be exact, the run exits non-zero otherwise).
Warm cache: every query set is run once before ``--rounds`` timed passes;
percentiles are computed per pass and reported as median (min-max) over
passes; builds are repeated ``--repeats`` times.

Memory: "peak RSS" is ``ru_maxrss`` of the system's process (it counts
touched pages of mmap'ed files, i.e. page cache); "anon" is the anonymous
RSS (``RssAnon``) the index holds beyond a process that loaded the
fingerprints, i.e. memory beyond the page cache. For simstore the build's
peak anonymous RSS is sampled every 5 ms.

``--update`` merges the systems measured now into an existing
``peers_<N>.json`` (e.g. ``--systems brute --update`` after a change to the
brute-force scan); each such update is listed in the JSON's ``updates``.

Reopen: fresh processes (interpreter and imports already loaded, timing
starts at the call) time ``simstore.open(path, "r")`` plus the first
answered query, ``--reopen-repeats`` times; faiss indexes are timed both
reading their ``write_index_binary`` file and rebuilding from a ``.npy`` of
the fingerprints; brute force is ``np.load`` plus one scan; ``SimhashIndex``
can only be rebuilt (its build time is shown).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import (
    AnonPeakSampler,
    Report,
    baseline_rss_mib,
    fmt_range,
    have,
    load_average,
    machine,
    parse_with_quick,
    round_percentiles,
    rss_breakdown_mib,
    run_isolated,
    skip_peer,
    source_state,
    timed_passes,
    versions,
    write_result_json,
)
from bench_store import base_fingerprints, brute_result, raw_floor

import simstore

K = 3
BATCH = 1000
PLANTED_SHARE = 0.8
QUERY_SEED = 20_240_777
ROOT = Path(__file__).resolve().parents[2]
SIMHASH_WORKER = Path(__file__).resolve().parent / "_simhash_worker.py"

# name: (label in tables, how it is built and queried)
SYSTEMS = {
    "simstore": "simstore (LMDB, persisted)",
    "lmdb-floor": "raw py-lmdb floor (same 10 tables)",
    "faiss-mh-4x16": "faiss IndexBinaryMultiHash 4x16",
    "faiss-mh-2x32": "faiss IndexBinaryMultiHash 2x32 nflip=1",
    "faiss-flat": "faiss IndexBinaryFlat",
    "simhash": "simhash SimhashIndex (pure Python)",
    "brute": "numpy brute force (bitwise_count, chunked)",
}
EXACT_REQUIRED = {"simstore", "lmdb-floor", "faiss-mh-4x16", "faiss-mh-2x32", "faiss-flat", "brute"}

Result = list[int]


# ------------------------------------------------------------------ the data


def make_queries(fps: np.ndarray, count: int, seed: int = QUERY_SEED, k: int = K) -> np.ndarray:
    """80% stored fingerprints with 1..k random bits flipped (cycling), 20% random."""
    rng = np.random.default_rng(seed)
    planted = int(count * PLANTED_SHARE)
    picked = fps[rng.integers(0, len(fps), size=planted)].copy()
    for index in range(planted):
        for bit in rng.choice(64, size=1 + index % k, replace=False):
            picked[index] ^= np.uint64(1) << np.uint64(bit)
    randoms = rng.integers(0, np.iinfo(np.uint64).max, size=count - planted, dtype=np.uint64, endpoint=True)
    queries = np.concatenate([picked, randoms])
    rng.shuffle(queries)
    return queries


# ------------------------------------------------------------------ simstore


def simstore_build(path: str, n: int, repeats: int) -> dict[str, Any]:
    """``add_many`` of N into a new store, ``repeats`` times; the last file stays."""
    fps = base_fingerprints(n)
    keys = range(n)
    before = rss_breakdown_mib().get("anon", 0.0)
    builds: list[dict[str, float]] = []
    peak_anon: list[float] = []
    stats = None
    for _ in range(repeats):
        with AnonPeakSampler() as sampler:
            started = time.perf_counter()
            store = simstore.open(path, "n", k=K)
            opened = time.perf_counter()
            store.add_many(keys, fps)
            added = time.perf_counter()
            stats = store.stats()
            store.close()
            closed = time.perf_counter()
        builds.append({"seconds": closed - started, "add_many s": added - opened})
        peak_anon.append(sampler.peak_mib - before)
    assert stats is not None
    return {
        "build s": [build["seconds"] for build in builds],
        "add_many s": [build["add_many s"] for build in builds],
        "build anon peak MiB": peak_anon,
        "bytes_on_disk": stats.bytes_on_disk,
        "docs": stats.docs,
        "delta docs": stats.delta_docs,
    }


def simstore_queries(path: str, queries: np.ndarray, rounds: int) -> dict[str, Any]:
    """Single ``query`` and ``query_many`` on the store opened read-only, warm."""
    before = rss_breakdown_mib().get("anon", 0.0)
    query_list = queries.tolist()
    with simstore.open(path, "r") as store:
        query = store.query
        results = [sorted(int(match.key) for match in query(fingerprint=q)) for q in query_list]
        latencies = timed_passes(lambda q: query(fingerprint=q), query_list, rounds)
        chunks = [queries[start : start + BATCH] for start in range(0, len(queries), BATCH)]
        batched: list[Result] = []
        for chunk in chunks:
            batched += [sorted(int(match.key) for match in found) for found in store.query_many(chunk)]
        per_query = []
        for _ in range(rounds):
            for chunk in chunks:
                started = time.perf_counter_ns()
                store.query_many(chunk)
                per_query.append((time.perf_counter_ns() - started) / len(chunk) / 1000)
    return {
        "latency us": latencies,
        "batch us/query": per_query,
        "results": results,
        "batched results": batched,
        "anon MiB": rss_breakdown_mib().get("anon", 0.0) - before,
    }


def simstore_reopen(path: str, queries: list[int]) -> dict[str, float]:
    """Seconds from ``simstore.open`` to the first answered query, the open
    alone, and to the answer of the 100th query: a store reads its bitmaps a
    table per query, so the first queries after a reopen are the slower ones."""
    started = time.perf_counter()
    store = simstore.open(path, "r")
    opened = time.perf_counter()
    store.query(fingerprint=queries[0])
    answered = time.perf_counter()
    for query in queries[1:100]:
        store.query(fingerprint=query)
    hundredth = time.perf_counter()
    store.close()
    return {
        "open s": opened - started,
        "first query s": answered - started,
        "100 queries s": hundredth - started,
    }


# --------------------------------------------------------------------- faiss


def _faiss_index(kind: str) -> Any:
    import faiss

    if kind == "faiss-flat":
        return faiss.IndexBinaryFlat(64)
    if kind == "faiss-mh-4x16":
        index = faiss.IndexBinaryMultiHash(64, 4, 16)
        index.nflip = 0
        return index
    if kind == "faiss-mh-2x32":
        index = faiss.IndexBinaryMultiHash(64, 2, 32)
        index.nflip = 1
        return index
    raise ValueError(kind)


def _codes(fps: np.ndarray) -> np.ndarray:
    """uint64 fingerprints as faiss binary codes: 8 bytes each (Hamming
    distance does not depend on the byte order)."""
    return np.ascontiguousarray(fps).view(np.uint8).reshape(-1, 8)


def faiss_run(
    kind: str, n: int, queries: np.ndarray, repeats: int, rounds: int, threads: int, index_path: str
) -> dict[str, Any]:
    """Build (``add``) ``repeats`` times, then single and batched range searches."""
    import faiss

    faiss.omp_set_num_threads(threads)
    codes = _codes(base_fingerprints(n))
    before = rss_breakdown_mib().get("anon", 0.0)
    builds = []
    index = None
    for _ in range(repeats):
        index = None
        started = time.perf_counter()
        index = _faiss_index(kind)
        index.add(codes)
        builds.append(time.perf_counter() - started)
    held = rss_breakdown_mib().get("anon", 0.0) - before
    assert index is not None
    radius = K + 1
    query_codes = _codes(queries)
    rows = [query_codes[position : position + 1] for position in range(len(queries))]
    results = []
    for row in rows:
        _, _, ids = index.range_search(row, radius)
        results.append(sorted(ids.tolist()))
    search = index.range_search
    latencies = timed_passes(lambda row: search(row, radius), rows, rounds)
    chunks = [query_codes[start : start + BATCH] for start in range(0, len(queries), BATCH)]
    batched: list[Result] = []
    for chunk in chunks:
        lims, _, ids = search(chunk, radius)
        batched += [sorted(ids[lims[i] : lims[i + 1]].tolist()) for i in range(len(chunk))]
    per_query = []
    for _ in range(rounds):
        for chunk in chunks:
            started = time.perf_counter_ns()
            search(chunk, radius)
            per_query.append((time.perf_counter_ns() - started) / len(chunk) / 1000)
    faiss.write_index_binary(index, index_path)
    return {
        "build s": builds,
        "latency us": latencies,
        "batch us/query": per_query,
        "results": results,
        "batched results": batched,
        "anon MiB": held,
        "file bytes": os.path.getsize(index_path),
    }


def faiss_reopen(kind: str, index_path: str, npy_path: str, query: int, rebuild: bool) -> dict[str, float]:
    """Seconds to the first answered query: read the saved index, or rebuild it."""
    import faiss

    faiss.omp_set_num_threads(1)
    query_codes = _codes(np.array([query], dtype=np.uint64))
    started = time.perf_counter()
    if rebuild:
        index = _faiss_index(kind)
        index.add(_codes(np.load(npy_path)))
    else:
        index = faiss.read_index_binary(index_path)
    opened = time.perf_counter()
    index.range_search(query_codes, K + 1)
    return {"open s": opened - started, "first query s": time.perf_counter() - started}


# --------------------------------------------------------------- brute force


class ChunkedScan:
    """Brute force without per-query temporaries of N elements: XOR and
    ``bitwise_count`` over chunks of ``CHUNK`` fingerprints into preallocated
    buffers that stay in cache."""

    CHUNK = 1 << 17

    def __init__(self, fps: np.ndarray) -> None:
        self.fps = fps
        self.xor = np.empty(min(self.CHUNK, max(len(fps), 1)), dtype=np.uint64)
        self.count = np.empty(len(self.xor), dtype=np.uint8)

    def __call__(self, query: int, k: int = K) -> list[int]:
        value = np.uint64(query)
        hits = []
        for start in range(0, len(self.fps), self.CHUNK):
            part = self.fps[start : start + self.CHUNK]
            xor, count = self.xor[: len(part)], self.count[: len(part)]
            np.bitwise_xor(part, value, out=xor)
            np.bitwise_count(xor, out=count)
            found = np.flatnonzero(count <= k)
            if found.size:
                hits += (found + start).tolist()
        return hits


def brute_run(n: int, queries: np.ndarray, rounds: int) -> dict[str, Any]:
    fps = base_fingerprints(n)
    scan = ChunkedScan(fps)
    query_list = queries.tolist()
    results = [scan(q) for q in query_list]
    # The chunked scan must agree with the plain one-array scan of bench_store.
    for q, found in list(zip(query_list, results, strict=True))[:50]:
        assert found == [doc for doc, _ in brute_result(fps, q, K)]
    latencies = timed_passes(scan, query_list, rounds)
    per_pass = np.array_split(latencies, rounds)
    return {
        "latency us": latencies,
        # A batch is one scan per query; its per-query time is a pass's mean.
        "batch us/query": [float(part.mean()) for part in per_pass],
        "results": results,
        "anon MiB": fps.nbytes / 2**20,
        "file bytes": fps.nbytes,
    }


def brute_reopen(npy_path: str, query: int) -> dict[str, float]:
    started = time.perf_counter()
    fps = np.load(npy_path)
    opened = time.perf_counter()
    ChunkedScan(fps)(query)
    return {"open s": opened - started, "first query s": time.perf_counter() - started}


def floor_run(path: str, n: int, queries: np.ndarray, repeats: int, rounds: int) -> dict[str, Any]:
    found = raw_floor(path, n, queries, repeats, rounds, 0)
    return {
        "build s": [load["seconds"] for load in found["loads"]],
        "latency us": found["latency us"],
        "results": [[doc for doc, _ in result] for result in found["results"]],
        "bytes_on_disk": found["bytes_on_disk"],
    }


# ------------------------------------------------------------------ the runner


def simhash_run(python: str, npy_path: str, queries_path: str, repeats: int, rounds: int) -> dict[str, Any]:
    completed = subprocess.run(
        [
            python,
            str(SIMHASH_WORKER),
            "peers",
            "--data",
            npy_path,
            "--queries",
            queries_path,
            "--k",
            str(K),
            "--repeats",
            str(repeats),
            "--rounds",
            str(rounds),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(completed.stdout)
    found["latency us"] = np.asarray(found["latency us"])
    return found


def recall(got: list[Result], expected: list[Result]) -> dict[str, Any]:
    wanted = sum(len(result) for result in expected)
    hits = sum(len(set(g) & set(e)) for g, e in zip(got, expected, strict=True))
    returned = sum(len(result) for result in got)
    return {
        "true neighbours": wanted,
        "recall": hits / wanted if wanted else 1.0,
        "precision": hits / returned if returned else 1.0,
        "queries differing": sum(1 for g, e in zip(got, expected, strict=True) if sorted(g) != e),
    }


def summarise(name: str, raw: dict[str, Any], n: int, rounds: int) -> dict[str, Any]:
    """The JSON-able figures of one system (no per-query samples)."""
    summary: dict[str, Any] = {"system": name, "label": SYSTEMS[name], "n": n}
    if raw.get("build s"):
        summary["build s"] = list(raw["build s"])
        summary["build docs/s"] = [n / seconds for seconds in raw["build s"]]
    if "latency us" in raw:
        summary["query us"] = round_percentiles(np.asarray(raw["latency us"]), rounds)
    if raw.get("batch us/query"):
        summary["batch us/query"] = list(raw["batch us/query"])
    for name_in, name_out in (
        ("bytes_on_disk", "bytes/doc on disk"),
        ("file bytes", "bytes/doc saved file"),
    ):
        if raw.get(name_in):
            summary[name_out] = raw[name_in] / n
    for field in (
        "anon MiB",
        "build anon peak MiB",
        "index anon MiB",
        "peak RSS MiB",
        "add_many s",
        "version",
    ):
        if field in raw:
            summary[field] = raw[field]
    return summary


def run_n(args: argparse.Namespace, n: int, work: str, report: Report) -> tuple[dict[str, Any], bool]:
    started_load = load_average()
    fps = base_fingerprints(n)
    queries = make_queries(fps, args.queries)
    npy_path = os.path.join(work, "fps.npy")
    queries_path = os.path.join(work, "queries.npy")
    np.save(npy_path, fps)
    np.save(queries_path, queries)
    del fps
    first_query = int(queries[0])
    systems = [name for name in args.systems if not (name == "simhash" and n > args.simhash_max_n)]
    raw: dict[str, dict[str, Any]] = {}
    rss: dict[str, dict[str, float]] = {}
    reopen: dict[str, dict[str, list[float]]] = {}
    load_at: dict[str, str] = {}

    def note(text: str) -> None:
        print(f"  [{time.strftime('%H:%M:%S')}] N={n:,} {text} (load {load_average()})", file=sys.stderr)

    store_path = os.path.join(work, "store.simstore")
    for name in systems:
        note(f"{name} ...")
        load_at[name] = load_average()
        if name == "simstore":
            built, build_rss, _ = run_isolated(simstore_build, store_path, n, args.repeats)
            queried, query_rss, end = run_isolated(simstore_queries, store_path, queries, args.rounds)
            raw[name] = {**built, **queried, "bytes_on_disk": built["bytes_on_disk"]}
            rss[name] = {"build": build_rss, "query": query_rss, "query file-backed": end.get("file", 0.0)}
            first_queries = queries[:100].tolist()  # queries[0] is every system's first_query
            runs = [
                run_isolated(simstore_reopen, store_path, first_queries)[0]
                for _ in range(args.reopen_repeats)
            ]
            reopen[name] = {
                "open s": [r["open s"] for r in runs],
                "first query s": [r["first query s"] for r in runs],
                "100 queries s": [r["100 queries s"] for r in runs],
            }
        elif name.startswith("faiss"):
            index_path = os.path.join(work, f"{name}.faiss")
            found, peak, _ = run_isolated(
                faiss_run, name, n, queries, args.repeats, args.rounds, args.faiss_threads, index_path
            )
            raw[name] = found
            rss[name] = {"query": peak}
            runs = [
                run_isolated(faiss_reopen, name, index_path, npy_path, first_query, False)[0]
                for _ in range(args.reopen_repeats)
            ]
            rebuilt = run_isolated(faiss_reopen, name, index_path, npy_path, first_query, True)[0]
            reopen[name] = {
                "open s": [r["open s"] for r in runs],
                "first query s": [r["first query s"] for r in runs],
                "rebuild first query s": [rebuilt["first query s"]],
            }
            os.remove(index_path)
        elif name == "brute":
            found, peak, _ = run_isolated(brute_run, n, queries, args.rounds)
            raw[name] = found
            rss[name] = {"query": peak}
            runs = [run_isolated(brute_reopen, npy_path, first_query)[0] for _ in range(args.reopen_repeats)]
            reopen[name] = {
                "open s": [r["open s"] for r in runs],
                "first query s": [r["first query s"] for r in runs],
            }
        elif name == "lmdb-floor":
            floor_path = os.path.join(work, "floor.lmdb")
            found, peak, _ = run_isolated(floor_run, floor_path, n, queries, args.repeats, args.rounds)
            raw[name] = found
            rss[name] = {"query": peak}
            for leftover in (floor_path, floor_path + "-lock"):
                if os.path.exists(leftover):
                    os.remove(leftover)
        elif name == "simhash":
            found = simhash_run(args.simhash_python, npy_path, queries_path, args.repeats, args.rounds)
            raw[name] = found
            rss[name] = {"query": found["peak RSS MiB"]}
            reopen[name] = {"rebuild first query s": [min(found["build s"])]}
        note(f"{name} done")
    if "simstore" in systems and not args.keep_store:
        for leftover in (store_path, store_path + "-lock"):
            if os.path.exists(leftover):
                os.remove(leftover)

    oracle = raw["brute"]["results"] if "brute" in raw else None
    exact = True
    checks = {}
    if oracle is not None:
        for name, found in raw.items():
            checks[name] = recall(found["results"], oracle)
            if "batched results" in found:
                checks[name + " (batched)"] = recall(found["batched results"], oracle)
        for name, check in checks.items():
            if name.split(" ")[0] in EXACT_REQUIRED and check["queries differing"]:
                exact = False

    summaries = {name: summarise(name, found, n, args.rounds) for name, found in raw.items()}
    for name, summary in summaries.items():
        summary["rss"] = rss.get(name, {})
        summary["reopen"] = reopen.get(name, {})
        summary["load average at start"] = load_at[name]
        summary["check"] = checks.get(name)
        summary["check batched"] = checks.get(name + " (batched)")
    result = {
        "n": n,
        "k": K,
        "queries": args.queries,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "faiss threads": args.faiss_threads,
        "load average": [started_load, load_average()],
        "systems": summaries,
        "skipped": {
            name: f"N > --simhash-max-n {args.simhash_max_n:,}"
            for name in args.systems
            if name not in systems
        },
        "exact": exact,
    }
    write_section(report, result)
    return result, exact


def write_section(report: Report, result: dict[str, Any]) -> None:
    n = result["n"]
    report.heading(f"N = {n:,}")
    report.add(
        f"k = {result['k']}; {result['queries']:,} queries (80% planted at 1..k bits), "
        f"{result['rounds']} timed passes; {result['repeats']} builds; load average "
        f"{result['load average'][0]} at the start, {result['load average'][1]} at the end.\n"
    )
    rows = []
    for s in result["systems"].values():
        query = s.get("query us", {})
        rows.append(
            [
                s["label"],
                fmt_range(s["build docs/s"]) if "build docs/s" in s else "-",
                fmt_range(query["p50"]) if query else "-",
                fmt_range(query["p99"]) if query else "-",
                fmt_range(query["p99.9"]) if query else "-",
                fmt_range(s["batch us/query"]) if "batch us/query" in s else "-",
                (s["check"] or {}).get("recall", "-"),
                s.get("bytes/doc on disk", s.get("bytes/doc saved file")),
                s.get("anon MiB", s.get("index anon MiB")),
                s["rss"].get("query"),
                s["load average at start"],
            ]
        )
    report.table(
        [
            "system",
            "build docs/s",
            "query p50 µs",
            "query p99 µs",
            "query p99.9 µs",
            "batched µs/query",
            "recall",
            "bytes/doc",
            "index anon MiB",
            "peak RSS MiB",
            "load at start",
        ],
        rows,
    )
    report.add(
        "Figures are median (min-max) over builds or timed passes. bytes/doc: simstore and the floor "
        "on disk (allocated blocks); faiss the `write_index_binary` file; brute force the array. "
        "index anon MiB: anonymous RSS the index holds beyond its process's baseline "
        "(simstore: the query process, mmap'ed file pages excluded).\n"
    )
    store = result["systems"].get("simstore")
    if store:
        report.add(
            f"simstore build: add_many {fmt_range(store['add_many s'])} s of "
            f"{fmt_range(store['build s'])} s total; peak anonymous RSS during the build "
            f"{fmt_range(store['build anon peak MiB'])} MiB; peak RSS build process "
            f"{store['rss']['build']:.0f} MiB, query process {store['rss']['query']:.0f} MiB "
            f"({store['rss']['query file-backed']:.0f} MiB file-backed at the end).\n"
        )
    rows = []
    for s in result["systems"].values():
        r = s.get("reopen") or {}
        if not r:
            continue
        rows.append(
            [
                s["label"],
                fmt_range([v * 1000 for v in r["open s"]]) if "open s" in r else "-",
                fmt_range([v * 1000 for v in r["first query s"]]) if "first query s" in r else "-",
                fmt_range([v * 1000 for v in r["100 queries s"]]) if "100 queries s" in r else "-",
                fmt_range([v * 1000 for v in r["rebuild first query s"]])
                if "rebuild first query s" in r
                else "-",
            ]
        )
    report.heading("Reopen to the first answered query (fresh process, warm page cache)", 3)
    report.table(
        ["system", "open / read ms", "first query ms", "100th query ms", "rebuild + first query ms"], rows
    )
    checks = [(name, s["check"]) for name, s in result["systems"].items() if s.get("check")]
    checks += [
        (name + " query_many / batch", s["check batched"])
        for name, s in result["systems"].items()
        if s.get("check batched")
    ]
    report.heading("Recall against brute force", 3)
    report.table(
        ["system", "true neighbours", "recall", "precision", "queries differing"],
        [
            [name, c["true neighbours"], c["recall"], c["precision"], c["queries differing"]]
            for name, c in checks
        ],
    )
    if result["skipped"]:
        report.add(
            "Skipped: " + "; ".join(f"{name} ({why})" for name, why in result["skipped"].items()) + "\n"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="100_000,1_000_000", help="comma-separated sizes")
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reopen-repeats", type=int, default=5)
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="comma-separated, of: " + ", ".join(SYSTEMS)
    )
    parser.add_argument("--simhash-python", default="/tmp/simhash-venv/bin/python")
    parser.add_argument("--simhash-max-n", type=int, default=1_000_000)
    parser.add_argument("--faiss-threads", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where store files go (deleted afterwards)")
    parser.add_argument(
        "--keep-store", action="store_true", help="leave the simstore file of the last N in --dir"
    )
    parser.add_argument(
        "--output", default=None, help="markdown report; peers_<N>.json are written beside it"
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="merge the systems measured now into an existing peers_<N>.json instead of replacing it",
    )
    args = parse_with_quick(
        parser, {"n": "5000", "queries": 100, "rounds": 1, "repeats": 1, "reopen_repeats": 1}
    )
    args.systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    if not have("faiss") and any(system.startswith("faiss") for system in args.systems):
        skip_peer("faiss", "faiss-cpu is not installed: pip install -e '.[bench]'")
        args.systems = [system for system in args.systems if not system.startswith("faiss")]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}")
    if "simhash" in args.systems and not os.path.exists(args.simhash_python):
        print(f"no {args.simhash_python}: skipping simhash (see the docstring for its venv)", file=sys.stderr)
        args.systems.remove("simhash")
    sizes = [int(value.replace("_", "")) for value in args.n.split(",")]

    base_dir = args.dir or tempfile.gettempdir()
    os.makedirs(base_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench_peers_", dir=base_dir) if not args.keep_store else base_dir
    report = Report()
    report.header("simstore and its peers", data_dir=work, code=source_state(ROOT, "simstore"))
    package_versions = versions("simstore", "faiss-cpu", "lmdb", "numpy")
    report.add(
        "Versions: "
        + ", ".join(f"{name} {version}" for name, version in package_versions.items())
        + f"; faiss threads {args.faiss_threads}. "
        + f"An idle spawn child peaks at {baseline_rss_mib():.0f} MiB RSS.\n"
    )
    out_dir = Path(args.output).parent if args.output else Path(work)
    exact = True
    wall = time.perf_counter()
    try:
        for n in sizes:
            result, ok = run_n(args, n, work, report)
            exact = exact and ok
            result["machine"] = machine(work)
            result["versions"] = package_versions
            if "simhash" in result["systems"]:
                result["versions"]["simhash"] = result["systems"]["simhash"].get("version", "?")
            result["code"] = source_state(ROOT, "simstore")
            result["command"] = " ".join([Path(sys.executable).name, *sys.argv])
            result["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
            label = f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}K"
            out_dir.mkdir(parents=True, exist_ok=True)
            json_path = out_dir / f"peers_{label}.json"
            write_result_json(json_path, result, update=args.update)
            if args.output:
                report.write(args.output)
    finally:
        if not args.keep_store:
            shutil.rmtree(work, ignore_errors=True)
    report.add(f"Total wall time {time.perf_counter() - wall:.0f} s. All exact systems exact: {exact}.")
    if args.output:
        report.write(args.output)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
