"""Turning what a caller asked for (k, blocks, a layout, a corpus size) into
the permutation tables of a new store or a re-layout.

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from simstore.engine.format import MAX_BANDS_PER_WIDTH, multi_index_layout
from simstore.errors import InvalidTypeError, InvalidValueError, SimstoreError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.index import multi_index
from simstore.index.cover import covers
from simstore.index.permute import Table, default_blocks, one_level_tables
from simstore.layout.planner import from_spec, k_for_similarity
from simstore.layout.presets import PRESET_K, preset_bands

#: The k of a new store: on real text whose near-duplicates occurred naturally
#: (benchmarks/suite/bench_quality.py --real: documentation across releases, licence
#: texts, Chinese manuals, templated reference pages), k = 5 finds 98 % of the
#: pairs with Jaccard similarity >= 0.97 (every corpus >= 97 %); k = 3 found
#: 92 % (60 % on licence paragraphs). Costs: see README "Choosing k".
DEFAULT_K = 5
#: The similarity threshold of a new store whose fingerprinter makes sketches:
#: a match shares at least ~80 % of its word 3-shingles. At k = 5 it keeps
#: every pair >= 0.97 that k finds and no pair below 0.5 (precision 99.0 %
#: unverified, 62.5 % on templated pages).
DEFAULT_MIN_SIMILARITY = 0.8
#: The bands of each width a new multi-index store's band table keeps a
#: document (simstore.fingerprinting.bands.kept_bands): a long text's 32
#: bands of 8 bins thinned to 8, about 8 keys (4 bytes each) a document.
DEFAULT_BANDS_PER_WIDTH = 8


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
    #: A band table (format 4): ``None`` or ``True`` for the default bands a
    #: width where the layout is a multi-index scheme and documents keep
    #: sketches, ``False`` for none, or the bands a width.
    bands: bool | int | None = None
    #: Whether documents keep sketches (a re-layout knows; a new store's
    #: fingerprinter says).
    sketches: bool = True
    #: Whether a new store keeps ``min_similarity`` as its threshold as it
    #: is (:class:`simstore.layout.presets.ExactThreshold`) rather than the
    #: lower one that finds pairs that similar.
    exact_threshold: bool = False


def requested_k(requested: LayoutRequest) -> int:
    """The ``k`` of a new store: asked for, or what its threshold needs, or the default.

    A threshold is met by a band table beside the default k where the store
    can keep one (:mod:`simstore.layout.presets`); otherwise by the ``k``
    at which 97 % of the real pairs that similar lie
    (:data:`simstore.layout.planner.K_FOR_SIMILARITY`)."""
    if requested.k is not None:
        return requested.k
    if requested.min_similarity is not None:
        return PRESET_K if _may_band(requested) else k_for_similarity(requested.min_similarity)
    return DEFAULT_K


def _may_band(requested: LayoutRequest) -> bool:
    """Whether a new store asked for with no ``k`` would keep a band table."""
    return (
        requested.bands is not False
        and requested.blocks is None
        and (requested.layout is None or is_multi_index(requested.layout))
        and _keeps_sketches(requested)
    )


def _keeps_sketches(requested: LayoutRequest) -> bool:
    return requested.sketches and (
        requested.fingerprinter is None or requested.fingerprinter.sketch is not None
    )


def layout_tables(layout: Any, k: int | None) -> tuple[int, tuple[Table, ...], dict[str, Any] | None]:
    """``(k, tables, spec)`` of a user-supplied layout, checked to be exact."""
    layout_k = getattr(layout, "k", k)
    tables = tuple(getattr(layout, "tables", layout))
    if not tables or not all(isinstance(table, Table) for table in tables):
        raise InvalidTypeError("layout must be a simstore.Layout or a sequence of simstore.Table")
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


#: ``layout=`` of a store whose tables are a multi-index scheme (format 3):
#: a few tables searched with many probes (:mod:`simstore.index.multi_index`).
MULTI_INDEX = "multi-index"
#: The corpus size a multi-index scheme is chosen for when none is expected.
MULTI_INDEX_DOCS = 10_000_000
# A new store is laid out as a multi-index scheme unless a layout or blocks
# are asked for (choose_layout). At the default k = 5, grown to 100M, Manku's
# 21 tables hold 258-344 bytes a document and the batches that pay compaction
# build at 27-68K docs/s (benchmarks/results/scale_k5_madv_random_100M.md);
# three tables searched at radius 1 hold 100-146 and build at 198K at worst
# (scale_k5_format3_100M.md), and at 1M and 10M answer 2-3x faster. At k = 3
# (query_engine_k3_1M.md, query_engine_k3_10M.md) two tables hold 81-83 bytes
# a document against Manku's 10 tables' 129-135, build 1.6x faster and answer
# batches in 0.4x the time; single queries take 1.3x Manku's time at 1M and
# 1.05-1.1x at 10M when they find a copy, 1.7x and 1.3x when they find nothing
# (miss_queries_k3.md: 29 against 17 µs at 1M, where Manku's occupancy bitmaps
# skip most tables). The bytes, batches, builds and 100M growth in steps
# outweigh that; blocks=k + 2 gives the faster misses.

#: The band table is kept by default from this k on (a store of smaller k is
#: asked for small and fast; ``bands=`` gives it one).
BANDS_FROM_K = 5


def is_multi_index(layout: Any) -> bool:
    return isinstance(layout, str) and layout == MULTI_INDEX


def choose_layout(requested: LayoutRequest) -> tuple[int, tuple[Table, ...], dict[str, Any], int | None]:
    """``(k, tables, layout description, blocks)`` for a new set of tables.

    With ``layout="multi-index"``, or with no layout or blocks asked for,
    the description names the multi-index
    scheme :func:`simstore.index.multi_index.choose` picks for ``k`` at the
    expected size, and ``tables`` is the Manku layout the in-memory delta
    and the pair searches use (what the same request would store in
    format 2)."""
    if requested.layout is not None and requested.blocks is not None:
        raise InvalidValueError("pass either blocks= or layout=, not both")
    if is_multi_index(requested.layout) or (requested.layout is None and requested.blocks is None):
        chosen_k, tables, _spec, _blocks = _manku_layout(replace(requested, layout=None))
        docs = MULTI_INDEX_DOCS if requested.expected_docs is None else requested.expected_docs
        bands = band_table(requested)
        return chosen_k, tables, multi_index_layout(multi_index.choose(chosen_k, docs), bands), None
    if requested.bands not in (None, False):
        raise InvalidValueError(
            "a band table sits beside a multi-index layout (the default; blocks= and Layout "
            "lay a store out as Manku's tables)"
        )
    return _manku_layout(requested)


def check_bands(bands: object) -> None:
    """Refuse a ``bands=`` that is not ``True``, ``False``, ``None`` or an int."""
    if bands is not None and not isinstance(bands, bool | int):
        raise InvalidTypeError(f"bands must be True, False, None or an int, not {type(bands).__name__}")


def band_table(requested: LayoutRequest) -> int | None:
    """The bands a width of a new multi-index layout's band table (``None``: none)."""
    bands = requested.bands
    check_bands(bands)
    sketches = _keeps_sketches(requested)
    if bands is False or (bands is None and (not sketches or requested_k(requested) < BANDS_FROM_K)):
        return None
    if not sketches:
        raise InvalidValueError("a band table bands the documents' sketches, and this store keeps none")
    if bands is None or bands is True:
        if requested.min_similarity is not None:
            return preset_bands(requested.min_similarity)
        return DEFAULT_BANDS_PER_WIDTH
    if not 1 <= bands <= MAX_BANDS_PER_WIDTH:
        raise InvalidValueError(f"bands must be from 1 to {MAX_BANDS_PER_WIDTH} a width, got {bands}")
    return int(bands)


