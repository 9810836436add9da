"""The two table formats of a store, queried side by side in one process: format 2
(Manku's permutation tables, ``blocks=``) and format 3 (``layout="multi-index"``, a
new store's default: a few tables of sorted columns searched at a radius, read in
place from LMDB),
beside faiss ``IndexBinaryMultiHash`` and a numpy brute-force scan, in alternating
rounds.

Run (from the repository root)::

    nice -n 5 python benchmarks/suite/bench_query_engine.py --sizes 1M --rounds 3 \\
        --output benchmarks/results/query_engine_1M.md
    nice -n 5 python benchmarks/suite/bench_query_engine.py --sizes 10M --rounds 3 \\
        --output benchmarks/results/query_engine_10M.md

The committed results (2026-11-28) were taken against a copy of the working tree's
``simstore`` (others were editing it: ``cp -r simstore /tmp/bqe/src/``, then
``PYTHONPATH=/tmp/bqe/src`` for both runs): the header names the simstore imported and
its digest (610ec3a081e8, commit b4dda3c plus uncommitted changes, in both files), and
the digest of the tree the script sat in when it started.

Machine of the committed results: the 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4,
CPython 3.11.7, numpy 2.4.6, py-lmdb 3.0.0, faiss-cpu 1.15.1 on 1 OpenMP thread),
shared with other jobs: read the ratios (taken per round, between systems that
answered the same queries minutes apart) rather than the absolute µs. Each
report's header gives the versions, the load average and the simstore source
digest that was measured.

Per size N in ``--sizes`` (seeded uniform random uint64 fingerprints, keys the
ints 0..N-1) and per k in ``--ks`` (3, 5, 8), the queries are ``--queries``
stored fingerprints, each with 0 to k distinct random bits flipped (so every
query has a match). Systems, all in this one process:

- **format 2**: ``simstore.open(path, "n", k=k, blocks=k + 2, sync=False)`` (Manku's
  one-level tables: a new store's default below k = 5 until 2026-11-30), ``add_many`` of N
  and ``compact()`` (the build, in documents a second), closed, reopened read-only;
  single ``query(fp, k=k)`` and ``query_many(queries, k=k)``; bytes a document of
  the file (``stats().bytes_used / N``, the pages in use, and ``bytes_on_disk / N``).
  Left out where N exceeds ``--format2-max-n`` for that k (default ``8=1M``: at
  k = 8 the default layout has many tables, and its 10M file and build are large;
  the report says so);
- **format 3**: the same with ``layout="multi-index"`` (the scheme
  ``simstore.index.multi_index.choose`` picks; ``stats().layout_name`` is reported);
- **faiss** ``IndexBinaryMultiHash(64, nhash, b)`` with ``nflip`` flips: the exact
  configurations for k (``nhash * (nflip + 1) > k``; FAISS_CONFIGS, FAISS_SHORTLIST at
  N >= 5M, as ``benchmarks/experiments/bench_multi_index.py`` chose them; both scripts
  take them, the numpy scan and the rounds from ``_query_peers.py``), each built
  (its bytes a document: the growth of the anonymous RSS / N) and timed alone on a batch
  of 100 queries; the fastest two (within 3x of the fastest) go into the rounds.
  ``range_search`` keeps distances strictly below its radius, so the radius is k + 1;
  its answers on the first queries are compared with brute force and reported;
- **numpy brute force**: ``np.flatnonzero(np.bitwise_count(fps ^ q) <= k)``, single
  queries only, ``--brute`` of them a round.

Exactness: every simstore system's answers (single and batch) to the first 50
queries must equal brute force, keys and distances; the run stops otherwise.

Then ``--rounds`` rounds: the ``--single`` first queries one call each, in blocks
of 50, every system answering each block in turn (the order rotated by block and
round), brute force's queries after them; then every system but brute force
answers all ``--queries`` in one call (order rotated by round). Reported: single
p50/p99 µs and batch µs a query as median (min-max) over the rounds, and per round
the ratios format 3 / faiss (single p50 and batch, against faiss's fastest),
format 3 / format 2, and brute force / format 3 (how many times faster than a
numpy scan format 3 answers; the goal at k = 8 and 10M is 10x or more).

Memory: the systems share the process, so for each build the report gives the
anonymous RSS before it (after ``malloc_trim``), the peak sampled during it
(``AnonPeakSampler``), the anonymous RSS after it (no trim: heap glibc kept counts)
and the process's ``ru_maxrss`` so far (which includes touched pages of the mapped
files); faiss's bytes a document are its own growth. Builds are not alternated:
their docs/s move with the machine's load (the header and each section give it).

Store files go to a fresh folder under ``--dir`` (default: the system temp
folder); each k's stores are deleted before the next k's are built.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import (
    AnonPeakSampler,
    Report,
    fmt,
    fmt_range,
    have,
    load_average,
    parse_count,
    parse_with_quick,
    peak_rss_mib,
    skip_peer,
    source_state,
    versions,
)

# benchmarks/suite/ (this script's folder, first on sys.path when run as a script
# or by run_suite.py): the peers and the rounds, shared with bench_multi_index.
from _query_peers import (
    System,
    Trial,
    anon_mib,
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
from simstore.index.permute import default_blocks

# The simstore imported: the tree, or a snapshot on PYTHONPATH.
ROOT = Path(simstore.__file__).resolve().parents[1]
REPOSITORY = Path(__file__).resolve().parents[2]

EXACT_QUERIES = 50
FAISS_TRIAL_QUERIES = 100


class NotExactError(AssertionError):
    """A simstore system's answer differs from brute force."""


