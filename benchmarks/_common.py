"""Shared helpers for the benchmark scripts in this folder.

- :func:`machine` describes the machine (CPU model, cores, RAM, OS, Python,
  numpy, py-lmdb and LMDB versions) for the header of every report;
- :func:`peak_rss_mib` reads this process's peak resident set size with
  :func:`resource.getrusage`, and :func:`rss_breakdown_mib` the current
  anonymous / file-backed split from ``/proc/self/status`` (Linux);
- :func:`run_isolated` runs a function in a fresh ``spawn`` process, so each
  system's peak RSS is its own;
- :func:`percentiles` and :func:`summary` turn samples into medians and
  percentiles (never means), :func:`min_med_max` summarises repeats;
- :class:`Report` prints markdown (headings, tables, notes) to stdout and
  keeps it for ``--output``;
- :class:`AnonPeakSampler` records the peak anonymous RSS of a block (memory
  beyond the page cache), :func:`round_percentiles` gives percentiles per
  timed pass, :func:`versions` the installed versions of named packages;
- :func:`parse_with_quick` adds every maintained script's ``--quick`` smoke mode
  (tiny sizes, a few seconds; ``run_suite.py --quick`` runs them all in CI), and
  :func:`have` / :func:`skip_peer` leave out an optional peer that is not installed,
  saying so.

Nothing here imports simstore, so any script can use it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import platform
import resource
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

MIB = 1024 * 1024


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1024**3)
    except (ValueError, OSError, AttributeError):
        return None


def _filesystem_of(path: str) -> str:
    """The mount point and file-system type holding ``path`` (Linux), else ``?``."""
    try:
        real = os.path.realpath(path)
        best = ("", "?")
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                mount_point, fs_type = fields[1], fields[2]
                inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) > len(best[0]):
                    best = (mount_point, fs_type)
        return f"{best[1]} at {best[0]}" if best[0] else "?"
    except OSError:
        return "?"


def machine(data_dir: str | None = None) -> dict[str, str]:
    """A description of this machine and software, for report headers."""
    ram = _ram_gib()
    info = {
        "cpu": f"{_cpu_model()} ({platform.machine()})",
        "cores": str(os.cpu_count()),
        "ram": f"{ram:.1f} GiB" if ram is not None else "?",
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy": np.__version__,
    }
    try:
        import lmdb

        info["lmdb"] = f"py-lmdb {lmdb.__version__}, LMDB {'.'.join(map(str, lmdb.version()))}"
    except ImportError:
        info["lmdb"] = "not installed"
    if data_dir is not None:
        info["data dir"] = f"{data_dir} ({_filesystem_of(data_dir)})"
    info["load average"] = load_average()
    return info


def drop_page_cache(path: str) -> None:
    """Ask the kernel to forget the store's cached pages (first-pass latency
    then includes reading them), where the platform allows it."""
    if hasattr(os, "posix_fadvise"):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def parse_count(text: str) -> int:
    """``10M`` -> 10_000_000; plain integers pass through."""
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    return int(float(number) * scale)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: other work on the machine skews timings."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "?"


def source_state(root: str | os.PathLike[str], package: str) -> str:
    """The git commit of ``root`` (read-only query) and a digest of ``package``'s
    ``*.py`` files (subpackages included), so a result names the exact code it measured."""
    import hashlib
    import subprocess

    digest = hashlib.sha256()
    base = Path(root, package)
    for source in sorted(base.rglob("*.py")):
        digest.update(source.relative_to(base).as_posix().encode())
        digest.update(source.read_bytes())
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    return f"commit {commit}, {package}/**/*.py sha256 {digest.hexdigest()[:12]}"


def command_line() -> str:
    """The command that started this script, shell-quoted."""
    return " ".join(shlex.quote(arg) for arg in [Path(sys.executable).name, *sys.argv])


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB.

    ``ru_maxrss`` is in KiB on Linux and bytes on macOS. It counts file-backed
    pages too, so pages of an mmap'ed LMDB file that were touched are included.
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024


def rss_breakdown_mib() -> dict[str, float]:
    """Current RSS split into anonymous and file-backed pages (Linux only; else empty)."""
    wanted = {"RssAnon": "anon", "RssFile": "file", "VmRSS": "total"}
    found: dict[str, float] = {}
    try:
        with open("/proc/self/status", encoding="utf-8") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in wanted:
                    found[wanted[name]] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return found


def _isolated_entry(
    func: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[T, float, dict[str, float]]:
    result = func(*args, **kwargs)
    return result, peak_rss_mib(), rss_breakdown_mib()


# Set by ``--quick`` (:func:`parse_with_quick`): a smoke run calls the systems in
# this process, since each spawn child would cost a second of imports on the
# 2-core VM and its peak RSS means nothing at tiny sizes anyway.
_IN_PROCESS = False


def run_isolated(func: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float, dict[str, float]]:
    """Run ``func(*args, **kwargs)`` in a fresh ``spawn`` process (in this one
    under ``--quick``).

    Returns:
        ``(result, peak RSS in MiB, current RSS breakdown at the end)`` of the
        child. ``func`` must be a module-level function and its arguments and
        result picklable.
    """
    if _IN_PROCESS:
        return _isolated_entry(func, args, kwargs)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(_isolated_entry, (func, args, kwargs))


def baseline_rss_mib() -> float:
    """Peak RSS of a fresh spawn child that only imported this module and numpy."""
    _, peak, _ = run_isolated(_noop)
    return peak


def _noop() -> None:
    return None


def percentiles(samples: Iterable[float], points: Sequence[float] = (50, 99, 99.9)) -> list[float]:
    """The given percentiles of ``samples`` (linear interpolation)."""
    values = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=np.float64)
    if values.size == 0:
        return [float("nan")] * len(points)
    return [float(value) for value in np.percentile(values, points)]


def summary(samples: Iterable[float]) -> dict[str, float]:
    """Median, p99, p99.9 and max of ``samples``."""
    values = np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples, dtype=np.float64)
    p50, p99, p999 = percentiles(values)
    return {
        "p50": p50,
        "p99": p99,
        "p99.9": p999,
        "max": float(values.max()) if values.size else float("nan"),
    }


def min_med_max(values: Sequence[float]) -> tuple[float, float, float]:
    """Minimum, median and maximum of repeated measurements."""
    ordered = sorted(values)
    return ordered[0], float(np.median(ordered)), ordered[-1]


def fmt(value: float | int | str | None, digits: int = 3) -> str:
    """A number with ``digits`` significant digits and thousands separators."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if value != value:  # NaN
        return "-"
    magnitude = abs(value)
    if magnitude >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    if magnitude == 0:
        return "0"
    decimals = max(0, digits - 1 - int(np.floor(np.log10(magnitude))))
    return f"{value:,.{decimals}f}"


