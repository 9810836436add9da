"""What the verification sketch costs: bytes per document, build speed and
query latency of a text store with sketches (the default) against the same
store without (``Fingerprinter(sketch=None)``), in one process.

The texts are synthetic (Zipf-distributed words from a 30,000-word vocabulary,
60 to 300 words each; one in four is an edited copy of an earlier one), so
the figures measure cost, not quality; ``bench_quality.py --real`` measures
quality on real text. The two stores are built in alternating rounds and
queried in alternating passes (the machine is shared: an A/B in one process).

Run (2-core x86-64 VM, Python 3.11)::

    python benchmarks/suite/bench_verify.py --docs 200000 --queries 2000 --rounds 3 \\
        --output benchmarks/results/verify_200K.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import AnonPeakSampler, Report, fmt, fmt_range, parse_with_quick, percentiles

import simstore

VOCABULARY = 30_000


def make_texts(count: int, seed: int) -> list[str]:
    """Synthetic documents: Zipf word choices, a quarter edited copies."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{index:05d}" for index in range(VOCABULARY)])
    texts: list[str] = []
    for index in range(count):
        if index >= 8 and rng.random() < 0.25:
            source = texts[int(rng.integers(0, index))].split()
            for _ in range(int(rng.integers(1, 6))):
                source[int(rng.integers(0, len(source)))] = str(words[int(rng.zipf(1.3)) % VOCABULARY])
            texts.append(" ".join(source))
            continue
        length = int(rng.integers(60, 300))
        choice = (rng.zipf(1.3, size=length) - 1) % VOCABULARY
        texts.append(" ".join(words[choice].tolist()))
    return texts


def build(path: str, texts: list[str], fingerprinter: simstore.Fingerprinter, k: int) -> dict[str, float]:
    with AnonPeakSampler() as sampler:
        started = time.perf_counter()
        with simstore.open(path, "n", k=k, fingerprinter=fingerprinter, sync=False) as store:
            store.add_many(range(len(texts)), texts=texts)
            store.merge()
            stats = store.stats()
        seconds = time.perf_counter() - started
    return {
        "docs_per_s": len(texts) / seconds,
        "file_per_doc": stats.bytes_on_disk / len(texts),
        "used_per_doc": stats.bytes_used / len(texts),
        "peak_anon_mib": sampler.peak_mib,
    }


def time_queries(store: simstore.Store, queries: list[str], threshold: float | None) -> list[float]:
    latencies = []
    for text in queries:
        started = time.perf_counter()
        store.query(text=text, min_similarity=threshold)
        latencies.append((time.perf_counter() - started) * 1e6)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", default=None)
    args = parse_with_quick(parser, {"docs": 1000, "queries": 50, "rounds": 1})
    warnings.simplefilter("ignore", simstore.ShortTextWarning)
    report = Report()
    scratch = tempfile.mkdtemp(prefix="bench-verify-", dir=args.data_dir)
    report.header(f"Verification sketch cost: {args.docs:,} synthetic texts, k={args.k}", scratch)
    texts = make_texts(args.docs, seed=1)
    megabytes = sum(map(len, texts)) / 1e6
    report.add(f"{args.docs:,} texts, {megabytes:.1f} MB; {args.queries:,} queries (stored texts)\n")
    systems = {
        "no sketch": simstore.Fingerprinter(sketch=None),
        "sketch 256x4 (default)": simstore.Fingerprinter(),
    }
    paths = {name: os.path.join(scratch, f"{index}.simstore") for index, name in enumerate(systems)}
    builds: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    try:
        for _ in range(args.rounds):
            for name, fingerprinter in systems.items():
                builds[name].append(build(paths[name], texts, fingerprinter, args.k))
        rows = []
        for name, results in builds.items():
            rates = [result["docs_per_s"] / 1e3 for result in results]
            last = results[-1]
            rows.append(
                [
                    name,
                    fmt_range(rates),
                    fmt(last["file_per_doc"]),
                    fmt(last["used_per_doc"]),
                    fmt(max(result["peak_anon_mib"] for result in results)),
                ]
            )
        report.heading("Build: add_many(texts=) then merge", 2)
        report.table(
            ["store", "K docs/s median (min-max)", "file B/doc", "used B/doc", "peak anon MiB"], rows
        )
        rng = np.random.default_rng(2)
        queries = [texts[int(index)] for index in rng.integers(0, len(texts), args.queries)]
        cases = [("no sketch", None), ("sketch 256x4 (default)", None), ("sketch 256x4 (default)", 0.8)]
        latencies: dict[tuple[str, float | None], list[float]] = {case: [] for case in cases}
        stores = {name: simstore.open(path, "r") for name, path in paths.items()}
        try:
            for _ in range(args.rounds):
                for case in cases:
                    latencies[case].extend(time_queries(stores[case[0]], queries, case[1]))
        finally:
            for store in stores.values():
                store.close()
        rows = []
        for (name, threshold), samples in latencies.items():
            p50, p99 = percentiles(samples, (50, 99))
            rows.append([name, "-" if threshold is None else threshold, fmt(p50), fmt(p99)])
        report.heading("query(text=...) latency, µs (fingerprinting the text included)", 2)
        report.table(["store", "min_similarity", "p50", "p99"], rows)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.output:
        report.write(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
