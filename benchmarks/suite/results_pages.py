"""The current-figures parts of ``benchmarks/RESULTS.md`` and ``docs/measured.md``.

Called by ``plot_results.py`` (its command line: ``python benchmarks/suite/plot_results.py``);
nothing here measures. :data:`CURRENT` names, for every maintained benchmark, the
result files that hold its latest committed run; each file's own header gives its
command line, code and date, and its first table is copied as the headline. Older
runs stay in ``benchmarks/results/`` and their analyses in ``benchmarks/HISTORY.md``.
When a benchmark is re-run, point its entry here at the new file and run
``plot_results.py`` again.

Machine of every file listed: one of the project's 2-core VMs (KVM, 23.5 GiB RAM, ext4,
CPython 3.11.7, numpy 2.4.6, py-lmdb 3.0.0; an AMD EPYC one until 2026-11-28, an Intel
Xeon one since), shared with other jobs; each file names its CPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: The maintained scripts' folder.
SUITE = Path(__file__).resolve().parent

# script -> (what it measures, [(result file, what that run is)]), latest runs only.
CURRENT: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "bench_peers.py": (
        "simstore beside faiss, `simhash`, numpy brute force and a raw py-lmdb floor",
        [("peers_format2.md", "1M and 10M, k = 3 in Manku's 10 tables (format 2)")],
    ),
    "bench_online.py": (
        "sustained single adds; durable writers",
        [
            ("online_1M.md", "single adds into 1M (format 1)"),
            ("online_10M.md", "single adds into 10M (format 1)"),
            ("writers_10M_log.md", "durable writer processes into 10M, with the write-ahead log"),
        ],
    ),
    "bench_scale.py": (
        "one store grown to 100M, then single adds",
        [
            ("scale_k3_multi_index_100M.md", "k = 3, format 3 (the default layout of k = 3 since 6b99493)"),
            ("scale_k5_stepped_100M.md", "k = 5, format 4, large joins in steps, beside whole joins"),
            ("scale_k5_scratch_100M.md", "k = 5, format 4, values built in scratch files (since c196a4b)"),
            ("scale_k5_format4_100M.md", "k = 5, format 4, joins a stretch at a time (since c5c540c)"),
            ("scale_k5_madv_random_100M.md", "k = 5, Manku's 21 tables (format 2), no readahead"),
            ("scale_k3_madv_random_100M.md", "k = 3, Manku's 10 tables (format 2), no readahead"),
            ("scale_k3_url.md", "k = 3, URL keys (before the no-readahead change)"),
        ],
    ),
    "bench_query_engine.py": (
        "format 2 and format 3 (multi-index) stores beside faiss `IndexBinaryMultiHash` and brute force",
        [
            ("query_engine_k3_1M.md", "1M, k = 3 and 5 (the README's comparison)"),
            ("query_engine_k5_10M.md", "10M, k = 5 (the README's comparison)"),
            ("query_engine_k3_10M.md", "10M, k = 3"),
            ("query_engine_k8_1M.md", "1M, k = 8"),
            ("query_engine_10M_k8.md", "10M, k = 8"),
        ],
    ),
    "bench_store.py": (
        "`add_many`, `query`, single adds beside brute force and the LMDB floor",
        [("bench_store_1M.md", "1M (format 1: no run since format 2)")],
    ),
    "bench_removals.py": (
        "removals, `compact()`, `shrink` and refilling",
        [
            ("removals_10M.md", "10M, half removed in calls of 100K keys"),
            ("removals_10M_1M_calls.md", "the same in calls of 1M keys"),
        ],
    ),
    "bench_pairs.py": (
        "batch all-pairs within k",
        [("bench_pairs_1M.md", "1M"), ("bench_pairs_10M.md", "10M")],
    ),
    "bench_layouts.py": (
        "table layouts the planner weighs",
        [("bench_layouts_1M.md", "1M"), ("bench_layouts_10M.md", "10M")],
    ),
    "bench_costs.py": ("the cost model's constants", [("bench_costs_1M.md", "1M")]),
    "bench_fingerprint.py": (
        "text fingerprinting speed",
        [("fingerprint_speed_quiet.md", "on a quiet machine (2026-11-27, code at 89f81b2)")],
    ),
    "bench_huge_document.py": ("one huge document", [("bench_huge_document.md", "1-29 MB")]),
    "bench_verify.py": ("what the verification sketch costs", [("verify_200K.md", "200K texts")]),
    "bench_quality.py": (
        "fingerprint quality on real text",
        [("quality_real.md", "`--real`, every corpus")],
    ),
    "bench_columnar.py": ("Parquet against JSON lines", [("columnar_200K.md", "200K rows")]),
    "bench_against.py": ("`dedup --against`", [("against_30k.md", "30K store rows, 10K query rows")]),
    "bench_workers.py": ("fingerprinting workers", [("workers_40k.md", "40K rows")]),
    "bench_dask.py": (
        "`simstore.dask` beside one machine",
        [("bench_dask_1M.md", "1M"), ("bench_dask_10M.md", "10M")],
    ),
    "bench_distributed.py": (
        "`simstore.ray` (and `simstore.dask`) beside one machine",
        [
            ("distributed_text_1M.md", "text dedup end to end, 1M documents"),
            (
                "distributed_pairs_10M.md",
                "pairs and clusters, 10M fingerprints (Dask shuffling bare fingerprints)",
            ),
            (
                "distributed_pairs_1M.md",
                "pairs and clusters, 1M fingerprints (Dask shuffling bare fingerprints)",
            ),
            (
                "distributed_1M_10M.md",
                "pairs and clusters, 1M and 10M fingerprints, before Dask shuffled bare fingerprints "
                "(its text table predates `order_column`)",
            ),
        ],
    ),
}

# The two scale runs docs/measured.md summarises (labels in results/scale.jsonl).
SCALE_LABELS = (
    "k=5 default layout, format 4, joins prepared in steps (session 51)",
    "k=3 default layout, no readahead (commit 01c9cc2)",
)


def header_of(path: Path) -> dict[str, str]:
    """Command, code and date from a result file's header (what ``_common.Report``
    writes; a few hand-made files give less)."""
    text = path.read_text(encoding="utf-8")
    found = {}
    for key, pattern in (
        ("command", r"^(?:Command: |- command: )`?(.+?)`?\s*$"),
        ("code", r"^Code: (.+?)\s*$"),
        ("date", r"^Date: (.+?)\s*$"),
    ):
        match = re.search(pattern, text, re.MULTILINE)
        if match:
            found[key] = match.group(1)
    if "command" not in found:
        match = re.search(r"^`(python [^`]+)`\s*$", text, re.MULTILINE)
        if match:
            found["command"] = match.group(1)
    if "command" in found:
        found["command"] = runnable(found["command"])
    return found


def runnable(command: str) -> str:
    """``command`` with a maintained script's path as it is now: runs made
    before the scripts moved into ``benchmarks/suite/`` recorded
    ``benchmarks/bench_*.py``."""

    def moved(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"benchmarks/suite/{name}" if (SUITE / name).exists() else match.group(0)

    return re.sub(r"benchmarks/(bench_\w+\.py)", moved, command)


def first_table(path: Path, skip_machine: bool = True) -> str:
    """The first markdown table of a result file (not the machine table)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tables: list[list[str]] = []
    current: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    for table in tables:
        if skip_machine and table[0].startswith("| machine"):
            continue
        return "\n".join(table)
    return ""


