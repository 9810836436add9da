"""``simstore dedup --against`` beside a full ``simstore dedup``, per document, on
real text whose documents share long paragraphs (boilerplate: a query has hundreds
of matches within k), in fresh runs alternating between source trees.

    git worktree add /tmp/ab-old bc30d50          # the tree to compare with
    python benchmarks/suite/bench_against.py --trees /tmp/ab-old,. --store-rows 30000 \\
        --query-rows 10000 --rounds 3 --output benchmarks/results/against_30k.md

The corpus is built from files every Debian machine has: the copyright files of
the installed packages (``/usr/share/doc/*/copyright``), cut into paragraphs (at
blank lines and the `` .`` lines of the machine-readable format, 8 words or more),
each document one, two or three consecutive paragraphs of one file. Licence texts
are the boilerplate: the GPL's paragraphs stand in hundreds of files, and each
window over them is a document that hundreds of others copy or nearly copy. The
documents are shuffled (seeded), the first ``--store-rows`` are the store's and the
next ``--query-rows`` the queries (so the queries are drawn as the store was).

For each round and each tree (the order flipped every round), in a fresh process
that puts the tree first on ``sys.path`` and runs from ``/``:

- ``dedup``: ``simstore dedup STORE_ROWS.jsonl -o OUT`` (a temporary store: add,
  cluster, write the kept rows);
- ``against``: ``simstore dedup QUERY_ROWS.jsonl --against STORE -o OUT``, STORE
  holding the store rows (built once, by the last tree's simstore, before the rounds);
- ``dedup same``: ``simstore dedup QUERY_ROWS.jsonl -o OUT``, the query rows
  deduplicated among themselves (as many documents as ``against``, so the fixed
  costs of a run weigh the same).

Each run's wall and CPU time (user + system of the process and its fingerprinting
workers) per document are reported as medians (min-max) over the rounds, with the
ratios of ``against`` to ``dedup`` and to ``dedup same`` per document in each tree,
and each tree's to the first tree's. The outputs of every tree must be equal (the run fails otherwise).
The matches within k of each query (unlimited, no similarity threshold, and with
the store's) are counted once, to show how heavy the boilerplate is.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import Report, fmt_range, load_average, parse_with_quick, source_state

MIN_WORDS = 8
WINDOWS = (1, 2, 3)
CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); from simstore.cli import main; sys.exit(main(sys.argv[2:]))"
)


def copyright_documents() -> list[str]:
    """Windows of one to three consecutive paragraphs of every installed copyright file."""
    documents = []
    for path in sorted(Path("/usr/share/doc").glob("*/copyright")):
        if not path.is_file():
            continue
        text = path.read_text("utf-8", "replace")
        blocks = re.split(r"\n(?:[ \t]*\.?[ \t]*\n)+", text)
        paragraphs = [" ".join(line.strip() for line in block.splitlines()).strip() for block in blocks]
        paragraphs = [paragraph for paragraph in paragraphs if len(paragraph.split()) >= MIN_WORDS]
        for window in WINDOWS:
            for start in range(len(paragraphs) - window + 1):
                documents.append("\n\n".join(paragraphs[start : start + window]))
    return documents


def write_rows(path: Path, texts: list[str], first_id: int) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for offset, text in enumerate(texts):
            out.write(json.dumps({"id": first_id + offset, "text": text}) + "\n")


def run_cli(tree: str, arguments: list[str]) -> tuple[float, float]:
    """Run ``simstore ARGUMENTS`` with ``tree`` first on ``sys.path``; returns
    (wall seconds, CPU seconds of the process and its children)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, tree, *arguments],
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode() if process.stderr else ""
    if process.returncode:
        raise SystemExit(f"simstore {' '.join(arguments)} failed in {tree}:\n{stderr}")
    return wall, usage.ru_utime + usage.ru_stime


