"""A/B of the bulk build between two source trees, builds alternating.

Run (from the repository root; ``git worktree add /tmp/ab-old REV`` gives the
old tree)::

    python benchmarks/experiments/ab_build.py /tmp/ab-old . --n 1_000_000 --pairs 6
    python benchmarks/experiments/ab_build.py /tmp/ab-old . --n 1_000_000 --pairs 6 --keys url

Each build is ``simstore.open(path, "n")``, one ``add_many`` of N seeded random
fingerprints and ``close()`` (the default ``sync=True``), in a fresh process
that imports ``simstore`` from the tree under test. The trees alternate build
by build, the first tree of each pair alternating too, because this shared
machine's speed swings by up to 1.6x for seconds to minutes: runs one after
another do not compare. Keys are ``range(N)`` (``--keys int``) or URL-like
strings in a scrambled order (``--keys url``). Prints each tree's docs/s and
peak anonymous RSS during the build (sampled every 5 ms) as median (min-max).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import command_line, fmt_range, load_average, machine, markdown_table

# Runs in the child, with the tree under test first on sys.path.
_CHILD = """
import json, os, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
import simstore
from _common import AnonPeakSampler, rss_breakdown_mib

n, keys_kind, path = int(sys.argv[3]), sys.argv[4], sys.argv[5]
fingerprints = np.random.default_rng(1).integers(0, 2**64, size=n, dtype=np.uint64)
if keys_kind == "url":
    # A multiplicative scramble: distinct, in no sorted order, of varied length.
    keys = [f"https://example.com/{index * 2654435761 % 2**40:x}/page" for index in range(n)]
else:
    keys = range(n)
before = rss_breakdown_mib().get("anon", 0.0)
with AnonPeakSampler() as sampler:
    started = time.perf_counter()
    store = simstore.open(path, "n")
    store.add_many(keys, fingerprints)
    store.close()
    seconds = time.perf_counter() - started
assert simstore.__file__.startswith(os.path.abspath(sys.argv[1])), simstore.__file__
print(json.dumps({"docs_per_s": n / seconds, "peak_anon_mib": sampler.peak_mib - before}))
"""


def build_once(tree: str, n: int, keys: str, work: str) -> dict[str, float]:
    path = os.path.join(work, "ab.simstore")
    for leftover in (path, path + "-lock"):
        if os.path.exists(leftover):
            os.remove(leftover)
    here = str(Path(__file__).resolve().parents[1])  # benchmarks/: _common
    output = subprocess.run(
        [sys.executable, "-c", _CHILD, os.path.abspath(tree), here, str(n), keys, path],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    ).stdout
    figures: dict[str, float] = json.loads(output.strip().splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("tree_a", help="a source tree holding simstore/ (e.g. a git worktree)")
    parser.add_argument("tree_b")
    parser.add_argument("--n", type=lambda text: int(float(text.replace("_", ""))), default=1_000_000)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--keys", choices=("int", "url"), default="int")
    parser.add_argument("--dir", default=None, help="where the store file goes (deleted afterwards)")
    args = parser.parse_args()

    print(f"Command: `{command_line()}`\n")
    print(markdown_table(["machine", ""], machine(args.dir or tempfile.gettempdir()).items()))
    results: dict[str, list[dict[str, float]]] = {args.tree_a: [], args.tree_b: []}
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        for pair in range(args.pairs):
            order = (args.tree_a, args.tree_b) if pair % 2 == 0 else (args.tree_b, args.tree_a)
            for tree in order:
                figures = build_once(tree, args.n, args.keys, work)
                results[tree].append(figures)
                print(
                    f"  pair {pair + 1}: {tree}: {figures['docs_per_s']:,.0f} docs/s, "
                    f"peak anon {figures['peak_anon_mib']:,.0f} MiB (load {load_average()})",
                    flush=True,
                )
    rows = [
        (
            tree,
            fmt_range([run["docs_per_s"] for run in runs]),
            fmt_range([run["peak_anon_mib"] for run in runs]),
        )
        for tree, runs in results.items()
    ]
    print()
    print(f"N = {args.n:,}, {args.keys} keys, {args.pairs} builds per tree; median (min-max).\n")
    print(markdown_table(["tree", "build docs/s", "peak anon MiB during the build"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
