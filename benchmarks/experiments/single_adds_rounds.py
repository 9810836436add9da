"""Single adds into a large store, in rounds, each round a fresh process (a
restart between rounds), as a crawler feeding a store grown in batches would:
docs/s, p50 / p99 per add, the longest adds (with their place in the round: the
delta merges come every 32,768 adds) and the runs before and after.

Grow the store first, then copy it to run two versions of simstore from the same
start (``--tree`` puts a worktree first on the path of each round's process):

    python benchmarks/suite/bench_scale.py --docs 100M --batch 10M --k 5 --single 0 \\
        --layout multi-index --data-dir /tmp/s100 --keep
    cp /tmp/s100/scale-k5.simstore /tmp/s100b/
    python benchmarks/experiments/single_adds_rounds.py --store /tmp/s100b/scale-k5.simstore \\
        --adds 200K --rounds 2
    python benchmarks/experiments/single_adds_rounds.py --store /tmp/s100/scale-k5.simstore \\
        --adds 200K --rounds 2 --tree ../wt-before

Measured on the 2-core Xeon VM (KVM, CPython 3.11.7, numpy 2.4.6, py-lmdb 3.0.0 with
LMDB 0.9.36), 2026-11-30: ``benchmarks/results/single_adds_100M.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from _common import parse_count  # noqa: E402

#: How many of a round's slowest adds are reported.
SLOWEST = 5


def one_round(store_path: str, adds: int, seed: int) -> dict[str, object]:
    """``adds`` single adds (``sync=False``) of random fingerprints under new
    int keys, timed one by one."""
    import simstore

    store = simstore.open(store_path, sync=False)
    before = store.stats()
    first_key = before.docs + 1_000_000_000 * (seed + 1)
    fingerprints = np.random.default_rng(seed).integers(0, 2**63, size=adds, dtype=np.int64).tolist()
    times = np.empty(adds)
    clock = time.perf_counter_ns
    began = time.perf_counter()
    for index, fingerprint in enumerate(fingerprints):
        start = clock()
        store.add(first_key + index, fingerprint=fingerprint)
        times[index] = clock() - start
    seconds = time.perf_counter() - began
    after = store.stats()
    store.close()
    micros = times / 1000.0
    slowest = np.argsort(micros)[::-1][:SLOWEST]
    return {
        "docs_before": before.docs,
        "runs_before": before.runs,
        "runs_after": after.runs,
        "docs_per_s": adds / seconds,
        "p50_us": float(np.percentile(micros, 50)),
        "p99_us": float(np.percentile(micros, 99)),
        "slowest": [(int(place), float(micros[place]) / 1e6) for place in slowest],
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--adds", type=parse_count, default=parse_count("200K"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tree", default=None, help="a simstore worktree put first on the path")
    parser.add_argument("--round", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.round is not None:
        print(json.dumps(one_round(args.store, args.adds, args.round)))
        return
    environment = dict(os.environ)
    if args.tree:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [args.tree, environment.get("PYTHONPATH")]))
    print("| round | docs before | runs before -> after | docs/s | p50 µs | p99 µs | slowest adds (at: s) |")
    print("|---|---|---|---|---|---|---|")
    for number in range(args.rounds):
        command = [sys.executable, __file__, "--store", args.store, "--adds", str(args.adds)]
        command += ["--round", str(number)]
        # (Run from this folder: a checkout's own simstore must not shadow --tree.)
        output = subprocess.run(
            command, check=True, capture_output=True, text=True, env=environment, cwd=Path(__file__).parent
        ).stdout
        result = json.loads(output.strip().splitlines()[-1])
        slowest = ", ".join(f"{place}: {seconds:.2f}" for place, seconds in result["slowest"])
        print(
            f"| {number + 1} | {result['docs_before']:,} | {result['runs_before']} -> {result['runs_after']} "
            f"| {result['docs_per_s']:,.0f} | {result['p50_us']:.1f} | {result['p99_us']:.1f} | {slowest} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