def _manku_layout(requested: LayoutRequest) -> tuple[int, tuple[Table, ...], dict[str, Any], int | None]:
    """:func:`choose_layout` among Manku's layouts (format 2)."""
    if isinstance(requested.layout, str):
        raise InvalidValueError(
            f"layout must be a Layout, tables or {MULTI_INDEX!r}; got {requested.layout!r}"
        )
    if requested.layout is not None:
        chosen_k, tables, spec = layout_tables(requested.layout, requested.k)
        layout_spec = spec if spec is not None else {"kind": "custom"}
        blocks = layout_spec.get("blocks")
        return chosen_k, tables, layout_spec, blocks if isinstance(blocks, int) else None
    chosen_k = requested_k(requested)
    chosen_blocks = default_blocks(chosen_k) if requested.blocks is None else requested.blocks
    tables = tuple(one_level_tables(chosen_k, chosen_blocks))
    return chosen_k, tables, {"kind": "one-level", "blocks": chosen_blocks}, chosen_blocks


def layout_name(k: int, spec: Mapping[str, Any] | None) -> str:
    """A readable name of the stored layout, e.g. ``1-level 5 blocks``."""
    spec = spec or {}
    if spec.get("kind") == MULTI_INDEX:
        name = f"multi-index {spec.get('widths')} r{spec.get('radii')}"
        return name if spec.get("bands") is None else f"{name} + {spec['bands']} bands a width"
    if spec.get("kind") in ("one-level", "two-level"):
        try:
            return from_spec(k, spec).name
        except SimstoreError:
            pass
    return str(spec.get("kind", "custom"))
