"""Speed of text fingerprinting: MB/s per core, p50/p99 per document and peak
RSS, for English, Chinese, mixed and short texts, beside ``jieba.lcut``, the
PyPI ``simhash`` package and a bare floor; then ``fingerprint_many`` over one
and two processes on a large stream.

Texts are the base documents of benchmarks/corpora: English = KJV chapters
(``en_long``), Chinese = Debian Reference sections (``zh_long``, which mix in
English commands), mixed = each English chapter followed by a Chinese section
(made here, deterministic), short = KJV verses and Chinese fortunes. MB means
10**6 bytes of UTF-8 input.

Methods, timed in one process with the rounds interleaved (every method runs
once per round, so that load from other work on the machine hits all of them
alike); MB/s is the median over rounds:

- ``simstore v2 batch``: ``Fingerprinter().fingerprint_many(texts)`` (the
  default algorithm, ``simstore-text-simhash-2``), one process;
- ``simstore v2 warm``: the same on text it has seen (jieba's words for
  each Han run are remembered; near-duplicates repeat most runs); every
  other method starts each call with that memory cleared;
- ``simstore v1 batch``: the same with ``algorithm="simstore-text-simhash-1"``
  (XXH3 per feature string, the algorithm of stores made before it);
- ``floor v2``: normalise, tokenise and hash every token of the batch, no
  n-grams, counts or vote (what the vote and features cost on top);
- ``jieba.lcut``: jieba's default segmenter (HMM on) over each whole text;
- ``simhash (PyPI)``: ``simhash.Simhash(text).value`` per text (its own
  tokeniser, no segmentation of Chinese).

p50/p99 are per document through the one-text API (``fingerprint(text)`` for
simstore, one call per text for the others). Peak RSS is measured apart, in a
child process per (workload, method): the peak minus the RSS after loading
the texts and warming up.

Run (2-core x86-64 VM shared with other sessions, Python 3.11.7, numpy 2.4.6,
jieba 0.42.1, simhash 2.1.2)::

    python benchmarks/suite/bench_fingerprint.py --rounds 5 --out benchmarks/results/fingerprint_speed.md

``--only single|memory|flat|many`` runs one part: ``flat`` is the peak RSS of
``fingerprint_many`` over generator streams of ``--flat`` copies of English +
Chinese (1.6 MB a copy); ``many`` compares 1 and 2 processes, alternating, on
a stream of ``--repeat`` copies, worker start-up included.

``--only ab`` times the public calls (``fingerprint``, ``fingerprint_and_sketch``
one text at a time; ``fingerprint_many``, ``fingerprints_and_sketches`` on the
whole list), versions 2 and 1, on short texts (the ``en_short``/``zh_short``
corpora, all under 520 characters) and long ones (``en_long``/``zh_long``),
in microseconds a text (median of ``--rounds``, the calls interleaved, jieba's
and the token hashes' memories cleared before each call), and appends one JSON
line to ``--ab-json``. It uses only public names, so ``--tree DIR`` can time
another checkout of simstore (say, ``git archive layout | tar -x -C DIR``)
with this same script. Alternate the two trees a few times, then
``--only ab-report --ab-json FILE --out FILE.md`` gives each tree's median and
the ratios::

    git archive layout | (mkdir -p /tmp/base && tar -x -C /tmp/base)
    for i in 1 2 3 4; do
        python benchmarks/bench_fingerprint.py --only ab --tree /tmp/base --label layout --ab-json ab.jsonl
        python benchmarks/bench_fingerprint.py --only ab --label onepass --ab-json ab.jsonl
    done
    python benchmarks/bench_fingerprint.py --only ab-report --ab-json ab.jsonl --out ab.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _tree() -> Path:
    """The checkout whose simstore is timed: ``--tree DIR``, or this one."""
    if "--tree" in sys.argv[:-1]:
        return Path(sys.argv[sys.argv.index("--tree") + 1]).resolve()
    return Path(__file__).resolve().parents[2]


sys.path.insert(0, str(_tree()))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import parse_with_quick  # noqa: E402

from simstore import Fingerprinter, ShortTextWarning  # noqa: E402
from simstore.fingerprinting.text import _segment_cache  # noqa: E402

try:
    from simstore.fingerprinting.segmenter import _jieba_tokenizer
except ImportError:  # a simstore before the segmenter module
    from simstore.fingerprinting.text import _jieba_tokenizer  # type: ignore[attr-defined,no-redef]

ALGORITHM_1 = "simstore-text-simhash-1"

CORPORA = Path(__file__).resolve().parents[1] / "corpora"
METHODS = (
    "simstore v2 batch",
    "simstore v2 warm",
    "simstore v1 batch",
    "floor v2",
    "jieba.lcut",
    "simhash (PyPI)",
)


def load(name: str) -> list[str]:
    """Base documents of one corpus."""
    with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle]


# Documents per workload (``--docs``; None: every document of the corpora).
LIMIT: int | None = None


def workloads() -> dict[str, list[str]]:
    english, chinese = load("en_long")[:LIMIT], load("zh_long")[:LIMIT]
    mixed = [e + "\n\n" + c for e, c in zip(english, chinese, strict=False)]
    return {
        "English": english,
        "Chinese": chinese,
        "mixed": mixed,
        "short": (load("en_short") + load("zh_short"))[:LIMIT],
    }


def megabytes(texts: Sequence[str]) -> float:
    return sum(len(t.encode()) for t in texts) / 1e6


def _floor(texts: list[str]) -> object:
    """Tokens of the batch hashed the way version 2 does, nothing more."""
    from simstore.fingerprinting.tokens import TokenBatch

    return TokenBatch.of_texts(texts, hmm=True).token_hashes(0)


def _forget() -> None:
    """Clear what fingerprinting remembers between calls: jieba's words for
    each Han run, and (where this simstore has it) token hashes."""
    _segment_cache(True).clear()
    try:
        from simstore.fingerprinting.tokens import _token_cache
    except ImportError:  # a simstore before the one-pass TokenBatch
        return
    _token_cache(0).clear()


def _cold(function: Callable[[Any], object]) -> Callable[[Any], object]:
    """``function``, called with jieba's remembered runs forgotten first."""

    def cold(argument: Any) -> object:
        _forget()
        return function(argument)

    return cold


