"""A/B of query_many's occupancy bit tests: per query in Python, or per batch in numpy.

Run (from the repository root; the store from ``ab_occupancy.py build``)::

    PYTHONPATH=. python benchmarks/ab_occupancy.py build /tmp/ab.simstore 1000000
    PYTHONPATH=. python benchmarks/ab_batch.py /tmp/ab.simstore

Both variants run the same scan (``simstore.query.scan_tables``) inside one process,
batch by batch, the order alternating from batch to batch (this shared machine's speed
swings too much for runs one after another to compare), and must return the same
matches. Batches of 1,000: 8,000 stored fingerprints with 1, 2 or 3 random bits
flipped (cycling) and 2,000 random ones, shuffled; three passes. Prints the median
µs per query of each variant.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import simstore
from simstore.query import occupied_tables, permute_columns, rows_of, scan_tables


def run_batch(store: simstore.Store, batch: np.ndarray, vectorised: bool) -> list[list[simstore.Match]]:
    """``store.query_many(batch)``, with the bit tests per batch or per query."""
    with store._read() as txn:
        plan = store._scan_plan
        columns = permute_columns(store._tables, batch)
        occupied: list[list[int] | None] = (
            list(occupied_tables(plan, columns)) if vectorised else [None] * len(batch)
        )
        cursors: list[object] = [None] * len(plan)
        results = []
        for query, permuted, tables in zip(batch.tolist(), rows_of(columns), occupied, strict=True):
            found = store._delta.matches(permuted, query, store.k)
            scan_tables(txn, store._handles.tables, cursors, plan, permuted, store.k, found, tables)  # type: ignore[arg-type]
            results.append(store._resolve(txn, found))
        return results


def main(path: str) -> None:
    rng = np.random.default_rng(3)
    with simstore.open(path, "r") as store:
        stored = store.fingerprints()
        near = stored[rng.integers(0, len(stored), 8000)].copy()
        for index in range(len(near)):
            for bit in rng.choice(64, size=1 + index % 3, replace=False):
                near[index] ^= np.uint64(1) << np.uint64(bit)
        queries = np.concatenate([near, rng.integers(0, 2**64, 2000, dtype=np.uint64)])
        rng.shuffle(queries)
        batches = [queries[start : start + 1000] for start in range(0, len(queries), 1000)]
        store.query_many(batches[0])  # reads every table's bitmaps
        micros: dict[bool, list[float]] = {True: [], False: []}
        for round_number in range(3):
            for index, batch in enumerate(batches):
                order = (True, False) if (index + round_number) % 2 else (False, True)
                answers = []
                for vectorised in order:
                    started = time.perf_counter_ns()
                    answers.append(run_batch(store, batch, vectorised))
                    micros[vectorised].append((time.perf_counter_ns() - started) / len(batch) / 1000)
                if answers[0] != answers[1]:
                    raise SystemExit("the two variants disagree")
        print(
            f"{path}: {len(store):,} documents; µs per query, median over batches: "
            f"bit tests per query {np.median(micros[False]):.1f}, per batch {np.median(micros[True]):.1f}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
