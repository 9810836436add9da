"""Parquet against JSONL through ``simstore dedup``: rows/s and peak memory.

The same synthetic corpus (Zipf words, a quarter edited copies; see
``bench_verify.make_texts``) is written as JSONL and as Parquet (row groups
of 10,000 rows), and ``simstore dedup FILE -o OUT`` runs on each in its own
process, alternating, ``--rounds`` times. Reported: rows/s end to end
(reading, fingerprinting, clustering, writing the kept rows) and the peak
anonymous RSS of the command (sampled in the child every 5 ms: the memory it
holds, not the page cache of the files it maps).

Run (2-core x86-64 VM, Python 3.11)::

    python benchmarks/suite/bench_columnar.py --rows 200000 --rounds 2 \\
        --output benchmarks/results/columnar_200K.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

import pyarrow as pa
import pyarrow.parquet as pq
from _common import Report, fmt, fmt_range, parse_with_quick
from bench_verify import make_texts

# The child reports its own peak anonymous RSS (memory beyond the page cache
# of the files it reads and the store it writes) on its last line of stderr.
_CHILD = (
    "import sys\n"
    f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
    "from _common import AnonPeakSampler\n"
    "from simstore.cli import main\n"
    "with AnonPeakSampler() as sampler:\n"
    "    code = main(sys.argv[1:])\n"
    "print(sampler.peak_mib, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def run(arguments: list[str]) -> tuple[float, float]:
    """Seconds and peak anonymous RSS (MiB) of ``simstore ARGUMENTS`` in a child process."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *arguments, "-q"], check=True, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    return seconds, float(done.stderr.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", default=None)
    args = parse_with_quick(parser, {"rows": 2000, "rounds": 1})
    report = Report()
    scratch = tempfile.mkdtemp(prefix="bench-columnar-", dir=args.data_dir)
    report.header(f"Parquet against JSONL: simstore dedup of {args.rows:,} rows", scratch)
    try:
        texts = make_texts(args.rows, seed=3)
        rows = [{"id": f"doc-{index}", "text": text} for index, text in enumerate(texts)]
        jsonl = Path(scratch) / "corpus.jsonl"
        with open(jsonl, "w", encoding="utf-8") as stream:
            for row in rows:
                stream.write(json.dumps(row) + "\n")
        parquet = Path(scratch) / "corpus.parquet"
        pq.write_table(pa.Table.from_pylist(rows), parquet, row_group_size=10_000)
        del rows, texts
        sizes = {"jsonl": os.path.getsize(jsonl), "parquet": os.path.getsize(parquet)}
        results: dict[str, list[tuple[float, float]]] = {"jsonl": [], "parquet": []}
        for _ in range(args.rounds):
            for name, path in (("jsonl", jsonl), ("parquet", parquet)):
                output = Path(scratch) / f"kept.{name}"
                results[name].append(run(["dedup", str(path), "-o", str(output)]))
                os.remove(output)
        table = []
        for name, runs in results.items():
            rates = [args.rows / seconds / 1e3 for seconds, _ in runs]
            table.append(
                [
                    name,
                    f"{sizes[name] / 1e6:.1f} MB",
                    fmt_range(rates),
                    fmt(max(peak for _, peak in runs)),
                ]
            )
        report.heading("dedup FILE -o OUT", 2)
        report.table(["input", "file", "K rows/s median (min-max)", "peak anon MiB"], table)
        # Memory flat in the input's size: add --batch-size commits (and lets
        # go of) every batch, so a quarter of the file and all of it should
        # peak alike.
        quarter = Path(scratch) / "quarter.parquet"
        pq.write_table(pq.read_table(parquet).slice(0, args.rows // 4), quarter, row_group_size=10_000)
        flat = []
        for name, path, count in (("a quarter", quarter, args.rows // 4), ("all", parquet, args.rows)):
            store = Path(scratch) / f"{name}.simstore"
            seconds, peak = run(["add", str(store), str(path), "--batch-size", "10000"])
            flat.append([name, f"{count:,}", f"{fmt(count / seconds / 1e3)}K", fmt(peak)])
            shutil.rmtree(store, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.remove(store)
        report.heading("add STORE corpus.parquet --batch-size 10000", 2)
        report.table(["input", "rows", "rows/s", "peak anon MiB"], flat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.output:
        report.write(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
