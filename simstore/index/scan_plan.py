"""The order a query that wants only its closest matches visits the tables
in, and how far each step of it has settled. No I/O.

A document whose fingerprint differs from the query's in the bit set ``E``
is found in a table iff the table's prefix avoids ``E``. After some of the
tables, every document closer than the smallest set of bits meeting all
their prefixes (a hitting set, :func:`simstore.index.cover.find_escape`) has
been found: one at distance 0 in the first table, and, in a one-level
layout, one at distance 1 as soon as two tables' prefixes share no block.
A query limited to its closest ``limit`` matches can stop once it has that
many verified ones below this bound (see :mod:`simstore.engine.closest`); an
unlimited one visits every table in any order.

The order puts first the tables whose prefixes overlap least with those
already chosen, so that the bound rises early.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from simstore.index.cover import find_escape
from simstore.index.permute import FINGERPRINT_BITS, Table

#: Positions chosen by overlap; the rest of a larger layout follows in its
#: own order (the bound has usually stopped rising by then, and choosing
#: costs tables * positions steps).
CHOSEN_POSITIONS = 32


class ScanPlan(NamedTuple):
    """``order``: table indexes in the order visited. ``settled[j]``: after
    the first ``j`` tables of ``order``, every document closer than this
    many bits has been found (``settled[0]`` is 0; the last is ``k + 1``
    for a layout exact for ``k`` and no more)."""

    order: tuple[int, ...]
    settled: tuple[int, ...]


@functools.lru_cache(maxsize=8)
def scan_plan(tables: tuple[Table, ...]) -> ScanPlan:
    """The scan plan of ``tables``.

    >>> from simstore.index.permute import one_level_tables
    >>> plan = scan_plan(tuple(one_level_tables(2, 4)))
    >>> plan.order, plan.settled
    ((0, 5, 1, 4, 2, 3), (0, 1, 2, 2, 2, 2, 3))
    """
    order = _order(tables)
    visited = [tables[index] for index in order]
    # The bound is monotone in the tables visited: for each distance, the
    # fewest tables after which no set of that many bits escapes them all,
    # found by bisection (find_escape costs in proportion to the tables).
    settled = [0] * (len(order) + 1)
    first = 1
    for distance in range(FINGERPRINT_BITS + 1):
        low, high = first, len(order) + 1
        while low < high:
            middle = (low + high) // 2
            if find_escape(visited[:middle], distance) is None:
                high = middle
            else:
                low = middle + 1
        if low > len(order):
            break  # the layout is not exact for this distance: the bound stops below it
        for count in range(low, len(order) + 1):
            settled[count] = distance + 1
        first = low
    return ScanPlan(tuple(order), tuple(settled))


def _order(tables: Sequence[Table]) -> list[int]:
    """The tables' indexes, those whose prefix bits were covered least by
    the ones before first (ties to the lower index)."""
    prefixes = [table.bit_order[: table.prefix_bits] for table in tables]
    covered = [0] * FINGERPRINT_BITS  # chosen tables holding each bit in their prefix
    order: list[int] = []
    left = list(range(len(tables)))
    while left and len(order) < CHOSEN_POSITIONS:
        best = min(left, key=lambda index: (_weight(prefixes[index], covered), index))
        order.append(best)
        left.remove(best)
        for bit in prefixes[best]:
            covered[bit] += 1
    return order + left


def _weight(prefix: Sequence[int], covered: Sequence[int]) -> float:
    """How often the tables chosen so far hold the bits of ``prefix``, per bit."""
    return sum(covered[bit] for bit in prefix) / len(prefix)
