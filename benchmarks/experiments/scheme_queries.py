"""Single queries and batches of one store per multi-index scheme, side by side: does
the scheme a new store gets (``simstore.index.multi_index.choose``, a model of batch
time and bytes) matter for a single query?

Each scheme named on the command line gets its own store of the same ``--docs``
seeded random fingerprints (``add_many`` and ``compact``, the scheme forced by
standing in for ``multi_index.choose`` while the store is made), reopened read-only.
Then, in ``--rounds`` alternating rounds (the order reversed every round, one
process), each store answers 400 single queries (stored fingerprints with 0 to k
random bits flipped, so each has a match) and one ``query_many`` of 1,000. Reported
per scheme: the median over the rounds of each round's p50 (and its range), the
batch's µs a query, the file's used bytes a document and the build's docs/s.

    python benchmarks/experiments/scheme_queries.py --docs 1M -k 3 \\
        --schemes 32/32:1/1 21/21/22:0/0/1 16/16/16/16:0/0/0/0

Measured on the 2-core Xeon VM (KVM, CPython 3.11.7, numpy 2.4.6, py-lmdb 3.0.0),
2026-11-30, 4 rounds at 1M. At k = 3 (``benchmarks/results/scheme_queries_k3_1M.md``):
32/32 r1/1, 21/21/22 r0/0/1 and 16x4 r0 answered single queries in 45.6 / 44.7 / 46.0 µs
p50, batches in 10.0 / 10.3 / 9.5 µs a query, in 80.6 / 90.7 / 93.5 bytes a document: a
single query's time is the store's and numpy's fixed costs, not its probes, so the
scheme of fewest bytes (``choose``'s) is right. At k = 5
(``scheme_queries_k5_1M.md``, ``--schemes 21/21/22:1/1/1 32/32:2/2 16/16/16/16:0/0/1/1``):
49.5 / 73.9 / 51.1 µs, batches 13.1 / 42.2 / 31.8, bytes 90.7 / 80.6 / 93.5: radius 2
over 32-bit segments (211 probes a table) costs more than the 10 bytes it saves, and
``choose`` keeps 21/21/22 r1.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from _common import Report, load_average, parse_count  # noqa: E402

import simstore  # noqa: E402
from simstore.index import multi_index  # noqa: E402
from simstore.index.multi_index import MultiIndex  # noqa: E402

SINGLE = 400
BATCH = 1000
DEFAULT_SCHEMES = ["32/32:1/1", "21/21/22:0/0/1", "16/16/16/16:0/0/0/0"]


def parse_scheme(text: str) -> MultiIndex:
    """``"21/21/22:1/1/1"``: segment widths, then radii."""
    widths, radii = text.split(":")
    return MultiIndex(tuple(map(int, widths.split("/"))), tuple(map(int, radii.split("/"))))


@contextmanager
def forced(scheme: MultiIndex) -> Iterator[None]:
    """New stores get ``scheme`` whatever k and size they are made for."""
    real = multi_index.choose
    multi_index.choose = lambda k, docs: scheme  # type: ignore[assignment]
    try:
        yield
    finally:
        multi_index.choose = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=parse_count, default=1_000_000)
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--schemes", nargs="+", default=DEFAULT_SCHEMES, help="widths:radii (21/21/22:1/1/1)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    schemes = [parse_scheme(text) for text in args.schemes]
    rng = np.random.default_rng(7)
    fingerprints = rng.integers(0, 2**64 - 1, args.docs, dtype=np.uint64)
    queries = fingerprints[rng.integers(0, args.docs, BATCH)].copy()
    for row in range(len(queries)):
        for bit in rng.choice(64, int(rng.integers(0, args.k + 1)), replace=False).tolist():
            queries[row] ^= np.uint64(1 << bit)
    single = queries[:SINGLE].tolist()
    folder = Path(tempfile.mkdtemp(prefix="scheme-queries-"))
    report = Report()
    report.header("Single queries and batches per multi-index scheme", tempfile.gettempdir())
    report.add(f"Load average before: {load_average()}\n")
    try:
        stores = {}
        for scheme in schemes:
            path = folder / f"{scheme.label().replace('/', '_')}.simstore"
            began = time.perf_counter()
            with forced(scheme), simstore.open(path, "n", k=args.k, sync=False) as store:
                store.add_many(np.arange(args.docs), fingerprints)
                store.compact()
            build = args.docs / (time.perf_counter() - began)
            reader = simstore.open(path, "r")
            assert reader.stats().layout_name.startswith(f"multi-index {list(scheme.widths)}")
            stores[scheme.label()] = (reader, build, reader.stats().bytes_used / args.docs)
        p50s: dict[str, list[float]] = {label: [] for label in stores}
        batches: dict[str, list[float]] = {label: [] for label in stores}
        for number in range(args.rounds):
            order = list(stores) if number % 2 == 0 else list(stores)[::-1]
            for label in order:
                reader = stores[label][0]
                for query in single[:50]:
                    reader.query(query)  # warm
                times = []
                for query in single:
                    began = time.perf_counter()
                    reader.query(query)
                    times.append(time.perf_counter() - began)
                p50s[label].append(float(np.median(times)) * 1e6)
                began = time.perf_counter()
                reader.query_many(queries)
                batches[label].append((time.perf_counter() - began) / BATCH * 1e6)
        report.add(
            f"N = {args.docs:,}, k = {args.k}, {args.rounds} alternating rounds of {SINGLE} single queries "
            f"and a batch of {BATCH}\n"
        )
        report.add("| scheme | single p50 µs (range) | batch µs/query | used bytes/doc | build docs/s |")
        report.add("|---|---|---|---|---|")
        for label, (reader, build, used) in stores.items():
            p50 = p50s[label]
            report.add(
                f"| {label} | {np.median(p50):.1f} ({min(p50):.1f}-{max(p50):.1f}) | "
                f"{np.median(batches[label]):.1f} | {used:.1f} | {build:,.0f} |"
            )
            reader.close()
        report.add(f"\nLoad average after: {load_average()}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.output is not None:
        report.write(args.output)


if __name__ == "__main__":
    main()