def fmt_range(values: Sequence[float], digits: int = 3) -> str:
    """``median (min-max)`` of repeated measurements."""
    low, mid, high = min_med_max(values)
    if len(values) == 1:
        return fmt(mid, digits)
    return f"{fmt(mid, digits)} ({fmt(low, digits)}-{fmt(high, digits)})"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table; numbers go through :func:`fmt`, others through ``str``."""

    def cell(value: object) -> str:
        if isinstance(value, float | int | np.integer | np.floating) and not isinstance(value, bool):
            return fmt(value)  # type: ignore[arg-type]
        return "-" if value is None else str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


class Report:
    """Markdown printed as it is produced, and kept for ``--output``."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, text: str = "") -> None:
        print(text, flush=True)
        self.parts.append(text)

    def heading(self, text: str, level: int = 2) -> None:
        self.add(f"{'#' * level} {text}\n")

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        self.add(markdown_table(headers, rows) + "\n")

    def header(self, title: str, data_dir: str | None = None, code: str | None = None) -> None:
        """Title, command line, date, code state and machine."""
        self.heading(title, 1)
        self.add(f"Command: `{command_line()}`  ")
        if code is not None:
            self.add(f"Code: {code}  ")
        self.add(f"Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
        self.table(["machine", ""], list(machine(data_dir).items()))

    def write(self, path: str | os.PathLike[str]) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("\n".join(self.parts) + "\n", encoding="utf-8")


class Stopwatch:
    """``with Stopwatch() as watch: ...`` then ``watch.seconds``."""

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self._start


class AnonPeakSampler:
    """``with AnonPeakSampler() as sampler: ...`` then ``sampler.peak_mib``: the
    largest anonymous RSS (``RssAnon``, Linux) seen while the block ran.

    ``ru_maxrss`` counts touched pages of mmap'ed files, which the kernel may
    drop at any time; anonymous pages are the memory a process really holds.
    A thread samples ``/proc/self/status`` every ``interval`` seconds, so a
    spike shorter than that may be missed.
    """

    def __init__(self, interval: float = 0.005) -> None:
        import threading

        self.interval = interval
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        anon = rss_breakdown_mib().get("anon")
        if anon is not None and anon > self.peak_mib:
            self.peak_mib = anon

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> AnonPeakSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def round_percentiles(latencies_us: np.ndarray, rounds: int) -> dict[str, list[float]]:
    """p50, p99 and p99.9 of each of ``rounds`` equal passes over the queries,
    so that a figure can be given as median (min-max) over the passes."""
    passes = np.array_split(np.asarray(latencies_us, dtype=np.float64), rounds)
    found: dict[str, list[float]] = {"p50": [], "p99": [], "p99.9": []}
    for samples in passes:
        p50, p99, p999 = percentiles(samples)
        found["p50"].append(p50)
        found["p99"].append(p99)
        found["p99.9"].append(p999)
    return found


def versions(*distributions: str) -> dict[str, str]:
    """Installed versions of the named distributions (``-`` when missing)."""
    from importlib import metadata

    found = {}
    for name in distributions:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "-"
    return found


def write_result_json(path: Path, result: dict[str, Any], *, update: bool) -> None:
    """Write a run's ``result`` to ``path``. With ``update``, an existing file
    keeps the systems not measured now (those measured now replace theirs),
    and the run is listed in its ``updates``."""
    if update and path.exists():
        previous: dict[str, Any] = json.loads(path.read_text())
        previous["systems"].update(result["systems"])
        previous.setdefault("updates", []).append(
            {key: result[key] for key in ("command", "date", "code", "load average") if key in result}
            | {"systems": sorted(result["systems"])}
        )
        if "exact" in result:
            previous["exact"] = previous.get("exact", True) and result["exact"]
        result = previous
    path.write_text(json.dumps(result, indent=1, default=float) + "\n")


QUICK_HELP = (
    "smoke run: tiny sizes and no optional peer that is not installed, a few seconds; "
    "proves the script runs (CI: benchmarks/run_suite.py --quick), measures nothing worth keeping"
)


def parse_with_quick(
    parser: argparse.ArgumentParser, quick: dict[str, Any], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse the command line with a ``--quick`` flag: with it, ``quick`` (option
    destination -> value) replaces those options' defaults (options given on the
    command line still win) and :func:`run_isolated` stays in this process."""
    global _IN_PROCESS
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    known, _ = parser.parse_known_args(argv)
    if known.quick:
        parser.set_defaults(**quick)
        _IN_PROCESS = True
        print(
            "quick smoke run: tiny sizes, no spawn children; the figures are not measurements",
            file=sys.stderr,
        )
    return parser.parse_args(argv)


def have(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def skip_peer(name: str, why: str) -> None:
    """Say on stderr that an optional peer is left out of this run, and why."""
    print(f"skipped: {name} ({why})", file=sys.stderr)


def timed_passes(query_once: Any, items: list[Any], rounds: int) -> np.ndarray:
    """Latency in µs of ``query_once(item)`` for every item, ``rounds`` times."""
    clock = time.perf_counter_ns
    latencies = np.empty(len(items) * rounds, dtype=np.int64)
    position = 0
    for _ in range(rounds):
        for item in items:
            started = clock()
            query_once(item)
            latencies[position] = clock() - started
            position += 1
    return latencies / 1000
