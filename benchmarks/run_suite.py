"""Run the maintained benchmarks (``benchmarks/suite/``), each in a fresh process.

With ``--quick`` (what CI runs, after the tests) every script runs its smoke mode:
tiny sizes, systems in one process, optional peers that are not installed left
out (each says so on stderr); it proves the scripts still import and run against
the current package, and measures nothing worth keeping. Five scripts whose smoke
run alone takes 10-60 s (``SLOW`` below) are only imported unless ``--all`` (or
``--only``) names them. The whole smoke run took 22-37 s (21 s of CPU) on the 2-core VM
below, 64 s with the test suite running beside it. A script whose required package is missing
is skipped, saying why; any other failure fails the run. The run also fails if a
script left a file in the repository (``git status`` before and after), or if a
script's docstring lacks its command line (``python benchmarks/<dir>/<name>.py``)
or the machine it was measured on.

Run (from the repository root)::

    python benchmarks/run_suite.py --quick                # CI's smoke run
    python benchmarks/run_suite.py --quick --only bench_store bench_peers
    python benchmarks/run_suite.py --check-docs           # only the docstring check

Without ``--quick`` it would run every script at its full default size (hours);
the full runs are one command each, in ``benchmarks/README.md``.

Machine: the 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, CPython 3.11) shared with
other jobs, where the committed results were taken.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent

# The maintained scripts in the order they run, with the modules each needs to
# run at all (optional peers are the scripts' own business).
SUITE: dict[str, tuple[str, ...]] = {
    "bench_store": (),
    "bench_peers": (),
    "bench_online": (),
    "bench_scale": (),
    "bench_removals": (),
    "bench_pairs": (),
    "bench_layouts": (),
    "bench_query_engine": (),
    "bench_costs": (),
    "bench_fingerprint": (),
    "bench_huge_document": (),
    "bench_verify": (),
    "bench_quality": ("scipy",),
    "bench_columnar": ("pyarrow",),
    "bench_against": (),
    "bench_workers": (),
    "bench_dask": ("dask", "distributed", "pandas"),
    # Its Ray and Dask rows are left out (saying so) where those are not installed.
    "bench_distributed": (),
}
# Smoke runs that cost 10-60 s whatever the size: every measurement is a fresh
# `simstore` command-line process (bench_columnar, bench_against, bench_workers)
# or a fresh Dask cluster (bench_dask), or a local Ray's start and first Dataset
# (bench_distributed, 25-35 s). Without --all, --quick only imports them.
SLOW = {"bench_columnar", "bench_against", "bench_workers", "bench_dask", "bench_distributed"}
# Modules of the suite that are not benchmarks themselves (used by the scripts
# above); their docstrings are checked for the machine only where they run alone.
HELPERS = {"_simhash_worker", "realtext_quality", "realtext_report", "realtext_truth", "results_pages"}
MACHINE = re.compile(r"machine|\bVM\b|core", re.IGNORECASE)


def docstring_problems() -> list[str]:
    """Every script under suite/ and experiments/ whose docstring lacks its own
    command line or the machine it was measured on."""
    problems = []
    for folder in ("suite", "experiments"):
        for path in sorted((BENCHMARKS / folder).glob("*.py")):
            if path.stem in HELPERS or path.stem.startswith("_"):
                continue
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            command = f"benchmarks/{folder}/{path.name}"
            if command not in doc:
                problems.append(f"{command}: the docstring does not give its command line")
            if not MACHINE.search(doc):
                problems.append(f"{command}: the docstring does not name the machine it was measured on")
    return problems


def tree_state() -> str | None:
    """``git status --porcelain`` of the repository, or None outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def missing(modules: tuple[str, ...]) -> list[str]:
    return [module for module in modules if not _importable(module)]


def run_one(name: str, quick: bool, timeout: float) -> tuple[str, float, str]:
    """Run one script; returns (status, seconds, the tail of its output)."""
    command = [sys.executable, str(BENCHMARKS / "suite" / f"{name}.py")] + (["--quick"] if quick else [])
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - started, ""
    seconds = time.perf_counter() - started
    skipped = sorted({line for line in done.stderr.splitlines() if line.startswith("skipped:")})
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
    if done.returncode != 0:
        return f"failed (exit {done.returncode})", seconds, tail
    return "ok" + (f"; {'; '.join(skipped)}" if skipped else ""), seconds, tail


def import_one(name: str) -> tuple[str, float, str]:
    """Import one script in a fresh process (its ``main`` does not run)."""
    code = f"import sys; sys.path.insert(0, {str(BENCHMARKS / 'suite')!r}); import {name}"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return f"failed to import (exit {done.returncode})", seconds, done.stderr[-2000:]
    return "ok, imported only (a slow smoke run: --all runs it)", seconds, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each script's smoke mode (CI)")
    parser.add_argument("--only", nargs="*", choices=sorted(SUITE), help="run only these scripts")
    parser.add_argument(
        "--all", action="store_true", help="also run the slow smoke runs (" + ", ".join(sorted(SLOW)) + ")"
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds per script (default 120)")
    parser.add_argument("--check-docs", action="store_true", help="only check the scripts' docstrings")
    args = parser.parse_args(argv)

    failures = docstring_problems()
    for problem in failures:
        print(f"docstring: {problem}")
    if args.check_docs:
        return 1 if failures else 0

    before = tree_state()
    started = time.perf_counter()
    names = args.only or list(SUITE)
    for name in names:
        absent = missing(SUITE[name])
        if absent:
            print(f"{name:22} skipped: {', '.join(absent)} not installed")
            continue
        if name in SLOW and args.quick and not (args.all or args.only):
            status, seconds, tail = import_one(name)
        else:
            status, seconds, tail = run_one(name, args.quick, args.timeout)
        print(f"{name:22} {seconds:6.1f} s  {status}", flush=True)
        if not status.startswith("ok"):
            failures.append(name)
            print("    " + tail.replace("\n", "\n    "))
    after = tree_state()
    if before is not None and after != before:
        failures.append("the repository changed")
        print(f"the run changed the repository:\n{after}")
    print(
        f"total {time.perf_counter() - started:.1f} s; " + (f"FAILED: {failures}" if failures else "all ok")
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
