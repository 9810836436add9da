"""What the default k costs: a store of N random fingerprints at k = 3 (the
default before issue 20), k = 5 (the default since: Manku's 7 blocks, 21
tables) and k = 5 laid out by the planner for N (``expected_docs=N``).

Each layout is built (``add_many`` then ``merge``) and queried in alternating
rounds in one process (the machine is shared). Queries are stored
fingerprints with 2 bits flipped. Reported: build docs/s, bytes per document
(file and used pages), query p50/p99 over the rounds' passes.

Run (2-core x86-64 VM, Python 3.11)::

    python benchmarks/experiments/bench_default_k.py --docs 1000000 --rounds 2 \\
        --output benchmarks/results/default_k_1M.md
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

from _common import Report, fmt, fmt_range, percentiles

import simstore

LAYOUTS: dict[str, dict[str, object]] = {
    "k=3 (old default)": {"k": 3},
    "k=5 (default)": {"k": 5},
    "k=5, expected_docs=N": {"k": 5, "expected": True},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    report = Report()
    scratch = tempfile.mkdtemp(prefix="bench-default-k-", dir=args.data_dir)
    report.header(f"The default k: {args.docs:,} random fingerprints", scratch)
    rng = np.random.default_rng(0)
    fingerprints = rng.integers(0, 2**64, args.docs, dtype=np.uint64)
    flips = np.uint64(0b101) << rng.integers(0, 62, args.queries).astype(np.uint64)
    queries = (fingerprints[rng.integers(0, args.docs, args.queries)] ^ flips).tolist()
    rates: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    latencies: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    shape: dict[str, tuple[int, str, float, float]] = {}
    try:
        for _ in range(args.rounds):
            for index, (name, spec) in enumerate(LAYOUTS.items()):
                path = os.path.join(scratch, f"{index}.simstore")
                expected = args.docs if spec.get("expected") else None
                started = time.perf_counter()
                with simstore.open(path, "n", k=spec["k"], expected_docs=expected, sync=False) as store:
                    store.add_many(range(args.docs), fingerprints)
                    store.merge()
                    rates[name].append(args.docs / (time.perf_counter() - started))
                    stats = store.stats()
                    shape[name] = (
                        stats.tables,
                        stats.layout_name,
                        stats.bytes_on_disk / args.docs,
                        stats.bytes_used / args.docs,
                    )
                    for query in queries[:200]:  # warm the pages
                        store.query(query)
                    for query in queries:
                        begun = time.perf_counter()
                        store.query(query)
                        latencies[name].append((time.perf_counter() - begun) * 1e6)
                os.remove(path)
        rows = []
        for name in LAYOUTS:
            tables, layout, file_bytes, used_bytes = shape[name]
            p50, p99 = percentiles(latencies[name], (50, 99))
            rows.append(
                [
                    name,
                    f"{tables} ({layout})",
                    fmt(file_bytes),
                    fmt(used_bytes),
                    f"{fmt_range([rate / 1e3 for rate in rates[name]])}K",
                    fmt(p50),
                    fmt(p99),
                ]
            )
        report.table(
            ["layout", "tables", "file B/doc", "used B/doc", "build docs/s", "query p50 µs", "p99 µs"], rows
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.output:
        report.write(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
