"""Whether permutation tables are exact for ``k``: the cover check, a
hitting-set search over the tables' prefixes. Pure; no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from simstore.index.permute import FINGERPRINT_BITS, Table, validate_k


def find_escape(tables: Sequence[Table], k: int) -> tuple[int, ...] | None:
    """A set of at most ``k`` bit positions whose flipping escapes every
    table's prefix, or ``None`` if there is none (the tables are exact for
    ``k``).

    Two fingerprints differing in the bit set ``E`` are found iff some table's
    prefix avoids ``E``. Bits that lie in exactly the same tables' prefixes
    form one *class*; only the classes ``E`` touches matter, and touching a
    class takes one bit. So the tables fail for ``k`` iff some set of at most
    ``k`` classes meets every table's prefix: a hitting set, searched for by
    branch and bound (branch on the elements of the smallest prefix not yet
    hit, each branch excluding the elements tried before it; prune with a
    packing of pairwise disjoint unhit prefixes, each of which needs its own
    element).
    """
    k = validate_k(k)
    if not tables:
        return ()
    signature = [0] * FINGERPRINT_BITS
    for index, table in enumerate(tables):
        for bit in table.bit_order[: table.prefix_bits]:
            signature[bit] |= 1 << index
    class_of: dict[int, int] = {}
    representative: list[int] = []
    for bit in range(FINGERPRINT_BITS):
        if signature[bit] and signature[bit] not in class_of:
            class_of[signature[bit]] = len(representative)
            representative.append(bit)
    prefix_sets = [0] * len(tables)
    for sig, class_index in class_of.items():
        remaining = sig
        while remaining:
            low = remaining & -remaining
            prefix_sets[low.bit_length() - 1] |= 1 << class_index
            remaining ^= low
    hitting = _hitting_set(sorted(set(prefix_sets), key=_popcount), k, {})
    if hitting is None:
        return None
    return tuple(sorted(representative[index] for index in _elements(hitting)))


def covers(tables: Sequence[Table], k: int) -> bool:
    """Whether any two fingerprints within ``k`` bits share the full prefix
    of at least one of ``tables`` (see :func:`find_escape`).

    >>> from simstore.index.permute import one_level_tables
    >>> covers(one_level_tables(3, 5), 3), covers(one_level_tables(3, 5), 4)
    (True, False)
    """
    return find_escape(tables, k) is None


def _popcount(value: int) -> int:
    return value.bit_count()


def _elements(mask: int) -> list[int]:
    found = []
    while mask:
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return found


def _hitting_set(sets: list[int], budget: int, failed: dict[tuple[frozenset[int], int], None]) -> int | None:
    """A mask of at most ``budget`` elements meeting every mask in ``sets``
    (sorted smallest first, none empty), or ``None``."""
    if not sets:
        return 0
    if budget == 0:
        return None
    if budget == 1:
        common = -1
        for members in sets:
            common &= members
            if not common:
                return None
        return common & -common
    # Lower bound: pairwise disjoint sets each need their own element.
    used = 0
    disjoint = 0
    for members in sets:
        if not members & used:
            used |= members
            disjoint += 1
            if disjoint > budget:
                return None
    memo_key = (frozenset(sets), budget)
    if memo_key in failed:
        return None
    excluded = 0
    for element in _elements(sets[0]):
        bit = 1 << element
        rest: set[int] = set()
        feasible = True
        for members in sets:
            if members & bit:
                continue
            narrowed = members & ~excluded
            if not narrowed:
                feasible = False
                break
            rest.add(narrowed)
        if feasible:
            found = _hitting_set(sorted(rest, key=_popcount), budget - 1, failed)
            if found is not None:
                return found | bit
        excluded |= bit
    failed[memo_key] = None
    return None
