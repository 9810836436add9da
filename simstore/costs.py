"""Measured constants of the layout planner's cost model, in one place.

:mod:`simstore.plan` estimates, for a layout of ``T`` tables whose query
returns ``C`` candidates (entries walked in the prefix ranges, summed over the
tables) after ``D`` B-tree descents (the tables whose occupancy bitmap does
not rule the query's prefix out, see :func:`simstore.occupancy.expected_descents`)::

    query µs      = PER_QUERY_US + T * PER_TABLE_US + D * probe_us(store bytes)
                    + C * PER_CANDIDATE_US
    insert µs/doc = PER_DOC_INSERT_US + T * PER_KEY_WRITE_US       (bulk add_many)
    bytes/doc     = PER_DOC_BYTES + T * PER_ENTRY_BYTES

The figures are least-squares fits over real simstore stores built with
``simstore.open(path, "n", k=..., blocks=...)`` for several table counts and
prefix lengths, N = 1,000,000 random fingerprints, single ``store.query``
calls on a warm store opened read-only. They describe this machine; rerun
the benchmark and edit the numbers by hand on another one.

Measured by::

    python benchmarks/bench_costs.py --output benchmarks/results/bench_costs_1M.md

on 2026-11-22 07:00 UTC, with the occupancy and crowded bitmaps (2-core AMD
EPYC VM, load average ~1.0; CPython 3.11.7, numpy 2.4.6, py-lmdb 3.0.0 /
LMDB 0.9.36). The fit minimises relative errors with each layout weighing
the same; the results file lists every layout's measured figures next to the
fit's, which stay within 25% of them. The machine's speed varies by up to
~1.6x over minutes (shared), so treat the constants as +-25%.
"""

from __future__ import annotations

import math

# Query: fixed cost per query (transaction, delta check, result list).
PER_QUERY_US = 10.7
# Query: per table, whether or not it is probed (permute, bitmap test).
PER_TABLE_US = 0.076
# Query: per B-tree descent (cursor, set_range, first-key test), for stores
# up to PROBE_BASE_BYTES. Measured on stores of 0.2-1.5 GB.
PER_PROBE_US = 2.81
# A probe costs more in a bigger store (more cache and TLB misses per B-tree
# descent). Per-probe costs implied by benchmarks/bench_layouts.py (query p50
# minus the fixed and per-candidate terms, over the tables), against the
# store's size: ~2.4-2.6 µs up to 1.1 GB, 2.9 at 1.5 GB, 3.4 at 2.3 GB,
# 3.6-3.7 at 3.2-5.9 GB (N = 10M), 4.2-4.4 at 4.4-13 GB (N = 1M, k = 8).
# Modelled as PER_PROBE_US up to PROBE_BASE_BYTES, then PROBE_US_PER_DOUBLING
# more per doubling of the size, at most MAX_PROBE_US: within 15% of each
# of those points (see probe_us). Those were measured before the bitmaps,
# when every table was probed; the same rise is kept on the new base.
PROBE_BASE_BYTES = 0.5e9
PROBE_US_PER_DOUBLING = 0.55
MAX_PROBE_US = 5.0
# Query: per candidate walked in a prefix range (cursor step, XOR popcount).
PER_CANDIDATE_US = 0.289

# Bulk insert: fixed cost per document (key packing, record, id).
PER_DOC_INSERT_US = 1.58
# Bulk insert: per table entry written (permute, sort, putmulti). At N = 10M
# one add_many measured 1.7-2.1x these estimates (larger sorts, deeper trees).
PER_KEY_WRITE_US = 0.393

# Size on disk: fixed bytes per document (key table and record with 8-byte
# int keys, measured 56.5 at 2M) ...
PER_DOC_BYTES = 56.5
# ... and bytes per table entry: format 2 packs entries in buckets, 5-6 bytes
# of tag and id plus bucket and page overhead and the occupancy bitmaps
# (measured 7.9 a table at 2M in 10 tables; format 1's node was 28.1).
PER_ENTRY_BYTES = 7.9

# numpy brute force (``np.bitwise_count(fps ^ q) <= k``), per stored document:
# the scan a layout has to beat when every exact layout is expensive.
BRUTE_FORCE_NS_PER_DOC = 0.78


def probe_us(store_bytes: float) -> float:
    """Estimated µs per table probed in a store of ``store_bytes`` on disk.

    >>> probe_us(1e8) == PER_PROBE_US, round(probe_us(2.3e9), 2), probe_us(1e12) == MAX_PROBE_US
    (True, 4.02, True)
    """
    if store_bytes <= PROBE_BASE_BYTES:
        return PER_PROBE_US
    doublings = math.log2(store_bytes / PROBE_BASE_BYTES)
    return min(MAX_PROBE_US, PER_PROBE_US + PROBE_US_PER_DOUBLING * doublings)


# The N at which the constants were measured; beyond a few times this, LMDB's
# B-trees deepen and may leave RAM, so the estimates are optimistic.
CALIBRATED_DOCS = 1_000_000
