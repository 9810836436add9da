"""A/B in alternating processes: a one-query ``query_many`` with a sketch (what a
single query by text pays after fingerprinting) and the band look-up alone
(``band_search.band_matches``), the working tree against a git revision.

Each run builds the same default store (format 4: k = 5 and 8 bands a width) of
``--docs`` synthetic documents (random fingerprints, random full 128-byte sketches),
compacted, with 1,000 more in the delta, then times ``--queries`` one-query
``query_many`` calls whose fingerprint is 7 bits from a stored one (past k) and whose
sketch differs from its sketch in 2 bytes (so the band table finds it), then
``band_matches`` of the same sketches. The revision's code is a ``git worktree`` in a
temporary folder put first on ``PYTHONPATH``; runs alternate, ``--rounds`` each.

Run (2-core x86-64 VM, Python 3.11)::

    python benchmarks/experiments/ab_one_query.py --against 0e9af7c

Measured 2026-11-29, ``--against 0e9af7c --docs 100000 --queries 1000 --rounds 2`` (the
start of that session against its end, 6011cfd): one-query ``query_many`` p50 1,532-1,660
-> 242-306 µs, the band look-up 357-374 -> 105-107 µs a query, every planted copy found
by both. Step by step (each against the commit before it, at 200K): the few-query
permutation (ace3e5a) 1,239-1,650 -> 578-640 µs; the band look-up 250-283 -> 176-239 µs
(e219345) -> 134-211 µs (46bd0b9).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def child(docs: int, queries: int) -> None:
    import simstore
    from simstore.engine import band_search

    rng = np.random.default_rng(1)
    fingerprints = rng.integers(0, 2**63, docs, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    rows = rng.integers(0, 256, (docs, 128), dtype=np.uint8)
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        store = simstore.open(Path(folder, "s.simstore"), "n", sync=False)
        store.add_many(range(docs), fingerprints, sketches=rows)
        store.compact()
        store.add_many(range(docs, docs + 1000), fingerprints[:1000] ^ np.uint64(1), sketches=rows[:1000])
        flipped = np.uint64(sum(1 << bit for bit in (3, 10, 20, 33, 40, 50, 60)))
        query_fps = fingerprints[5000 : 5000 + queries] ^ flipped
        query_rows = rows[5000 : 5000 + queries].copy()
        query_rows[:, :2] ^= 0x11
        for i in range(50):
            store.query_many(query_fps[i : i + 1], sketches=query_rows[i : i + 1])
        times, found = [], 0
        for i in range(queries):
            began = time.perf_counter()
            answer = store.query_many(query_fps[i : i + 1], sketches=query_rows[i : i + 1])
            times.append(time.perf_counter() - began)
            found += bool(answer[0])
        engine = store._engine
        with engine.read(query=True) as txn:
            began = time.perf_counter()
            for i in range(queries):
                band_search.band_matches(engine, txn, query_rows[i : i + 1], 0.8)
            band = (time.perf_counter() - began) / queries
        store.close()
    print(
        json.dumps(
            {"p50": float(np.percentile(times, 50) * 1e6), "band": band * 1e6, "found": found, "of": queries}
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the git revision to compare with (default HEAD)")
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.docs, args.queries)
        return
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder, "tree")
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), args.against], check=True
        )
        try:
            sides = {args.against: str(tree), "working tree": str(ROOT)}
            for round_number in range(args.rounds):
                for name, path in sides.items() if round_number % 2 == 0 else reversed(sides.items()):
                    env = dict(os.environ, PYTHONPATH=path)
                    command = [
                        sys.executable,
                        __file__,
                        "--child",
                        "--docs",
                        str(args.docs),
                        "--queries",
                        str(args.queries),
                    ]
                    result = json.loads(
                        subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
                    )
                    print(
                        f"{name}: one-query query_many p50 {result['p50']:,.0f} µs, band look-up "
                        f"{result['band']:,.0f} µs a query, found {result['found']}/{result['of']}",
                        flush=True,
                    )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
