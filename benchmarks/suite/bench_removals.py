"""Removals and the disk: what a store's file holds after a large share of its
documents is removed, after ``compact()``, after ``simstore.shrink``, and when
new documents come in afterwards.

One store of ``--docs`` random 64-bit fingerprints with int keys (``sync=False``,
one ``add_many``); then ``--remove`` of them (a share, spread over the key range)
removed by ``remove_many`` calls of ``--batch`` keys; ``compact()``; the store
closed and ``simstore.shrink(path)``; then as many new documents added again in
one ``add_many``. After each phase: its time and docs/s, the peak anonymous RSS,
the file's bytes and the live pages' bytes (``Stats.bytes_live``) per document
held, and the file against the live pages. Query p50/p99 over 10,000 queries
(near a stored document or random) after the removals and after the shrink.

Run (2-core x86-64 VM, Python 3.11)::

    python benchmarks/suite/bench_removals.py --docs 10M --remove 0.5 \\
        --output benchmarks/results/removals_10M.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import (
    AnonPeakSampler,
    Report,
    Stopwatch,
    parse_count,
    parse_with_quick,
    percentiles,
    source_state,
)

import simstore

ROOT = Path(__file__).resolve().parents[2]


def query_latencies(store: simstore.Store, stored: np.ndarray, count: int = 10_000) -> list[float]:
    rng = np.random.default_rng(5)
    near = stored[rng.integers(0, len(stored), count * 4 // 5)] ^ (
        np.uint64(1) << rng.integers(0, 64, count * 4 // 5).astype(np.uint64)
    )
    queries = np.concatenate([near, rng.integers(0, 2**64, count - len(near), dtype=np.uint64)]).tolist()
    for query in queries[:1000]:  # the bitmaps and the upper pages in memory
        store.query(fingerprint=query)
    latencies = []
    for query in queries:
        started = time.perf_counter_ns()
        store.query(fingerprint=query)
        latencies.append((time.perf_counter_ns() - started) / 1000)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default="1M", help="documents first added (10M, 1e6, ...)")
    parser.add_argument("--remove", type=float, default=0.5, help="share of them removed")
    parser.add_argument("--batch", type=int, default=1_000_000, help="keys per remove_many call")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--data-dir", default=None, help="where the store goes (default: a temporary folder)")
    parser.add_argument("--output", help="write the report as markdown here")
    args = parse_with_quick(parser, {"docs": "5000", "batch": 1000})
    docs = parse_count(args.docs)
    removed = int(docs * args.remove)
    folder = tempfile.mkdtemp(prefix="bench_removals_", dir=args.data_dir)
    path = os.path.join(folder, "s.simstore")
    report = Report()
    report.header(
        f"Removals and the disk: {docs:,} documents, {removed:,} removed, k={args.k}",
        folder,
        source_state(ROOT, "simstore"),
    )
    rows = []

    def measure(
        phase: str, seconds: float, documents: int, peak: float, store: simstore.Store | None
    ) -> None:
        file_bytes = os.path.getsize(path)
        if store is None:
            with simstore.open(path, "r") as reader:
                stats = reader.stats()
        else:
            stats = store.stats()
        held = max(stats.docs, 1)
        rate = f"{documents / seconds:,.0f}" if documents else "-"
        rows.append(
            [
                phase,
                f"{seconds:.1f}",
                rate,
                f"{peak:,.0f}",
                f"{stats.docs:,}",
                f"{file_bytes / held:.0f}",
                f"{stats.bytes_live / held:.0f}",
                f"{file_bytes / stats.bytes_live:.2f}",
            ]
        )
        print(rows[-1], flush=True)

    try:
        fingerprints = np.random.default_rng(1).integers(0, 2**64, docs, dtype=np.uint64)
        latencies = {}
        with simstore.open(path, "n", k=args.k, sync=False) as store:
            with AnonPeakSampler() as sampler, Stopwatch() as watch:
                store.add_many(range(docs), fingerprints)
            measure("add_many", watch.seconds, docs, sampler.peak_mib, store)
            doomed = np.random.default_rng(2).permutation(docs)[:removed]
            with AnonPeakSampler() as sampler, Stopwatch() as watch:
                for start in range(0, removed, args.batch):
                    store.remove_many(doomed[start : start + args.batch].tolist())
            measure("remove", watch.seconds, removed, sampler.peak_mib, store)
            kept = np.ones(docs, dtype=bool)
            kept[doomed] = False
            latencies["after removals"] = query_latencies(store, fingerprints[kept])
            with AnonPeakSampler() as sampler, Stopwatch() as watch:
                store.compact()
            measure("compact()", watch.seconds, 0, sampler.peak_mib, store)
        with AnonPeakSampler() as sampler, Stopwatch() as watch:
            shrunk = simstore.shrink(path)
        measure("shrink()", watch.seconds, 0, sampler.peak_mib, None)
        with simstore.open(path, "r") as store:
            latencies["after shrink"] = query_latencies(store, fingerprints[kept])
        more = np.random.default_rng(3).integers(0, 2**64, removed, dtype=np.uint64)
        with simstore.open(path, "w", sync=False) as store:
            with AnonPeakSampler() as sampler, Stopwatch() as watch:
                store.add_many(range(docs, docs + removed), more)
            measure("add_many again", watch.seconds, removed, sampler.peak_mib, store)
            problems = store.check()
        report.table(
            ["phase", "s", "docs/s", "peak anon MiB", "docs held", "file B/doc", "live B/doc", "file / live"],
            rows,
        )
        report.add(
            f"shrink: {shrunk.bytes_before:,} -> {shrunk.bytes_after:,} bytes; check() after: "
            f"{'clean' if not problems else problems[:3]}\n"
        )
        report.table(
            ["queries", "p50 µs", "p99 µs"],
            [
                [name, *(f"{value:.1f}" for value in percentiles(values, (50, 99)))]
                for name, values in latencies.items()
            ],
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.output:
        report.write(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
