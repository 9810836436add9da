"""A/B in one process: the query path (``simstore/engine/runs.py`` and
``simstore/engine/tableset.py``) of the working tree against the same two modules at
a git revision, passes alternating over one store.

The store (``--store``; built at ``--k`` with ``--docs`` random fingerprints
if missing, and kept) is opened read-only once. Before each pass the table
search is pointed at one side's modules and its probes rebuilt; the rest of
simstore is the working tree's for both. A pass is 5,000 single queries,
four in five a stored fingerprint with 0-3 bits flipped and one in five
random, after 1,000 warm-up queries; each pass's p50 is printed.

Run (2-core x86-64 VM, Python 3.11)::

    python benchmarks/experiments/ab_query_path.py --store /tmp/k3-10M.simstore --k 3 --docs 10M \\
        --against HEAD
    python benchmarks/experiments/ab_query_path.py --store /tmp/k5-10M.simstore --k 5 --docs 10M \\
        --against HEAD
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import load_average, parse_count

import simstore
from simstore.engine import runs as working_runs
from simstore.engine import tableset as working_tables

ROOT = Path(__file__).resolve().parents[2]
SEED = 1
BUILD_BATCH = 10_000_000


def stored_fingerprints(docs: int) -> np.ndarray:
    return np.random.default_rng(SEED).integers(0, 2**64, docs, dtype=np.uint64, endpoint=False)


def build(path: str, k: int, docs: int) -> None:
    fingerprints = stored_fingerprints(docs)
    with simstore.open(path, "c", k=k, sync=False) as store:
        for first in range(0, docs, BUILD_BATCH):
            part = fingerprints[first : first + BUILD_BATCH]
            store.add_many(np.arange(first, first + len(part)), fingerprints=part)


def queries(docs: int, count: int) -> list[int]:
    stored = stored_fingerprints(docs)
    rng = np.random.default_rng(SEED + 1)
    made = []
    for index in range(count):
        if index % 5 == 4:
            made.append(int(rng.integers(0, 2**64, dtype=np.uint64)))
            continue
        fingerprint = int(stored[rng.integers(0, docs)])
        for bit in rng.choice(64, int(rng.integers(0, 4)), replace=False):
            fingerprint ^= 1 << int(bit)
        made.append(fingerprint)
    return made


def module_at(revision: str, relative: str, name: str, folder: str) -> ModuleType:
    """``relative`` as it was at ``revision``, imported as module ``name``."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:{relative}"], check=True, capture_output=True, text=True
    ).stdout
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as file:
        file.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def p50_us(store: simstore.Store, batch: list[int]) -> float:
    latencies = []
    for query in batch:
        started = time.perf_counter()
        store.query(fingerprint=query)
        latencies.append(time.perf_counter() - started)
    return float(np.percentile(latencies, 50) * 1e6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--docs", type=parse_count, default=parse_count("10M"))
    parser.add_argument("--against", default="HEAD", help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if not os.path.exists(args.store):
        build(args.store, args.k, args.docs)
    with tempfile.TemporaryDirectory() as folder:
        old_runs = module_at(args.against, "simstore/engine/runs.py", "ab_old_runs", folder)
        old_tables = module_at(args.against, "simstore/engine/tableset.py", "ab_old_tables", folder)
        old_tables.runs = old_runs  # type: ignore[attr-defined]
        sides = {
            f"at {args.against}": (old_runs, old_tables._scan),
            "working tree": (working_runs, working_tables._scan),
        }
        store = simstore.open(args.store, "r")
        tableset = store._engine.tableset
        batch = queries(len(store), 5_000)
        print(f"{args.store}: {len(store):,} documents, k={store.k}; load average {load_average()}")
        try:
            for round_index in range(args.rounds):
                for side, (side_runs, side_scan) in sides.items():
                    # TableSet's methods find these through simstore.engine.tableset' globals.
                    working_tables.runs = side_runs  # type: ignore[attr-defined]
                    working_tables._scan = side_scan
                    tableset._build_probes()
                    for query in batch[:1_000]:
                        store.query(fingerprint=query)
                    print(f"round {round_index} {side:>16}: p50 {p50_us(store, batch):.1f} µs", flush=True)
        finally:
            working_tables.runs = working_runs  # type: ignore[attr-defined]
            working_tables._scan = sides["working tree"][1]
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
