"""Grow one store to 100M documents and measure it at every step.

What a user with a big crawl does: open a store, ``add_many`` it in large
batches, then keep adding one document at a time. After each batch this
reports:

- build speed (documents per second of the ``add_many`` call, which pays its
  share of compaction; ``x first``: over the first batch's), and the peak
  anonymous RSS during it;
- the runs the store holds after it (``+``: a join is being prepared in steps);
- the file's bytes per document and the bytes LMDB's last snapshot spans
  (``Stats.bytes_used``), per document;
- query latency p50/p99 on the first pass over a fresh set of queries (pages
  not yet touched) and on a second, warm pass over the same queries; four in
  five queries are stored fingerprints with 0..k bits flipped, one in five
  random.

Then ``--single`` documents are added one ``add`` at a time (``sync=False``),
with the latency of each: documents per second, p50/p99 and the longest
single call, which includes any merge or compaction step it paid for.

The script uses only simstore's public API, so the same script measures an
older simstore (a git worktree on ``PYTHONPATH``, ``--label format-1``).
Fingerprints are random 64-bit integers, keys are ints (or URL-like strings
with ``--keys url``), and nothing is downloaded.

Usage::

    python benchmarks/suite/bench_scale.py --docs 100M --batch 10M --k 3 --single 2M \\
        --data-dir /data/scale --output benchmarks/results/scale_k3.md
    python benchmarks/suite/bench_scale.py --docs 100M --batch 10M --k 5 --single 2M --layout multi-index \\
        --data-dir /data/scale --output benchmarks/results/scale_k5_format3.md
    PYTHONPATH=../wt-old python benchmarks/suite/bench_scale.py --docs 20M --label format-1 ...

The store is deleted at the end unless ``--keep``.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import AnonPeakSampler, Report, drop_page_cache, fmt, parse_count, parse_with_quick, percentiles

import simstore

SEED = 20_261_125
QUERIES = 10_000
PLANTED_SHARE = 0.8


def fingerprints(first: int, n: int) -> np.ndarray:
    """The fingerprints of documents ``first .. first + n``, reproducible per batch."""
    rng = np.random.default_rng([SEED, first])
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def keys_for(first: int, n: int, kind: str) -> Any:
    if kind == "int":
        return np.arange(first, first + n, dtype=np.int64)
    return [f"https://example.org/{i % 9973}/page-{i}.html" for i in range(first, first + n)]


def queries(stored: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Stored fingerprints with 0..k random bits flipped, and random ones."""
    rng = np.random.default_rng([SEED, seed])
    planted = int(QUERIES * PLANTED_SHARE)
    picked = stored[rng.integers(0, len(stored), size=planted)].copy()
    for flips in range(1, k + 1):
        rows = np.arange(planted)[np.arange(planted) % (k + 1) == flips]
        for _ in range(flips):
            # Possibly the same bit twice: distance <= flips, still a near-duplicate.
            bits = rng.integers(0, 64, size=len(rows)).astype(np.uint64)
            picked[rows] ^= np.uint64(1) << bits
    randoms = rng.integers(0, np.iinfo(np.uint64).max, size=QUERIES - planted, dtype=np.uint64, endpoint=True)
    mixed = np.concatenate([picked, randoms])
    rng.shuffle(mixed)
    return mixed


