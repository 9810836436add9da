"""What sketch bands cost ``near_duplicate_pairs`` (issue 36): a store of N random
fingerprints and sketches (fills of 15, 40 and 100 % of the bins: short,
middling and long texts; no near-duplicates, so the cost is the search's), all
pairs with and without ``bands=True``, each in a fresh process (peak RSS is a
process's), alternating.

    python benchmarks/experiments/band_pairs_cost.py --docs 2M --rounds 1

Measured on the 2-core AMD EPYC VM (CPython 3.11, numpy 2.4), 2026-11-29, load
1.1-1.3: at 2M, 26.3 s and a peak of 1,051 MiB with bands, 11.1 s and 759 MiB
without (the store's build alone peaks at 759).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import load_average, parse_count


def one_run(docs: int, bands: bool) -> None:
    """Build the store and time all pairs, in this process."""
    import simstore
    from simstore.fingerprinting.sketch import Sketch, _pack

    rng = np.random.default_rng(0)
    sketch = Sketch()
    with tempfile.TemporaryDirectory(dir=".") as tmp, simstore.open(Path(tmp, "s.simstore"), "n") as store:
        for start in range(0, docs, 1 << 17):
            count = min(1 << 17, docs - start)
            fill = rng.choice([0.15, 0.4, 1.0], count)
            values = rng.integers(1, 1 << sketch.bits, (count, sketch.bins))
            codes = np.where(rng.random((count, sketch.bins)) < fill[:, None], values, 0).astype(np.uint8)
            fingerprints = rng.integers(0, 2**64, count, dtype=np.uint64)
            store.add_many(range(start, start + count), fingerprints, sketches=_pack(codes, sketch.bits))
        store.merge()
        built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        began = time.perf_counter()
        pairs = sum(1 for _ in store.near_duplicate_pairs(bands=bands))
        seconds = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"bands={bands}: {pairs} pairs in {seconds:.1f} s, peak RSS {peak:.0f} MiB (build: {built:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=parse_count, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", choices=("bands", "plain"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        one_run(args.docs, args.child == "bands")
        return
    print(f"{args.docs:,} documents; load {load_average()}", flush=True)
    for round_ in range(args.rounds):
        for child in ("bands", "plain") if round_ % 2 == 0 else ("plain", "bands"):
            command = [sys.executable, __file__, "--docs", str(args.docs), "--child", child]
            subprocess.run(command, check=True)
    print(f"load {load_average()}")


if __name__ == "__main__":
    main()