# --------------------------------------------------------------------- data


def brute_pairs(stored: np.ndarray, queries: np.ndarray, k: int) -> list[list[tuple[int, int]]]:
    """Per query, the sorted (key, distance) of every stored fingerprint within k."""
    found = []
    for query in queries:
        distances = np.bitwise_count(stored ^ query)
        hits = np.flatnonzero(distances <= k)
        found.append(sorted(zip(hits.tolist(), distances[hits].tolist(), strict=True)))
    return found


def store_pairs(matches: list[simstore.Match]) -> list[tuple[int, int]]:
    return sorted((int(match.key), int(match.distance)) for match in matches)


# --------------------------------------------------------------------- systems


@dataclass
class Build:
    label: str
    cells: list[Any]


def build_store(
    folder: str, kind: str, stored: np.ndarray, k: int, keys: np.ndarray
) -> tuple[str, dict[str, Any]]:
    """A store of ``stored`` in ``folder``: add_many + compact, timed; closed."""
    path = os.path.join(folder, f"{kind}-k{k}.simstore")
    # Format 2 is Manku's tables, asked for by their blocks: from k = 5 a new
    # store's own default is a multi-index scheme (format 3), and "format 2"
    # at k = 5 and 8 measured that same layout twice.
    extra: dict[str, Any] = {"layout": "multi-index"} if kind == "format3" else {"blocks": default_blocks(k)}
    trim()
    anon_before = anon_mib()
    with AnonPeakSampler() as sampler:
        started = time.perf_counter()
        store = simstore.open(path, "n", k=k, sync=False, **extra)
        opened = time.perf_counter()
        store.add_many(keys, fingerprints=stored)
        added = time.perf_counter()
        store.compact()
        compacted = time.perf_counter()
        stats = store.stats()
        store.close()
        closed = time.perf_counter()
    return path, {
        "add_many s": added - opened,
        "compact s": compacted - added,
        "close s": closed - compacted,
        "docs/s": len(stored) / (compacted - started),
        "stats": stats,
        "anon before": anon_before,
        "anon peak": sampler.peak_mib,
        "anon after": anon_mib(),
        "maxrss": peak_rss_mib(),
    }


def store_system(
    store: simstore.Store, kind: str, label: str, queries: np.ndarray, k: int, singles: int
) -> System:
    rows = [int(query) for query in queries[:singles]]
    query, query_many = store.query, store.query_many
    return System(
        label=label,
        kind=kind,
        single=lambda position: query(rows[position], k=k),
        batch=lambda: query_many(queries, k=k),
        single_count=singles,
        close=store.close,
    )


def check_store(label: str, store: simstore.Store, queries: np.ndarray, truth: list, k: int) -> None:
    """The store's single and batch answers to the first queries equal brute force."""
    single = [store_pairs(store.query(int(query), k=k)) for query in queries]
    batch = [store_pairs(found) for found in store.query_many(queries, k=k)]
    for how, got in (("query", single), ("query_many", batch)):
        for position, (mine, expected) in enumerate(zip(got, truth, strict=True)):
            if mine != expected:
                raise NotExactError(
                    f"{label} {how}: query {position} ({int(queries[position]):#018x}) answered "
                    f"{mine}, brute force {expected}"
                )


def faiss_pairs(index: Any, stored: np.ndarray, queries: np.ndarray, k: int) -> list[list[tuple[int, int]]]:
    lims, _, labels = index.range_search(faiss_codes(queries), k + 1)
    found = []
    for position, query in enumerate(queries):
        hits = labels[lims[position] : lims[position + 1]].astype(np.int64)
        distances = np.bitwise_count(stored[hits] ^ query)
        found.append(sorted(zip(hits.tolist(), distances.tolist(), strict=True)))
    return found


