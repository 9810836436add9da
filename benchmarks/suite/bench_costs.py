"""Measure the constants of the layout planner's cost model (simstore/index/costs.py).

Run (from the repository root; about 3 minutes at N = 1M on a 2-core VM)::

    python benchmarks/suite/bench_costs.py --output benchmarks/results/bench_costs_1M.md

For several ``(k, blocks)`` one-level layouts, chosen so that the table count
(4 to 56) and the candidates per query (~0 to ~30,000) vary independently, a
real store is built with ``simstore.open(path, "n", k=k, blocks=blocks,
sync=False)`` and ``add_many`` of N seeded random fingerprints, then reopened
read-only and queried with random fingerprints (single ``store.query`` calls,
``--rounds`` timed rounds after a warm-up; each query's time is its fastest
round, which filters out the other jobs on a shared machine). Each query's
candidate count (entries in its prefix ranges, summed over the tables) is
and its B-tree descents (tables whose occupancy bitmap holds the query's
slot, at the bitmap size the store uses) are computed exactly with numpy from
the same fingerprints. Then three least-squares fits (of relative errors,
each layout weighing the same) give the constants:

- query µs  = PER_QUERY_US + tables * PER_TABLE_US + descents * PER_PROBE_US
  + candidates * PER_CANDIDATE_US (over every query of the layouts whose
  prefixes are not crowded, see ``simstore.index.costs.CROWDED_PREFIX``);
- query µs, crowded = CROWDED_QUERY_US + tables * CROWDED_BUCKET_US
  + candidates * CROWDED_ENTRY_US (over the others: every bucket is read,
  then searched in numpy);
- bulk insert µs/doc = PER_DOC_INSERT_US + tables * PER_KEY_WRITE_US;
- bytes/doc (``stats().bytes_on_disk / N``) = PER_DOC_BYTES + tables * PER_ENTRY_BYTES;

plus numpy brute force (``np.bitwise_count(fps ^ q) <= k``) in ns per
document. The constants are printed as a block to paste into costs.py, with
each layout's measured figures next to the fit's predictions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import Report, load_average, parse_with_quick, percentiles, source_state

import simstore
from simstore.engine import occupancy
from simstore.index import costs
from simstore.index.permute import Table
from simstore.layout.planner import one_level

U64 = npt.NDArray[np.uint64]

SEED = 20_261_122
# (k, blocks): tables and prefix bits at N = 1M give candidates/query of
# 61, 0.2, ~0, ~0, 7, 3.7K, 69, 3.3, 430 and 31K; crowded (4 or more a table):
# (3, 4), (5, 6), (6, 8), (7, 8).
CONFIGS = ((3, 4), (3, 5), (3, 6), (3, 8), (4, 6), (5, 6), (5, 7), (5, 8), (6, 8), (7, 8))
# Fewer queries where each walks many candidates, to bound the run time.
MAX_CANDIDATES_PER_CONFIG = 4_000_000


def make_fingerprints(n: int, seed: int) -> U64:
    """``n`` uniformly random 64-bit fingerprints, reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def candidates_per_query(tables: Sequence[Table], fps: U64, queries: U64) -> npt.NDArray[np.int64]:
    """Entries in each query's prefix ranges, summed over ``tables``, exactly."""
    total = np.zeros(len(queries), dtype=np.int64)
    for table in tables:
        shift = np.uint64(table.suffix_bits)
        prefixes = np.sort(table.permute_array(fps)) >> shift
        wanted = table.permute_array(queries) >> shift
        total += np.searchsorted(prefixes, wanted, side="right") - np.searchsorted(
            prefixes, wanted, side="left"
        )
    return total


def descents_per_query(tables: Sequence[Table], fps: U64, queries: U64) -> npt.NDArray[np.int64]:
    """Tables whose occupancy bitmap (as a store of ``fps`` sizes it) holds
    each query's slot, i.e. the B-tree descents the query makes."""
    total = np.zeros(len(queries), dtype=np.int64)
    for table in tables:
        shift = np.uint64(64 - occupancy.bits_for(len(fps), table.prefix_bits, len(tables)))
        slots = np.sort(table.permute_array(fps) >> shift)
        wanted = table.permute_array(queries) >> shift
        total += np.searchsorted(slots, wanted, side="right") > np.searchsorted(slots, wanted, side="left")
    return total


def bits_label(prefix_bits: Sequence[int]) -> str:
    """``"25-26"``, or ``"16"`` when every table has the same prefix length."""
    low, high = min(prefix_bits), max(prefix_bits)
    return str(low) if low == high else f"{low}-{high}"