def match_counts(tree: str, store: Path, queries: Path) -> dict[str, list[float]]:
    """Matches within k per query: unlimited, with no threshold and with the store's."""
    code = f"""
import json, sys
sys.path.insert(0, {tree!r})
import numpy as np, simstore
texts = [json.loads(line)["text"] for line in open({str(queries)!r}, encoding="utf-8")]
with simstore.open({str(store)!r}, "r") as store:
    rows = []
    for threshold in (0.0, None):
        counts = np.array([len(m) for m in store.query_many(texts=texts, min_similarity=threshold)])
        points = np.percentile(counts, [50, 90, 99]).tolist()
        rows.append([float(counts.mean()), *points, float(counts.max())])
print(json.dumps(rows))
"""
    output = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    within, verified = json.loads(output.stdout)
    return {"within k": within, "verified (store's threshold)": verified}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trees", default=".", help="comma-separated source trees; the first is the baseline"
    )
    parser.add_argument("--store-rows", type=int, default=30_000)
    parser.add_argument("--query-rows", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--dir", default=None, help="where the rows and stores go (default: a temporary folder)"
    )
    parser.add_argument("--output", help="also write the markdown report here")
    args = parse_with_quick(parser, {"store_rows": 400, "query_rows": 100, "rounds": 1})
    trees = [str(Path(tree).resolve()) for tree in args.trees.split(",")]

    documents = copyright_documents()
    random.Random(args.seed).shuffle(documents)
    needed = args.store_rows + args.query_rows
    if len(documents) < needed:
        raise SystemExit(f"the corpus has {len(documents)} documents; {needed} were asked for")
    report = Report()
    report.header(
        "dedup --against beside dedup, per document",
        code="; ".join(f"{tree}: {source_state(tree, 'simstore')}" for tree in trees),
    )
    files = len(list(Path("/usr/share/doc").glob("*/copyright")))
    report.add(
        f"Corpus: {len(documents):,} windows of 1-3 paragraphs of {files} "
        f"installed copyright files, shuffled (seed {args.seed}); {args.store_rows:,} store rows, "
        f"{args.query_rows:,} query rows ({sum(map(len, documents[:needed])) / needed:,.0f} characters "
        f"a document on average). Load average at the start: {load_average()}.\n"
    )
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-against-") as folder:
        work = Path(folder)
        store_rows, query_rows = work / "store_rows.jsonl", work / "query_rows.jsonl"
        write_rows(store_rows, documents[: args.store_rows], 0)
        write_rows(query_rows, documents[args.store_rows : needed], args.store_rows)
        store = work / "against.simstore"
        run_cli(trees[-1], ["dedup", str(store_rows), "--store", str(store), "-o", str(work / "built.jsonl")])

        counts = match_counts(trees[-1], store, query_rows)
        report.heading("Matches a query has in the store")
        report.table(
            ["matches", "mean", "p50", "p90", "p99", "max"],
            [[name, *values] for name, values in counts.items()],
        )

        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        outputs: dict[str, dict[str, bytes]] = {}
        for number in range(args.rounds):
            order = trees if number % 2 == 0 else trees[::-1]
            for tree in order:
                for mode, rows, arguments in (
                    ("dedup", args.store_rows, ["dedup", str(store_rows)]),
                    ("against", args.query_rows, ["dedup", str(query_rows), "--against", str(store)]),
                    ("dedup same", args.query_rows, ["dedup", str(query_rows)]),
                ):
                    out = work / f"out-{mode}.jsonl"
                    wall, cpu = run_cli(tree, [*arguments, "-o", str(out)])
                    times.setdefault((tree, mode), []).append((wall / rows * 1e3, cpu / rows * 1e3))
                    kept = outputs.setdefault(mode, {})
                    content = out.read_bytes()
                    if kept.setdefault(tree, content) != content or content != next(iter(kept.values())):
                        raise SystemExit(f"{mode}: the trees' outputs differ")
                    out.unlink()
            print(f"round {number + 1} of {args.rounds} done", file=sys.stderr, flush=True)

    report.heading("Per document, milliseconds: median (min-max) over the rounds")
    modes = ("dedup", "against", "dedup same")
    for column, measure in ((0, "wall"), (1, "CPU")):
        rows = []
        for tree in trees:
            medians = {mode: np.median(np.array(times[(tree, mode)])[:, column]) for mode in modes}
            rows.append(
                [
                    tree,
                    *(fmt_range(np.array(times[(tree, mode)])[:, column].tolist()) for mode in modes),
                    f"{medians['against'] / medians['dedup']:.2f}",
                    f"{medians['against'] / medians['dedup same']:.2f}",
                ]
            )
        report.table(
            ["tree", *(f"{mode} {measure}" for mode in modes), "against / dedup", "against / dedup same"],
            rows,
        )
    if len(trees) > 1:
        base = trees[0]
        report.heading(f"Against the first tree ({base}), per document: the medians' ratios")
        ratio_rows = []
        for tree in trees[1:]:
            ratios = []
            for mode in modes:
                for column in (0, 1):
                    this = np.median(np.array(times[(tree, mode)])[:, column])
                    ratios.append(f"{this / np.median(np.array(times[(base, mode)])[:, column]):.2f}")
            ratio_rows.append([tree, *ratios])
        headers = [f"{mode} {measure}" for mode in modes for measure in ("wall", "CPU")]
        report.table(["tree", *headers], ratio_rows)
    report.add(f"Load average at the end: {load_average()}.")
    if args.output:
        report.write(args.output)


if __name__ == "__main__":
    main()