# --------------------------------------------------------------------- one (N, k)


def format2_allowed(limits: dict[int, int], k: int, size: int) -> bool:
    return all(size <= limit for limit_k, limit in limits.items() if k >= limit_k)


def median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


def per_round(top: list[float], bottom: list[float]) -> list[float]:
    return [a / b for a, b in zip(top, bottom, strict=True)]


def compare(
    report: Report,
    args: argparse.Namespace,
    size: int,
    stored: np.ndarray,
    k: int,
    folder: str,
    summary: list[list[Any]],
) -> None:
    report.heading(f"N = {size:,}, k = {k}", 3)
    report.add(f"Load before: {load_average()}  ")
    queries = make_queries(stored, args.queries, k, args.seed)
    singles = min(args.single, len(queries))
    brute_count = min(args.brute, len(queries))
    exact_count = min(EXACT_QUERIES, len(queries))
    truth = brute_pairs(stored, queries[:exact_count], k)
    keys = np.arange(size, dtype=np.int64)
    systems: list[System] = []
    builds: list[list[Any]] = []
    memory: list[list[Any]] = []
    skipped: list[str] = []
    # -------- simstore, both formats
    for kind in ("format2", "format3"):
        if kind == "format2" and not format2_allowed(args.format2_limits, k, size):
            limit = min(n for limit_k, n in args.format2_limits.items() if k >= limit_k)
            skipped.append(
                f"format 2 left out at k = {k}, N = {size:,} (`--format2-max-n`: at most {limit:,} at this k)"
            )
            continue
        path, built = build_store(folder, kind, stored, k, keys)
        stats = built["stats"]
        label = f"{kind.replace('format', 'format ')} ({stats.layout_name}, {stats.tables} tables)"
        store = simstore.open(path, "r")
        try:
            check_store(label, store, queries[:exact_count], truth, k)
        except NotExactError:
            store.close()
            raise
        system = store_system(store, kind, label, queries, k, singles)
        system.bytes_per_doc = stats.bytes_used / size
        system.disk_per_doc = stats.bytes_on_disk / size
        system.notes = f"format_version {stats.format_version}; file bytes/doc (used, on disk)"
        systems.append(system)
        builds.append(
            [
                label,
                f"{built['add_many s']:.1f}",
                f"{built['compact s']:.1f}",
                f"{built['close s']:.2f}",
                built["docs/s"],
                fmt(stats.bytes_used / size),
                fmt(stats.bytes_on_disk / size),
            ]
        )
        memory.append([label, built["anon before"], built["anon peak"], built["anon after"], built["maxrss"]])
    # -------- faiss
    faiss_notes: list[str] = []
    if args.faiss:
        trial = faiss_codes(queries[: min(FAISS_TRIAL_QUERIES, len(queries))])
        kept: list[Trial] = []
        for config in faiss_configs(k, size, args.faiss_all):
            index, seconds, per_doc, anon_before, peak = faiss_build(stored, config)
            label = faiss_label(config)
            trial_us = faiss_trial_us(index, trial, k)
            exact = faiss_pairs(index, stored, queries[:exact_count], k) == truth
            faiss_notes.append(
                f"{label}: exact {'yes' if exact else '**no**'}, add {seconds:.1f} s, "
                f"{per_doc:.0f} B/doc RAM, batch of {len(trial)} {trial_us:.1f} µs/q"
            )
            builds.append([label, f"{seconds:.1f}", "-", "-", size / seconds, "-", "-"])
            memory.append([label, anon_before, peak, anon_mib(), peak_rss_mib()])
            kept.append((trial_us, index, label, per_doc))
            kept = keep_fastest(kept)
            del index
            trim()
        for _, index, label, per_doc in kept:
            systems.append(
                faiss_system(
                    index, label, queries, k, singles, bytes_per_doc=per_doc, notes="RAM growth at add / N"
                )
            )
        del kept
    # -------- brute force
    if brute_count:
        systems.append(
            brute_force_system(stored, queries, k, brute_count, notes=f"{brute_count} single queries a round")
        )
    # -------- rounds
    warm_up(systems)
    report.add(
        f"Exact: every simstore system's `query` and `query_many` equal brute force on the first "
        f"{exact_count} queries ({sum(len(found) for found in truth)} matches, keys and distances)  "
    )
    if faiss_notes:
        report.add("faiss alone, each configuration: " + "; ".join(faiss_notes) + "  ")
    for note in skipped:
        report.add(note + "  ")
    report.add(
        f"Rounds: {args.rounds}, {singles} single queries (brute force {brute_count}) and a batch of "
        f"{len(queries)} per round; load before {load_average()}  "
    )
    try:
        run_rounds(systems, args.rounds, len(queries))
    finally:
        for system in systems:
            system.close()
    report.add(f"Load after: {load_average()}\n")
    report.table(
        ["system", "single p50 µs", "single p99 µs", "batch µs/q", "bytes/doc", "on disk/doc", "notes"],
        [
            [
                s.label,
                fmt_range(s.p50),
                fmt_range(s.p99),
                fmt_range(s.batch_us) if s.batch_us else "-",
                s.bytes_per_doc,
                s.disk_per_doc,
                s.notes,
            ]
            for s in systems
        ],
    )
    report.table(
        ["build", "add_many / add s", "compact s", "close s", "docs/s", "used bytes/doc", "on disk/doc"],
        builds,
    )
    report.table(
        [
            "after the build of",
            "anon RSS before MiB",
            "peak anon during MiB",
            "anon after MiB",
            "process ru_maxrss so far MiB",
        ],
        memory,
    )
    # -------- ratios per round
    by_kind = {
        kind: [s for s in systems if s.kind == kind] for kind in ("format2", "format3", "faiss", "brute")
    }
    f2 = by_kind["format2"][0] if by_kind["format2"] else None
    f3 = by_kind["format3"][0]
    brute_system = by_kind["brute"][0] if by_kind["brute"] else None
    faiss_single = min(by_kind["faiss"], key=lambda s: median(s.p50), default=None)
    faiss_batch = min(by_kind["faiss"], key=lambda s: median(s.batch_us), default=None)
    ratios: list[list[Any]] = []
    ratio_cells: dict[str, str] = {}

    def ratio(name: str, key: str, values: list[float]) -> None:
        ratios.append([name, fmt_range(values)])
        ratio_cells[key] = fmt_range(values)

    if faiss_single is not None and faiss_batch is not None:
        ratio(
            f"format 3 / `{faiss_single.label}`, single p50",
            "f3/faiss p50",
            per_round(f3.p50, faiss_single.p50),
        )
        ratio(
            f"format 3 / `{faiss_batch.label}`, batch µs/q",
            "f3/faiss batch",
            per_round(f3.batch_us, faiss_batch.batch_us),
        )
    if f2 is not None:
        ratio("format 3 / format 2, single p50", "f3/f2 p50", per_round(f3.p50, f2.p50))
        ratio("format 3 / format 2, batch µs/q", "f3/f2 batch", per_round(f3.batch_us, f2.batch_us))
    if brute_system is not None:
        ratio(
            "brute force p50 / format 3 single p50 (x faster than the scan)",
            "brute/f3 p50",
            per_round(brute_system.p50, f3.p50),
        )
        ratio(
            "brute force p50 / format 3 batch µs/q",
            "brute/f3 batch",
            per_round(brute_system.p50, f3.batch_us),
        )
    if ratios:
        report.add("Ratios, each taken per round, median (min-max) over the rounds:\n")
        report.table(["ratio", "value"], ratios)

    def cells(system: System | None) -> list[Any]:
        if system is None:
            return ["-", "-", "-"]
        return [
            fmt(median(system.p50)),
            fmt(median(system.batch_us)) if system.batch_us else "-",
            fmt(system.bytes_per_doc),
        ]

    summary.append(
        [
            f"{size:,}",
            k,
            *cells(f2),
            *cells(f3),
            faiss_name(faiss_single, faiss_batch),
            fmt(median(faiss_single.p50)) if faiss_single else "-",
            fmt(median(faiss_batch.batch_us)) if faiss_batch else "-",
            fmt(faiss_batch.bytes_per_doc) if faiss_batch else "-",
            fmt(median(brute_system.p50)) if brute_system else "-",
            ratio_cells.get("f3/f2 p50", "-"),
            ratio_cells.get("f3/f2 batch", "-"),
            ratio_cells.get("f3/faiss p50", "-"),
            ratio_cells.get("f3/faiss batch", "-"),
            ratio_cells.get("brute/f3 p50", "-"),
        ]
    )
    del systems
    trim()


