"""Choosing permutation tables from ``k`` and the expected corpus size.

A layout is a set of permutation tables (:class:`simstore.index.permute.Table`)
that is *exact* for a radius ``k``: any two fingerprints within ``k`` bits
share the full leading prefix of at least one table, so one prefix range scan
per table finds every neighbour. Following Manku, Jain & Das Sarma (WWW
2007), a table whose prefix is ``p`` bits returns about ``N / 2**p``
candidates per probe over ``N`` random fingerprints; more tables buy longer
prefixes and cost storage and insert time.

Two families are built here:

- **one-level** (:func:`one_level`): 64 bits in ``b`` blocks, one table per
  choice of ``b - k`` leading blocks: ``C(b, k)`` tables;
- **two-level** (:func:`two_level`): 64 bits in ``b1`` outer blocks, one
  choice of ``b1 - k1`` leading outer blocks; the bits left over are split
  again into ``b2`` inner blocks, and ``b2 - k`` of those follow:
  ``C(b1, k1) * C(b2, k)`` tables (fewer if two choices give the same prefix).
  For ``k = 3``, 4 outer blocks of 16 bits and 4 inner blocks of 12 bits give
  the paper's 16 tables with 28-bit prefixes.

:func:`plan` lists the layouts for a ``k`` and ``N`` with estimated
candidates, bytes, query and insert time from the cost model whose measured
constants live in :mod:`simstore.index.costs`; :func:`covers` checks any set of
tables for exactness. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from math import comb
from typing import Any

import numpy as np

from simstore.engine import occupancy, runs
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.sketch import check_similarity
from simstore.index import costs
from simstore.index.permute import (
    FINGERPRINT_BITS,
    MAX_TABLES,
    Table,
    block_bit_numbers,
    block_sizes,
    one_level_tables,
    validate_k,
)

MAX_PLAN_K = 12


@dataclass(frozen=True)
class Layout:
    """An exact set of permutation tables for radius ``k``, and what it costs.

    ``spec`` describes how the tables were made (msgpack-able, stored in the
    store's meta record), e.g. ``{"kind": "one-level", "blocks": 5}``. The
    estimate fields are filled by :meth:`with_estimates` (and :func:`plan`)
    for ``expected_docs`` documents, and are ``None`` otherwise:

    Attributes:
        expected_candidates: entries walked per query, summed over the tables,
            for a random query over random fingerprints.
        bytes_per_doc: bytes on disk per document.
        query_us: estimated single-query time in microseconds.
        insert_us: estimated bulk insert time per document in microseconds.
    """

    name: str
    k: int
    tables: tuple[Table, ...]
    spec: dict[str, Any] = field(hash=False)
    expected_docs: int | None = None
    expected_candidates: float | None = None
    bytes_per_doc: float | None = None
    query_us: float | None = None
    insert_us: float | None = None

    @property
    def table_count(self) -> int:
        return len(self.tables)

    @property
    def prefix_bits(self) -> tuple[int, ...]:
        return tuple(table.prefix_bits for table in self.tables)

    @property
    def candidate_rate(self) -> float:
        """Expected candidates per stored document: ``sum(2**-prefix_bits)``."""
        return sum(2.0**-bits for bits in self.prefix_bits)

    def with_estimates(self, expected_docs: int | float) -> Layout:
        """This layout with its estimates for ``expected_docs`` documents."""
        docs = _check_docs(expected_docs)
        candidates = docs * self.candidate_rate
        tables = self.table_count
        bytes_per_doc = costs.PER_DOC_BYTES + tables * costs.PER_ENTRY_BYTES
        probe_us = costs.probe_us(docs * bytes_per_doc)
        descents = sum(occupancy.expected_descents(docs, bits, tables) for bits in self.prefix_bits)
        # Candidates whose filter bits let them through cost a record read each.
        reads = sum(docs * 2.0**-bits * filter_pass_rate(self.k, docs, bits) for bits in self.prefix_bits)
        if candidates >= tables * costs.CROWDED_PREFIX:
            # Crowded prefixes: every bucket is read, then searched in numpy.
            query_us = (
                costs.CROWDED_QUERY_US
                + tables * costs.CROWDED_BUCKET_US
                + candidates * costs.CROWDED_ENTRY_US
                + reads * costs.CANDIDATE_READ_US
            )
        else:
            query_us = (
                costs.PER_QUERY_US
                + tables * costs.PER_TABLE_US
                + descents * probe_us
                + candidates * costs.PER_CANDIDATE_US
                + reads * costs.CANDIDATE_READ_US
            )
        return dataclasses.replace(
            self,
            expected_docs=docs,
            expected_candidates=candidates,
            bytes_per_doc=bytes_per_doc,
            query_us=query_us,
            insert_us=costs.PER_DOC_INSERT_US + tables * costs.PER_KEY_WRITE_US,
        )


def filter_pass_rate(k: int, docs: float, prefix_bits: int) -> float:
    """The share of the entries sharing a random query's prefix whose filter
    bits (as a run of ``docs`` entries records them, see
    :func:`simstore.engine.runs.choose_geometry`) are within ``k`` of the query's."""
    entries = max(1, int(docs))
    geometry = runs.choose_geometry(entries, prefix_bits, entries, filter_bits=runs.filter_bits_for(k))
    filter_bits = geometry.filter_bits
    return sum(comb(filter_bits, flipped) for flipped in range(min(k, filter_bits) + 1)) / 2.0**filter_bits


# ------------------------------------------------------------------ builders


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= int(value) <= high:
        raise InvalidValueError(f"{name} must be in {low}..{high}, got {value}")
    return int(value)


def _sizes_label(sizes: Iterable[int]) -> str:
    distinct = sorted(set(sizes))
    return str(distinct[0]) if len(distinct) == 1 else f"{distinct[0]}-{distinct[-1]}"


def one_level(k: int, blocks: int) -> Layout:
    """Manku's one-level layout: ``blocks`` blocks, one table per choice of
    ``blocks - k`` leading blocks (the tables of
    :func:`simstore.index.permute.one_level_tables`, in the same order)."""
    k = validate_k(k)
    tables = tuple(one_level_tables(k, blocks))
    return Layout(
        name=f"1-level {int(blocks)} blocks",
        k=k,
        tables=tables,
        spec={"kind": "one-level", "blocks": int(blocks)},
    )


def two_level(k: int, outer_blocks: int, outer_k: int, inner_blocks: int) -> Layout:
    """The paper's two-level layout.

    The 64 bits are cut into ``outer_blocks`` (b1) blocks. For every choice
    of ``b1 - outer_k`` leading outer blocks, the bits of the other
    ``outer_k`` outer blocks (in their natural order) are cut again into
    ``inner_blocks`` (b2) blocks, and for every choice of ``b2 - k`` of those
    there is one table: prefix = the chosen outer blocks, then the chosen
    inner blocks; the remaining inner blocks follow. Tables whose prefixes
    hold the same bits are kept once.

    Why this is exact (for ``outer_k >= k``): let two fingerprints differ in
    the set ``E`` of bit positions, ``|E| <= k``. ``E`` touches at most ``k``
    outer blocks, so at least ``b1 - k >= b1 - outer_k`` outer blocks are
    free of differences; some enumerated choice ``L`` of ``b1 - outer_k``
    outer blocks is among them. All of ``E`` then lies in the leftover bits
    ``R(L)``, which are cut into ``b2`` inner blocks; ``E`` touches at most
    ``k`` of them, so at least ``b2 - k`` are free, and some enumerated
    choice ``M`` of ``b2 - k`` inner blocks is among them. The table for
    ``(L, M)`` has a prefix made only of bits outside ``E``: both
    fingerprints have the same prefix there, and that table's range scan
    meets the neighbour. Dropping a table whose prefix bits repeat an
    earlier table's loses nothing, since only the set of prefix bits matters.

    Why the inner level needs ``k2 = k`` and not less: choosing error-free
    outer blocks moves no difference out of ``R(L)``, so all ``|E|`` may lie
    there, in ``k`` distinct inner blocks. And why :func:`plan` uses only
    ``outer_k = k``: with ``m`` leading outer blocks and an inner level that
    keeps the share ``r = (b2 - k) / b2 < 1`` of the leftover bits, the prefix
    is ``64 * (m + r * outer_k) / (m + outer_k)`` bits, which shrinks as
    ``outer_k`` grows, while the outer choices ``C(m + outer_k, m)`` multiply:
    ``outer_k > k`` loses on both counts to ``outer_k = k``.

    Args:
        k: the radius the layout must answer.
        outer_blocks: b1, at least ``outer_k + 1``.
        outer_k: ``b1 -`` the number of leading outer blocks; at least ``k``.
        inner_blocks: b2, at least ``k + 1`` and at most the leftover bits.

    Raises:
        InvalidValueError: impossible parameters, or more than
            ``MAX_TABLES`` tables.
    """
    k = validate_k(k)
    if k > MAX_PLAN_K:
        raise InvalidValueError(f"two-level layouts are built for k up to {MAX_PLAN_K}, got k={k}")
    outer_k = _check_int("outer_k", outer_k, k, FINGERPRINT_BITS - 1)
    outer_blocks = _check_int("outer_blocks", outer_blocks, outer_k + 1, FINGERPRINT_BITS)
    outer_sizes = block_sizes(outer_blocks)
    # The leftover bits are fewest when the smallest outer blocks are left over.
    fewest_left = sum(sorted(outer_sizes)[:outer_k])
    if fewest_left < k + 1:
        raise InvalidValueError(
            f"outer_k={outer_k} of {outer_blocks} outer blocks leaves {fewest_left} bits, "
            f"too few for {k + 1} inner blocks"
        )
    inner_blocks = _check_int("inner_blocks", inner_blocks, k + 1, fewest_left)
    table_count = comb(outer_blocks, outer_k) * comb(inner_blocks, k)
    if table_count > MAX_TABLES:
        raise InvalidValueError(
            f"{outer_blocks} outer blocks (outer_k={outer_k}) x {inner_blocks} inner blocks need "
            f"{table_count} tables for k={k}; at most {MAX_TABLES} are allowed"
        )
    outer_bits = block_bit_numbers(outer_sizes)
    tables: list[Table] = []
    seen: set[frozenset[int]] = set()
    inner_sizes_seen: set[int] = set()
    for leading in combinations(range(outer_blocks), outer_blocks - outer_k):
        lead_bits = [bit for index in leading for bit in outer_bits[index]]
        rest_bits = [
            bit for index in range(outer_blocks) if index not in leading for bit in outer_bits[index]
        ]
        inner_sizes = block_sizes(inner_blocks, len(rest_bits))
        inner_sizes_seen.update(inner_sizes)
        inner_bits: list[list[int]] = []
        start = 0
        for size in inner_sizes:
            inner_bits.append(rest_bits[start : start + size])
            start += size
        for inner_leading in combinations(range(inner_blocks), inner_blocks - k):
            prefix = lead_bits + [bit for index in inner_leading for bit in inner_bits[index]]
            bit_set = frozenset(prefix)
            if bit_set in seen:
                continue
            seen.add(bit_set)
            suffix = [
                bit
                for index in range(inner_blocks)
                if index not in inner_leading
                for bit in inner_bits[index]
            ]
            tables.append(Table(tuple(prefix + suffix), len(prefix)))
    outer_label = f"{outer_blocks}x{_sizes_label(outer_sizes)}"
    inner_label = f"{inner_blocks}x{_sizes_label(inner_sizes_seen)}"
    name = f"2-level {outer_label} + {inner_label}"
    if outer_k != k:
        name += f" (outer k {outer_k})"
    return Layout(
        name=name,
        k=k,
        tables=tuple(tables),
        spec={
            "kind": "two-level",
            "outer_blocks": outer_blocks,
            "outer_k": outer_k,
            "inner_blocks": inner_blocks,
            "inner_k": k,
        },
    )


def from_spec(k: int, spec: Mapping[str, Any]) -> Layout:
    """Rebuild a layout from its ``spec`` (as stored in a store's meta record).

    Raises:
        InvalidValueError: an unknown kind or bad parameters.
    """
    if not isinstance(spec, Mapping):
        raise InvalidTypeError(f"a layout spec must be a mapping, got {type(spec).__name__}")
    kind = spec.get("kind")
    try:
        if kind == "one-level":
            return one_level(k, spec["blocks"])
        if kind == "two-level":
            if spec.get("inner_k", k) != k:
                raise InvalidValueError(f"spec inner_k={spec.get('inner_k')} differs from k={k}")
            return two_level(k, spec["outer_blocks"], spec["outer_k"], spec["inner_blocks"])
    except KeyError as exc:
        raise InvalidValueError(f"layout spec {dict(spec)!r} lacks {exc}") from exc
    raise InvalidValueError(f"unknown layout kind {kind!r} in spec {dict(spec)!r}")


# ------------------------------------------------------------------ exactness


# ------------------------------------------------------------------ planning


def _check_docs(expected_docs: object) -> int:
    if isinstance(expected_docs, bool) or not isinstance(
        expected_docs, int | float | np.integer | np.floating
    ):
        raise InvalidTypeError(f"expected_docs must be a number, got {type(expected_docs).__name__}")
    value = float(expected_docs)
    if not math.isfinite(value) or value != math.floor(value) or not 1 <= value <= 2**63:
        raise InvalidValueError(
            f"expected_docs must be a whole number of documents from 1 to 2**63, got {expected_docs!r}"
        )
    return int(value)


def _plan_k(k: object) -> int:
    checked = validate_k(k)
    if checked > MAX_PLAN_K:
        raise InvalidValueError(f"the planner handles k in 0..{MAX_PLAN_K}, got k={checked}")
    return checked


def _shapes(k: int, max_tables: int) -> list[tuple[int, int]]:
    """``(outer_blocks, inner_blocks)`` of the two-level layouts (``outer_k = k``)
    with at most ``max_tables`` tables before deduplication; ``inner_blocks = 0``
    stands for the one-level layout with ``outer_blocks`` blocks."""
    shapes: list[tuple[int, int]] = []
    if k == 0:
        return [(1, 0)]  # every one-level layout is the identity table with a 64-bit prefix
    for outer in range(k + 1, FINGERPRINT_BITS + 1):
        outer_tables = comb(outer, k)
        if outer_tables > max_tables:
            break
        shapes.append((outer, 0))
        fewest_left = sum(sorted(block_sizes(outer))[:k])
        for inner in range(k + 1, fewest_left + 1):
            if outer_tables * comb(inner, k) > max_tables:
                break
            shapes.append((outer, inner))
    return shapes


def candidate_layouts(k: int, *, max_tables: int | None = None) -> list[Layout]:
    """Every layout of the planner's families for ``k`` with at most
    ``max_tables`` tables (default ``MAX_TABLES``), without estimates, dominated
    ones included; a layout whose tables repeat another's is listed once, as
    one-level if it is one."""
    k = _plan_k(k)
    limit = MAX_TABLES if max_tables is None else _check_int("max_tables", max_tables, 1, MAX_TABLES)
    layouts: list[Layout] = []
    seen: set[frozenset[frozenset[int]]] = set()
    # One-level layouts first: when a two-level layout builds the very same
    # tables (4x16 + 6x8 is 1-level 8 blocks for k=3), the simpler name stays.
    for outer, inner in sorted(_shapes(k, limit), key=lambda shape: shape[1] != 0):
        layout = one_level(k, outer) if inner == 0 else two_level(k, outer, k, inner)
        if layout.table_count > limit:
            continue
        signature = frozenset(frozenset(table.bit_order[: table.prefix_bits]) for table in layout.tables)
        if signature in seen:
            continue
        seen.add(signature)
        layouts.append(layout)
    return layouts


_CANDIDATES_CACHE: dict[tuple[int, int], tuple[Layout, ...]] = {}


def _cached_candidates(k: int, max_tables: int) -> tuple[Layout, ...]:
    key = (k, max_tables)
    if key not in _CANDIDATES_CACHE:
        _CANDIDATES_CACHE[key] = tuple(candidate_layouts(k, max_tables=max_tables))
    return _CANDIDATES_CACHE[key]


def _exact_rate(layout: Layout) -> int:
    """``candidate_rate * 2**64`` as an exact int, so that layouts with the same
    prefix lengths compare equal whatever the order of their tables."""
    return sum(1 << (FINGERPRINT_BITS - bits) for bits in layout.prefix_bits)


def _dominated(layout: Layout, others: Sequence[Layout]) -> bool:
    """Another layout has no more tables and no more candidates, one of them fewer:
    it is no worse in query time, insert time and bytes for every N."""
    rate = _exact_rate(layout)
    for other in others:
        other_rate = _exact_rate(other)
        if (
            other.table_count <= layout.table_count
            and other_rate <= rate
            and (other.table_count < layout.table_count or other_rate < rate)
        ):
            return True
    return False


#: For a similarity threshold ``J``, the smallest ``k`` at which at least 97 %
#: of the near-duplicate pairs with Jaccard similarity (of word 3-shingles) at
#: least ``J`` (exact copies aside) lie within ``k`` bits of each other, pooled
#: over the real-text corpora of ``benchmarks/suite/bench_quality.py --real`` (texts
#: of 20 tokens or more). A threshold between two rows takes the lower row's
#: ``k`` (more recall).
K_FOR_SIMILARITY: tuple[tuple[float, int], ...] = ((0.97, 5), (0.9, 8), (0.8, 11))


def k_for_similarity(threshold: float) -> int:
    """The ``k`` a store verifying at ``threshold`` needs (see
    :data:`K_FOR_SIMILARITY`): below the table's lowest threshold, its ``k``."""
    for similarity, k in K_FOR_SIMILARITY:
        if threshold >= similarity:
            return k
    return K_FOR_SIMILARITY[-1][1]


def plan(
    k: int | None,
    expected_docs: int | float,
    *,
    max_tables: int | None = None,
    bytes_budget: int | float | None = None,
    min_similarity: float | None = None,
) -> list[Layout]:
    """The layouts for radius ``k`` and ``expected_docs`` documents, best first.

    Considers Manku's one-level layouts (``b`` blocks, ``C(b, k)`` tables) and
    two-level layouts (``b1`` outer, ``b2`` inner blocks,
    ``C(b1, k) * C(b2, k)`` tables) with at most ``MAX_TABLES`` tables, and
    returns every one that is not dominated (a layout with no more tables and
    no more expected candidates, one of the two strictly fewer, is no worse
    in every estimate for every corpus size; :func:`candidate_layouts` lists
    the dominated ones too). Of layouts with the same prefix lengths (and so
    the same estimates) only the first is kept, a one-level one if any. Each
    carries its estimates; the list is sorted by estimated query time, then
    bytes per document.

    Args:
        k: the radius, 0..12; ``None`` with ``min_similarity``: the radius
            that threshold needs (:func:`k_for_similarity`).
        expected_docs: the corpus size to plan for (an int, or a float such
            as ``1e9`` with no fractional part).
        max_tables: keep layouts with at most this many tables.
        bytes_budget: keep layouts whose estimated size for
            ``expected_docs`` documents is at most this many bytes.
        min_similarity: the similarity threshold the store will verify
            matches at (see :func:`simstore.open`).

    Raises:
        InvalidValueError: bad arguments, or no layout fits the limits (the
            message names what the smallest layout needs).
        InvalidTypeError: arguments of the wrong type.
    """
    if k is None:
        if min_similarity is None:
            raise InvalidValueError("plan() needs k= or min_similarity=")
        k = k_for_similarity(check_similarity(min_similarity))
    k = _plan_k(k)
    docs = _check_docs(expected_docs)
    limit = MAX_TABLES if max_tables is None else _check_int("max_tables", max_tables, 1, 1 << 62)
    if bytes_budget is not None:
        if isinstance(bytes_budget, bool) or not isinstance(
            bytes_budget, int | float | np.integer | np.floating
        ):
            raise InvalidTypeError(
                f"bytes_budget must be a number of bytes, got {type(bytes_budget).__name__}"
            )
        if not bytes_budget > 0:
            raise InvalidValueError(f"bytes_budget must be positive, got {bytes_budget!r}")
    everything = _cached_candidates(k, MAX_TABLES)
    fitting = [
        layout.with_estimates(docs) for layout in everything if layout.table_count <= min(limit, MAX_TABLES)
    ]
    if bytes_budget is not None:
        fitting = [layout for layout in fitting if (layout.bytes_per_doc or 0.0) * docs <= bytes_budget]
    if not fitting:
        smallest = min(everything, key=lambda layout: layout.table_count).with_estimates(docs)
        total = (smallest.bytes_per_doc or 0.0) * docs
        raise InvalidValueError(
            f"no exact layout for k={k} fits max_tables={max_tables}, bytes_budget={bytes_budget}: "
            f"the smallest ({smallest.name}) needs {smallest.table_count} tables and about "
            f"{total:,.0f} bytes for {docs:,} documents"
        )
    undominated = [layout for layout in fitting if not _dominated(layout, fitting)]
    undominated.sort(
        key=lambda layout: (
            layout.query_us,
            layout.bytes_per_doc,
            layout.table_count,
            layout.spec.get("kind") != "one-level",  # the simpler of two equivalent layouts first
            layout.name,
        )
    )
    # Layouts with the same prefix lengths have the same estimates: keep the first.
    kept: list[Layout] = []
    shapes_seen: set[tuple[int, ...]] = set()
    for layout in undominated:
        shape = tuple(sorted(layout.prefix_bits))
        if shape not in shapes_seen:
            shapes_seen.add(shape)
            kept.append(layout)
    return kept


def best_layout(
    k: int,
    expected_docs: int | float,
    *,
    max_tables: int | None = None,
    bytes_budget: int | float | None = None,
) -> Layout:
    """The layout :func:`plan` ranks first."""
    return plan(k, expected_docs, max_tables=max_tables, bytes_budget=bytes_budget)[0]


def _human(value: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def format_plan(layouts: Sequence[Layout], *, limit: int | None = None) -> str:
    """A plain-text table of planned layouts (as printed by ``simstore plan``)."""
    if not layouts:
        return "no layouts"
    shown = list(layouts if limit is None else layouts[:limit])
    headers = [
        "#",
        "layout",
        "tables",
        "prefix bits",
        "candidates/query",
        "bytes/doc",
        "query µs",
        "insert µs/doc",
    ]
    rows: list[list[str]] = []
    for rank, layout in enumerate(shown, 1):
        bits = sorted(set(layout.prefix_bits))
        rows.append(
            [
                str(rank),
                layout.name,
                str(layout.table_count),
                str(bits[0]) if len(bits) == 1 else f"{bits[0]}-{bits[-1]}",
                "-" if layout.expected_candidates is None else f"{layout.expected_candidates:.3g}",
                "-" if layout.bytes_per_doc is None else f"{layout.bytes_per_doc:.0f}",
                "-" if layout.query_us is None else f"{layout.query_us:.3g}",
                "-" if layout.insert_us is None else f"{layout.insert_us:.3g}",
            ]
        )
    widths = [max(len(header), *(len(row[column]) for row in rows)) for column, header in enumerate(headers)]
    left = {1}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if column in left else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    lines = [line(headers), line(["-" * width for width in widths])]
    lines += [line(row) for row in rows]
    first = shown[0]
    docs = first.expected_docs
    if docs is not None:
        lines.append("")
        lines.append(
            f"k={first.k}, {_human(docs)} documents; estimates from the cost model (simstore/index/costs.py) "
            f"(measured at {_human(costs.CALIBRATED_DOCS)} documents on one machine)."
        )
        if docs > 10 * costs.CALIBRATED_DOCS:
            lines.append(
                "Beyond the calibrated size LMDB's trees deepen; the model charges bigger stores "
                "more per probe; for a store larger than RAM treat the times as lower bounds."
            )
        brute_us = docs * costs.BRUTE_FORCE_NS_PER_DOC / 1000
        if first.query_us is not None and first.query_us > brute_us / 10:
            lines.append(
                f"Costly: the best exact layout walks ~{_human(first.expected_candidates or 0)} candidates "
                f"per query; a numpy brute-force scan of all documents takes ~{brute_us:.3g} µs."
            )
        if limit is not None and len(layouts) > limit:
            lines.append(f"{len(layouts) - limit} more layouts not shown.")
    return "\n".join(lines)
