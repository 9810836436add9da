"""What a store's band table costs (format 4, the default, against ``bands=False``,
format 3): build throughput, bytes a document, single-query p50/p99 and batch
µs a query, and how many planted near-copies past k each store finds.

Both stores are built and queried side by side in one process, in alternating
rounds (build batches, blocks of 100 single queries, batch rounds), so a noisy
machine skews both alike: read the ratios, not the absolute times. Documents are
synthetic (no text is fingerprinted): random 64-bit fingerprints and random
sketches, ~70 % long (all 256 bins filled) and ~30 % medium (60-150 bins).
Queries: half planted near-copies of stored documents (2-4 filled bins given
another code, 8 fingerprint bits flipped, so past k = 5), half random.

    nice .venv/bin/python benchmarks/experiments/band_table_cost.py --docs 100K,1M \\
        --output benchmarks/results/band_table_cost.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import command_line, machine, markdown_table, parse_count

import simstore
from simstore.fingerprinting.bands import sketch_codes
from simstore.fingerprinting.sketch import Sketch

SKETCH = Sketch()  # 256 bins of 4 bits: 128 bytes
STORES = {"plain (bands=False)": False, "bands (default)": None}


def stores_of(bands: int | None) -> dict[str, bool | int | None]:
    """The two stores compared: without a band table, and with the default one
    (``bands`` None) or one of ``bands`` a width."""
    return STORES if bands is None else {"plain (bands=False)": False, f"bands={bands}": bands}


U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]


def pack(codes: U8) -> U8:
    """Codes 0..15 packed two a byte, low nibble first (bin 2i in byte i's low bits)."""
    return (codes[:, 0::2] | (codes[:, 1::2] << np.uint8(4))).astype(np.uint8)


def random_codes(rng: np.random.Generator, count: int) -> U8:
    """Codes of ``count`` sketches: 70 % with every bin filled, 30 % with 60-150 random bins."""
    filled = np.where(rng.random(count) < 0.7, SKETCH.bins, rng.integers(60, 151, count))
    places = np.argsort(rng.random((count, SKETCH.bins)), axis=1) < filled[:, None]
    values = rng.integers(1, 16, (count, SKETCH.bins), dtype=np.uint8)
    return np.where(places, values, 0).astype(np.uint8)


def documents(rng: np.random.Generator, count: int) -> tuple[U64, U8]:
    """Random fingerprints and packed sketches, made a chunk at a time."""
    rows = np.empty((count, SKETCH.nbytes), dtype=np.uint8)
    for start in range(0, count, 1 << 16):
        rows[start : start + (1 << 16)] = pack(random_codes(rng, min(1 << 16, count - start)))
    return rng.integers(0, 2**64, count, dtype=np.uint64), rows


def queries(
    rng: np.random.Generator, fps: U64, rows: U8, count: int
) -> tuple[U64, U8, npt.NDArray[np.int64]]:
    """``count`` queries, even ones planted near-copies of stored documents (their
    index in the last array; -1 for a random query), shuffled."""
    planted = rng.choice(len(fps), count // 2, replace=False)
    codes = sketch_codes(rows[planted], SKETCH)
    for row, changes in zip(codes, rng.integers(2, 5, len(planted)), strict=True):
        bins = rng.choice(np.flatnonzero(row), changes, replace=False)
        row[bins] = (row[bins] - 1 + rng.integers(1, 15, changes)) % 15 + 1  # another code
    bits = np.argsort(rng.random((len(planted), 64)), axis=1)[:, :8].astype(np.uint64)
    flips = np.bitwise_or.reduce(np.uint64(1) << bits, axis=1)
    other_fps, other_rows = documents(rng, count - len(planted))
    order = rng.permutation(count)
    q_fps = np.concatenate([fps[planted] ^ flips, other_fps])[order]
    q_rows = np.concatenate([pack(codes), other_rows])[order]
    target = np.concatenate([planted, np.full(len(other_fps), -1)])[order]
    return q_fps, q_rows, target


def found(results: list[list[simstore.Match]], target: npt.NDArray[np.int64]) -> int:
    """Planted queries whose document is among their matches."""
    return sum(t >= 0 and any(m.key == t for m in ms) for ms, t in zip(results, target, strict=True))


def measure(n: int, args: argparse.Namespace, tmp: str) -> list[list[object]]:
    rng = np.random.default_rng(n)
    fps, rows = documents(rng, n)
    check = random_codes(rng, 8)
    assert (sketch_codes(pack(check), SKETCH) == check).all(), "packing disagrees with simstore"
    kinds = stores_of(args.bands)
    paths = {name: Path(tmp, f"{n}-{bands}.simstore") for name, bands in kinds.items()}
    stores = {name: simstore.open(paths[name], "n", bands=bands) for name, bands in kinds.items()}
    names = list(stores)
    out: dict[str, dict[str, object]] = {name: {} for name in names}
    build = dict.fromkeys(names, 0.0)
    for i, start in enumerate(range(0, n, args.batch)):  # alternate the stores a batch at a time
        for name in names if i % 2 == 0 else names[::-1]:
            began = time.perf_counter()
            stores[name].add_many(
                range(start, min(n, start + args.batch)),
                fps[start : start + args.batch],
                sketches=rows[start : start + args.batch],
            )
            build[name] += time.perf_counter() - began
    for name in names:
        out[name]["add"] = n / build[name]
        began = time.perf_counter()
        stores[name].compact()
        build[name] += time.perf_counter() - began
        stats = stores[name].stats()
        assert len(stores[name]) == stats.docs == stats.sketched_docs == n, (len(stores[name]), stats)
        out[name] |= {
            "build": n / build[name],
            "compact": build[name] - n / out[name]["add"],  # type: ignore[operator]
            "format": stats.format_version,
            "live": stats.bytes_live / n,
            "file": os.path.getsize(paths[name]) / n,
        }
    # Single queries: one-query batches, the stores alternating every 100 queries.
    q_fps, q_rows, target = queries(rng, fps, rows, args.queries)
    for name in names:  # warm up
        stores[name].query_many(q_fps[:50], sketches=q_rows[:50])
    times: dict[str, list[float]] = {name: [] for name in names}
    hits = dict.fromkeys(names, 0)
    for block, start in enumerate(range(0, args.queries, 100)):
        for name in names if block % 2 == 0 else names[::-1]:
            for i in range(start, min(args.queries, start + 100)):
                began = time.perf_counter()
                result = stores[name].query_many(q_fps[i : i + 1], sketches=q_rows[i][None, :])
                times[name].append(time.perf_counter() - began)
                hits[name] += found(result, target[i : i + 1])
    # A batch of 10K: median of alternating rounds.
    b_fps, b_rows, b_target = queries(rng, fps, rows, args.batch_queries)
    batch: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            began = time.perf_counter()
            results = stores[name].query_many(b_fps, sketches=b_rows)
            batch[name].append(time.perf_counter() - began)
    for name in names:
        results = stores[name].query_many(b_fps, sketches=b_rows)
        wrong = sum(bool(ms) for ms, t in zip(results, b_target, strict=True) if t < 0)
        p50, p99 = np.percentile(np.array(times[name]) * 1e6, [50, 99])
        out[name] |= {
            "p50": p50,
            "p99": p99,
            "batch": np.median(batch[name]) * 1e6 / args.batch_queries,
            "single": f"{hits[name]}/{args.queries // 2}",
            "found": f"{found(results, b_target)}/{args.batch_queries // 2}",
            "random hit": wrong,
        }
        stores[name].close()
        for suffix in ("", "-lock", "-log"):  # free the disk before the next N
            Path(f"{paths[name]}{suffix}").unlink(missing_ok=True)
    plain, band = (out[name] for name in names)
    lines: list[list[object]] = [[f"{n:,}", name, *(o[c] for c in COLUMNS)] for name, o in out.items()]
    ratio = [f"{band[c] / plain[c]:.2f}x" if isinstance(plain[c], float) else "" for c in COLUMNS]  # type: ignore[operator]
    lines.append([f"{n:,}", "**band / plain**", *ratio])
    print(markdown_table(HEADERS, lines), flush=True)
    return lines


COLUMNS = [
    "format",
    "add",
    "build",
    "compact",
    "live",
    "file",
    "p50",
    "p99",
    "batch",
    "single",
    "found",
    "random hit",
]
HEADERS = [
    "N",
    "store",
    "format",
    "add_many docs/s",
    "build docs/s (with compact)",
    "compact s",
    "B/doc (bytes_live)",
    "B/doc (file)",
    "p50 µs",
    "p99 µs",
    "batch µs/q",
    "planted found (singles)",
    "planted found (batch)",
    "random queries matched",
]


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", default="100K,1M", help="comma-separated store sizes (default 100K,1M)")
    parser.add_argument("--batch", type=parse_count, default=50_000, help="add_many batch (default 50K)")
    parser.add_argument("--queries", type=parse_count, default=2000, help="single queries (default 2000)")
    parser.add_argument("--batch-queries", type=parse_count, default=10_000, help="batch size (default 10K)")
    parser.add_argument("--rounds", type=int, default=3, help="batch rounds a store (default 3)")
    parser.add_argument(
        "--bands", type=int, default=None, help="bands a width of the band store (default: the default's)"
    )
    parser.add_argument("--output", type=Path, default=None, help="write the markdown report here")
    args = parser.parse_args()
    load_start, began, info = loadavg(), time.perf_counter(), machine()
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="band_table_cost_") as tmp:
        for n in (parse_count(text) for text in args.docs.split(",")):
            rows += measure(n, args, tmp)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    text = "\n".join(
        [
            "# Band table cost: format 4 (bands, default) against format 3 (bands=False)",
            "",
            f"Command: `nice {command_line()}`",
            "",
            f"Machine: 2-core VM (nproc {os.cpu_count()}), {info['cpu']}, {info['python']}, "
            f"numpy {info['numpy']}, {info['lmdb']}; {datetime.date.today().isoformat()}; "
            f"/proc/loadavg at start `{load_start}`, "
            f"at end `{loadavg()}`; {time.perf_counter() - began:.0f} s in all.",
            "",
            markdown_table(HEADERS, rows),
            "",
            f"- Peak RSS of the whole process (both stores of every N mapped, the documents and queries "
            f"in memory): {peak:,.0f} MiB (`ru_maxrss`).",
            f"- Build: `add_many` in batches of {args.batch:,}, the stores alternating a batch at a time, "
            "then `compact()`; build docs/s is of the two together.",
            f"- p50/p99: {args.queries:,} one-query `query_many` calls with sketches, the stores alternating "
            f"every 100; batch: one `query_many` of {args.batch_queries:,}, median of {args.rounds} "
            "alternating rounds. Half of the queries are planted near-copies (2-4 bins changed, fingerprint "
            "8 bits away, past k = 5), half random.",
            "- Shared noisy VM: compare the ratios, not the absolute times.",
            "",
        ]
    )
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