def methods() -> dict[str, tuple[Callable[[list[str]], object], Callable[[str], object]] | None]:
    """Each method as (batch call, one-text call); None if not installed."""
    v2, v1 = Fingerprinter(), Fingerprinter(algorithm=ALGORITHM_1)
    tokenizer = _jieba_tokenizer()  # a private jieba.Tokenizer, initialised here
    table: dict[str, tuple[Callable[[list[str]], object], Callable[[str], object]] | None] = {
        "simstore v2 batch": (_cold(v2.fingerprint_many), _cold(v2.fingerprint)),
        "simstore v2 warm": (v2.fingerprint_many, v2.fingerprint),
        "simstore v1 batch": (_cold(v1.fingerprint_many), _cold(v1.fingerprint)),
        "floor v2": (_cold(_floor), _cold(lambda text: _floor([text]))),
        "jieba.lcut": (lambda texts: [tokenizer.lcut(t) for t in texts], tokenizer.lcut),
    }
    try:
        from simhash import Simhash

        table["simhash (PyPI)"] = (
            lambda texts: [Simhash(t).value for t in texts],
            lambda text: Simhash(text).value,
        )
    except ImportError:
        table["simhash (PyPI)"] = None
    return table


def single(rounds: int, only_methods: Sequence[str]) -> list[dict[str, object]]:
    """Throughput (median of interleaved rounds) and per-document latency."""
    rows = []
    table = methods()
    for workload, texts in workloads().items():
        size = megabytes(texts)
        seconds: dict[str, list[float]] = {name: [] for name in only_methods if table.get(name)}
        cpu_seconds: dict[str, list[float]] = {name: [] for name in seconds}
        for _ in range(rounds):
            for name in seconds:
                batch, _ = table[name]  # type: ignore[misc]
                started, cpu_started = time.perf_counter(), time.process_time()
                batch(texts)
                seconds[name].append(time.perf_counter() - started)
                cpu_seconds[name].append(time.process_time() - cpu_started)
        for name in seconds:
            _, one = table[name]  # type: ignore[misc]
            latencies = []
            for text in texts:
                started = time.perf_counter()
                one(text)
                latencies.append(time.perf_counter() - started)
            p50, p99 = np.percentile(latencies, [50, 99]) * 1e3
            rate = size / statistics.median(seconds[name])
            cpu_rate = size / statistics.median(cpu_seconds[name])
            rows.append(
                {
                    "workload": workload,
                    "method": name,
                    "mb_s": rate,
                    "cpu_mb_s": cpu_rate,
                    "p50_ms": p50,
                    "p99_ms": p99,
                    "docs": len(texts),
                    "mb": size,
                    "rounds_mb_s": [size / s for s in seconds[name]],
                }
            )
            print(
                f"  {workload:8s} {name:18s} {rate:7.2f} MB/s ({cpu_rate:6.2f} of CPU time)  "
                f"p50 {p50:7.3f} ms  p99 {p99:8.3f} ms",
                flush=True,
            )
    return rows


