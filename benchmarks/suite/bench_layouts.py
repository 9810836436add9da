"""Table layouts measured against the planner's predictions.

Run (from the repository root; about 15 minutes and up to ~20 GB of
temporary disk at N = 1M on a 2-core VM, the k = 8 group being most of it)::

    python benchmarks/suite/bench_layouts.py --n 1e6 --output benchmarks/results/bench_layouts_1M.md
    python benchmarks/suite/bench_layouts.py --n 1e7 --k 3 --output benchmarks/results/bench_layouts_10M.md

Layouts, in groups by k:

- k = 3: every layout of the planner's families with at most 56 tables
  (``simstore.layout.planner.candidate_layouts(3, max_tables=56)``, dominated ones
  included);
- k = 6 and k = 8: the planner's best ``--top`` layouts
  (``simstore.plan(k, N)[:top]``).

Data: N fingerprints, of which 99% are seeded uniformly random and 1% are
planted neighbours (copies of random earlier fingerprints with 1..k bits
flipped). Queries: half random fingerprints, half stored fingerprints with
0..k bits flipped.

For each layout a store is built with ``simstore.open(path, "n", layout=layout,
sync=False)`` and one ``add_many`` (timed: add throughput; ``stats()``:
bytes per document). Then, so that the other jobs on a shared machine hit
every layout alike, all the group's stores are opened read-only once and
``--rounds`` rounds each time single ``store.query`` calls on every store in
turn, after an untimed warm-up round: p50 and p99 are over all rounds.
Each query's candidate count (entries in its prefix ranges) is computed
exactly with numpy; the first ``--verify`` queries' results must
equal numpy brute force (the run fails otherwise). Every measured figure
stands next to the planner's prediction (:meth:`Layout.with_estimates`), and
each group ends with the layout the planner picks (``best_layout(k, N)``,
measured too even if not in the group) against the measured best p50.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import Report, load_average, parse_with_quick, percentiles, source_state
from bench_costs import bits_label, bulk_load, candidates_per_query, make_fingerprints

import simstore
from simstore.index import costs
from simstore.layout.planner import Layout, best_layout, candidate_layouts, plan

U64 = npt.NDArray[np.uint64]

SEED = 20_261_123
PLANTED_SHARE = 0.01
PICK_TOLERANCE = 1.25


def flip_bits(values: U64, max_flips: int, rng: np.random.Generator, min_flips: int = 0) -> U64:
    """Each value with ``min_flips..max_flips`` distinct random bits flipped."""
    flipped = values.copy()
    for index in range(len(flipped)):
        count = int(rng.integers(min_flips, max_flips + 1))
        for bit in rng.choice(64, size=count, replace=False).tolist():
            flipped[index] ^= np.uint64(1 << bit)
    return flipped


def make_corpus(n: int, k: int) -> U64:
    """99% random fingerprints, then 1% near copies (1..k bits) of random earlier ones."""
    planted = int(n * PLANTED_SHARE)
    base = make_fingerprints(n - planted, SEED)
    rng = np.random.default_rng(SEED + k)
    copies = flip_bits(base[rng.integers(0, len(base), size=planted)], k, rng, min_flips=1)
    return np.concatenate([base, copies])


def make_queries(fps: U64, count: int, k: int) -> U64:
    """Half random fingerprints, half stored ones with 0..k bits flipped, shuffled."""
    rng = np.random.default_rng(SEED + 100 + k)
    near = flip_bits(fps[rng.integers(0, len(fps), size=count // 2)], k, rng)
    queries = np.concatenate([make_fingerprints(count - count // 2, SEED + 200 + k), near])
    rng.shuffle(queries)
    return queries


def brute(fps: U64, query: int, k: int) -> list[int]:
    return np.flatnonzero(np.bitwise_count(fps ^ np.uint64(query)) <= k).tolist()


def remove_store(path: str) -> None:
    for leftover in (path, path + "-lock"):
        if os.path.exists(leftover):
            os.remove(leftover)


def time_stores(
    paths: list[str],
    results: list[dict[str, Any]],
    query_list: list[int],
    expected: list[list[int]],
    rounds: int,
) -> None:
    """Verify and time every store, the rounds interleaved across them."""
    # Every store stays open across the rounds, as in a long-running
    # service: reopening would map the file afresh and make each round pay
    # a page fault on the first touch of every page again.
    stores = [simstore.open(path, "r") for path in paths]
    try:
        clock = time.perf_counter_ns
        for round_index in range(rounds + 1):  # round 0 warms up and verifies
            for store, result in zip(stores, results, strict=True):
                if round_index == 0:
                    got = [
                        sorted(int(match.key) for match in store.query(fingerprint=query))
                        for query in query_list[: len(expected)]
                    ]
                    result["exact"] = got == expected
                    for query in query_list:
                        store.query(fingerprint=query)
                    continue
                samples = result["samples"]
                for query in query_list:
                    started = clock()
                    store.query(fingerprint=query)
                    samples.append((clock() - started) / 1000)
    finally:
        for store in stores:
            store.close()


def measure_group(
    k: int, layouts: list[Layout], n: int, args: argparse.Namespace, work_dir: str
) -> list[dict[str, Any]]:
    """Build, time and verify every layout of one group; returns one row per layout."""
    fps = make_corpus(n, k)
    queries = make_queries(fps, args.queries, k)
    query_list = [int(query) for query in queries.tolist()]
    random_mask = np.isin(queries, make_fingerprints(args.queries - args.queries // 2, SEED + 200 + k))
    expected = [brute(fps, query, k) for query in query_list[: args.verify]]
    results: list[dict[str, Any]] = []
    paths: list[str] = []
    try:
        for index, layout in enumerate(layouts):
            path = os.path.join(work_dir, f"k{k}_{index}.simstore")
            paths.append(path)
            load = bulk_load(path, fps, layout=layout)
            candidates = candidates_per_query(layout.tables, fps, queries)
            results.append(
                {
                    "layout": layout,
                    "load": load,
                    "candidates random": float(candidates[random_mask].mean()),
                    "candidates all": float(candidates.mean()),
                    "samples": [],
                    "exact": None,
                    "load average": load_average(),
                }
            )
            print(
                f"  k={k} {layout.name}: built in {load['add_many s']:.1f} s, "
                f"{load['bytes_on_disk'] / n:.0f} B/doc",
                file=sys.stderr,
            )
            if args.one_at_a_time:
                # Measured and deleted before the next is built: the group's
                # stores need not fit on the disk (or in RAM) together.
                time_stores([path], results[-1:], query_list, expected, args.rounds)
                remove_store(path)
        if not args.one_at_a_time:
            time_stores(paths, results, query_list, expected, args.rounds)
    finally:
        for path in paths:
            remove_store(path)
    rows = []
    for result in results:
        layout: Layout = result["layout"]
        predicted = layout.with_estimates(n)
        p50, p99 = percentiles(result["samples"], (50, 99))
        add_s = result["load"]["add_many s"]
        rows.append(
            {
                "layout": layout.name,
                "tables": layout.table_count,
                "prefix bits": bits_label(layout.prefix_bits),
                "cand. predicted": predicted.expected_candidates,
                "cand. measured (random q.)": result["candidates random"],
                "query µs predicted": predicted.query_us,
                "query p50 µs": p50,
                "query p99 µs": p99,
                "add docs/s": n / add_s,
                "insert µs/doc predicted": predicted.insert_us,
                "insert µs/doc measured": add_s / n * 1e6,
                "bytes/doc predicted": predicted.bytes_per_doc,
                "bytes/doc measured": result["load"]["bytes_on_disk"] / n,
                "exact": result["exact"],
                "load avg (built)": result["load average"],
            }
        )
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=lambda text: int(float(text)), default=1_000_000)
    parser.add_argument("--k", type=int, nargs="+", default=[3, 6, 8], help="groups to run (3, 6, 8)")
    parser.add_argument("--k3-max-tables", type=int, default=56)
    parser.add_argument("--top", type=int, default=3, help="planner's best layouts measured for k = 6, 8")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verify", type=int, default=200, help="queries checked against brute force")
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="build, time and delete each layout's store before the next (for groups too big for the disk "
        "together; rounds are then not interleaved across layouts)",
    )
    parser.add_argument("--dir", default=None, help="folder for the store files (default: temp)")
    parser.add_argument("--output", default=None, help="write the markdown report here")
    return parse_with_quick(
        parser, {"n": 5000, "k": [3], "top": 1, "queries": 50, "rounds": 1, "verify": 10}, argv
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work_dir = tempfile.mkdtemp(prefix="bench_layouts_", dir=args.dir)
    report = Report()
    root = Path(__file__).resolve().parents[2]
    report.header(
        f"simstore table layouts, N = {args.n:,}", data_dir=work_dir, code=source_state(root, "simstore")
    )
    try:
        return run(args, work_dir, report)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        if args.output:
            report.write(args.output)
            print(f"wrote {args.output}", file=sys.stderr)


def run(args: argparse.Namespace, work_dir: str, report: Report) -> int:
    wall = time.perf_counter()
    n = args.n
    timing = (
        "each layout on its own (--one-at-a-time)"
        if args.one_at_a_time
        else "interleaved across each group's layouts"
    )
    report.add(
        f"N = {n:,} fingerprints ({1 - PLANTED_SHARE:.0%} random, {PLANTED_SHARE:.0%} planted near copies "
        f"at 1..k bits); {args.queries:,} queries (half random, half stored fingerprints with 0..k bits "
        f"flipped); {args.rounds} timed rounds, {timing}; predictions from "
        f"simstore/index/costs.py (PER_QUERY_US={costs.PER_QUERY_US}, PER_TABLE_US={costs.PER_TABLE_US}, "
        f"PER_PROBE_US={costs.PER_PROBE_US}, "
        f"PER_CANDIDATE_US={costs.PER_CANDIDATE_US}, PER_KEY_WRITE_US={costs.PER_KEY_WRITE_US}). "
        "Predicted candidates are for random queries; a planted query also walks its neighbours.\n"
    )
    all_ok = True
    summary_rows = []
    for k in args.k:
        if k == 3:
            layouts = candidate_layouts(3, max_tables=args.k3_max_tables)
            title = f"k = 3: every layout with at most {args.k3_max_tables} tables"
        else:
            layouts = plan(k, n)[: args.top]
            title = f"k = {k}: the planner's best {len(layouts)}"
        pick = best_layout(k, n)
        if all(layout.tables != pick.tables for layout in layouts):
            layouts.append(pick)
        ranked = {layout.name: rank for rank, layout in enumerate(plan(k, n), 1)}
        rows = measure_group(k, layouts, n, args, work_dir)
        for row in rows:
            row["planner rank"] = ranked.get(row["layout"], "dominated")
        report.heading(title)
        headers = list(rows[0].keys())
        report.table(headers, [[row[name] for name in headers] for row in rows])
        best = min(rows, key=lambda row: row["query p50 µs"])
        picked = next(row for row in rows if row["layout"] == pick.name)
        ratio = picked["query p50 µs"] / best["query p50 µs"]
        within = ratio <= PICK_TOLERANCE
        exact = all(row["exact"] for row in rows)
        all_ok = all_ok and exact
        summary_rows.append(
            [
                k,
                pick.name,
                picked["query p50 µs"],
                best["layout"],
                best["query p50 µs"],
                f"{ratio:.2f}",
                "yes" if within else "NO",
                exact,
            ]
        )
        report.add(
            f"Planner's pick: {pick.name} (p50 {picked['query p50 µs']:.1f} µs); measured best: "
            f"{best['layout']} (p50 {best['query p50 µs']:.1f} µs); ratio {ratio:.2f}. "
            f"Load average now {load_average()}.\n"
        )
    report.heading("Planner's pick against the measured best")
    report.table(
        [
            "k",
            "planner's pick",
            "pick p50 µs",
            "measured best",
            "best p50 µs",
            "ratio",
            f"within {PICK_TOLERANCE - 1:.0%}",
            "exact",
        ],
        summary_rows,
    )
    report.add(
        f"Total wall time {time.perf_counter() - wall:.0f} s; load average at the end {load_average()}. "
        f"All results exact: {all_ok}."
    )
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