def query_pass(store: Any, probes: list[int]) -> tuple[float, float, int]:
    """p50 and p99 in µs of one pass, and the matches found."""
    latencies = np.empty(len(probes))
    found = 0
    clock = time.perf_counter_ns
    for index, probe in enumerate(probes):
        start = clock()
        found += len(store.query(probe))
        latencies[index] = clock() - start
    p50, p99 = percentiles(latencies / 1000.0, (50, 99))
    return p50, p99, found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=parse_count, default=parse_count("100M"))
    parser.add_argument("--batch", type=parse_count, default=parse_count("10M"))
    parser.add_argument("--single", type=parse_count, default=parse_count("2M"))
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--plan", action="store_true", help="let the planner lay the store out for --docs")
    parser.add_argument(
        "--layout",
        choices=("manku", "multi-index"),
        default="manku",
        help="the store's tables: format 2 or 3",
    )
    parser.add_argument("--keys", choices=("int", "url"), default="int")
    parser.add_argument("--label", default="")
    parser.add_argument("--data-dir", default=os.environ.get("SIMSTORE_BENCH_DIR", "/tmp/simstore-scale"))
    parser.add_argument("--output", type=Path)
    parser.add_argument("--json", type=Path, help="append each step as a JSON line here")
    parser.add_argument("--keep", action="store_true")
    args = parse_with_quick(
        parser,
        {
            "docs": 4000,
            "batch": 2000,
            "single": 200,
            "data_dir": os.path.join(tempfile.gettempdir(), "simstore-scale-quick"),
        },
    )

    label = args.label or f"simstore {simstore.__version__}"
    os.makedirs(args.data_dir, exist_ok=True)
    path = os.path.join(args.data_dir, f"scale-k{args.k}.simstore")
    report = Report()
    report.header(f"bench_scale: {label}, k={args.k}, {args.keys} keys", data_dir=args.data_dir)

    open_options: dict[str, Any] = {"k": args.k, "sync": False}
    if args.layout == "multi-index":
        open_options["layout"] = "multi-index"
        open_options["expected_docs"] = args.docs
    elif args.plan:  # the planner's Manku layout for --docs
        open_options["layout"] = simstore.plan(args.k, args.docs)[0]
    else:  # Manku's one-level tables (a new store's default is a multi-index scheme)
        open_options["blocks"] = args.k + 2
    store = simstore.open(path, "n", **open_options)
    stats = store.stats()
    report.add(
        f"Layout: {stats.layout_name}, format {stats.format_version}, {stats.tables} tables"
        + ("" if stats.format_version == 3 else f", prefix bits {list(stats.prefix_bits)}")
    )
    report.add()
    headers = [
        "docs",
        "add_many docs/s",
        "x first",
        "runs after",
        "peak anon MiB",
        "file B/doc",
        "used B/doc",
        "first p50 µs",
        "first p99 µs",
        "warm p50 µs",
        "warm p99 µs",
    ]
    rows: list[list[object]] = []
    steps: list[dict[str, Any]] = []

    def record(step: dict[str, Any]) -> None:
        steps.append(step)
        if args.json:
            with args.json.open("a", encoding="utf-8") as sink:
                sink.write(json.dumps({"label": label, "k": args.k, **step}) + "\n")
        print(json.dumps(step), file=sys.stderr, flush=True)

    stored = 0
    while stored < args.docs:
        size = min(args.batch, args.docs - stored)
        batch_fps = fingerprints(stored, size)
        batch_keys = keys_for(stored, size, args.keys)
        gc.collect()
        with AnonPeakSampler() as sampler:
            start = time.perf_counter()
            store.add_many(batch_keys, batch_fps)
            seconds = time.perf_counter() - start
        del batch_keys
        stored += size
        stats = store.stats()
        # Queries near documents of every batch so far, not only the last.
        sample = np.concatenate([fingerprints(first, 2_000) for first in range(0, stored, args.batch)])
        probes = [int(q) for q in queries(sample, args.k, stored)]
        drop_page_cache(path)
        first_p50, first_p99, _ = query_pass(store, probes)
        warm_p50, warm_p99, found = query_pass(store, probes)
        step = {
            "docs": stored,
            "docs_per_s": size / seconds,
            "peak_anon_mib": sampler.peak_mib,
            "file_b_per_doc": stats.bytes_on_disk / stored,
            "used_b_per_doc": stats.bytes_used / stored,
            "first_p50_us": first_p50,
            "first_p99_us": first_p99,
            "warm_p50_us": warm_p50,
            "warm_p99_us": warm_p99,
            "matches": found,
            "runs": stats.runs,
            "compacting": stats.compacting,
        }
        record(step)
        rows.append(
            [
                f"{stored / 1e6:g}M",
                fmt(step["docs_per_s"], 0),
                f"{step['docs_per_s'] / steps[0]['docs_per_s']:.2f}",
                f"{stats.runs}{' +' if stats.compacting else ''}",
                fmt(sampler.peak_mib, 0),
                fmt(step["file_b_per_doc"], 0),
                fmt(step["used_b_per_doc"], 0),
                fmt(first_p50, 1),
                fmt(first_p99, 1),
                fmt(warm_p50, 1),
                fmt(warm_p99, 1),
            ]
        )
    report.heading("add_many batches", 3)
    report.table(headers, rows)

    if args.single:
        single_fps = [int(f) for f in fingerprints(stored, args.single)]
        single_keys = keys_for(stored, args.single, args.keys)
        if args.keys == "int":
            single_keys = [int(key) for key in single_keys]
        latencies = np.empty(args.single)
        clock = time.perf_counter_ns
        gc.collect()
        with AnonPeakSampler() as sampler:
            start = time.perf_counter()
            for index in range(args.single):
                begin = clock()
                store.add(single_keys[index], fingerprint=single_fps[index])
                latencies[index] = clock() - begin
            seconds = time.perf_counter() - start
        stored += args.single
        stats = store.stats()
        p50, p99, p999 = percentiles(latencies / 1000.0, (50, 99, 99.9))
        step = {
            "docs": stored,
            "single_adds": args.single,
            "single_docs_per_s": args.single / seconds,
            "add_p50_us": p50,
            "add_p99_us": p99,
            "add_p999_us": p999,
            "longest_add_s": float(latencies.max()) / 1e9,
            "adds_over_100ms": int((latencies > 1e8).sum()),
            "peak_anon_mib": sampler.peak_mib,
            "file_b_per_doc": stats.bytes_on_disk / stored,
            "used_b_per_doc": stats.bytes_used / stored,
        }
        record(step)
        report.heading(f"{args.single:,} single adds (sync=False) after the batches", 3)
        report.table(
            [
                "docs/s",
                "p50 µs",
                "p99 µs",
                "p99.9 µs",
                "longest add s",
                "adds > 0.1 s",
                "peak anon MiB",
                "file B/doc",
                "used B/doc",
            ],
            [
                [
                    fmt(step["single_docs_per_s"], 0),
                    fmt(p50, 1),
                    fmt(p99, 1),
                    fmt(p999, 1),
                    fmt(step["longest_add_s"], 3),
                    step["adds_over_100ms"],
                    fmt(sampler.peak_mib, 0),
                    fmt(step["file_b_per_doc"], 0),
                    fmt(step["used_b_per_doc"], 0),
                ]
            ],
        )
    store.close()
    if args.output:
        report.write(args.output)
    if not args.keep:
        for leftover in (path, path + "-lock"):
            if os.path.exists(leftover):
                os.remove(leftover)


if __name__ == "__main__":
    main()