def bulk_load(path: str, fps: U64, **open_args: Any) -> dict[str, float]:
    """A new store at ``path`` with ``fps`` under the keys 0..N-1: seconds and size."""
    started = time.perf_counter()
    with simstore.open(path, "n", sync=False, **open_args) as store:
        store.add_many(range(len(fps)), fps)
        loaded = time.perf_counter()
        stats = store.stats()
    closed = time.perf_counter()
    return {
        "add_many s": loaded - started,
        "seconds": closed - started,
        "bytes_on_disk": float(stats.bytes_on_disk),
        "delta_docs": float(stats.delta_docs),
    }


def time_queries(path: str, queries: U64, rounds: int) -> tuple[npt.NDArray[np.float64], list[list[int]]]:
    """Each query's fastest time over ``rounds`` (µs), and its matching keys."""
    query_list = [int(query) for query in queries.tolist()]
    clock = time.perf_counter_ns
    best = np.full(len(query_list), np.inf)
    with simstore.open(path, "r") as store:
        results = [sorted(int(match.key) for match in store.query(fingerprint=q)) for q in query_list]
        for _ in range(rounds):
            for index, query in enumerate(query_list):
                started = clock()
                store.query(fingerprint=query)
                elapsed = (clock() - started) / 1000
                if elapsed < best[index]:
                    best[index] = elapsed
    return best, results


def brute_force_ns_per_doc(fps: U64, queries: U64, k: int) -> float:
    """Median time of one numpy scan, per stored document."""
    times = []
    for query in queries[:200].tolist():
        started = time.perf_counter_ns()
        np.flatnonzero(np.bitwise_count(fps ^ np.uint64(query)) <= k)
        times.append(time.perf_counter_ns() - started)
    return float(np.median(times)) / len(fps)