def faiss_name(single: System | None, batch: System | None) -> str:
    if single is None or batch is None:
        return "-"
    names = [system.label.removeprefix("faiss MultiHash ") for system in (single, batch)]
    return names[0] if names[0] == names[1] else f"p50 {names[0]}, batch {names[1]}"


# --------------------------------------------------------------------- main


def parse_limits(text: str) -> dict[int, int]:
    """``8=1M`` -> {8: 1_000_000}: format 2 at k >= 8 only up to 1M documents."""
    limits = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        k, _, n = part.partition("=")
        limits[int(k)] = parse_count(n)
    return limits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M", help="comma-separated N (default 1M; e.g. 1M,10M)")
    parser.add_argument("--ks", default="3,5,8", help="comma-separated k (default 3,5,8)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--queries", type=int, default=1000, help="queries a batch (default 1000)")
    parser.add_argument("--single", type=int, default=300, help="single queries a round (default 300)")
    parser.add_argument(
        "--brute", type=int, default=30, help="brute-force single queries a round (default 30)"
    )
    parser.add_argument(
        "--format2-max-n",
        default="8=1M",
        help="K=N[,K=N]: leave format 2 out at k >= K when N exceeds N (default 8=1M; '' never)",
    )
    parser.add_argument("--faiss-all", action="store_true", help="every faiss configuration, also at N >= 5M")
    parser.add_argument("--no-faiss", action="store_true", help="leave faiss out")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--dir", default=None, help="where the store files go (deleted afterwards)")
    parser.add_argument("--output", default=None, help="also write the markdown report here")
    args = parse_with_quick(
        parser,
        {"sizes": "20000", "queries": 60, "single": 30, "brute": 10, "rounds": 1, "format2_max_n": "8=10K"},
    )
    args.format2_limits = parse_limits(args.format2_max_n)
    args.faiss = not args.no_faiss and have("faiss")
    if not args.no_faiss and not args.faiss:
        skip_peer("faiss", "faiss-cpu is not installed: pip install -e '.[bench]'")
    faiss_version = "-"
    if args.faiss:
        import faiss

        faiss.omp_set_num_threads(1)
        faiss_version = faiss.__version__
    report = Report()
    report.header(
        "Query engine: format 2 and format 3 stores beside faiss IndexBinaryMultiHash and brute force",
        data_dir=args.dir or tempfile.gettempdir(),
        code=source_state(ROOT, "simstore"),
    )
    report.add(f"simstore imported from `{ROOT}`  ")
    if ROOT != REPOSITORY:
        report.add(f"The benchmark's own tree: `{REPOSITORY}`, {source_state(REPOSITORY, 'simstore')}  ")
    report.add(
        f"faiss-cpu {faiss_version}"
        + (" (1 OpenMP thread)" if args.faiss else " (not measured)")
        + f"; simstore {versions('simstore')['simstore']}; keys the ints 0..N-1; queries: stored "
        f"fingerprints with 0..k distinct bits flipped (seed {args.seed}); batch = {args.queries} "
        "queries in one call; all systems in one process\n"
    )
    sizes = [parse_count(text) for text in args.sizes.split(",") if text]
    ks = [int(text) for text in args.ks.split(",") if text]
    summary: list[list[Any]] = []
    started = time.perf_counter()
    for size in sizes:
        report.heading(f"N = {size:,}", 2)
        stored = make_fingerprints(size, args.seed)
        for k in ks:
            folder = tempfile.mkdtemp(prefix="bench_query_engine_", dir=args.dir)
            try:
                compare(report, args, size, stored, k, folder, summary)
            except NotExactError as error:
                print(f"NOT EXACT, stopping: {error}", file=sys.stderr)
                report.add(f"**NOT EXACT, the run stopped**: {error}")
                if args.output:
                    report.write(args.output)
                return 1
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        del stored
        trim()
    report.heading("Summary", 2)
    report.add(
        "Medians over the rounds; bytes/doc: the store file's used pages / N, faiss's RAM growth / N, "
        "the scan's 8-byte array. Ratios per round, median (min-max); below 1 format 3 is faster.\n"
    )
    report.table(
        [
            "N",
            "k",
            "format 2 p50 µs",
            "batch µs/q",
            "bytes/doc",
            "format 3 p50 µs",
            "batch µs/q",
            "bytes/doc",
            "faiss (fastest)",
            "p50 µs",
            "batch µs/q",
            "RAM bytes/doc (batch's)",
            "brute p50 µs",
            "f3/f2 p50",
            "f3/f2 batch",
            "f3/faiss p50",
            "f3/faiss batch",
            "brute/f3 p50",
        ],
        summary,
    )
    report.add(
        f"Finished {time.strftime('%Y-%m-%d %H:%M:%S')} after {time.perf_counter() - started:.0f} s, "
        f"load {load_average()}; process ru_maxrss {peak_rss_mib():.0f} MiB"
    )
    if args.output:
        report.write(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
