"""A/B of the crowded-bitmap skip inside one process, alternating per query.

Run (from the repository root; the store from ``ab_occupancy.py build``)::

    PYTHONPATH=. python benchmarks/ab_occupancy.py build /tmp/ab.simstore 1000000
    PYTHONPATH=. python benchmarks/ab_crowded.py /tmp/ab.simstore

On the shared 2-core VM the machine's speed swings by up to 1.6x for seconds to
minutes at a time, so runs of one code tree after another (even alternated) did not
separate a 20% change from that noise. Here one process runs every query twice in a
row, once with the store's crowded bitmaps and once with them switched off (the same
occupancy bitmaps, no skipping), the order alternating from query to query, so that
both variants see the same machine and the same warm caches.

Queries: 4,000 stored fingerprints with 1, 2 or 3 random bits flipped (cycling) and
1,000 random fingerprints, shuffled; three passes after a warm-up pass. Prints single
``store.query`` p50 and p99 of each variant, for the near-duplicate and the random
queries apart.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import simstore


def main(path: str) -> None:
    rng = np.random.default_rng(11)
    with simstore.open(path, "r") as store:
        stored = store.fingerprints()  # near-duplicates of any document: their records are cold too
        near = stored[rng.integers(0, len(stored), 4000)].copy()
        for index in range(len(near)):
            for bit in rng.choice(64, size=1 + index % 3, replace=False):
                near[index] ^= np.uint64(1) << np.uint64(bit)
        queries = [(query, "near") for query in near.tolist()]
        queries += [(query, "random") for query in rng.integers(0, 2**64, 1000, dtype=np.uint64).tolist()]
        rng.shuffle(queries)  # type: ignore[arg-type]
        for query, _ in queries:  # warm-up; also reads every table's bitmaps
            store.query(fingerprint=query)
        with_crowded = store._scan_plan
        without_crowded = tuple(
            (suffix, bitmap, None, shift, masks) for suffix, bitmap, _, shift, masks in with_crowded
        )
        variants = {"crowded bitmaps": with_crowded, "occupancy bitmaps only": without_crowded}
        latencies: dict[tuple[str, str], list[int]] = {
            (v, kind): [] for v in variants for kind in ("near", "random")
        }
        for round_number in range(3):
            for index, (query, kind) in enumerate(queries):
                order = list(variants.items())
                if (index + round_number) % 2:
                    order.reverse()
                for name, plan in order:
                    store._scan_plan = plan
                    started = time.perf_counter_ns()
                    store.query(fingerprint=query)
                    latencies[name, kind].append(time.perf_counter_ns() - started)
        store._scan_plan = with_crowded
        print(f"{path}: {len(store):,} documents, load {os.getloadavg()[0]:.2f}")
        for (name, kind), values in latencies.items():
            micros = np.array(values) / 1000
            p50, p99 = np.percentile(micros, [50, 99])
            print(f"  {name:24} {kind:6} p50 {p50:6.1f} us  p99 {p99:6.1f} us")


if __name__ == "__main__":
    main(sys.argv[1])