def latest_section() -> str:
    """Every maintained benchmark's latest committed run: where, when, how, and its
    headline table."""
    parts = ["## The latest run of each maintained benchmark\n"]
    parts.append(
        "Generated from the result files' own headers by `python benchmarks/suite/plot_results.py` "
        "(the list of current files is `CURRENT` in `benchmarks/suite/results_pages.py`). Each "
        "headline is the file's first table; the file has the rest. Machine: one of the project's "
        "2-core VMs (23.5 GiB RAM, ext4, CPython 3.11.7; an AMD EPYC one until 2026-11-28, an Intel "
        "Xeon one since: each file names its CPU), shared with other jobs, so compare figures "
        "across rows with care; every file gives its load average. Code moves on "
        "between runs: each file names the commit it measured.\n"
    )
    rows = []
    for script, (what, files) in CURRENT.items():
        for name, run in files:
            header = header_of(RESULTS / name)
            rows.append(
                f"| `{script}` | {what} | [`{name}`](results/{name}): {run} | "
                f"{header.get('date', '-')} | {header.get('code', '-')} |"
            )
    parts.append(
        "| script | measures | current result | date | code |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    for script, (_, files) in CURRENT.items():
        for name, run in files:
            path = RESULTS / name
            header = header_of(path)
            parts.append(f"### `{script}`: {run}\n")
            parts.append(
                f"`{header.get('command', '(command: see the file)')}` "
                f"({header.get('date', 'date: see the file')}; [`results/{name}`](results/{name}))\n"
            )
            table = first_table(path)
            if table:
                parts.append(table + "\n")
    return "\n".join(parts)


def scale_rows() -> list[dict[str, Any]]:
    """The batch steps at 10M, 50M and 100M and the single adds of the scale runs
    in :data:`SCALE_LABELS`, from ``results/scale.jsonl``."""
    steps = [json.loads(line) for line in (RESULTS / "scale.jsonl").read_text().splitlines() if line]
    rows = []
    for label in SCALE_LABELS:
        mine = [step for step in steps if step.get("label") == label]
        batches = {step["docs"]: step for step in mine if "docs_per_s" in step}
        single = next((step for step in mine if "single_docs_per_s" in step), None)
        for docs in (10_000_000, 50_000_000, 100_000_000):
            if docs in batches:
                rows.append({"label": label, "single": single, **batches[docs]})
    return rows


def scale_table() -> str:
    rows = [
        "| run | docs | `add_many` docs/s | peak anon MiB | file B/doc | used B/doc "
        "| warm query p50 / p99 µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in scale_rows():
        rows.append(
            f"| {row['label']} | {row['docs'] / 1e6:.0f}M | {row['docs_per_s']:,.0f} | "
            f"{row['peak_anon_mib']:,.0f} | {row['file_b_per_doc']:.0f} | {row['used_b_per_doc']:.0f} | "
            f"{row['warm_p50_us']:,.0f} / {row['warm_p99_us']:,.0f} |"
        )
    singles = {row["label"]: row["single"] for row in scale_rows() if row["single"]}
    notes = [
        f"- {label}: {single['single_adds']:,} single adds (`sync=False`) after it at "
        f"{single['single_docs_per_s']:,.0f} docs/s, p50 {single['add_p50_us']:.1f} µs, "
        f"p99 {single['add_p99_us']:.1f} µs"
        for label, single in singles.items()
    ]
    return "\n".join(rows) + "\n\n" + "\n".join(notes) + "\n"


def peers_table(peers: list[dict[str, Any]]) -> str:
    """simstore and its peers at each N of the latest peers run (medians over repeats)."""
    import numpy as np

    rows = [
        "| N | system | build docs/s | query p50 µs | query p99 µs | bytes/doc (file) | recall |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in peers:
        for name, system in run["systems"].items():
            if "query us" not in system:
                continue
            check = system.get("check") or {}
            size = system.get("bytes/doc on disk", system.get("bytes/doc saved file"))
            rows.append(
                f"| {run['n']:,} | {system.get('label', name)} | "
                f"{float(np.median(system['build docs/s'])):,.0f} | "
                f"{float(np.median(system['query us']['p50'])):.1f} | "
                f"{float(np.median(system['query us']['p99'])):.1f} | "
                f"{f'{size:.0f}' if isinstance(size, int | float) else '-'} | "
                f"{check.get('recall', '-')} |"
                if "build docs/s" in system
                else f"| {run['n']:,} | {system.get('label', name)} | - | "
                f"{float(np.median(system['query us']['p50'])):.1f} | "
                f"{float(np.median(system['query us']['p99'])):.1f} | - | {check.get('recall', '-')} |"
            )
    return "\n".join(rows) + "\n"


def latest_peers(peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The peers runs of the latest day (older sizes measured older code)."""
    day = max(run.get("date", "")[:10] for run in peers)
    return [run for run in peers if run.get("date", "")[:10] == day]


#: The query-engine reports whose first tables the measured page shows.
README_COMPARISON = ("query_engine_k3_1M.md", "query_engine_k5_10M.md")


def query_engine_tables() -> str:
    """The README's comparison: each report's command, date and first table."""
    parts = []
    for name in README_COMPARISON:
        path = RESULTS / name
        header = header_of(path)
        parts.append(
            f"`{runnable(header.get('command', name))}` ({header.get('date', '-')}; "
            f"`benchmarks/results/{name}`: its other tables have the other k, the builds and the bytes):\n"
        )
        parts.append(first_table(path) + "\n")
    return "\n".join(parts)


def scale_commands() -> str:
    """The scale runs' command lines and dates, from their reports' headers."""
    lines = []
    for name in ("scale_k5_stepped_100M.md", "scale_k3_madv_random_100M.md"):
        header = header_of(RESULTS / name)
        lines.append(f"- `{header.get('command', name)}` ({header.get('date', '-')})")
    return "\n".join(lines)


def measured_page(peers: list[dict[str, Any]]) -> str:
    """``docs/measured.md``: the current headline figures, their commands and machine."""
    current = latest_peers(peers)
    first = current[0]
    return f"""# Measured: the current figures

Generated by `python benchmarks/suite/plot_results.py` from the results' JSON
(`benchmarks/results/peers_*.json`, `scale.jsonl`) and the query-engine reports; do not
edit by hand. These are the
latest committed runs only: `benchmarks/RESULTS.md` has every maintained benchmark's latest
run, and `benchmarks/HISTORY.md` the dated runs before them, with what changed the figures.

All were taken on one of the project's 2-core VMs (KVM, 23.5 GiB RAM, ext4, CPython 3.11.7,
numpy 2.4.6, py-lmdb 3.0.0; an AMD EPYC one until 2026-11-28, an Intel Xeon one since: each
report names its CPU), shared with other jobs: its speed swings by up to 1.6x for minutes
at a time, so compare within a table, where systems alternate, with care.
A claim that one version of simstore is faster than another comes from an A/B in one
process or from alternating runs (`benchmarks/experiments/`), never from two of these tables.

## simstore beside faiss's multi-index hashing (the README's comparison)

{query_engine_tables()}
## Manku's tables (format 2) beside faiss, simhash and brute force

`{runnable(first.get("command", "python benchmarks/suite/bench_peers.py"))}`, {first.get("date", "")}:
random 64-bit fingerprints, k = 3 in the layout that was then the default (Manku's 10
tables), one thread each, every answer checked against brute force; medians over
{first.get("repeats", "?")} builds and {first.get("rounds", "?")} timed passes.

{peers_table(current)}
Bytes/doc: simstore and the floor are the LMDB file's allocated blocks, the others the
index saved to a file (an in-memory index persists nothing by itself). Restart, memory
and batched queries are in `benchmarks/RESULTS.md`; the full report is
`benchmarks/results/peers_format2.md`.

## One store grown to 100M

{scale_commands()}

Random fingerprints, int keys, `add_many` in 10M batches, then single adds; queries are
four in five stored fingerprints with 0..k bits flipped.

{scale_table()}
A query probes every run in every table, so its time grows with the runs a bulk load
leaves; `store.compact()` after a load joins them, and `add_many` joins them as it goes.
At k = 5 (format 4) a join of 16M entries or more is prepared a step at a time, each
batch paying about 2.5 s of steps: the store held 7 runs at 100M, a 70M join under way
(its report has the same growth with whole joins beside it, alternating). The k = 3 run
is format 2 (Manku's 10 tables). The reports are
`benchmarks/results/scale_k5_stepped_100M.md` and `scale_k3_madv_random_100M.md`.

## Reproduce

Every maintained benchmark is one command, listed in `benchmarks/README.md`;
`python benchmarks/run_suite.py --quick` checks they all still run (CI does, in under a
minute).
"""
