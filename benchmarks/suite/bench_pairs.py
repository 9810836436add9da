"""All near-duplicate pairs at N random fingerprints with planted near-duplicates, k=3:
``Store.near_duplicate_pairs`` and ``Store.clusters`` from an on-disk store, against
simhash-py's ``find_all`` (its C++ core) when it is installed, and against a numpy
reimplementation of the same sort-and-compare algorithm otherwise (always run).

Run (from the repository root)::

    python benchmarks/suite/bench_pairs.py --n 1_000_000 --output benchmarks/results/bench_pairs_1M.md
    python benchmarks/suite/bench_pairs.py --n 10_000_000 --repeats 1 \\
        --output benchmarks/results/bench_pairs_10M.md

simhash-py needs an older Cython to build; in a separate venv::

    python -m venv /tmp/simhashpy-venv
    /tmp/simhashpy-venv/bin/pip install "cython<3" numpy setuptools wheel
    /tmp/simhashpy-venv/bin/pip install --no-build-isolation simhash-py

and pass ``--simhash-python /tmp/simhashpy-venv/bin/python``: its ``find_all`` runs in
that interpreter on the same fingerprints (written to a ``.npy`` file). On the machine
of the committed results it does not build under CPython 3.11: the 0.4.0 sdist's
pre-generated ``simhash.cpp`` includes ``longintrepr.h`` (gone from 3.11's public
headers), and regenerating it from ``simhash.pyx`` fails because the sdist lacks the
``.pxd`` that declares the C++ functions; so the results compare with the numpy
reimplementation only.

Data: ``N`` seeded random 64-bit fingerprints, of which ``--planted`` (default 1%)
are near-duplicates of another document: a random earlier fingerprint with 0-3
random bits flipped. Keys are the ints ``0..N-1``. Every system's pair set must equal
the numpy reference exactly (and include every planted pair), or the run fails.

Timings: ``near_duplicate_pairs`` is consumed in full (keys resolved, ``Pair``
objects built); each system runs ``--repeats`` times and the median, min and max
are reported, with each repeat's per-table times summarised as p50 and p99.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import Report, Stopwatch, fmt, fmt_range, parse_with_quick, percentiles, source_state

import simstore
from simstore.index.permute import one_level_tables

ROOT = Path(__file__).resolve().parents[2]
K = 3
BLOCKS = 5


def make_fingerprints(n: int, planted: float, seed: int) -> tuple[np.ndarray, set[tuple[int, int]]]:
    """Random fingerprints where a ``planted`` share copy an earlier one with 0-3 bits flipped."""
    rng = np.random.default_rng(seed)
    fingerprints = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    copies = int(n * planted)
    targets = rng.choice(np.arange(1, n), size=copies, replace=False)
    sources = (rng.random(copies) * targets).astype(np.int64)
    variants = fingerprints[sources].copy()
    for _ in range(K):
        flip = rng.random(copies) < 0.75
        bits = rng.integers(0, 64, copies).astype(np.uint64)
        variants ^= np.where(flip, np.uint64(1) << bits, np.uint64(0))
    fingerprints[targets] = variants
    # A target may itself be copied from, so pair each with its source's final value.
    planted_pairs = {
        (min(a, b), max(a, b))
        for a, b in zip(sources.tolist(), targets.tolist(), strict=True)
        if int(fingerprints[a] ^ fingerprints[b]).bit_count() <= K
    }
    return fingerprints, planted_pairs


def numpy_find_all(fingerprints: np.ndarray, k: int, blocks: int) -> np.ndarray:
    """simhash-py's ``find_all`` algorithm in numpy: for every table, sort the
    permuted fingerprints, compare every pair inside each run of equal prefixes, and
    collect matches in one set (here: unique packed ``(a, b)`` pairs at the end)."""
    found = []
    for table in one_level_tables(k, blocks):
        permuted = table.permute_array(fingerprints)
        order = np.argsort(permuted)
        ordered = permuted[order]
        prefixes = ordered >> np.uint64(table.suffix_bits)
        active = np.flatnonzero(prefixes[1:] == prefixes[:-1])
        offset = 1
        while active.size:
            right = active + offset
            close = np.bitwise_count(ordered[active] ^ ordered[right]) <= k
            a = order[active[close]]
            b = order[right[close]]
            found.append(
                np.minimum(a, b).astype(np.uint64) << np.uint64(32) | np.maximum(a, b).astype(np.uint64)
            )
            offset += 1
            active = active[active + offset < len(ordered)]
            active = active[prefixes[active] == prefixes[active + offset]]
    if not found:
        return np.zeros(0, dtype=np.uint64)
    return np.unique(np.concatenate(found))


SIMHASH_PY_SCRIPT = """
import sys, time, json
import numpy as np
import simhash
fingerprints = [int(v) for v in np.load(sys.argv[1])]
seconds = []
result = None
for _ in range(int(sys.argv[4])):
    start = time.perf_counter()
    result = simhash.find_all(fingerprints, int(sys.argv[2]), int(sys.argv[3]))
    seconds.append(time.perf_counter() - start)
