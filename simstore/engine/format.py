"""The on-disk format: its version, the meta record, and compatibility checks.

The meta record is one msgpack map stored under ``META_KEY`` in the ``meta``
sub-database. It holds every parameter that shapes the stored keys, so a
reopened store never depends on defaults that a later simstore might change:
the format name and version, ``k``, ``blocks`` and the explicit bit order and
prefix length of every table (see :mod:`simstore.index.permute`). The store's
counters live beside it under ``STATE_KEY`` as four big-endian uint64s, and
the run catalog (see :mod:`simstore.engine.catalog`) under ``CATALOG_KEY``.

Format 2 packs each table's entries in buckets (:mod:`simstore.engine.runs`);
format 3 is a store laid out by a multi-index scheme (``layout="multi-index"``:
a few tables of sorted columns searched with many probes,
:mod:`simstore.engine.column_tableset`), its scheme in the layout description;
format 1 (simstore 0.1) kept an LMDB node per entry. This simstore reads no
format-1 table: such a file is refused with the way to convert it. A store is
written as format 3 only when its layout needs it, so that a simstore that
reads format 2 alone refuses it rather than misreading its tables.

Nothing here does I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from simstore.errors import (
    CorruptStoreError,
    FormatVersionError,
    InvalidValueError,
    NotAStoreError,
    ParameterMismatchError,
)
from simstore.index.multi_index import MultiIndex
from simstore.index.permute import MAX_TABLES, Table, validate_k

FORMAT_NAME = "simstore"
#: Format 2: Manku's permutation tables (the default layout).
FORMAT_VERSION = 2
#: Format 3: the tables of a multi-index scheme (the layout kind below).
MULTI_INDEX_FORMAT_VERSION = 3
#: Format 4: format 3 with a band table beside the runs (issue 36): the
#: layout description holds ``"bands"``, the bands of each width a document
#: keeps (:func:`simstore.fingerprinting.bands.kept_bands`). A simstore that
#: reads only format 3 refuses it rather than write runs without bands.
BAND_TABLE_FORMAT_VERSION = 4
#: The layout description's ``kind`` of a format-3 store.
MULTI_INDEX_KIND = "multi-index"
#: The most bands of a width a band table keeps a document.
MAX_BANDS_PER_WIDTH = 64
#: The format simstore 0.1 wrote, which ``simstore migrate`` converts.
LEGACY_FORMAT_VERSION = 1

META_KEY = b"meta"
STATE_KEY = b"state"
CATALOG_KEY = b"runs"
#: The number of the latest group of writes committed through the writers'
#: mailbox (simstore.commit.mailbox), 8 bytes big-endian; absent until one is.
WRITERS_KEY = b"writers"
#: A random number each commit of several threads' single writes puts here
#: (8 bytes), so that a leader interrupted around its commit can tell whether
#: the commit happened (simstore.commit.group); read by nothing else.
GROUP_KEY = b"group"
#: Format 3: how many table entries removals and new fingerprints have left
#: stale, 8 bytes big-endian (absent: none); runs are stamped with it
#: (simstore.engine.column_index.RunEntry).
REMOVALS_KEY = b"removals"
# The write-ahead log's next position, the last transaction it holds a record
# of, and the store's salt of its records (simstore.engine.wal).
LOG_KEY = b"log"

# Limits keep a damaged or hostile meta record from costing unbounded memory.
MAX_META_BYTES = 1 << 20


class LayoutChangedError(Exception):
    """Internal: a snapshot's meta record differs from the one this engine
    uses, because another process re-laid the store out."""


@dataclass(frozen=True)
class StoredParams:
    """Everything in the meta record: the parameters that shape the keys."""

    k: int
    blocks: int | None
    tables: tuple[Table, ...]
    layout: Mapping[str, Any] | None = None
    fingerprinter: Mapping[str, Any] | None = None
    segmenter: Mapping[str, Any] | None = None
    created_by: str = ""
    generation: int = 0
    #: The similarity threshold queries, pairs and clusters apply unless a
    #: call passes its own (``None``: none; stores before issue 20 have none).
    min_similarity: float | None = None

    @property
    def scheme(self) -> MultiIndex | None:
        """The multi-index scheme of a format-3 store's stored tables
        (``None``: Manku's tables, ``tables``, are stored). In a format-3
        store ``tables`` is a Manku layout exact for ``k`` that only the
        in-memory delta and the pair searches use."""
        return scheme_of(self.layout)

    @property
    def version(self) -> int:
        """The format version this store's tables need."""
        if self.scheme is None:
            return FORMAT_VERSION
        return MULTI_INDEX_FORMAT_VERSION if self.bands is None else BAND_TABLE_FORMAT_VERSION

    @property
    def bands(self) -> int | None:
        """The bands of each width the store's band table keeps a document
        (``None``: the store keeps no band table)."""
        return bands_of(self.layout)

    @property
    def stored_tables(self) -> int:
        """The number of table sub-databases in the file."""
        scheme = self.scheme
        return len(self.tables) if scheme is None else scheme.tables


def scheme_of(layout: Mapping[str, Any] | None) -> MultiIndex | None:
    """The multi-index scheme a layout description names, if it names one.

    Raises:
        ValueError: it names one, badly.
    """
    if layout is None or layout.get("kind") != MULTI_INDEX_KIND:
        return None
    widths, radii = layout.get("widths"), layout.get("radii")
    if not (isinstance(widths, list | tuple) and isinstance(radii, list | tuple)):
        raise ValueError("the multi-index layout lacks its widths or radii")
    try:
        return MultiIndex(tuple(widths), tuple(radii))
    except (InvalidValueError, TypeError) as exc:
        raise ValueError(f"the multi-index layout is invalid: {exc}") from exc


def bands_of(layout: Mapping[str, Any] | None) -> int | None:
    """The bands of each width a layout description's band table keeps
    (``None``: it has none).

    Raises:
        ValueError: it names a band table, badly.
    """
    if layout is None or "bands" not in layout:
        return None
    bands = layout["bands"]
    if isinstance(bands, bool) or not isinstance(bands, int) or not 1 <= bands <= MAX_BANDS_PER_WIDTH:
        raise ValueError(f"the band table keeps {bands!r} bands a width")
    return bands


def multi_index_layout(scheme: MultiIndex, bands: int | None = None) -> dict[str, Any]:
    """The layout description of a format-3 store laid out by ``scheme``
    (format 4 with a band table of ``bands`` a width)."""
    layout: dict[str, Any] = {
        "kind": MULTI_INDEX_KIND,
        "widths": list(scheme.widths),
        "radii": list(scheme.radii),
    }
    if bands is not None:
        layout["bands"] = bands
    return layout


_STATE_STRUCT = struct.Struct(">QQQQ")


class State(NamedTuple):
    """The store's counters, rewritten by every write transaction.

    ``next_id`` is the next internal document id; ``next_seq`` the next delta
    log sequence number; ``merge_epoch`` counts merges, so another process can
    tell that the delta log was folded into the tables and must be re-read;
    ``catalog_version`` counts changes to the run catalog (merges, compaction
    steps, re-layouts), so another process knows when to read it again.

    A named tuple rather than a frozen dataclass: every single add makes one,
    and a frozen dataclass takes several times longer to build.
    """

    next_id: int = 0
    next_seq: int = 0
    merge_epoch: int = 0
    catalog_version: int = 0

    def encode(self) -> bytes:
        return _STATE_STRUCT.pack(*self)

    @classmethod
    def decode(cls, raw: bytes | None) -> State:
        if raw is not None and len(raw) == _STATE_STRUCT.size:
            return cls(*_STATE_STRUCT.unpack(raw))
        raise CorruptStoreError("the store's state record is missing or damaged")


def encode_meta(params: StoredParams, *, version: str) -> bytes:
    """Serialise ``params`` as the meta record."""
    record = {
        "format": FORMAT_NAME,
        "version": params.version,
        "created_by": f"simstore {version}",
        "k": params.k,
        "blocks": params.blocks,
        "layout": dict(params.layout) if params.layout is not None else None,
        "tables": [[list(table.bit_order), table.prefix_bits] for table in params.tables],
        "fingerprinter": dict(params.fingerprinter) if params.fingerprinter is not None else None,
        "segmenter": dict(params.segmenter) if params.segmenter is not None else None,
        "generation": params.generation,
        "min_similarity": params.min_similarity,
    }
    packed: bytes = msgpack.packb(record, use_bin_type=True)
    return packed


def unpack_bounded(raw: bytes, limit: int, what: str) -> Any:
    """A stored msgpack record, refused as damaged (``CorruptStoreError``)
    when longer than ``limit`` bytes or not valid msgpack: a damaged or
    hostile record must not cost unbounded memory or raise a foreign type."""
    if len(raw) > limit:
        raise CorruptStoreError(f"the {what} is {len(raw)} bytes, more than {limit}")
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise CorruptStoreError(f"the {what} is not valid msgpack: {exc}") from exc


def decode_meta(raw: bytes, *, accept: int = FORMAT_VERSION) -> StoredParams:
    """Parse and validate a meta record of format version ``accept`` (today's,
    unless a migration reads an old store).

    Raises:
        NotAStoreError: the record is not simstore's.
        FormatVersionError: the record is from a newer format version.
        CorruptStoreError: the record is simstore's but damaged.
    """
    record = unpack_bounded(raw, MAX_META_BYTES, "meta record")
    if not isinstance(record, dict) or record.get("format") != FORMAT_NAME:
        raise NotAStoreError("the file's meta record is not a simstore meta record")
    version = record.get("version")
    if not isinstance(version, int) or version < 1:
        raise CorruptStoreError(f"the meta record has an invalid format version {version!r}")
    if version > BAND_TABLE_FORMAT_VERSION:
        raise FormatVersionError(
            f"the store has format version {version}, but this simstore reads only "
            f"versions up to {BAND_TABLE_FORMAT_VERSION}; upgrade simstore to open it"
        )
    if version >= FORMAT_VERSION and accept != FORMAT_VERSION:
        raise FormatVersionError(f"the store has format version {version} already; it needs no migration")
    if version < FORMAT_VERSION and version != accept:
        raise FormatVersionError(
            f"the store has format version {version} (simstore 0.1), whose tables this simstore "
            f"does not read; convert it with `simstore migrate OLD NEW` (or "
            f"simstore.migrate(old, new)), which leaves the old file as it is"
        )
    try:
        k = validate_k(record["k"])
        blocks = record["blocks"]
        if blocks is not None and (not isinstance(blocks, int) or blocks < 1):
            raise ValueError(f"blocks is {blocks!r}")
        layout = record.get("layout")
        if layout is not None and not isinstance(layout, dict):
            raise ValueError("the layout description is not a map")
        raw_tables = record["tables"]
        if not isinstance(raw_tables, list) or not 1 <= len(raw_tables) <= MAX_TABLES:
            raise ValueError("the table list is missing or has an impossible length")
        tables = tuple(Table(tuple(bit_order), prefix_bits) for bit_order, prefix_bits in raw_tables)
        fingerprinter = record.get("fingerprinter")
        segmenter = record.get("segmenter")
        if fingerprinter is not None and not isinstance(fingerprinter, dict):
            raise ValueError("fingerprinter settings are not a map")
        if segmenter is not None and not isinstance(segmenter, dict):
            raise ValueError("segmenter information is not a map")
        generation = record.get("generation", 0)
        if not isinstance(generation, int) or generation < 0:
            raise ValueError(f"the layout generation is {generation!r}")
        min_similarity = record.get("min_similarity")
        if min_similarity is not None and (
            not isinstance(min_similarity, float) or not 0.0 <= min_similarity <= 1.0
        ):
            raise ValueError(f"the similarity threshold is {min_similarity!r}")
        scheme = scheme_of(layout)
        bands = bands_of(layout)
        expected = (
            FORMAT_VERSION
            if scheme is None
            else MULTI_INDEX_FORMAT_VERSION
            if bands is None
            else BAND_TABLE_FORMAT_VERSION
        )
        if version != expected and not (scheme is None and version < FORMAT_VERSION):
            raise ValueError(f"format version {version} with a layout of kind {(layout or {}).get('kind')!r}")
        if scheme is not None and scheme.k < k:
            raise ValueError(f"the multi-index scheme {scheme.label()} does not answer k={k}")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptStoreError(f"the meta record is damaged: {exc}") from exc
    return StoredParams(
        k=k,
        blocks=blocks,
        tables=tables,
        layout=layout,
        fingerprinter=fingerprinter,
        segmenter=segmenter,
        created_by=str(record.get("created_by", "")),
        generation=generation,
        min_similarity=min_similarity,
    )


def check_requested(stored: StoredParams, requested: Mapping[str, Any]) -> None:
    """Refuse explicit parameters that differ from the stored ones.

    ``requested`` maps a parameter name to the value the caller passed; a
    value of ``None`` means "the file decides" and is never a difference.

    Raises:
        ParameterMismatchError: listing every difference at once.
    """
    differences: dict[str, tuple[Any, Any]] = {}
    for name, value in requested.items():
        if value is None:
            continue
        stored_value = getattr(stored, name)
        if stored_value == value:
            continue
        if isinstance(stored_value, Mapping) and isinstance(value, Mapping):
            # Name the settings that differ, not two whole maps.
            for setting in sorted(set(stored_value) | set(value)):
                if stored_value.get(setting) != value.get(setting):
                    differences[f"{name}.{setting}"] = (stored_value.get(setting), value.get(setting))
        else:
            differences[name] = (stored_value, value)
    if differences:
        raise ParameterMismatchError(differences)
