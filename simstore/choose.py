"""Turning what a caller asked for (k, blocks, a layout, a corpus size) into
the permutation tables of a new store or a re-layout.

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simstore.errors import InvalidTypeError, InvalidValueError, SimstoreError
from simstore.permute import Table, default_blocks, one_level_tables
from simstore.planner import best_layout, covers, from_spec
from simstore.simhash import Fingerprinter

DEFAULT_K = 3

#: For a similarity threshold ``J``, the smallest ``k`` at which at least 97 %
#: of the near-duplicate pairs with Jaccard similarity (of word 3-shingles) at
#: least ``J`` (exact copies aside) lie within ``k`` bits of each other, pooled
#: over the real-text corpora of ``benchmarks/bench_quality.py --real``. A
#: threshold between two rows takes the lower row's ``k`` (more recall).
K_FOR_SIMILARITY: tuple[tuple[float, int], ...] = ((0.97, 6), (0.9, 8), (0.8, 10))


@dataclass(frozen=True)
class LayoutRequest:
    """What the caller of :func:`simstore.open` or ``relayout`` asked for;
    ``None`` lets the file (or the defaults) decide."""

    k: int | None
    blocks: int | None
    fingerprinter: Fingerprinter | None
    layout: Any
    expected_docs: int | None
    min_similarity: float | None = None


def k_for_similarity(threshold: float) -> int:
    """The ``k`` a store verifying at ``threshold`` needs (see
    :data:`K_FOR_SIMILARITY`): below the table's lowest threshold, its ``k``."""
    for similarity, k in K_FOR_SIMILARITY:
        if threshold >= similarity:
            return k
    return K_FOR_SIMILARITY[-1][1]


def requested_k(requested: LayoutRequest) -> int:
    """The ``k`` of a new store: asked for, or what its threshold needs, or the default."""
    if requested.k is not None:
        return requested.k
    if requested.min_similarity is not None:
        return k_for_similarity(requested.min_similarity)
    return DEFAULT_K


def layout_tables(layout: Any, k: int | None) -> tuple[int, tuple[Table, ...], dict[str, Any] | None]:
    """``(k, tables, spec)`` of a user-supplied layout, checked to be exact."""
    layout_k = getattr(layout, "k", k)
    tables = tuple(getattr(layout, "tables", layout))
    if not tables or not all(isinstance(table, Table) for table in tables):
        raise InvalidTypeError("layout must be a simstore.planner.Layout or a sequence of simstore.Table")
    if layout_k is None:
        raise InvalidValueError("a layout given as bare tables needs k=")
    if k is not None and k != layout_k:
        raise InvalidValueError(f"k={k} but the layout was planned for k={layout_k}")
    if not covers(tables, layout_k):
        raise InvalidValueError(
            f"the layout's tables do not guarantee finding every fingerprint within k={layout_k} bits"
        )
    spec = getattr(layout, "spec", None)
    return layout_k, tables, dict(spec) if spec is not None else None


def choose_layout(requested: LayoutRequest) -> tuple[int, tuple[Table, ...], dict[str, Any], int | None]:
    """``(k, tables, layout description, blocks)`` for a new set of tables."""
    if requested.layout is not None and requested.blocks is not None:
        raise InvalidValueError("pass either blocks= or layout=, not both")
    if requested.layout is not None:
        chosen_k, tables, spec = layout_tables(requested.layout, requested.k)
        layout_spec = spec if spec is not None else {"kind": "custom"}
        blocks = layout_spec.get("blocks")
        return chosen_k, tables, layout_spec, blocks if isinstance(blocks, int) else None
    if requested.blocks is None and requested.expected_docs is not None:
        planned = best_layout(requested_k(requested), requested.expected_docs)
        layout_spec = dict(planned.spec)
        blocks = layout_spec.get("blocks")
        return planned.k, tuple(planned.tables), layout_spec, blocks if isinstance(blocks, int) else None
    chosen_k = requested_k(requested)
    chosen_blocks = default_blocks(chosen_k) if requested.blocks is None else requested.blocks
    tables = tuple(one_level_tables(chosen_k, chosen_blocks))
    return chosen_k, tables, {"kind": "one-level", "blocks": chosen_blocks}, chosen_blocks


def layout_name(k: int, spec: Mapping[str, Any] | None) -> str:
    """A readable name of the stored layout, e.g. ``1-level 5 blocks``."""
    spec = spec or {}
    if spec.get("kind") in ("one-level", "two-level"):
        try:
            return from_spec(k, spec).name
        except SimstoreError:
            pass
    return str(spec.get("kind", "custom"))