print(json.dumps({"seconds": seconds, "pairs": len(result)}))
"""


def run_simhash_py(
    python: str, fingerprints: np.ndarray, repeats: int, folder: str
) -> dict[str, object] | str:
    path = os.path.join(folder, "fingerprints.npy")
    np.save(path, fingerprints)
    completed = subprocess.run(
        [python, "-c", SIMHASH_PY_SCRIPT, path, str(BLOCKS), str(K), str(repeats)],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        return completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else "failed"
    result: dict[str, object] = json.loads(completed.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=lambda s: int(s.replace("_", "")), default=1_000_000)
    parser.add_argument("--planted", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", default=None, help="folder for the store (default: system temp)")
    parser.add_argument("--simhash-python", default=None, help="a Python with simhash-py installed")
    parser.add_argument("--skip-reference", action="store_true", help="do not run the numpy reference")
    parser.add_argument("--output", default=None)
    args = parse_with_quick(parser, {"n": 5000, "repeats": 1})

    report = Report()
    folder = tempfile.mkdtemp(prefix="bench_pairs_", dir=args.dir)
    report.header(f"simstore all-pairs benchmark, N = {args.n:,}", folder, source_state(ROOT, "simstore"))
    fingerprints, planted_pairs = make_fingerprints(args.n, args.planted, args.seed)
    copies = int(args.n * args.planted)
    report.add(
        f"k = {K}, {BLOCKS} blocks, 10 tables; {copies:,} planted near-duplicates (0-3 bits from an "
        f"earlier fingerprint), seed {args.seed}; {args.repeats} repeat(s) per system.\n"
    )
    path = os.path.join(folder, "pairs.simstore")
    with Stopwatch() as load, simstore.open(path, "n", k=K, blocks=BLOCKS, sync=False) as store:
        store.add_many(np.arange(args.n, dtype=np.int64).tolist(), fingerprints)
    rows = []
    reference: set[tuple[int, int]] | None = None
    if not args.skip_reference:
        seconds = []
        packed = np.zeros(0, dtype=np.uint64)
        for _ in range(args.repeats):
            with Stopwatch() as watch:
                packed = numpy_find_all(fingerprints, K, BLOCKS)
            seconds.append(watch.seconds)
        reference = set(
            zip((packed >> np.uint64(32)).tolist(), (packed & np.uint64(0xFFFFFFFF)).tolist(), strict=True)
        )
        rows.append(
            ["numpy reimplementation of find_all (in memory)", fmt_range(seconds), len(reference), "-", "-"]
        )

    with simstore.open(path, "r") as store:
        seconds = []
        table_seconds: list[float] = []
        pairs: set[tuple[int, int]] = set()
        for _ in range(args.repeats):
            stamps = [time.perf_counter()]

            def stamp(done: int, total: int, stamps: list[float] = stamps) -> None:
                stamps.append(time.perf_counter())

            with Stopwatch() as watch:
                found = [(pair.key_a, pair.key_b) for pair in store.near_duplicate_pairs(progress=stamp)]
            seconds.append(watch.seconds)
            # The first table's time includes reading the snapshot.
            table_seconds.extend(b - a for a, b in itertools.pairwise(stamps))
            pairs = set(found)  # type: ignore[arg-type]
            if len(found) != len(pairs):
                raise SystemExit("near_duplicate_pairs reported a pair twice")
        p50, p99 = percentiles(table_seconds, (50, 99)) if table_seconds else (float("nan"), float("nan"))
        rows.append(
            [
                "simstore `near_duplicate_pairs` (on-disk store, read-only)",
                fmt_range(seconds),
                len(pairs),
                f"{fmt(args.n / float(np.median(seconds)))} docs/s",
                f"{fmt(p50)} / {fmt(p99)}",
            ]
        )
        cluster_seconds = []
        for _ in range(args.repeats):
            with Stopwatch() as watch:
                clusters = store.clusters()
            cluster_seconds.append(watch.seconds)
        rows.append(
            [
                "simstore `clusters` (same store)",
                fmt_range(cluster_seconds),
                f"{len(clusters):,} clusters",
                f"{fmt(args.n / float(np.median(cluster_seconds)))} docs/s",
                "-",
            ]
        )
    missed = planted_pairs - pairs
    if missed:
        raise SystemExit(f"simstore missed {len(missed)} planted pairs, e.g. {sorted(missed)[:3]}")
    if reference is not None and pairs != reference:
        raise SystemExit(f"simstore found {len(pairs)} pairs, the reference {len(reference)}; they differ")
    notes = []
    if args.simhash_python:
        outcome = run_simhash_py(args.simhash_python, fingerprints, args.repeats, folder)
        if isinstance(outcome, str):
            notes.append(f"simhash-py `find_all` could not run: {outcome}")
        else:
            times = [float(value) for value in outcome["seconds"]]  # type: ignore[attr-defined]
            rows.insert(
                0, ["simhash-py `find_all` (C++, in memory)", fmt_range(times), outcome["pairs"], "-", "-"]
            )
            if outcome["pairs"] != len(pairs):
                notes.append(f"simhash-py found {outcome['pairs']} pairs, simstore {len(pairs)}")
    else:
        notes.append(
            "simhash-py not run (no --simhash-python): it does not build on CPython 3.11, "
            "see this script's docstring"
        )
    report.heading("All pairs within k")
    report.table(
        ["system", "seconds, median (min-max)", "pairs", "throughput", "per table p50 / p99 s"], rows
    )
    report.add(
        f"- store bulk load (not timed above): {fmt(load.seconds)} s; "
        f"file {os.path.getsize(path) / 2**20:,.0f} MiB"
    )
    report.add(
        f"- planted pairs still within k after all copies: {len(planted_pairs):,}; simstore found every one, "
        "and its pair set equals the numpy reference's exactly (checked)"
    )
    for line in notes:
        report.add(f"- {line}")
    if args.output:
        report.write(args.output)
    os.remove(path)
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    os.rmdir(folder)


if __name__ == "__main__":
    main()