def fit(
    columns: Sequence[npt.ArrayLike], target: npt.ArrayLike, groups: npt.ArrayLike | None = None
) -> npt.NDArray[np.float64]:
    """Coefficients of ``target ~ 1 + columns`` minimising squared *relative* errors.

    Relative, so that a layout whose queries take 8 ms does not drown the
    ones that take 20 µs; with ``groups`` (a label per row), each group weighs
    the same however many rows it has.
    """
    target_array = np.asarray(target, dtype=np.float64)
    design = np.column_stack(
        [np.ones_like(target_array), *(np.asarray(c, dtype=np.float64) for c in columns)]
    )
    weights = 1.0 / target_array
    if groups is not None:
        _labels, inverse, counts = np.unique(np.asarray(groups), return_inverse=True, return_counts=True)
        weights = weights / np.sqrt(counts[inverse])
    coefficients, *_ = np.linalg.lstsq(design * weights[:, None], target_array * weights, rcond=None)
    return coefficients


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=lambda text: int(float(text)), default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000, help="random queries per layout (at most)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="folder for the store files (default: temp)")
    parser.add_argument("--output", default=None, help="write the markdown report here")
    return parse_with_quick(parser, {"n": 5000, "queries": 50, "rounds": 1}, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work_dir = tempfile.mkdtemp(prefix="bench_costs_", dir=args.dir)
    report = Report()
    root = Path(__file__).resolve().parents[2]
    report.header(
        f"simstore cost-model constants, N = {args.n:,}",
        data_dir=work_dir,
        code=source_state(root, "simstore"),
    )
    try:
        run(args, work_dir, report)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        if args.output:
            report.write(args.output)
            print(f"wrote {args.output}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace, work_dir: str, report: Report) -> None:
    wall = time.perf_counter()
    n = args.n
    fps = make_fingerprints(n, SEED)
    all_queries = make_fingerprints(args.queries, SEED + 1)
    path = os.path.join(work_dir, "costs.simstore")
    rows: list[dict[str, Any]] = []
    query_tables: list[npt.NDArray[np.float64]] = []
    query_candidates: list[npt.NDArray[np.float64]] = []
    query_descents: list[npt.NDArray[np.float64]] = []
    query_times: list[npt.NDArray[np.float64]] = []
    crowded: list[bool] = []
    for k, blocks in CONFIGS:
        layout = one_level(k, blocks)
        candidates = candidates_per_query(layout.tables, fps, all_queries)
        mean_candidates = max(float(candidates.mean()), 1.0)
        count = int(min(len(all_queries), max(100, MAX_CANDIDATES_PER_CONFIG / mean_candidates)))
        queries, candidates = all_queries[:count], candidates[:count]
        descents = descents_per_query(layout.tables, fps, queries)
        load = bulk_load(path, fps, k=k, blocks=blocks)
        times, _ = time_queries(path, queries, args.rounds)
        os.remove(path)
        if os.path.exists(path + "-lock"):
            os.remove(path + "-lock")
        query_tables.append(np.full(count, layout.table_count, dtype=np.float64))
        query_candidates.append(candidates.astype(np.float64))
        query_descents.append(descents.astype(np.float64))
        query_times.append(times)
        crowded.append(float(candidates.mean()) >= layout.table_count * costs.CROWDED_PREFIX)
        p50, p99 = percentiles(times, (50, 99))
        rows.append(
            {
                "layout": f"k={k}, {layout.name}" + (" (crowded)" if crowded[-1] else ""),
                "tables": layout.table_count,
                "prefix bits": bits_label(layout.prefix_bits),
                "queries": count,
                "descents/query (mean)": float(descents.mean()),
                "candidates/query (mean)": float(candidates.mean()),
                "query p50 µs": p50,
                "query p99 µs": p99,
                "insert µs/doc": load["add_many s"] / n * 1e6,
                "bytes/doc": load["bytes_on_disk"] / n,
                "load average": load_average(),
            }
        )
        print(f"  {rows[-1]['layout']}: p50 {p50:.1f} µs, load {load['add_many s']:.1f} s", file=sys.stderr)

    def pick(columns: list[npt.NDArray[np.float64]], wanted: bool) -> npt.NDArray[np.float64]:
        return np.concatenate(
            [column for column, is_crowded in zip(columns, crowded, strict=True) if is_crowded == wanted]
        )

    groups = [np.full(len(times), index, dtype=np.float64) for index, times in enumerate(query_times)]
    per_query, per_table, per_probe, per_candidate = fit(
        [pick(query_tables, False), pick(query_descents, False), pick(query_candidates, False)],
        pick(query_times, False),
        groups=pick(groups, False),
    )
    crowded_query, crowded_bucket, crowded_entry = fit(
        [pick(query_tables, True), pick(query_candidates, True)],
        pick(query_times, True),
        groups=pick(groups, True),
    )
    table_counts = [row["tables"] for row in rows]
    per_doc_insert, per_key_write = fit([table_counts], [row["insert µs/doc"] for row in rows])
    per_doc_bytes, per_entry_bytes = fit([table_counts], [row["bytes/doc"] for row in rows])
    brute_ns = brute_force_ns_per_doc(fps, all_queries, 3)

    report.add(
        f"Random fingerprints, N = {n:,}; random queries (fastest of {args.rounds} rounds per query); "
        f"every store built with `simstore.open(path, 'n', k=k, blocks=blocks, sync=False)` + `add_many`.\n"
    )
    for row, is_crowded in zip(rows, crowded, strict=True):
        row["predicted query µs"] = (
            crowded_query + crowded_bucket * row["tables"] + crowded_entry * row["candidates/query (mean)"]
            if is_crowded
            else per_query
            + per_table * row["tables"]
            + per_probe * row["descents/query (mean)"]
            + per_candidate * row["candidates/query (mean)"]
        )
        row["predicted insert µs/doc"] = per_doc_insert + per_key_write * row["tables"]
        row["predicted bytes/doc"] = per_doc_bytes + per_entry_bytes * row["tables"]
    headers = list(rows[0].keys())
    report.table(headers, [[row[name] for name in headers] for row in rows])
    constants = (
        f"PER_QUERY_US = {per_query:.2f}\n"
        f"PER_TABLE_US = {per_table:.3f}\n"
        f"PER_PROBE_US = {per_probe:.3f}\n"
        f"PER_CANDIDATE_US = {per_candidate:.4f}\n"
        f"CROWDED_QUERY_US = {crowded_query:.2f}\n"
        f"CROWDED_BUCKET_US = {crowded_bucket:.3f}\n"
        f"CROWDED_ENTRY_US = {crowded_entry:.4f}\n"
        f"PER_DOC_INSERT_US = {per_doc_insert:.2f}\n"
        f"PER_KEY_WRITE_US = {per_key_write:.3f}\n"
        f"PER_DOC_BYTES = {per_doc_bytes:.1f}\n"
        f"PER_ENTRY_BYTES = {per_entry_bytes:.2f}\n"
        f"BRUTE_FORCE_NS_PER_DOC = {brute_ns:.3f}\n"
        f"CALIBRATED_DOCS = {n:_}\n"
    )
    report.heading("Fitted constants (paste into simstore/index/costs.py)")
    report.add("```python\n" + constants + "```\n")
    report.add(
        f"Total wall time {time.perf_counter() - wall:.0f} s; load average at the end {load_average()}."
    )


if __name__ == "__main__":
    sys.exit(main())
