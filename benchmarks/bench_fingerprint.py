"""Speed of text fingerprinting: MB/s per core (English, Chinese, mixed),
against bare jieba segmentation and the PyPI ``simhash`` package, and
``fingerprint_many`` scaling over processes.

Texts are the base documents of benchmarks/corpora (KJV chapters for
English, Debian Reference sections for Chinese, which mix in English
commands). MB means 10**6 bytes of UTF-8 input. Each measurement is the
median of ``--rounds`` passes; per-document latencies are p50/p99 over all
passes.

Run (2-core x86-64 VM, Python 3.11, numpy 2.4, jieba 0.42.1, xxhash 4.1)::

    python benchmarks/bench_fingerprint.py --simhash-python /tmp/simhash-venv/bin/python

The ``simhash`` comparison runs in the given interpreter (it needs
numpy < 2) and is skipped if that does not exist. ``--only many`` runs just
the ``fingerprint_many`` part.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simstore.simhash import Fingerprinter, ShortTextWarning
from simstore.text import _HAN, _jieba_tokenizer, normalise, segment_han

_HAN_RUNS = re.compile(rf"[{_HAN}]+")

CORPORA = Path(__file__).resolve().parent / "corpora"


def load(name: str) -> list[str]:
    """Base documents of one corpus."""
    with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle]


def megabytes(texts: Sequence[str]) -> float:
    """Size of ``texts`` in MB of UTF-8."""
    return sum(len(t.encode()) for t in texts) / 1e6


def timed(function: Callable[[str], object], texts: Sequence[str], rounds: int) -> tuple[float, list[float]]:
    """Median seconds per pass over ``texts`` and every per-text latency."""
    passes, latencies = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        for text in texts:
            t0 = time.perf_counter()
            function(text)
            latencies.append(time.perf_counter() - t0)
        passes.append(time.perf_counter() - started)
    return statistics.median(passes), latencies


def report(label: str, texts: Sequence[str], seconds: float, latencies: list[float]) -> float:
    """Print one line of throughput and latency; return MB/s."""
    rate = megabytes(texts) / seconds
    p50, p99 = np.percentile(latencies, [50, 99]) * 1e3 if latencies else (float("nan"),) * 2
    print(f"  {label:44s} {rate:7.2f} MB/s   p50 {p50:7.3f} ms   p99 {p99:7.3f} ms   ({len(texts)} docs)")
    return rate


_PEER_CODE = r"""
import json, sys, time, statistics
from simhash import Simhash
texts = json.load(open(sys.argv[1], encoding="utf-8"))
passes = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    for t in texts:
        Simhash(t)
    passes.append(time.perf_counter() - t0)
print(statistics.median(passes))
"""


def peer_seconds(python: str | None, texts: Sequence[str], rounds: int) -> float | None:
    """Median seconds per pass of the PyPI simhash package, or None."""
    if not python or not Path(python).exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "texts.json")
        path.write_text(json.dumps(list(texts)), encoding="utf-8")
        out = subprocess.run(
            [python, "-c", _PEER_CODE, str(path), str(rounds)], capture_output=True, text=True
        )
    return float(out.stdout) if out.returncode == 0 else None


def single_core(args: argparse.Namespace) -> None:
    """Per-core throughput for English, Chinese and mixed text."""
    fp = Fingerprinter()
    tokenizer = _jieba_tokenizer()  # initialised before timing
    english, chinese = load("en_long"), load("zh_long")
    print(f"single core, default settings {fp.settings()}")
    for label, texts in (("English (KJV chapters)", english), ("Chinese (Debian Reference)", chinese)):
        seconds, lat = timed(fp.fingerprint, texts, args.rounds)
        ours = report(f"{label}: simstore fingerprint", texts, seconds, lat)
        if label.startswith("Chinese"):
            seconds, lat = timed(tokenizer.lcut, texts, args.rounds)
            bare = report(f"{label}: bare jieba lcut", texts, seconds, lat)
            print(f"  {'':44s} simstore / bare jieba = {ours / bare:.2f}")
            # jieba alone on the same Han runs simstore hands it: the floor.
            runs = [_HAN_RUNS.findall(normalise(t)) for t in texts]
            seconds, lat = timed(
                lambda i, runs=runs: segment_han(runs[int(i)]),
                [str(i) for i in range(len(texts))],
                args.rounds,
            )
            floor = megabytes(texts) / seconds
            print(f"  {label + ': jieba on its Han runs only':44s} {floor:7.2f} MB/s (of the whole text)")
            print(f"  {'':44s} simstore / jieba on Han runs = {ours / floor:.2f}")
        peer = peer_seconds(args.simhash_python, texts, args.rounds)
        if peer is not None:
            report(f"{label}: simhash (PyPI)", texts, peer, [])
    short = load("en_short") + load("zh_short")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShortTextWarning)
        seconds, lat = timed(fp.fingerprint, short, args.rounds)
    report("short texts (verses + fortunes)", short, seconds, lat)


def many(args: argparse.Namespace) -> None:
    """fingerprint_many over 1..N processes (start-up included)."""
    texts = (load("en_long") + load("zh_long")) * args.repeat
    fp = Fingerprinter()
    size = megabytes(texts)
    print(
        f"\nfingerprint_many on {len(texts)} docs, {size:.1f} MB (English + Chinese), worker start included"
    )
    base = None
    cores = len(os.sched_getaffinity(0))
    for processes in sorted({1, 2, cores}):
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        fp.fingerprint_many(texts, processes=processes)
        seconds = time.perf_counter() - started
        rate = size / seconds
        base = base or rate
        # CPU seconds by this process and by the (finished) workers: on a
        # machine shared with other work the wall time says little, but how
        # evenly the CPU time is split says what free cores would give.
        own_cpu = _cpu(resource.getrusage(resource.RUSAGE_SELF)) - _cpu(own)
        worker_cpu = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - _cpu(children)
        print(
            f"  processes={processes}: {seconds:6.2f} s  {rate:6.2f} MB/s  speed-up {rate / base:4.2f}"
            f"   CPU: this process {own_cpu:5.2f} s, workers {worker_cpu:5.2f} s"
            f"  (load average {os.getloadavg()[0]:.2f})"
        )


def _cpu(usage: resource.struct_rusage) -> float:
    """User plus system CPU seconds of a getrusage() result."""
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--simhash-python", default="/tmp/simhash-venv/bin/python")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=12, help="copies of the corpora for fingerprint_many")
    parser.add_argument("--only", choices=("single", "many"), help="run only one of the two parts")
    args = parser.parse_args(argv)
    if args.only != "many":
        single_core(args)
    if args.only != "single":
        many(args)


if __name__ == "__main__":
    main()
