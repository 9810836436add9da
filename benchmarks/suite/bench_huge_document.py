"""Time and memory of fingerprinting one huge document (issue 34: a 29 MB
JSONL line took 7.4 s and 1.05 GB), against the same bytes as many
documents of 500 words.

Run (from the repository root)::

    PYTHONPATH=. python benchmarks/suite/bench_huge_document.py [--sizes 1,4,16,29] [--rounds 3]
        [--baseline DIR] [--output FILE]

``--baseline DIR`` names a folder holding another ``simstore`` package (for
example ``git archive COMMIT simstore | tar -x -C DIR``): each measurement
then runs for it and for this tree in turn, alternating, so that load from
other work on the machine falls on both alike.

Each measurement is a fresh process that builds the text (words drawn with
a fixed seed from a 60,000-word vocabulary, about 6 bytes a word), then
times ``Fingerprinter().fingerprints_and_sketches([text])`` (what ``simstore
add`` and ``dedup`` run) and reads the peak RSS it added
(``ru_maxrss`` after, less before: the arrays of the call, beyond the
interpreter, numpy and the text itself). Medians over ``--rounds``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import Report, parse_with_quick

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, random, resource, sys, time
size, shape = int(sys.argv[1]), sys.argv[2]
rng = random.Random(1)
common = ["the", "of", "and", "a", "to", "in", "is", "you", "that", "it"]
vocabulary = [f"w{i}" for i in range(50000)] + common * 1000
words = [rng.choice(vocabulary) for _ in range(size // 6)]
if shape == "one":
    texts = [" ".join(words)]
else:
    texts = [" ".join(words[i : i + 500]) for i in range(0, len(words), 500)]
del words
import simstore
fingerprinter = simstore.Fingerprinter()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
values, _ = fingerprinter.fingerprints_and_sketches(texts)
seconds = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "added_mib": (after - before) / 1024, "first": int(values[0])}))
"""


def measure(package_root: Path, size: int, shape: str) -> dict[str, float]:
    environment = {**os.environ, "PYTHONPATH": str(package_root)}
    finished = subprocess.run(
        [sys.executable, "-c", CHILD, str(size), shape],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
        cwd=package_root,
    )
    result: dict[str, float] = json.loads(finished.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4,16,29", help="document sizes in MB (10**6 bytes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a folder holding another simstore package")
    parser.add_argument("--output", type=Path)
    args = parse_with_quick(parser, {"sizes": "1", "rounds": 1})
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    report = Report()
    report.header("Fingerprinting one huge document")
    rows = []
    for megabytes in (int(value) for value in args.sizes.split(",")):
        size = megabytes * 10**6
        for shape in ("one", "many"):
            samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, root in trees.items():  # alternating
                    samples[name].append(measure(root, size, shape))
            firsts = {sample["first"] for runs in samples.values() for sample in runs}
            assert len(firsts) == 1, f"the trees disagree on the fingerprint: {firsts}"
            for name, runs in samples.items():
                seconds = statistics.median(run["seconds"] for run in runs)
                added = statistics.median(run["added_mib"] for run in runs)
                rows.append(
                    [
                        name,
                        f"{megabytes} MB",
                        "1 document" if shape == "one" else "500-word documents",
                        f"{seconds:.2f}",
                        f"{megabytes / seconds:.1f}",
                        f"{added:.0f}",
                        f"{added * 1.048576 / megabytes:.1f}",
                    ]
                )
    report.table(["tree", "size", "as", "seconds", "MB/s", "peak RSS added (MiB)", "MiB per MB"], rows)
    report.add(f"Medians of {args.rounds} rounds; one process (no worker processes).")
    if args.output is not None:
        report.write(args.output)


if __name__ == "__main__":
    main()
