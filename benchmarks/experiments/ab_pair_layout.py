"""A/B: ``Store.near_duplicate_pairs`` and ``clusters`` of one store, run by two
simstore trees in alternating child processes (the store's own tables against
the tables chosen for the search, :mod:`simstore.layout.pair_layout`).

    python benchmarks/experiments/ab_pair_layout.py --before /tmp/base --after . \\
        --cases 3:1M 5:1M 8:1M 5:10M --rounds 2 --output benchmarks/results/pair_layout_ab.md

Each case's store (random fingerprints, 5 % of them near copies of another
within 0..k+2 bits) is built once by ``--after``'s tree; both trees read the
same file. Figures: wall seconds per call, pairs found (must agree), peak RSS.
Measured on the shared 2-core AMD EPYC VM (24 GiB RAM; CPython 3.11, numpy 2.4):
``benchmarks/results/pair_layout_ab.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import simstore
store = simstore.open(sys.argv[2], "r")
what = sys.argv[3]
started = time.perf_counter()
if what == "pairs":
    found = sum(1 for _ in store.near_duplicate_pairs())
else:
    found = sum(len(c) for c in store.clusters())
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "found": found,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

BUILD = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import simstore
k, count = int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(11)
fingerprints = rng.integers(0, 2**64 - 1, count, dtype=np.uint64)
copies = count // 20
flips = np.zeros(copies, dtype=np.uint64)
for bit in range(64):
    flips |= (rng.random(copies) < (k + 2) / 128).astype(np.uint64) << np.uint64(bit)
fingerprints[rng.integers(0, count, copies)] = fingerprints[rng.integers(0, count, copies)] ^ flips
with simstore.open(sys.argv[2], "n", k=k, sync=False) as store:
    for start in range(0, count, 1_000_000):
        store.add_many(range(start, min(start + 1_000_000, count)), fingerprints[start : start + 1_000_000])
"""


def size(text: str) -> int:
    scale = {"K": 1_000, "M": 1_000_000}
    return int(float(text[:-1]) * scale[text[-1]]) if text[-1] in scale else int(text)


def run(code: str, *args: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="simstore tree A (the store's own tables)")
    parser.add_argument("--after", required=True, help="simstore tree B")
    parser.add_argument("--cases", nargs="+", default=["3:1M", "5:1M", "8:1M"], help="k:N")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--output")
    args = parser.parse_args()
    lines = [
        "# All pairs and clusters: the store's tables against tables chosen for the search",
        "",
        f"Command: `python {' '.join(sys.argv)}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load before {os.getloadavg()[0]:.2f}  ",
        "A = the store's own tables (before), B = `pair_layout` (after); alternating child processes, "
        "each reading the same store file read-only.",
        "",
        "| k | N | call | A seconds (rounds) | B seconds (rounds) | B / A (median) | found A / B "
        "| peak RSS MiB A / B |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in args.cases:
        k_text, count_text = case.split(":")
        folder = tempfile.mkdtemp(dir=args.dir)
        path = os.path.join(folder, "s.simstore")
        try:
            build = [sys.executable, "-c", BUILD, args.after, path, k_text, str(size(count_text))]
            subprocess.run(build, check=True)
            for call in ("pairs", "clusters"):
                results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
                for _ in range(args.rounds):
                    for label, tree in (("A", args.before), ("B", args.after)):
                        results[label].append(run(CHILD, tree, path, call))
                        print(case, call, label, results[label][-1], flush=True)
                a = [r["seconds"] for r in results["A"]]
                rss_a = max(r["rss_mib"] for r in results["A"])
                rss_b = max(r["rss_mib"] for r in results["B"])
                b = [r["seconds"] for r in results["B"]]
                ratio = sorted(y / x for x, y in zip(a, b, strict=True))[len(a) // 2]
                lines.append(
                    f"| {k_text} | {count_text} | {call} | {', '.join(f'{x:.1f}' for x in a)} | "
                    f"{', '.join(f'{y:.1f}' for y in b)} | {ratio:.2f} | "
                    f"{int(results['A'][0]['found']):,} / {int(results['B'][0]['found']):,} | "
                    f"{rss_a:,.0f} / {rss_b:,.0f} |"
                )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    lines += ["", f"Load after: {os.getloadavg()[0]:.2f}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
