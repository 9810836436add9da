"""Whether fingerprinting workers pay for themselves: ``simstore dedup`` on its
default (every core) beside the same run pinned to one core with ``taskset``, in
fresh runs alternating between source trees; and the library's
``fingerprints_and_sketches`` with ``processes=1`` and ``2`` by input size.

    git worktree add /tmp/ab-old 700d4f5          # the tree to compare with
    python benchmarks/suite/bench_workers.py --trees /tmp/ab-old,. --rows 60000 --rounds 3 \\
        --sizes 1000,4000,16000,64000 --output benchmarks/results/workers_60k.md

The text is real English: the windows of one to three paragraphs of the installed
packages' copyright files that ``bench_against.py`` builds (shuffled, seed 1); a
few of them hold Han characters (names), as real English text does, so a process
that meets one loads jieba's dictionary.

``dedup``: each round runs every tree twice, ``simstore dedup ROWS.jsonl -o OUT``
as it is and under ``taskset -c 0``, the order flipped every round; each run's
wall and CPU time (the process and its workers) are reported as medians (min-max),
with the ratio of the default to the pinned run (above 1: the second core made the
run slower). The outputs must be equal.

``library``: for each size (documents), fresh processes fingerprint the first rows
with ``processes=1`` and ``processes=2`` (workers asked for explicitly), alternating;
wall and CPU medians and their ratios show where a worker starts to pay on this
machine. The 1-minute load average is printed beside: other work on the machine
takes the second core, and then a worker never pays.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import Report, fmt_range, load_average, parse_with_quick, source_state
from bench_against import copyright_documents, write_rows

CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); from simstore.cli import main; sys.exit(main(sys.argv[2:]))"
)
LIBRARY = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import simstore
processes, count, path = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
texts = [json.loads(line)["text"] for _, line in zip(range(count), open(path, encoding="utf-8"))]
simstore.Fingerprinter().fingerprints_and_sketches(texts, processes=processes)
print(sum(map(len, texts)))
"""


def timed(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and its children, stdout)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    out = process.stdout.read().decode() if process.stdout else ""
    err = process.stderr.read().decode() if process.stderr else ""
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(command)} failed:\n{err}")
    return wall, usage.ru_utime + usage.ru_stime, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", default=".", help="comma-separated source trees, the baseline first")
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1000,4000,16000,64000", help="documents, for the library runs")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--output")
    args = parse_with_quick(parser, {"rows": 400, "rounds": 1, "sizes": "200,400"})
    trees = [str(Path(tree).resolve()) for tree in args.trees.split(",")]
    sizes = [int(size) for size in args.sizes.split(",") if size]
    if shutil.which("taskset") is None:
        raise SystemExit("taskset (util-linux) is needed")

    documents = copyright_documents()
    random.Random(1).shuffle(documents)
    needed = max([args.rows, *sizes])
    report = Report()
    report.header(
        "Fingerprinting workers: every core beside one",
        code="; ".join(f"{tree}: {source_state(tree, 'simstore')}" for tree in trees),
    )
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-workers-") as folder:
        rows = Path(folder) / "rows.jsonl"
        write_rows(rows, documents[:needed], 0)
        chars = sum(map(len, documents[: args.rows]))
        report.add(
            f"{args.rows:,} rows, {chars / 1e6:.1f}M characters; {os.cpu_count()} cores; "
            f"load average at the start {load_average()}.\n"
        )
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        outputs: dict[str, bytes] = {}
        dedup_rows = Path(folder) / "dedup_rows.jsonl"
        write_rows(dedup_rows, documents[: args.rows], 0)
        for number in range(args.rounds):
            runs = [(tree, pinned) for tree in trees for pinned in (False, True)]
            for tree, pinned in runs if number % 2 == 0 else runs[::-1]:
                out = Path(folder) / "out.jsonl"
                command = [sys.executable, "-c", CHILD, tree, "dedup", str(dedup_rows), "-o", str(out)]
                wall, cpu, _ = timed((["taskset", "-c", "0"] if pinned else []) + command)
                times.setdefault((tree, "one core" if pinned else "default"), []).append((wall, cpu))
                content = out.read_bytes()
                if outputs.setdefault("dedup", content) != content:
                    raise SystemExit("the runs' outputs differ")
            print(f"dedup round {number + 1} done; load {load_average()}", file=sys.stderr, flush=True)
        report.heading("simstore dedup: seconds, median (min-max)")
        table = []
        for tree in trees:
            default, pinned = np.array(times[(tree, "default")]), np.array(times[(tree, "one core")])
            table.append(
                [
                    tree,
                    fmt_range(default[:, 0].tolist()),
                    fmt_range(pinned[:, 0].tolist()),
                    f"{np.median(default[:, 0]) / np.median(pinned[:, 0]):.2f}",
                    fmt_range(default[:, 1].tolist()),
                    fmt_range(pinned[:, 1].tolist()),
                    f"{np.median(default[:, 1]) / np.median(pinned[:, 1]):.2f}",
                ]
            )
        report.table(
            [
                "tree",
                "default wall",
                "one core wall",
                "wall ratio",
                "default CPU",
                "one core CPU",
                "CPU ratio",
            ],
            table,
        )

        if sizes:
            report.heading(f"The library ({trees[-1]}): processes=2 beside 1, seconds, median (min-max)")
            library: dict[tuple[int, int], list[tuple[float, float]]] = {}
            sizes_chars: dict[int, int] = {}
            for number in range(args.rounds):
                for size in sizes:
                    for processes in (1, 2) if number % 2 == 0 else (2, 1):
                        command = [
                            sys.executable,
                            "-c",
                            LIBRARY,
                            trees[-1],
                            str(processes),
                            str(size),
                            str(rows),
                        ]
                        wall, cpu, out = timed(command)
                        sizes_chars[size] = int(out.strip())
                        library.setdefault((size, processes), []).append((wall, cpu))
                print(f"library round {number + 1} done; load {load_average()}", file=sys.stderr, flush=True)
            table = []
            for size in sizes:
                one, two = np.array(library[(size, 1)]), np.array(library[(size, 2)])
                table.append(
                    [
                        f"{size:,} ({sizes_chars[size] / 1e6:.1f}M chars)",
                        fmt_range(one[:, 0].tolist()),
                        fmt_range(two[:, 0].tolist()),
                        f"{np.median(two[:, 0]) / np.median(one[:, 0]):.2f}",
                        fmt_range(one[:, 1].tolist()),
                        fmt_range(two[:, 1].tolist()),
                        f"{np.median(two[:, 1]) / np.median(one[:, 1]):.2f}",
                    ]
                )
            report.table(
                ["documents", "1 wall", "2 wall", "wall 2/1", "1 CPU", "2 CPU", "CPU 2/1"],
                table,
            )
    report.add(f"Load average at the end: {load_average()}.")
    if args.output:
        report.write(args.output)


if __name__ == "__main__":
    main()
