"""The permutation tables an all-pairs search in memory uses.

A store's own tables serve its queries; an all-pairs search reads every
fingerprint into memory and sorts them once per table
(:mod:`simstore.index.pairs`), so it is free to use other tables. Its cost is
not a query's: each table costs a sort of all ``N`` fingerprints, and each
run of ``m`` equal prefixes ``m**2 / 2`` comparisons. Few tables with short
prefixes, right for a query, make long runs: at ``k = 8`` and 1M random
fingerprints a store's 45 tables (12-14 bit prefixes) took 88 s, the 165
tables of 11 blocks 23 s. This module picks, among the planner's one-level
layouts, the one whose estimated sort and comparison time is least for the
``N`` at hand.

Nothing here does I/O.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

from simstore.index import costs
from simstore.index.pairs import packs
from simstore.index.permute import FINGERPRINT_BITS, MAX_TABLES, Table
from simstore.layout.planner import Layout, one_level


def pair_seconds(tables: tuple[Table, ...], count: int) -> float:
    """Estimated seconds of an all-pairs search of ``count`` random
    fingerprints through ``tables`` (:mod:`simstore.index.costs`)."""
    total_us = 0.0
    for table in tables:
        sort_us = costs.PAIR_SORT_US if packs(table, count) else costs.PAIR_ARGSORT_US
        run_length = count / 2.0**table.prefix_bits
        total_us += count * (sort_us + costs.PAIR_COMPARE_US * run_length / 2)
    return total_us / 1e6


def pair_layout(k: int, count: int) -> Layout:
    """The one-level layout exact for ``k`` with the least estimated
    all-pairs time over ``count`` fingerprints (ties: fewer tables)."""
    return min(_candidates(k), key=lambda layout: (pair_seconds(layout.tables, count), layout.table_count))


@lru_cache(maxsize=16)
def _candidates(k: int) -> tuple[Layout, ...]:
    """The one-level layouts for ``k`` of up to ``MAX_TABLES`` tables. The
    planner's two-level layouts are left out: the model ranked one of them
    first for no k in 0..12 and no N from 10 to 10**11, and building them all
    took up to 0.24 s, more than a whole search of 20K fingerprints."""
    layouts = []
    for blocks in range(k + 1, FINGERPRINT_BITS + 1):
        if comb(blocks, k) > MAX_TABLES:
            break
        layouts.append(one_level(k, blocks))
    return tuple(layouts)
