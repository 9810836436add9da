"""A/B of the occupancy bitmaps' size inside one process, alternating per query.

Run (from the repository root, on a store of 10M documents, e.g. the one
``bench_peers.py --n 10_000_000 --keep-store --dir /tmp/peers10m`` leaves)::

    PYTHONPATH=. python benchmarks/ab_bitmap_bits.py /tmp/peers10m/store.simstore --bits 25

Every query runs twice in a row, once with the store's own bitmaps and once with
bitmaps of at most ``--bits`` bits (occupancy and crowded, built in memory from the
store's fingerprints for each table whose stored bitmaps are larger), the order
alternating from query to query (see ``_ab_queries.py``). The answers must agree.
Queries: 4,000 stored fingerprints with 1, 2 or 3 random bits flipped and 1,000
random ones, shuffled; three passes after a warm-up pass. Prints single
``store.query`` p50 and p99 of each variant, near-duplicate and random queries apart.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _ab_queries import alternate, near_and_random_queries, warm_up

import simstore
from simstore import occupancy
from simstore.permute import FINGERPRINT_BITS
from simstore.query import table_scan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("store")
    parser.add_argument("--bits", type=int, default=25, help="the smaller bitmaps' bits")
    args = parser.parse_args()
    with simstore.open(args.store, "r") as store:
        queries = near_and_random_queries(store)
        warm_up(store, queries)
        stored_plan = store._scan_plan
        fingerprints = store.fingerprints()
        smaller = list(stored_plan)
        changed = []
        for index, (table, entry) in enumerate(zip(store.tables, stored_plan, strict=True)):
            stored_bits = FINGERPRINT_BITS - entry[3] if entry[1] is not None else 0
            if stored_bits > args.bits:
                bitmap, crowded = occupancy.built_with_crowded(args.bits, table.permute_array(fingerprints))
                entry_bits = (bitmap.tobytes(), crowded.tobytes(), FINGERPRINT_BITS - args.bits)
                smaller[index] = table_scan(store.tables, index, entry_bits)
                changed.append(f"table {index}: {stored_bits} -> {args.bits} bits")
        print("; ".join(changed) or f"no table's stored bitmaps have more than {args.bits} bits")
        alternate(
            store, {"stored bitmaps": stored_plan, f"bitmaps of <= {args.bits} bits": tuple(smaller)}, queries
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
