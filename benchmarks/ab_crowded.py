"""A/B of the crowded-bitmap skip inside one process, alternating per query.

Run (from the repository root; the store from ``ab_occupancy.py build``)::

    PYTHONPATH=. python benchmarks/ab_occupancy.py build /tmp/ab.simstore 1000000
    PYTHONPATH=. python benchmarks/ab_crowded.py /tmp/ab.simstore

One process runs every query twice in a row, once with the store's crowded bitmaps
and once with them switched off (the same occupancy bitmaps, no skipping), the order
alternating from query to query (see ``_ab_queries.py`` for why in one process).

Queries: 4,000 stored fingerprints with 1, 2 or 3 random bits flipped (cycling) and
1,000 random fingerprints, shuffled; three passes after a warm-up pass. Prints single
``store.query`` p50 and p99 of each variant, for the near-duplicate and the random
queries apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _ab_queries import alternate, near_and_random_queries, warm_up

import simstore


def main(path: str) -> None:
    with simstore.open(path, "r") as store:
        queries = near_and_random_queries(store)
        warm_up(store, queries)
        with_crowded = store._scan_plan
        without_crowded = tuple(
            (suffix, bitmap, None, shift, masks) for suffix, bitmap, _, shift, masks in with_crowded
        )
        alternate(
            store, {"crowded bitmaps": with_crowded, "occupancy bitmaps only": without_crowded}, queries
        )


if __name__ == "__main__":
    main(sys.argv[1])