def peak_rss_mib() -> float:
    """This process's peak RSS in MiB: VmHWM on Linux, which a new program
    (exec) starts afresh, unlike getrusage's ru_maxrss, which keeps the
    parent's peak across fork and exec."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_MEMORY_CHILD = """
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {bench_dir!r})
import bench_fingerprint as bench
bench.LIMIT = {limit!r}
texts = bench.workloads()[{workload!r}]
batch, one = bench.methods()[{method!r}]
batch(texts[:3])
before = bench.peak_rss_mib()
batch(texts)
print(before, bench.peak_rss_mib())
"""


def memory(only_methods: Sequence[str]) -> list[dict[str, object]]:
    """Peak RSS growth of one batch call, in a fresh process per method."""
    rows = []
    for workload in workloads():
        for name in only_methods:
            code = _MEMORY_CHILD.format(
                bench_dir=str(Path(__file__).resolve().parent), workload=workload, method=name, limit=LIMIT
            )
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if out.returncode:
                continue
            before, after = (float(v) for v in out.stdout.split())
            rows.append(
                {"workload": workload, "method": name, "rss_mib": after, "growth_mib": after - before}
            )
            print(f"  {workload:8s} {name:18s} peak RSS {after:7.1f} MiB (+{after - before:.1f} in the call)")
    return rows


_FLAT_CHILD = """
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {bench_dir!r})
import bench_fingerprint as bench
from simstore.fingerprinting.fingerprinter import Fingerprinter
before = bench.peak_rss_mib()
values = Fingerprinter().fingerprint_many(bench._stream({repeat}))
print(before, bench.peak_rss_mib(), len(values))
"""


def flat(repeats: Sequence[int]) -> list[dict[str, object]]:
    """Peak RSS of fingerprint_many over a stream of ``repeat`` copies of
    English + Chinese, in a fresh process each: flat if it does not grow."""
    rows = []
    print("\npeak RSS of fingerprint_many over a stream (generator), one process")
    for repeat in repeats:
        code = _FLAT_CHILD.format(bench_dir=str(Path(__file__).resolve().parent), repeat=repeat)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        before_text, after_text, count_text = out.stdout.split()
        before, after, count = float(before_text), float(after_text), int(count_text)
        size = megabytes(list(_stream(1))) * repeat
        rows.append({"mb": size, "docs": count, "rss_mib": after, "start_mib": before})
        print(f"  {size:7.1f} MB, {count} docs: peak RSS {after:.0f} MiB (at start {before:.0f})")
    return rows


def _stream(repeat: int) -> Iterator[str]:
    texts = load("en_long") + load("zh_long")
    for _ in range(repeat):
        yield from texts


def many(repeat: int, rounds: int) -> list[dict[str, object]]:
    """fingerprint_many over 1 and 2 processes on a stream, alternating,
    worker start-up included; CPU split and this process's peak RSS."""
    size = megabytes(list(_stream(1))) * repeat
    fingerprinter = Fingerprinter()
    print(f"\nfingerprint_many on a stream of {size:.1f} MB (English + Chinese), start-up included")
    rows = []
    for _ in range(rounds):
        for processes in (1, 2):
            own = resource.getrusage(resource.RUSAGE_SELF)
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            fingerprinter.fingerprint_many(_stream(repeat), processes=processes)
            seconds = time.perf_counter() - started
            own_cpu = _cpu(resource.getrusage(resource.RUSAGE_SELF)) - _cpu(own)
            worker_cpu = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - _cpu(children)
            peak = peak_rss_mib()
            load_average = os.getloadavg()[0]
            rows.append(
                {
                    "processes": processes,
                    "seconds": seconds,
                    "mb_s": size / seconds,
                    "own_cpu": own_cpu,
                    "worker_cpu": worker_cpu,
                    "load": load_average,
                }
            )
            print(
                f"  processes={processes}: {seconds:6.2f} s {size / seconds:6.2f} MB/s  CPU this process "
                f"{own_cpu:5.2f} s, workers {worker_cpu:5.2f} s  peak RSS {peak:.0f} MiB  "
                f"load {load_average:.2f}",
                flush=True,
            )
    for processes in (1, 2):
        times = [row["seconds"] for row in rows if row["processes"] == processes]
        print(f"  processes={processes}: median {statistics.median(times):.2f} s")  # type: ignore[type-var]
    return rows


