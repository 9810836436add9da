"""Measured constants of the layout planner's cost model, in one place.

:mod:`simstore.layout.planner` estimates, for a layout of ``T`` tables whose query
meets ``C`` entries in its prefix ranges (summed over the tables), ``R`` of
which pass their filter bits (each then costs a record read), after ``D``
bucket probes (the tables whose occupancy bitmap does not rule the query's
prefix out, see :func:`simstore.engine.occupancy.expected_descents`)::

    query µs      = PER_QUERY_US + T * PER_TABLE_US + D * probe_us(store bytes)
                    + C * PER_CANDIDATE_US + R * CANDIDATE_READ_US
    crowded (C >= T * CROWDED_PREFIX: every bucket read, then searched in numpy):
    query µs      = CROWDED_QUERY_US + T * CROWDED_BUCKET_US + C * CROWDED_ENTRY_US
                    + R * CANDIDATE_READ_US
    insert µs/doc = PER_DOC_INSERT_US + T * PER_KEY_WRITE_US       (bulk add_many)
    bytes/doc     = PER_DOC_BYTES + T * PER_ENTRY_BYTES

The query constants are fitted by hand (within ~25 %) to real stores of N =
1,000,000 random fingerprints, single ``store.query`` calls on a warm store
opened read-only, one-level layouts from 4 to 56 tables::

    python benchmarks/suite/bench_costs.py --output benchmarks/results/bench_costs_1M.md

(2026-11-25 15:36 UTC, load average ~0.4-0.9, format 2 with crowded
prefixes; 2-core AMD EPYC VM, CPython 3.11.7, numpy 2.4.6, py-lmdb 3.0.0 /
LMDB 0.9.36), plus ``benchmarks/experiments/ab_crowded.py`` at 10M and 30M for the
crowded ones. The results file lists every layout's figures; its
least-squares fit gave a negative per-candidate cost over the uncrowded
layouts (too few of them walk candidates), so PER_CANDIDATE_US is the
measured cost of testing one entry in Python and the rest were fitted around
it. Insert and size constants are from the 2026-11-22 fit. The machine's
speed varies by up to ~1.6x over minutes (shared): treat them as +-25 %.
"""

from __future__ import annotations

import math

# Query: fixed cost per query (transaction, delta check, result list).
PER_QUERY_US = 3.0
# Query: per table, whether or not it is probed (permute, bitmap test).
PER_TABLE_US = 0.30
# Query: per bucket probed (get, checksum, tags unpacked, binary search), for
# stores up to PROBE_BASE_BYTES.
PER_PROBE_US = 3.6
# A probe costs more in a bigger store (more cache and TLB misses per B-tree
# descent). Per-probe costs implied by benchmarks/suite/bench_layouts.py (query p50
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
# Query: per entry walked in a prefix range (its filter bits tested in Python).
PER_CANDIDATE_US = 0.08
# Query: per entry whose filter bits pass (its record read, the full
# fingerprints compared); few at k >= 4 (2k + 8 filter bits), most of a
# crowded prefix at k <= 3 (4-6 bits).
CANDIDATE_READ_US = 1.3

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

# Crowded prefixes: from this many entries sharing a query's prefix (summed
# over a table's runs, on average over the tables) a query reads every bucket
# it needs first and searches them together in numpy (TableSet.find). The
# two ways cross at about 3.4 (k = 5's 21 tables at 1M: 108 against 109 µs;
# at 3M 113 against 120; at 10M 115 against 154; benchmarks/experiments/ab_crowded.py):
# k = 5 from about 1.2M documents, never k = 3's 25-26-bit prefixes below 150M.
CROWDED_PREFIX = 4.0
# Query, crowded: fixed, per bucket read (get, checksum, the tags into
# numpy) and per entry tested; fitted by hand (within 25 %) to k=5 6 blocks,
# k=6 8 blocks and k=7 8 blocks at 1M (bench_costs.py: 46.8, 108, 252 µs),
# k=5 7 blocks at 10M (115) and at 30M in three runs (313; ab_crowded.py).
CROWDED_QUERY_US = 11.0
CROWDED_BUCKET_US = 4.0
CROWDED_ENTRY_US = 0.0066

# numpy brute force (``np.bitwise_count(fps ^ q) <= k``), per stored document:
# the scan a layout has to beat when every exact layout is expensive.
BRUTE_FORCE_NS_PER_DOC = 0.78


def probe_us(store_bytes: float) -> float:
    """Estimated µs per table probed in a store of ``store_bytes`` on disk.

    >>> probe_us(1e8) == PER_PROBE_US, round(probe_us(2.3e9), 2), probe_us(1e12) == MAX_PROBE_US
    (True, 4.81, True)
    """
    if store_bytes <= PROBE_BASE_BYTES:
        return PER_PROBE_US
    doublings = math.log2(store_bytes / PROBE_BASE_BYTES)
    return min(MAX_PROBE_US, PER_PROBE_US + PROBE_US_PER_DOUBLING * doublings)


# The N at which the constants were measured; beyond a few times this, LMDB's
# B-trees deepen and may leave RAM, so the estimates are optimistic.
CALIBRATED_DOCS = 1_000_000

# All pairs in memory (simstore.index.pairs, chosen by simstore.layout.pair_layout):
# per table and fingerprint, the permutation and the sort of the packed
# (prefix, position) keys; three times that when they do not fit 64 bits and
# an argsort runs instead. Then per comparison inside a run of equal prefixes.
# Fitted to all_pairs over 1M random fingerprints at k = 3, 5 and 8 and every
# planner layout of up to 512 tables (2026-11-28, the 2-core VM above).
PAIR_SORT_US = 0.05
PAIR_ARGSORT_US = 0.15
PAIR_COMPARE_US = 0.03
