"""Turn the results' JSON into ``benchmarks/RESULTS.md``, ``docs/measured.md`` and plots.

Run (from the repository root, after a maintained benchmark was re-run and its entry
in ``results_pages.CURRENT`` points at the new file; the plots need matplotlib, in the
``bench`` extra, and ``--no-plots`` leaves them as they are)::

    python benchmarks/suite/plot_results.py
    python benchmarks/suite/plot_results.py --no-plots

Reads ``benchmarks/results/peers_*.json``, ``online_*.json`` and ``scale.jsonl``, and the
headers of the current result files (``results_pages.py``); writes
``benchmarks/RESULTS.md`` (current figures only: the latest peers run's tables as
median (min-max) over repeats, with the machine, versions, commands and load averages of
each run, and the latest run of every maintained benchmark with its command and
headline table), ``docs/measured.md`` (the headline figures) and
``benchmarks/results/peers_query_latency.png`` (single-query latency against N, log
axes), ``peers_throughput.png`` (build, batched query and online add throughput bars)
and ``scale_bytes_and_p50.png``. The dated analyses are in ``benchmarks/HISTORY.md``.

Machine of the figures: one of the project's 2-core VMs (see each result's header).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import fmt, fmt_range, markdown_table
from results_pages import latest_peers, latest_section, measured_page

HERE = Path(__file__).resolve().parents[1]  # benchmarks/
RESULTS = HERE / "results"
ORDER = ["simstore", "lmdb-floor", "faiss-mh-2x32", "faiss-mh-4x16", "faiss-flat", "simhash", "brute"]
STYLE = {
    "simstore": ("#d62728", "o", "-"),
    "lmdb-floor": ("#ff9896", "o", ":"),
    "faiss-mh-2x32": ("#1f77b4", "s", "-"),
    "faiss-mh-4x16": ("#aec7e8", "s", "--"),
    "faiss-flat": ("#9467bd", "D", "--"),
    "simhash": ("#2ca02c", "^", "-"),
    "brute": ("#7f7f7f", "v", ":"),
}
SHORT = {
    "simstore": "simstore",
    "lmdb-floor": "raw py-lmdb floor",
    "faiss-mh-2x32": "faiss MultiHash 2x32+1 flip",
    "faiss-mh-4x16": "faiss MultiHash 4x16",
    "faiss-flat": "faiss BinaryFlat",
    "simhash": "simhash SimhashIndex",
    "brute": "numpy brute force",
}


def load(pattern: str) -> list[dict[str, Any]]:
    runs = [json.loads(path.read_text()) for path in sorted(RESULTS.glob(pattern))]
    return sorted(runs, key=lambda run: run["n"])


def label_n(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}K"


def med(values: list[float]) -> float:
    return float(np.median(values))


# ---------------------------------------------------------------------- plots


def plot_latency(peers: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    panels = (("p50", "single query p50"), ("p99", "single query p99"))
    for axis, (stat, title) in zip(axes, panels, strict=True):
        for name in ORDER:
            points = [
                (run["n"], run["systems"][name]["query us"][stat])
                for run in peers
                if name in run["systems"] and "query us" in run["systems"][name]
            ]
            if not points:
                continue
            ns = [n for n, _ in points]
            mids = [med(values) for _, values in points]
            lows = [mid - min(values) for mid, (_, values) in zip(mids, points, strict=False)]
            highs = [max(values) - mid for mid, (_, values) in zip(mids, points, strict=False)]
            color, marker, line = STYLE[name]
            axis.errorbar(
                ns,
                mids,
                yerr=[lows, highs],
                color=color,
                marker=marker,
                linestyle=line,
                linewidth=2.5 if name == "simstore" else 1.5,
                capsize=3,
                label=SHORT[name],
            )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("fingerprints stored (N)")
        axis.set_title(f"{title}, k = 3 (lower is better)")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("µs per query (median over passes, bars min-max)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_throughput(peers: list[dict[str, Any]], online: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = max((run for run in peers), key=lambda run: run["n"] if run["n"] <= 1_000_000 else 0)
    panels = [
        (
            f"bulk build docs/s, N = {label_n(target['n'])}",
            {name: s["build docs/s"] for name, s in target["systems"].items() if "build docs/s" in s},
        ),
        (
            f"batched queries/s (1000 per call), N = {label_n(target['n'])}",
            {
                name: [1e6 / value for value in s["batch us/query"]]
                for name, s in target["systems"].items()
                if "batch us/query" in s
            },
        ),
    ]
    if online:
        run = max(online, key=lambda item: item["n"])
        rates = {}
        for name, s in run["systems"].items():
            rates[name] = s["docs/s"]
        panels.append((f"single online adds docs/s into N = {label_n(run['n'])}", rates))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5))
    for axis, (title, data) in zip(np.atleast_1d(axes), panels, strict=False):
        names = [name for name in [*ORDER, "simstore-sync"] if name in data]
        mids = [med(data[name]) for name in names]
        lows = [mid - min(data[name]) for mid, name in zip(mids, names, strict=False)]
        highs = [max(data[name]) - mid for mid, name in zip(mids, names, strict=False)]
        colors = [STYLE.get(name, ("#e377c2", "", ""))[0] for name in names]
        labels = [SHORT.get(name, "simstore sync=True") for name in names]
        axis.barh(range(len(names)), mids, xerr=[lows, highs], color=colors, capsize=3)
        axis.set_yticks(range(len(names)), labels, fontsize=8)
        axis.invert_yaxis()
        axis.set_xscale("log")
        axis.set_title(title + " (higher is better)", fontsize=10)
        axis.grid(True, axis="x", which="both", alpha=0.3)
        for position, mid in enumerate(mids):
            axis.text(mid, position, f" {fmt(mid)}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------- the text


def figure_table(peers: list[dict[str, Any]], getter: Any, scale: float = 1.0) -> str:
    headers = ["system"] + [f"N = {label_n(run['n'])}" for run in peers]
    rows = []
    for name in ORDER:
        row: list[object] = [SHORT[name]]
        present = False
        for run in peers:
            s = run["systems"].get(name)
            values = getter(s) if s else None
            if values:
                present = True
                row.append(fmt_range([value * scale for value in values]))
            else:
                row.append("-")
        if present:
            rows.append(row)
    return markdown_table(headers, rows)


def verdicts(peers: list[dict[str, Any]], online: list[dict[str, Any]]) -> list[list[object]]:
    by_n = {run["n"]: run["systems"] for run in peers}
    online_by_n = {run["n"]: run["systems"] for run in online}
    rows: list[list[object]] = []

    def verdict(value: float | None, target: float, higher: bool) -> str:
        if value is None:
            return "not measured"
        met = value >= target if higher else value <= target
        if higher:
            return (
                f"met ({value / target:.2f}x the target)" if met else f"MISSED ({value / target:.0%} of it)"
            )
        return f"met ({target / value:.1f}x under)" if met else f"MISSED ({value / target:.2f}x the target)"

    def get(n: int, name: str, *path: str) -> float | None:
        node: Any = by_n.get(n, {}).get(name)
        for part in path:
            if node is None:
                return None
            node = node.get(part)
        return med(node) if isinstance(node, list) else node

    for n, target in ((1_000_000, 25.0), (10_000_000, 30.0)):
        value = get(n, "simstore", "query us", "p50")
        rows.append(
            [
                f"single query p50, N={label_n(n)}",
                f"<= {target:.0f} µs",
                fmt(value),
                verdict(value, target, False),
            ]
        )
    value = get(1_000_000, "simstore", "build docs/s")
    rows.append(
        ["bulk build, 1M (persisted, sync=True)", ">= 250K docs/s", fmt(value), verdict(value, 250_000, True)]
    )
    for n in sorted(online_by_n):
        s = online_by_n[n].get("simstore")
        value = med(s["docs/s"]) if s else None
        rows.append(
            [
                f"online add, store of {label_n(n)} (sync=False)",
                ">= 30K docs/s",
                fmt(value),
                verdict(value, 30_000, True),
            ]
        )
        s = online_by_n[n].get("simstore-sync")
        if s:
            value = med(s.get("docs/s with amortised merge", s["docs/s"]))
            rows.append(
                [
                    f"online add, store of {label_n(n)} (sync=True, default)",
                    ">= 30K docs/s",
                    fmt(value),
                    verdict(value, 30_000, True),
                ]
            )
    s = by_n.get(1_000_000, {}).get("simstore")
    if s:
        query_anon = s.get("anon MiB")
        build_anon = med(s["build anon peak MiB"])
        rows.append(
            [
                "memory, 1M: anon RSS beyond page cache, query process",
                "<= 100 MiB",
                fmt(query_anon),
                verdict(query_anon, 100, False),
            ]
        )
        rows.append(
            [
                "memory, 1M: peak anon RSS during bulk build",
                "<= 100 MiB",
                fmt(build_anon),
                verdict(build_anon, 100, False),
            ]
        )
    for n in sorted(by_n, reverse=True)[:1]:
        value = get(n, "simstore", "reopen", "first query s")
        value = value * 1000 if value is not None else None
        rows.append(
            [f"reopen to first query, {label_n(n)}", "<= 50 ms", fmt(value), verdict(value, 50, False)]
        )
    return rows


def write_results(peers: list[dict[str, Any]], online: list[dict[str, Any]], path: Path) -> None:
    parts = ["# Benchmark results: the current figures\n"]
    parts.append(
        "Generated by `python benchmarks/suite/plot_results.py` from `benchmarks/results/peers_*.json`, "
        "`online_*.json` and the current result files' headers; do not edit by hand. Current figures "
        "only: the dated runs before these, and the analyses of what changed them, are in "
        "[`HISTORY.md`](HISTORY.md). The scripts, their command lines and their smoke runs are in "
        "[`README.md`](README.md). Commands are given as they were run: the scripts have since moved "
        "from `benchmarks/` to `benchmarks/suite/`.\n"
    )
    parts.append("## simstore against its peers\n")
    parts.append(
        "The latest `bench_peers.py` run (and `bench_online.py`'s single adds). Every figure is "
        "median (min-max) over repeated builds or timed passes. k = 3 everywhere; the default simstore "
        "layout (5 blocks, 10 tables). faiss runs on one OpenMP thread like everything else here. "
        "The plots also show the 100K run of 2026-11-22.\n"
    )
    parts.append("![single-query latency against N](results/peers_query_latency.png)\n")
    parts.append("![throughput](results/peers_throughput.png)\n")
    parts.append("## Runs\n")
    rows = []
    updates = [
        {**update, "n": run["n"], "kind": f"{kind} update ({', '.join(update['systems'])})"}
        for kind, runs in (("peers", peers), ("online", online))
        for run in runs
        for update in run.get("updates", [])
    ]
    for run in peers + online + updates:
        kind = run.get("kind") or ("online" if "adds" in run else "peers")
        load = run.get("load average") or ["?", "?"]
        rows.append(
            [
                kind,
                label_n(run["n"]),
                f"`{run['command']}`",
                run["date"],
                run["code"],
                " → ".join(load) if isinstance(load, list) else load,
            ]
        )
    parts.append(
        markdown_table(["run", "N", "command", "date", "code", "load average start → end"], rows) + "\n"
    )
    if peers:
        machine = peers[-1]["machine"]
        machine = {key: value for key, value in machine.items() if key not in ("load average", "data dir")}
        parts.append(markdown_table(["machine", ""], list(machine.items())) + "\n")
        found_versions: dict[str, str] = {}
        for run in peers:
            found_versions.update(run.get("versions", {}))
        parts.append("Versions: " + ", ".join(f"{k} {v}" for k, v in found_versions.items()) + "\n")
    parts.append("## Targets\n")
    parts.append(
        markdown_table(["figure", "target", "simstore measured (median)", "verdict"], verdicts(peers, online))
        + "\n"
    )
    sections = [
        ("Single query p50, µs", lambda s: s.get("query us", {}).get("p50"), 1.0),
        ("Single query p99, µs", lambda s: s.get("query us", {}).get("p99"), 1.0),
        ("Single query p99.9, µs", lambda s: s.get("query us", {}).get("p99.9"), 1.0),
        ("Batched queries (1000 per call), µs per query", lambda s: s.get("batch us/query"), 1.0),
        ("Bulk build, docs/s", lambda s: s.get("build docs/s"), 1.0),
        (
            "Reopen: open / read the saved index, ms (fresh process, warm cache)",
            lambda s: (s.get("reopen") or {}).get("open s"),
            1000.0,
        ),
        (
            "Reopen to the first answered query, ms",
            lambda s: (s.get("reopen") or {}).get("first query s"),
            1000.0,
        ),
        (
            "Reopen to the answer of the 100th query, ms (simstore reads its bitmaps a table per query)",
            lambda s: (s.get("reopen") or {}).get("100 queries s"),
            1000.0,
        ),
        (
            "Rebuild from a .npy of the fingerprints to the first answered query, ms",
            lambda s: (s.get("reopen") or {}).get("rebuild first query s"),
            1000.0,
        ),
    ]
    for title, getter, scale in sections:
        parts.append(f"## {title}\n")
        parts.append(figure_table(peers, getter, scale) + "\n")
    parts.append("## Size and memory\n")
    rows = []
    for run in peers:
        for name in ORDER:
            s = run["systems"].get(name)
            if not s:
                continue
            rss = s.get("rss", {})
            rows.append(
                [
                    label_n(run["n"]),
                    SHORT[name],
                    s.get("bytes/doc on disk", s.get("bytes/doc saved file")),
                    s.get("anon MiB", s.get("index anon MiB")),
                    fmt_range(s["build anon peak MiB"]) if "build anon peak MiB" in s else "-",
                    rss.get("build"),
                    rss.get("query"),
                ]
            )
    parts.append(
        markdown_table(
            [
                "N",
                "system",
                "bytes/doc (disk or saved file)",
                "index anon MiB (held)",
                "build peak anon MiB",
                "peak RSS MiB build",
                "peak RSS MiB query",
            ],
            rows,
        )
        + "\n"
    )
    parts.append(
        "bytes/doc: simstore and the floor are the LMDB file's allocated blocks; faiss the "
        "`write_index_binary` file; brute force the raw array; SimhashIndex cannot be saved except by "
        "pickling. 'index anon MiB' is the anonymous RSS the index holds beyond its process's baseline "
        "(for simstore, the read-only query process: LMDB pages are file-backed page cache, not counted). "
        "Peak RSS counts touched file pages too.\n"
    )
    parts.append(
        "## Recall against brute force (single queries; batched where the system has a batch call)\n"
    )
    rows = []
    for run in peers:
        for name in ORDER:
            s = run["systems"].get(name)
            if not s or not s.get("check"):
                continue
            check = s["check"]
            batched = s.get("check batched") or {}
            rows.append(
                [
                    label_n(run["n"]),
                    SHORT[name],
                    check["true neighbours"],
                    check["recall"],
                    check["precision"],
                    check["queries differing"],
                    batched.get("recall", "-"),
                ]
            )
    parts.append(
        markdown_table(
            ["N", "system", "true neighbours", "recall", "precision", "queries differing", "batched recall"],
            rows,
        )
        + "\n"
    )
    for run in online:
        parts.append(f"## Sustained single adds into an index of {label_n(run['n'])}\n")
        rows = []
        for s in run["systems"].values():
            rows.append(
                [
                    s["label"],
                    s["adds"],
                    fmt_range(s["docs/s"]),
                    fmt_range(s["docs/s with amortised merge"])
                    if "docs/s with amortised merge" in s
                    else "-",
                    fmt_range(s["add us"]["p50"]),
                    fmt_range(s["add us"]["p99"]),
                    fmt_range(s["add us"]["p99.9"]),
                    fmt_range(s["merge pause s"]) if s["merge pause s"] else "-",
                    s.get("peak RSS MiB"),
                    s.get("load average at start", "?"),
                ]
            )
        parts.append(
            markdown_table(
                [
                    "system",
                    "adds per run",
                    "docs/s (all calls)",
                    "docs/s with merge amortised",
                    "p50 µs",
                    "p99 µs",
                    "p99.9 µs",
                    "merge pause s",
                    "peak RSS MiB",
                    "load at start",
                ],
                rows,
            )
            + "\n"
        )
    skipped = {name: why for run in peers for name, why in run.get("skipped", {}).items()}
    if skipped:
        parts.append(
            "Skipped: "
            + "; ".join(f"{name} ({why})" for name, why in skipped.items())
            + ". simhash-py was not measured: it does not build on CPython 3.11 (see `bench_peers.py`).\n"
        )
    parts.append(latest_section())
    path.write_text("\n".join(parts))


def plot_scale(path: Path, out: Path) -> bool:
    """Bytes per document and query p50 against N from ``bench_scale.py``'s
    JSON lines (one series per label and k); False if there are none."""
    if not path.exists():
        return False
    series: dict[str, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        step = json.loads(line)
        if "docs_per_s" in step:  # a batch step, not the single adds
            series.setdefault(f"{step['label']}, k={step['k']}", []).append(step)
    if not series:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (size_axis, query_axis) = plt.subplots(1, 2, figsize=(12, 5))
    for name, steps in series.items():
        docs = [step["docs"] / 1e6 for step in steps]
        color = None
        # A solid line for the headline figure, dotted for its companion.
        for axis, field, label, dotted in (
            (size_axis, "file_b_per_doc", "file", False),
            (size_axis, "used_b_per_doc", "pages in use", True),
            (query_axis, "warm_p50_us", "warm", False),
            (query_axis, "first_p50_us", "first pass", True),
        ):
            (line,) = axis.plot(
                docs,
                [step[field] for step in steps],
                marker="." if dotted else "o",
                linestyle=":" if dotted else "-",
                color=color,
                label=f"{name}: {label}",
            )
            color = line.get_color()
    size_axis.set(xlabel="documents (millions)", ylabel="bytes per document", title="size on disk")
    query_axis.set(xlabel="documents (millions)", ylabel="µs", title="single query p50", yscale="log")
    for axis in (size_axis, query_axis):
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"))
    parser.add_argument("--measured", default=str(HERE.parent / "docs" / "measured.md"))
    parser.add_argument("--no-plots", action="store_true", help="leave the plots as they are")
    args = parser.parse_args()
    peers = load("peers_*.json")
    online = load("online_*.json")
    if not peers:
        print("no benchmarks/results/peers_*.json: run bench_peers.py first", file=sys.stderr)
        return 1
    if not args.no_plots:
        plot_latency(peers, RESULTS / "peers_query_latency.png")
        plot_throughput(peers, online, RESULTS / "peers_throughput.png")
        if plot_scale(RESULTS / "scale.jsonl", RESULTS / "scale_bytes_and_p50.png"):
            print(f"wrote {RESULTS / 'scale_bytes_and_p50.png'}")
        print(f"wrote {RESULTS / 'peers_query_latency.png'}, {RESULTS / 'peers_throughput.png'}")
    write_results(latest_peers(peers), online, Path(args.output))
    Path(args.measured).write_text(measured_page(peers), encoding="utf-8")
    print(f"wrote {args.output}, {args.measured}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
