"""What a batch query by text costs (issue 36): ``query_many(limit=1)`` of a batch
against a store of random fingerprints and sketches, without and with
``bands=True`` (every stored sketch read and banded once per call), in
alternating rounds in one process; and how many of the batch's one-bin-edited
copies each finds.

The stored sketches are random at fills of 15, 40 and 100 % of the bins (short,
middling and long texts); each query is a stored document's sketch with 3 bins
changed (about a one-token edit of a 50-token text) and its fingerprint moved
past k, so only the bands can find it.

    python benchmarks/experiments/band_queries.py --docs 1M --queries 10K --rounds 3

Measured on the 2-core AMD EPYC VM (CPython 3.11, numpy 2.4), 2026-11-29, load
0.9-1.2, medians of 3 rounds: at 1M stored, a call of 10K queries took 0.15 s
without bands (finding none of the copies) and 4.49 s with them (4.5 µs a stored
document; 9,998 of the 10,000 copies found), peak RSS 778 MiB.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import load_average, parse_count

import simstore
from simstore.fingerprinting.sketch import Sketch, _pack


def sketches(rng: np.random.Generator, count: int, sketch: Sketch) -> tuple[np.ndarray, np.ndarray]:
    """Random packed sketches at mixed fills, and their codes."""
    fill = rng.choice([0.15, 0.4, 1.0], count)
    values = rng.integers(1, 1 << sketch.bits, (count, sketch.bins))
    codes = np.where(rng.random((count, sketch.bins)) < fill[:, None], values, 0).astype(np.uint8)
    return _pack(codes, sketch.bits), codes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=parse_count, default=1_000_000)
    parser.add_argument("--queries", type=parse_count, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sketch = Sketch()
    print(f"load {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        path = Path(tmp, "bands.simstore")
        with simstore.open(path, "n") as store:
            fingerprints = rng.integers(0, 2**64, args.docs, dtype=np.uint64)
            rows = np.empty((args.docs, sketch.nbytes), dtype=np.uint8)
            chosen = np.sort(rng.choice(args.docs, args.queries, replace=False))
            query_codes = None
            for start in range(0, args.docs, 1 << 17):
                end = min(start + (1 << 17), args.docs)
                packed, codes = sketches(rng, end - start, sketch)
                rows[start:end] = packed
                inside = chosen[(chosen >= start) & (chosen < end)]
                part = codes[inside - start]
                query_codes = part if query_codes is None else np.concatenate([query_codes, part])
            order = chosen
            began = time.perf_counter()
            store.add_many(range(args.docs), fingerprints, sketches=rows)
            store.merge()
            print(f"built {args.docs:,} in {time.perf_counter() - began:.1f} s", flush=True)
            del rows
            assert query_codes is not None
            for row in query_codes:  # 3 bins changed
                where = rng.choice(sketch.bins, 3, replace=False)
                row[where] = rng.integers(1, 1 << sketch.bits, 3)
            query_rows = _pack(query_codes, sketch.bits)
            query_fingerprints = fingerprints[order] ^ np.uint64(0xFFFF)  # 16 bits away
            times: dict[bool, list[float]] = {False: [], True: []}
            found: dict[bool, int] = {}
            for round_ in range(args.rounds):
                for bands in (False, True) if round_ % 2 == 0 else (True, False):
                    began = time.perf_counter()
                    results = store.query_many(query_fingerprints, sketches=query_rows, limit=1, bands=bands)
                    times[bands].append(time.perf_counter() - began)
                    found[bands] = sum(
                        bool(matches) and matches[0].key == int(doc)
                        for doc, matches in zip(order.tolist(), results, strict=True)
                    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for bands in (False, True):
        seconds = np.median(times[bands])
        print(
            f"bands={bands}: {seconds:.2f} s a call of {args.queries:,} ({min(times[bands]):.2f}-"
            f"{max(times[bands]):.2f}), {1e6 * seconds / args.docs:.2f} µs a stored document; "
            f"found {found[bands]:,} of {args.queries:,} edited copies"
        )
    print(f"peak RSS {rss:.0f} MiB; load {load_average()}")


if __name__ == "__main__":
    main()