AB_CALLS = ("fingerprint", "fingerprint_and_sketch", "fingerprint_many", "fingerprints_and_sketches")


def ab(rounds: int, label: str, path: Path) -> None:
    """Microseconds a text of each public call, short and long texts, both
    versions: one JSON line appended to ``path`` (see the module docstring)."""
    texts = {
        "short English": load("en_short"),
        "short Chinese": load("zh_short"),
        "long English": load("en_long"),
        "long Chinese": load("zh_long"),
    }
    fingerprinters = {"v2": Fingerprinter(), "v1": Fingerprinter(algorithm=ALGORITHM_1)}
    calls: dict[str, Callable[[list[str]], object]] = {}
    for version, fingerprinter in fingerprinters.items():
        one, one_sketched = fingerprinter.fingerprint, fingerprinter.fingerprint_and_sketch
        calls[f"{version} fingerprint"] = lambda batch, one=one: [one(text) for text in batch]
        calls[f"{version} fingerprint_and_sketch"] = lambda batch, f=one_sketched: [f(text) for text in batch]
        calls[f"{version} fingerprint_many"] = fingerprinter.fingerprint_many
        calls[f"{version} fingerprints_and_sketches"] = fingerprinter.fingerprints_and_sketches
    for call in calls.values():  # load jieba, warm numpy
        call(texts["short Chinese"][:20])
    seconds: dict[str, list[float]] = {}
    cpu_seconds: dict[str, list[float]] = {}
    for _ in range(rounds):
        for workload, batch in texts.items():
            for name, call in calls.items():
                _forget()
                started, cpu_started = time.perf_counter(), time.process_time()
                call(batch)
                key = f"{workload} | {name}"
                seconds.setdefault(key, []).append((time.perf_counter() - started) / len(batch) * 1e6)
                cpu_seconds.setdefault(key, []).append((time.process_time() - cpu_started) / len(batch) * 1e6)
    row = {
        "label": label,
        "tree": str(_tree()),
        "load": os.getloadavg()[0],
        "us_per_text": {key: statistics.median(values) for key, values in seconds.items()},
        "cpu_us_per_text": {key: statistics.median(values) for key, values in cpu_seconds.items()},
    }
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
    for key, value in row["us_per_text"].items():  # type: ignore[attr-defined]
        print(f"  {label:10s} {key:50s} {value:9.1f} us/text", flush=True)


