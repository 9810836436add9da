"""Multi-index hashing in memory (``simstore.index.column_search``) beside faiss
``IndexBinaryMultiHash`` and numpy brute force, in one process, in alternating
rounds; then a calibration of the cost model of ``simstore.index.multi_index``
(``TABLE_US``, ``PROBE_US``, ``CANDIDATE_US``). Dated experiment, issue 35
(2026-11-28; the date is in each report's header).

Run (2-core x86-64 VM shared with others, AMD EPYC, 23.5 GiB, Python 3.11.7, numpy 2.4.6,
faiss-cpu 1.15.1 on 1 thread), against a snapshot of a commit's ``simstore`` (the tree was
being edited while it ran; the report's header names the digest of what was imported)::

    git archive b46a6ce simstore | tar -x -C /tmp/bmi/head
    export PYTHONPATH=/tmp/bmi/head
    nice -n 5 .venv-dev/bin/python benchmarks/experiments/bench_multi_index.py --quick
    nice -n 5 .venv-dev/bin/python benchmarks/experiments/bench_multi_index.py --sizes 1M --rounds 5 \\
        --output benchmarks/results/multi_index_1M.md
    nice -n 5 .venv-dev/bin/python benchmarks/experiments/bench_multi_index.py --sizes 10M --rounds 3 \\
        --calibrate 10M --output benchmarks/results/multi_index_10M.md

Per size N (uniform random uint64 fingerprints, seeded; ids ``uint32``) and per k in
``--ks`` (3, 5, 8), the queries are ``--queries`` stored fingerprints, each with 0 to k
distinct random bits flipped (so every query has a match):

- column_search: ``choose(k, N)``'s scheme and the next cheapest of ``exact_schemes(k)``
  by the same modelled cost (at most ``--schemes`` in all), each built with
  ``build_run`` (seconds, documents a second; a run is shared by schemes of the same
  widths) and its bytes a document (the run's arrays / N: 8 bytes a table and the id);
- faiss ``IndexBinaryMultiHash(64, nhash, b)`` with ``nflip``: the exact
  configurations (``nhash * (nflip + 1) > k``, ``nhash * b <= 64``: 3x21 covers 63 bits
  and is still exact, a distance on 63 bits being at most the distance on 64) of
  FAISS_CONFIGS (in ``benchmarks/suite/_query_peers.py``, with the numpy scan and the
  rounds, which the suite's ``bench_query_engine.py`` shares), as the prototype
  (``/work/proto/bench_mih.py``) set them up; each is
  built (``add`` seconds, the growth of the anonymous RSS / N as its bytes a document)
  and timed alone on a batch of the first queries; the fastest two (within 3x of the
  fastest) go into the rounds. At N >= 5M only FAISS_SHORTLIST (the prototype's
  shortlist: the others were 8-30x slower at 1M). ``range_search`` keeps distances
  strictly below its radius, so the radius is ``k + 1`` (checked: its answers equal
  brute force on the first queries);
- numpy brute force (``np.bitwise_count(fps ^ q) <= k``), single queries only;
- exactness: every column_search scheme's batch answer on the first 50 queries equals
  brute force (asserted; the run stops otherwise), faiss's is reported.

Then ``--rounds`` rounds: the ``--single`` first queries one call each, in blocks of 50,
every system answering each block in turn (order rotated by block and round), the brute
force's ``--brute`` queries after them; then each system answers all queries in one call
(order rotated). Reported: single-query p50/p99 µs and batch µs a query as median (min-max)
over the rounds, and per round the ratio of our fastest scheme to faiss's fastest.

Calibration (at the ``--calibrate`` size when it is among ``--sizes``): every scheme of
``exact_schemes(k)`` for k = 2..10 with at most ``--max-probes`` probes, batch µs a query
(a scheme with many candidates answers fewer queries a call, so that a call
holds at most ~10M candidates; ``--calibration-passes`` alternating passes over all the
schemes, each scheme's min), fitted by non-negative least squares to
``TABLE_US * tables + PROBE_US * probes + CANDIDATE_US * N * candidate_rate()``, on the
µs themselves (dominated by the slowest schemes) and on µs / measured (relative error); the
model's relative error per scheme, and per k whether ``choose(k, N)`` (with the
constants in the source and with the fitted ones) picks the scheme with the lowest
measured µs + ``US_PER_BYTE * 8 * tables``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite"))  # benchmarks/suite/: _query_peers

from _common import Report, fmt, fmt_range, have, parse_count, parse_with_quick, skip_peer, source_state
from _query_peers import (
    System,
    Trial,
    brute,
    brute_force_system,
    faiss_build,
    faiss_codes,
    faiss_configs,
    faiss_label,
    faiss_system,
    faiss_trial_us,
    keep_fastest,
    make_fingerprints,
    make_queries,
    run_rounds,
    trim,
    warm_up,
)

import simstore
from simstore.index import multi_index
from simstore.index.column_search import ColumnRun, Snapshot, build_run
from simstore.index.multi_index import MultiIndex, exact_schemes

ROOT = (
    Path(simstore.__file__).resolve().parents[1]
)  # the simstore imported (a snapshot on PYTHONPATH, or the tree)

EXACT_QUERIES = 50
MAX_CANDIDATES_PER_CALL = 10_000_000


# --------------------------------------------------------------------- memory


def run_bytes(run: ColumnRun) -> int:
    return run.fingerprints.nbytes + run.ids.nbytes + sum(column.nbytes for column in run.rotated)


# --------------------------------------------------------------------- systems


def ours(
    scheme: MultiIndex, snapshot: Snapshot, queries: np.ndarray, k: int, singles: int, label: str = ""
) -> System:
    rows = [queries[position : position + 1] for position in range(singles)]
    return System(
        label=label or f"column_search {scheme.label()}",
        single=lambda position: snapshot.search(rows[position], k),
        batch=lambda: snapshot.search(queries, k),
        single_count=singles,
        kind="ours",
    )


def in_lmdb(
    scheme: MultiIndex, stored: np.ndarray, ids: np.ndarray, folder: str
) -> tuple[Any, Any, float, float]:
    """The run written by the engine (format 3's tables) into an LMDB file in
    ``folder``; its open read transaction (buffers) and the snapshot that views
    the map in place; build seconds and the file's bytes a document."""
    import lmdb

    from simstore.engine.column_index import ColumnCatalog, ColumnIndex

    env = lmdb.open(folder, max_dbs=8, map_size=1 << 36, sync=False, metasync=False, readahead=False)
    index = ColumnIndex(scheme, [env.open_db(f"t{table}".encode()) for table in range(scheme.tables)])
    started = time.perf_counter()
    with env.begin(write=True) as txn:
        catalog = index.write_run(txn, ColumnCatalog(), stored, ids, removals=0)
    env.sync(True)
    seconds = time.perf_counter() - started
    file_bytes = os.path.getsize(os.path.join(folder, "data.mdb"))
    txn = env.begin(buffers=True)
    snapshot = index.snapshot(txn, catalog)
    return (env, txn), snapshot, seconds, file_bytes / len(stored)


def pairs_of(queries: np.ndarray, ids: np.ndarray, limit: int) -> set[tuple[int, int]]:
    keep = queries < limit
    return set(zip(queries[keep].tolist(), ids[keep].tolist(), strict=True))


# --------------------------------------------------------------------- part 1


def modelled_cost(scheme: MultiIndex, docs: float) -> float:
    return multi_index.query_us(scheme, docs) + multi_index.US_PER_BYTE * multi_index.bytes_per_doc(scheme)


def compare(report: Report, args: argparse.Namespace, size: int, stored: np.ndarray, k: int) -> None:

    report.heading(f"N = {size:,}, k = {k}", 3)
    report.add(f"Load before: {load()}  ")
    queries = make_queries(stored, args.queries, k, args.seed)
    singles = min(args.single, len(queries))
    brute_count = min(args.brute, len(queries))
    exact_count = min(EXACT_QUERIES, len(queries))
    truth = set()
    for position in range(exact_count):
        truth |= {(position, int(doc)) for doc in brute(stored, queries[position], k)}
    # -------- column_search schemes
    chosen = multi_index.choose(k, size)
    ranked = sorted(exact_schemes(k), key=lambda scheme: (modelled_cost(scheme, size), scheme.tables))
    schemes = [chosen, *[scheme for scheme in ranked if scheme != chosen][: args.schemes - 1]]
    ids = np.arange(size, dtype=np.uint32)
    runs: dict[tuple[int, ...], ColumnRun] = {}
    build_rows = []
    systems: list[System] = []
    for scheme in schemes:
        if scheme.widths not in runs:
            trim()
            started = time.perf_counter()
            runs[scheme.widths] = build_run(scheme, stored, ids)
            seconds = time.perf_counter() - started
            build_rows.append(
                [
                    "column_search " + "/".join(map(str, scheme.widths)),
                    seconds,
                    size / seconds,
                    run_bytes(runs[scheme.widths]) / size,
                ]
            )
        run = runs[scheme.widths]
        snapshot = Snapshot.of(scheme, [run])
        system = ours(scheme, snapshot, queries, k, singles)
        system.bytes_per_doc = snapshot.words.nbytes / size
        system.notes = (
            f"{scheme.probes} probes, {size * scheme.candidate_rate():,.0f} modelled candidates/q, "
            f"model {multi_index.query_us(scheme, size):.1f} µs/q"
            + (", **choose()**" if scheme == chosen else "")
        )
        matches = snapshot.search(queries[:exact_count], k)
        found = pairs_of(matches.queries, matches.ids, exact_count)
        assert found == truth, f"{scheme.label()}: {len(found ^ truth)} pairs differ from brute force"
        systems.append(system)
    # -------- the chosen scheme as the engine stores it: an LMDB file, viewed in place
    lmdb_folder = tempfile.TemporaryDirectory(prefix="bench_multi_index_")
    handles, lmdb_snapshot, seconds, file_per_doc = in_lmdb(chosen, stored, ids, lmdb_folder.name)
    build_rows.append(
        ["engine.column_index " + chosen.label() + " (LMDB)", seconds, size / seconds, file_per_doc]
    )
    system = ours(
        chosen, lmdb_snapshot, queries, k, singles, f"column_search {chosen.label()} in LMDB, in place"
    )
    system.bytes_per_doc = file_per_doc
    system.notes = "file bytes/doc; read transaction held open"
    matches = lmdb_snapshot.search(queries[:exact_count], k)
    assert pairs_of(matches.queries, matches.ids, exact_count) == truth, (
        "LMDB snapshot differs from brute force"
    )
    systems.append(system)
    # -------- faiss
    codes = faiss_codes(queries[: min(100, len(queries))])
    trials = []
    kept: list[Trial] = []
    faiss_exact = []
    for config in faiss_configs(k, size, args.faiss_all):
        # No peak sampler beside the add: the committed figures were taken without one.
        index, seconds, per_doc, _, _ = faiss_build(stored, config, sample_peak=False)
        label = faiss_label(config)
        trial_us = faiss_trial_us(index, codes, k)
        lims, _, labels = index.range_search(faiss_codes(queries[:exact_count]), k + 1)
        owners = np.repeat(np.arange(exact_count), np.diff(lims.astype(np.int64)))
        exact = pairs_of(owners, labels, exact_count) == truth
        faiss_exact.append(f"{label}: {'yes' if exact else '**no**'}")
        trials.append(
            f"{label}: add {seconds:.1f} s ({size / seconds / 1e6:.2f}M docs/s), "
            f"{per_doc:.0f} B/doc RAM, batch of {len(codes)} {trial_us:.1f} µs/q"
        )
        build_rows.append([label, seconds, size / seconds, per_doc])
        kept.append((trial_us, index, label, per_doc))
        kept = keep_fastest(kept)
        del index
        trim()
    report.add("faiss alone, each configuration: " + "; ".join(trials) + "  ")
    for _, index, label, per_doc in kept:
        systems.append(
            faiss_system(index, label, queries, k, singles, bytes_per_doc=per_doc, notes="RAM growth at add")
        )
    # -------- brute force
    if brute_count:
        systems.append(
            brute_force_system(stored, queries, k, brute_count, notes=f"{brute_count} queries a round")
        )
    report.add(
        f"exact: yes (every column_search scheme equals brute force on the first {exact_count} "
        f"queries, {len(truth)} pairs); faiss: {', '.join(faiss_exact)}  "
    )
    warm_up(systems)
    report.add(
        f"Rounds: {args.rounds}, {singles} single queries (brute force {brute_count}) and a batch "
        f"of {len(queries)} per round; load before {load()}  "
    )
    # No gc.collect() before each batch here: the committed figures were timed without one.
    run_rounds(systems, args.rounds, len(queries), collect_before_batch=False)
    handles[1].abort()  # the snapshot's views die with the transaction: no search after this
    handles[0].close()
    lmdb_folder.cleanup()
    report.add(f"Load after: {load()}\n")
    report.table(
        ["system", "batch µs/q", "single p50 µs", "single p99 µs", "bytes/doc", "notes"],
        [
            [
                s.label,
                fmt_range(s.batch_us) if s.batch_us else "-",
                fmt_range(s.p50),
                fmt_range(s.p99),
                s.bytes_per_doc,
                s.notes,
            ]
            for s in systems
        ],
    )
    report.table(["build", "seconds", "docs/s", "bytes/doc"], build_rows)
    mine = [s for s in systems if s.kind == "ours"]
    theirs = [s for s in systems if s.kind == "faiss"]
    best_batch = min(mine, key=lambda s: float(np.median(s.batch_us)))
    best_single = min(mine, key=lambda s: float(np.median(s.p50)))
    if theirs:
        faiss_batch = min(theirs, key=lambda s: float(np.median(s.batch_us)))
        faiss_single = min(theirs, key=lambda s: float(np.median(s.p50)))
        ratio_batch = [a / b for a, b in zip(best_batch.batch_us, faiss_batch.batch_us, strict=True)]
        ratio_single = [a / b for a, b in zip(best_single.p50, faiss_single.p50, strict=True)]
        report.add(
            f"Ratios per round, median (min-max): batch `{best_batch.label}` / `{faiss_batch.label}` "
            f"{fmt_range(ratio_batch)}x; single p50 `{best_single.label}` / `{faiss_single.label}` "
            f"{fmt_range(ratio_single)}x\n"
        )
    brute_rows = [s for s in systems if s.kind == "brute"]
    SUMMARY.append(
        [
            f"{size:,}",
            k,
            f"{best_batch.label.removeprefix('column_search ')}",
            fmt(float(np.median(best_batch.batch_us))),
            f"{fmt(float(np.median(best_single.p50)))} ({best_single.label.removeprefix('column_search ')})",
            fmt(best_batch.bytes_per_doc),
            f"{faiss_batch.label.removeprefix('faiss MultiHash ')}" if theirs else "-",
            fmt(float(np.median(faiss_batch.batch_us))) if theirs else "-",
            f"{fmt(float(np.median(faiss_single.p50)))} "
            f"({faiss_single.label.removeprefix('faiss MultiHash ')})"
            if theirs
            else "-",
            fmt(faiss_batch.bytes_per_doc) if theirs else "-",
            fmt_range(ratio_batch) if theirs else "-",
            fmt_range(ratio_single) if theirs else "-",
            fmt(float(np.median(brute_rows[0].p50))) if brute_rows else "-",
        ]
    )
    del systems, kept, runs
    trim()


SUMMARY: list[list[Any]] = []


# --------------------------------------------------------------------- calibration


def calls_for(scheme: MultiIndex, size: int, queries: int) -> int:
    """Queries a timed call answers: all of them, or fewer so that a call holds
    at most ~MAX_CANDIDATES_PER_CALL candidates (memory)."""
    expected = max(1.0, size * scheme.candidate_rate())
    return int(min(queries, max(20, MAX_CANDIDATES_PER_CALL // expected)))


def fit(features: np.ndarray, measured: np.ndarray, weights: np.ndarray) -> np.ndarray:
    a = features * weights[:, None]
    b = measured * weights
    if have("scipy"):
        from scipy.optimize import nnls

        return nnls(a, b)[0]
    return np.clip(np.linalg.lstsq(a, b, rcond=None)[0], 0, None)


def calibrate(report: Report, args: argparse.Namespace, size: int, stored: np.ndarray) -> None:
    report.heading(f"Calibration at N = {size:,}", 2)
    report.add(f"Load before: {load()}  ")
    ids = np.arange(size, dtype=np.uint32)
    runs: dict[tuple[int, ...], ColumnRun] = {}
    rows: list[tuple[int, MultiIndex, float, int]] = []
    plan: list[tuple[int, Snapshot, np.ndarray]] = []
    placed: dict[tuple[int, ...], Snapshot] = {}
    started = time.perf_counter()
    for k in range(2, 11):
        queries = make_queries(stored, args.queries, k, args.seed)
        for scheme in exact_schemes(k):
            if scheme.probes > args.max_probes:
                continue
            if scheme.widths not in runs:
                runs[scheme.widths] = build_run(scheme, stored, ids)
                placed[scheme.widths] = Snapshot.of(scheme, [runs[scheme.widths]])
            # One buffer per widths: the radii change only the probes.
            base = placed[scheme.widths]
            snapshot = Snapshot(scheme, base.words, base.runs)
            part = queries[: calls_for(scheme, size, len(queries))]
            snapshot.search(part[:10], k)  # warm-up
            plan.append((k, snapshot, part))
    built = time.perf_counter() - started
    # Passes over every scheme, alternating (forwards, then backwards, ...), each
    # scheme's figure the min over the passes: a burst of load spoils one pass.
    samples: list[list[float]] = [[] for _ in plan]
    for number in range(args.calibration_passes):
        order = list(range(len(plan)))
        if number % 2:
            order.reverse()
        for position in order:
            k, snapshot, part = plan[position]
            begun = time.perf_counter_ns()
            snapshot.search(part, k)
            samples[position].append((time.perf_counter_ns() - begun) / 1000 / len(part))
    rows = [
        (k, snapshot.scheme, min(taken), len(part))
        for (k, snapshot, part), taken in zip(plan, samples, strict=True)
    ]
    spread = [max(taken) / min(taken) for taken in samples]
    report.add(
        f"{len(rows)} schemes ({len(runs)} runs built in {built:.0f} s), "
        f"{args.calibration_passes} alternating passes in {time.perf_counter() - started - built:.0f} s, "
        "each scheme's min over the passes (max/min over the passes: "
        f"median {np.median(spread):.2f}, max {max(spread):.2f}); load after {load()}\n"
    )
    del runs, placed, plan
    trim()
    features = np.array(
        [[s.tables, s.probes, size * s.candidate_rate()] for _, s, _, _ in rows], dtype=np.float64
    )
    measured = np.array([m for _, _, m, _ in rows])
    fits = {
        "absolute (NNLS on µs)": fit(features, measured, np.ones_like(measured)),
        "relative (NNLS on µs / measured)": fit(features, measured, 1 / measured),
    }
    report.add(
        f"Constants in the source: TABLE_US {multi_index.TABLE_US}, PROBE_US {multi_index.PROBE_US}, "
        f"CANDIDATE_US {multi_index.CANDIDATE_US}, US_PER_BYTE {multi_index.US_PER_BYTE}\n"
    )
    report.table(
        ["fit", "TABLE_US", "PROBE_US", "CANDIDATE_US", "median abs rel error", "p90 abs rel error", "max"],
        [
            [
                name,
                f"{c[0]:.4g}",
                f"{c[1]:.4g}",
                f"{c[2]:.4g}",
                *(f"{v:.0%}" for v in np.percentile(np.abs(features @ c / measured - 1), [50, 90, 100])),
            ]
            for name, c in fits.items()
        ]
        + [
            [
                "source constants",
                multi_index.TABLE_US,
                multi_index.PROBE_US,
                multi_index.CANDIDATE_US,
                *(
                    f"{v:.0%}"
                    for v in np.percentile(
                        np.abs(
                            features
                            @ np.array([multi_index.TABLE_US, multi_index.PROBE_US, multi_index.CANDIDATE_US])
                            / measured
                            - 1
                        ),
                        [50, 90, 100],
                    )
                ),
            ]
        ],
    )
    absolute, relative = fits["absolute (NNLS on µs)"], fits["relative (NNLS on µs / measured)"]
    report.table(
        [
            "k",
            "scheme",
            "tables",
            "probes",
            "candidates/q",
            "queries a call",
            "measured µs/q",
            "model (abs fit)",
            "error",
            "model (rel fit)",
            "error",
        ],
        [
            [
                k,
                s.label(),
                s.tables,
                s.probes,
                f"{f[2]:,.0f}",
                c,
                f"{m:.2f}",
                f"{f @ absolute:.2f}",
                f"{f @ absolute / m - 1:+.0%}",
                f"{f @ relative:.2f}",
                f"{f @ relative / m - 1:+.0%}",
            ]
            for (k, s, m, c), f in zip(rows, features, strict=True)
        ],
    )
    # -------- does choose() pick the fastest?
    saved = (multi_index.TABLE_US, multi_index.PROBE_US, multi_index.CANDIDATE_US)

    def choose_with(constants: tuple[float, ...], k: int) -> MultiIndex:
        multi_index.TABLE_US, multi_index.PROBE_US, multi_index.CANDIDATE_US = constants
        try:
            return multi_index.choose(k, size)
        finally:
            multi_index.TABLE_US, multi_index.PROBE_US, multi_index.CANDIDATE_US = saved

    penalty = multi_index.US_PER_BYTE * multi_index.TABLE_BYTES
    table = []
    for k in range(2, 11):
        mine = [(s, m) for kk, s, m, _ in rows if kk == k]
        if not mine:
            continue
        fastest = min(mine, key=lambda entry: entry[1])
        best = min(mine, key=lambda entry: (entry[1] + penalty * entry[0].tables, entry[0].tables))
        cost = {s: m + penalty * s.tables for s, m in mine}
        cells = [k, f"{fastest[0].label()} ({fastest[1]:.1f})", f"{best[0].label()} ({cost[best[0]]:.1f})"]
        for constants in (saved, tuple(absolute), tuple(relative)):
            pick = choose_with(constants, k)
            if pick in cost:
                verdict = "yes" if pick == best[0] else f"no: +{cost[pick] / cost[best[0]] - 1:.0%}"
                cells.append(f"{pick.label()} ({verdict})")
            else:
                cells.append(f"{pick.label()} (not measured: > {args.max_probes} probes)")
        table.append(cells)
    report.add(
        f"\nchoose(k, {size:,}) against the measured costs (µs/q + US_PER_BYTE x 8 x tables = "
        f"{penalty:g} µs a table):\n"
    )
    report.table(
        [
            "k",
            "fastest measured (µs/q)",
            "lowest measured cost (cost)",
            "choose(), source constants",
            "choose(), abs fit",
            "choose(), rel fit",
        ],
        table,
    )


# --------------------------------------------------------------------- main


def load() -> str:
    with open("/proc/loadavg", encoding="utf-8") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M", help="comma-separated N (1M,10M)")
    parser.add_argument("--ks", default="3,5,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=1000, help="queries a batch")
    parser.add_argument("--single", type=int, default=300, help="single queries a round")
    parser.add_argument("--brute", type=int, default=30, help="brute-force single queries a round")
    parser.add_argument("--schemes", type=int, default=5, help="column_search schemes per k")
    parser.add_argument("--faiss-all", action="store_true", help="every faiss configuration, also at N >= 5M")
    parser.add_argument("--calibrate", default="1M", help="the size the cost model is calibrated at")
    parser.add_argument("--no-calibration", action="store_true")
    parser.add_argument("--max-probes", type=int, default=800)
    parser.add_argument("--calibration-passes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--output", default=None)
    args = parse_with_quick(
        parser,
        {"sizes": "20000", "queries": 100, "single": 30, "brute": 10, "rounds": 1, "calibrate": "20000"},
    )
    if not have("faiss"):
        skip_peer("faiss", "not installed")
        return 1
    import faiss

    faiss.omp_set_num_threads(1)
    report = Report()
    report.header(
        "Multi-index hashing (column_search) against faiss IndexBinaryMultiHash, "
        "and the cost model's constants",
        code=source_state(ROOT, "simstore"),
    )
    report.add(f"simstore imported from `{ROOT}`  ")
    report.add(
        f"faiss {faiss.__version__} (1 OpenMP thread); ids uint32; queries: stored fingerprints with "
        f"0..k distinct bits flipped; batch = {args.queries} queries in one call\n"
    )
    sizes = [parse_count(text) for text in args.sizes.split(",") if text]
    for size in sizes:
        report.heading(f"N = {size:,}", 2)
        stored = make_fingerprints(size, args.seed)
        for k in (int(text) for text in args.ks.split(",") if text):
            compare(report, args, size, stored, k)
        if not args.no_calibration and size == parse_count(args.calibrate):
            calibrate(report, args, size, stored)
        del stored
        trim()
    report.heading("Summary", 2)
    report.table(
        [
            "N",
            "k",
            "our fastest batch scheme",
            "batch µs/q",
            "our best single p50 µs",
            "bytes/doc",
            "faiss fastest batch",
            "batch µs/q",
            "faiss best single p50 µs",
            "bytes/doc (RAM)",
            "batch ratio ours/faiss",
            "single p50 ratio",
            "brute p50 µs",
        ],
        SUMMARY,
    )
    report.add(f"Finished {time.strftime('%Y-%m-%d %H:%M:%S')}, load {load()}")
    if args.output:
        report.write(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