def ab_report(path: Path, out: Path | None, argv: Sequence[str], measure: str = "us_per_text") -> None:
    """Each label's median over its runs, and the ratio first label / others:
    of wall time (``us_per_text``) or CPU time (``cpu_us_per_text``)."""
    runs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    labels = list(dict.fromkeys(run["label"] for run in runs))
    keys = list(runs[0][measure])
    medians = {
        label: {
            key: statistics.median(run[measure][key] for run in runs if run["label"] == label) for key in keys
        }
        for label in labels
    }
    base = labels[0]
    counts = ", ".join(f"{label}: {sum(run['label'] == label for run in runs)} runs" for label in labels)
    lines = [
        f"`python benchmarks/bench_fingerprint.py {' '.join(argv)}` ({counts}, alternating; "
        f"{'CPU' if measure.startswith('cpu') else 'wall'} time, median of the runs' medians)",
        "",
        "| texts | call | "
        + " | ".join(f"{label} us/text" for label in labels)
        + " | "
        + " | ".join(f"{base} / {label}" for label in labels[1:])
        + " |",
        "|---|---|" + "---|" * (2 * len(labels) - 1),
    ]
    for key in keys:
        workload, call = key.split(" | ")
        values = [medians[label][key] for label in labels]
        ratios = [values[0] / value for value in values[1:]]
        lines.append(
            f"| {workload} | {call} | "
            + " | ".join(f"{value:.1f}" for value in values)
            + " | "
            + " | ".join(f"{ratio:.2f}x" for ratio in ratios)
            + " |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text, encoding="utf-8")


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def write_markdown(
    path: Path,
    single_rows: list[dict[str, object]],
    memory_rows: list[dict[str, object]],
    flat_rows: list[dict[str, object]],
    many_rows: list[dict[str, object]],
    argv: Sequence[str],
) -> None:
    lines = [f"`python benchmarks/suite/bench_fingerprint.py {' '.join(argv)}`", ""]
    if single_rows:
        peaks = {(r["workload"], r["method"]): r for r in memory_rows}
        lines += [
            "| text | method | MB/s (wall) | MB/s (CPU time) | p50 ms/doc | p99 ms/doc "
            "| peak RSS MiB (+ in call) |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in single_rows:
            peak = peaks.get((row["workload"], row["method"]))
            rss = f"{peak['rss_mib']:.0f} (+{peak['growth_mib']:.0f})" if peak else ""
            lines.append(
                f"| {row['workload']} ({row['docs']} docs, {row['mb']:.2f} MB) | {row['method']} | "
                f"{row['mb_s']:.2f} | {row['cpu_mb_s']:.2f} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} "
                f"| {rss} |"
            )
    if flat_rows:
        lines += ["", "| stream MB | docs | peak RSS MiB | RSS at start MiB |", "|---|---|---|---|"]
        for row in flat_rows:
            lines.append(
                f"| {row['mb']:.1f} | {row['docs']} | {row['rss_mib']:.0f} | {row['start_mib']:.0f} |"
            )
    if many_rows:
        lines += [
            "",
            "| processes | s | MB/s | CPU this process s | CPU workers s | load |",
            "|---|---|---|---|---|---|",
        ]
        for row in many_rows:
            lines.append(
                f"| {row['processes']} | {row['seconds']:.2f} | {row['mb_s']:.2f} | "
                f"{row['own_cpu']:.2f} | {row['worker_cpu']:.2f} | {row['load']:.2f} |"
            )
    path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=30, help="copies of English + Chinese for the stream")
    parser.add_argument("--many-rounds", type=int, default=2)
    parser.add_argument(
        "--only", nargs="*", choices=("single", "memory", "flat", "many", "ab", "ab-report", "none")
    )
    parser.add_argument("--tree", type=Path, help="time the simstore of this checkout (ab)")
    parser.add_argument("--label", default="this", help="the name of this run's tree (ab)")
    parser.add_argument("--ab-json", type=Path, default=Path("ab.jsonl"), help="ab's results, appended")
    parser.add_argument("--cpu", action="store_true", help="ab-report: CPU time in place of wall time")
    parser.add_argument("--flat", type=int, nargs="*", default=[1, 16], help="stream sizes (copies) for flat")
    parser.add_argument("--methods", nargs="*", default=list(METHODS))
    parser.add_argument("--out", type=Path, help="write the tables as markdown here")
    parser.add_argument("--docs", type=int, default=None, help="documents per workload (default: all)")
    quick = {"rounds": 1, "repeat": 1, "many_rounds": 1, "flat": [1], "docs": 5, "only": ["single"]}
    args = parse_with_quick(parser, quick, argv)
    global LIMIT
    LIMIT = args.docs
    parts = set(args.only or ("single", "memory", "flat", "many"))
    if "none" in parts:
        return
    warnings.simplefilter("ignore", ShortTextWarning)
    written_argv = sys.argv[1:] if argv is None else argv
    if "ab" in parts:
        ab(args.rounds, args.label, args.ab_json)
        return
    if "ab-report" in parts:
        ab_report(args.ab_json, args.out, written_argv, "cpu_us_per_text" if args.cpu else "us_per_text")
        return
    warnings.simplefilter("ignore", ShortTextWarning)
    print(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
        f"settings {Fingerprinter().settings()}"
    )
    single_rows = single(args.rounds, args.methods) if "single" in parts else []
    memory_rows = memory(args.methods) if "memory" in parts else []
    flat_rows = flat(args.flat) if "flat" in parts else []
    many_rows = many(args.repeat, args.many_rounds) if "many" in parts else []
    if args.out:
        written_argv = sys.argv[1:] if argv is None else argv
        write_markdown(args.out, single_rows, memory_rows, flat_rows, many_rows, written_argv)


if __name__ == "__main__":
    main()
