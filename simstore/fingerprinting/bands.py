"""Band keys of verification sketches: a second candidate generator, by text
rather than by fingerprint (issue 36).

The sketch (:mod:`simstore.fingerprinting.sketch`) is a one-permutation
MinHash: a bin of two documents holds the same code with probability about
their Jaccard similarity J. Split the bins into bands; two documents whose
codes agree in a whole band become a candidate pair, as in MinHash LSH. A
one-token edit changes three shingles, so it spoils few bands, where it can
move a short text's 64-bit fingerprint past any k.

What makes this work for short and long texts alike is the band's width. A
long text fills every bin, and a band of 8 bins (32 bits of codes) is specific
enough; a text of 50 tokens fills about 45 of 256 bins, and a band must be
wider to hold a few filled bins, whose places then say as much as their codes.
So each document is banded at the widths (powers of two) where its bands hold
``MIN_FILLED`` to ``MAX_FILLED`` filled bins on average: one or two widths. Two
texts at J >= 0.8 differ by less than 1.25x in filled bins, and ``MAX_FILLED /
MIN_FILLED`` exceeds 2 x 1.25, so they always share a width. A band is keyed
only if its codes and the places of its filled bins carry at least
``MIN_BAND_BITS`` bits: fewer, and unrelated texts would share it by chance.

Every key is a 64-bit hash of the band's place (width and index) and its
packed codes; equal keys mean equal bands but for hash collisions, which only
add a candidate that verification then judges. Nothing here does I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from simstore.fingerprinting.hashing import mix64, mix64_array
from simstore.fingerprinting.sketch import (
    Sketch,
    U8Array,
    code_low_bits,
    code_words,
    filled_code_bits,
    filled_words,
)

__all__ = [
    "MAX_FILLED",
    "MIN_BAND_BITS",
    "MIN_FILLED",
    "BandKeys",
    "BandSlot",
    "KeyedBand",
    "band_keys",
    "band_shared",
    "band_slots",
    "filled_bins",
    "kept_bands",
    "keyed_bands",
    "shares_band_rows",
    "sketch_codes",
    "slot_keys",
]

#: The filled bins a document's bands hold on average at the widths it is
#: banded at: from MIN_FILLED to MAX_FILLED (see the module's docstring).
MIN_FILLED = 3.0
MAX_FILLED = 8.0
#: Bits of codes and places a band must carry to be keyed: 2**-24 is the
#: chance two unrelated texts share a given band.
MIN_BAND_BITS = 24.0
BAND_SALT = 0x5BD1E9955BD1E995

_U64 = np.uint64
IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]


class BandKeys(NamedTuple):
    """Band keys of sketches: key ``keys[i]`` belongs to the sketch in row
    ``rows[i]`` of the array given."""

    rows: IntArray
    keys: U64Array


class BandSlot(NamedTuple):
    """A band's place: its width in bins and its index among the bands of that width."""

    width: int
    band: int


def sketch_codes(rows: U8Array, sketch: Sketch) -> U8Array:
    """The codes of packed sketches (``(n, sketch.nbytes)`` uint8) as an
    ``(n, sketch.bins)`` uint8 array, 0 in an empty bin."""
    return _codes(np.asarray(rows, dtype=np.uint8).reshape(-1, sketch.nbytes), sketch.bits)


def _codes(packed: U8Array, bits: int) -> U8Array:
    """The codes of ``bits`` each packed in the bytes of each row."""
    per_byte = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    codes = np.empty((packed.shape[0], packed.shape[1] * per_byte), dtype=np.uint8)
    for j in range(per_byte):
        codes[:, j::per_byte] = (packed >> np.uint8(bits * j)) & mask
    return codes


#: Rows counted at a time by :func:`filled_bins` (its word arrays stay a few MB).
_CODES_CHUNK = 1 << 16


def filled_bins(rows: U8Array, sketch: Sketch) -> IntArray:
    """Each packed sketch's number of filled bins, counted a chunk at a time."""
    rows = np.asarray(rows, dtype=np.uint8).reshape(-1, sketch.nbytes)
    out = np.empty(len(rows), dtype=np.int64)
    for start in range(0, len(rows), _CODES_CHUNK):
        out[start : start + _CODES_CHUNK] = filled_words(
            code_words(rows[start : start + _CODES_CHUNK]), sketch.bits
        )
    return out


def band_slots(sketch: Sketch) -> list[BandSlot]:
    """Every band's place, narrowest width first: :func:`slot_keys` of each,
    together, are :func:`band_keys`."""
    return [BandSlot(width, band) for width in _widths(sketch) for band in range(sketch.bins // width)]


def slot_keys(rows: U8Array, filled: IntArray, sketch: Sketch, slot: BandSlot) -> BandKeys:
    """The keys of one band place: those of :func:`band_keys` whose band is
    ``slot`` (``filled``: :func:`filled_bins` of ``rows``). Two sketches can
    share a key only in one place, so a search for shared keys can take the
    places one at a time, holding one key a document at most."""
    rows = np.ascontiguousarray(np.asarray(rows, dtype=np.uint8).reshape(-1, sketch.nbytes))
    width, band = slot
    spread = filled * width / sketch.bins
    docs = np.flatnonzero((spread >= MIN_FILLED) & (spread <= MAX_FILLED))
    band_bytes = width * sketch.bits // 8
    # One band of each document: a gather of fixed-size items, not of rows.
    piece = rows.view(f"V{band_bytes}")[docs, band].view(np.uint8).reshape(len(docs), band_bytes)
    fill = _filled_per_byte(sketch.bits)[piece].sum(axis=1, dtype=np.int64)
    keyed = _keyed_by_fill(sketch)[width][fill]
    keys = _fold(np.ascontiguousarray(piece[keyed]), width, np.array([band]), sketch)
    return BandKeys(docs[keyed], keys[:, 0])


@functools.lru_cache(maxsize=4)
def _filled_per_byte(bits: int) -> npt.NDArray[np.uint8]:
    """For each byte value, how many of its codes of ``bits`` are not 0."""
    values = np.arange(256, dtype=np.uint8).reshape(256, 1)
    counts: npt.NDArray[np.uint8] = (_codes(values, bits) != 0).sum(axis=1).astype(np.uint8)
    return counts


def band_keys(rows: U8Array, sketch: Sketch, per_width: int | None = None) -> BandKeys:
    """The band keys of each packed sketch of ``rows`` (``(n, sketch.nbytes)``
    uint8): a few dozen for a long text, a few for a short one, none for a
    text too short to band (under about 8 shingles).

    ``per_width`` keeps at most that many evenly spaced bands of each width
    (:func:`kept_bands`): the bands a store's band table holds, a few keys a
    document rather than 32 for a long text."""
    rows = np.ascontiguousarray(np.asarray(rows, dtype=np.uint8).reshape(-1, sketch.nbytes))
    if len(rows) <= FEW_ROWS:
        return _few_band_keys(rows, sketch, per_width)
    # Filled bins per byte (a table look-up of the packed bytes: no codes
    # unpacked), then each wider band's by adding pairs of the last's.
    in_band = _filled_per_byte(sketch.bits)[rows].astype(np.uint16)
    count = in_band.sum(axis=1, dtype=np.int64)
    keyed_by_fill = _keyed_by_fill(sketch)
    found_rows: list[IntArray] = []
    found_keys: list[U64Array] = []
    width = 8 // sketch.bits  # bins a byte
    for band_width in _widths_of(count, sketch):
        while width < band_width:
            in_band = in_band[:, 0::2] + in_band[:, 1::2]
            width *= 2
        spread = count * width / sketch.bins
        docs = np.flatnonzero((spread >= MIN_FILLED) & (spread <= MAX_FILLED))
        if not len(docs):
            continue
        kept = kept_bands(sketch.bins // width, per_width)
        places = _places(sketch.bins // width, kept.step or 1)
        band_bytes = width * sketch.bits // 8
        # Only the kept bands' bytes are folded (a thinned table keeps a few).
        pieces = np.ascontiguousarray(rows[docs].view(f"V{band_bytes}")[:, kept])
        keys = _fold(pieces.view(np.uint8).reshape(len(docs), -1), width, places, sketch)
        doc_of, band_of = np.nonzero(keyed_by_fill[width][in_band[docs][:, kept]])
        found_rows.append(docs[doc_of])
        found_keys.append(keys[doc_of, band_of])
    if not found_rows:
        return BandKeys(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64))
    return BandKeys(np.concatenate(found_rows), np.concatenate(found_keys))


#: Batches of at most this many sketches (a query's, its candidates') are
#: banded in plain Python: some 60 numpy calls cost a single sketch ~400 µs.
FEW_ROWS = 4


def _few_band_keys(rows: U8Array, sketch: Sketch, per_width: int | None) -> BandKeys:
    """:func:`band_keys` of a few sketches, one band at a time in Python:
    the same keys in the same order (width, then row, then band)."""
    per_row = [keyed_bands(row, sketch, per_width) for row in rows]
    found_rows: list[int] = []
    found_keys: list[int] = []
    for width in _widths(sketch):
        for row, bands in enumerate(per_row):
            for band in bands:
                if band.width == width:
                    found_rows.append(row)
                    found_keys.append(band.key)
    return BandKeys(np.array(found_rows, dtype=np.int64), np.array(found_keys, dtype=np.uint64))


class KeyedBand(NamedTuple):
    """One keyed band of a sketch: its width, the filled bins a sketch must
    have in all to be banded at that width (``low`` to ``high``), its place
    in the packed bytes (``start`` to ``end``), those bytes, and its key."""

    width: int
    low: float
    high: float
    start: int
    end: int
    piece: bytes
    key: int


def keyed_bands(row: U8Array, sketch: Sketch, per_width: int | None = None) -> list[KeyedBand]:
    """The keyed bands of one packed sketch (:func:`band_keys` of it, with
    where each band lies), narrowest width first, in plain Python: filled
    bins are counted as set bits of :func:`filled_code_bits` of the sketch."""
    raw = np.ascontiguousarray(row, dtype=np.uint8).tobytes()
    value = int.from_bytes(raw, "little")
    filled = filled_code_bits(value, sketch.bits, code_low_bits(sketch.bits, sketch.nbytes))
    count = filled.bit_count()
    found: list[KeyedBand] = []
    for width, low, high, band_mask, word_mask, bands, keyed in _few_plan(sketch, per_width):
        if not low <= count <= high:
            continue
        for start, end, seed, shift, word_shifts in bands:
            if not keyed[((filled >> shift) & band_mask).bit_count()]:
                continue
            key = seed
            for word_shift in word_shifts:
                key = mix64(key ^ ((value >> word_shift) & word_mask))
            found.append(_keyed_band(KeyedBand, (width, low, high, start, end, raw[start:end], key)))
    return found


# A query keys a few dozen bands: the tuple's own constructor takes 0.25 µs
# where the named tuple's, which handles keywords, takes 0.55.
_keyed_band: Callable[[type[KeyedBand], tuple[int, float, float, int, int, bytes, int]], KeyedBand]
_keyed_band = tuple.__new__


def band_shared(query: Sequence[KeyedBand], raw: bytes, filled: int) -> bool:
    """Whether the packed sketch of bytes ``raw`` and ``filled`` filled bins
    shares a key of :func:`band_keys` with the sketch whose
    :func:`keyed_bands` ``query`` is: two keys are equal (but for 64-bit
    hash collisions) exactly where a band place at whose width both sketches
    are banded holds the same bytes in both, the query's keyed."""
    return any(band.low <= filled <= band.high and raw[band.start : band.end] == band.piece for band in query)


def shares_band_rows(query: Sequence[KeyedBand], rows: U8Array, sketch: Sketch) -> npt.NDArray[np.bool_]:
    """:func:`band_shared` of many rows at once, in numpy: the rows viewed as
    a grid of each width's bands (a band starts at a multiple of its
    size), the query's kept columns compared with its pieces, a few calls a
    width whatever the rows' number (a boilerplate paragraph's query has
    hundreds of candidates)."""
    rows = np.ascontiguousarray(rows, dtype=np.uint8).reshape(-1, sketch.nbytes)
    out = np.zeros(len(rows), dtype=np.bool_)
    if not query or not len(rows):
        return out
    filled = filled_bins(rows, sketch)
    by_width: dict[int, list[KeyedBand]] = {}
    for band in query:
        by_width.setdefault(band.width, []).append(band)
    for bands in by_width.values():
        size = bands[0].end - bands[0].start
        places = [band.start // size for band in bands]
        pieces = b"".join(band.piece for band in bands)
        if size <= 8:
            unit = np.dtype(f"<u{size}") if size > 1 else np.dtype(np.uint8)
            same = rows.view(unit)[:, places] == np.frombuffer(pieces, dtype=unit)
        else:
            words = size // 8
            grid = rows.view("<u8").reshape(len(rows), -1, words)
            wanted = np.frombuffer(pieces, dtype="<u8").reshape(len(bands), words)
            same = (grid[:, places] == wanted).all(axis=2)
        out |= same.any(axis=1) & (filled >= bands[0].low) & (filled <= bands[0].high)
    return out


class _WidthPlan(NamedTuple):
    """What :func:`keyed_bands` needs of one width, worked out once: the
    filled bins a sketch must have in all to be banded at it, masks of a
    band's and a word's bits, each kept band's ``(start, end, seed,
    bit shift, bit shift of each word)``, and whether a band of each fill
    is keyed."""

    width: int
    low: float
    high: float
    band_mask: int
    word_mask: int
    bands: tuple[tuple[int, int, int, int, tuple[int, ...]], ...]
    keyed: tuple[bool, ...]


@functools.lru_cache(maxsize=16)
def _few_plan(sketch: Sketch, per_width: int | None) -> tuple[_WidthPlan, ...]:
    """Per width, a :class:`_WidthPlan`."""
    plan = []
    keyed_by_fill = _keyed_by_fill(sketch)
    for width in _widths(sketch):
        band_bytes = width * sketch.bits // 8
        word = min(band_bytes, 8)
        places = _places(sketch.bins // width, kept_bands(sketch.bins // width, per_width).step or 1)
        seeds = _seeds(width, places.tobytes()).tolist()
        bands = tuple(
            (
                start := place * band_bytes,
                start + band_bytes,
                seed,
                8 * start,
                tuple(8 * at for at in range(start, start + band_bytes, word)),
            )
            for place, seed in zip(places.tolist(), seeds, strict=True)
        )
        plan.append(
            _WidthPlan(
                width,
                MIN_FILLED * sketch.bins / width,
                MAX_FILLED * sketch.bins / width,
                (1 << (8 * band_bytes)) - 1,
                (1 << (8 * word)) - 1,
                bands,
                tuple(keyed_by_fill[width].tolist()),
            )
        )
    return tuple(plan)


def kept_bands(bands: int, per_width: int | None) -> slice:
    """Which of a width's ``bands`` bands a band table keeps: at most
    ``per_width``, evenly spaced from the first (all of them for ``None``).
    Evenly spaced bands see different parts of the sketch, so an edit that
    spoils one rarely spoils the others."""
    if per_width is None or per_width >= bands:
        return slice(None)
    if per_width < 1:
        raise ValueError(f"per_width must be at least 1, got {per_width}")
    return slice(0, bands, -(-bands // per_width))


def _widths(sketch: Sketch) -> list[int]:
    """Band widths in bins: powers of two of at least a byte of codes."""
    width = max(1, 8 // sketch.bits)
    out = []
    while width <= sketch.bins:
        out.append(width)
        width *= 2
    return out


def _widths_of(count: IntArray, sketch: Sketch) -> list[int]:
    """The widths :func:`band_keys` bands any of the sketches at (``count``:
    their filled bins): a few numpy calls spared a width for a small batch."""
    if not len(count):
        return []
    low, high = int(count.min()), int(count.max())
    return [
        width
        for width in _widths(sketch)
        if high * width >= MIN_FILLED * sketch.bins and low * width <= MAX_FILLED * sketch.bins
    ]


@functools.lru_cache(maxsize=64)
def _places(bands: int, step: int) -> IntArray:
    """Every ``step``-th band's index of ``bands`` (read-only: shared)."""
    places = np.arange(0, bands, step, dtype=np.int64)
    places.flags.writeable = False
    return places


@functools.lru_cache(maxsize=256)
def _seeds(width: int, places: bytes) -> U64Array:
    """Each band place's hash seed (read-only: shared)."""
    place = np.frombuffer(places, dtype=np.int64).astype(np.uint64) | _U64(width << 32)
    seeds = mix64_array(place ^ _U64(BAND_SALT))
    seeds.flags.writeable = False
    return seeds


def _fold(rows: U8Array, width: int, places: IntArray, sketch: Sketch) -> U64Array:
    """``(len(rows), len(places))`` keys: each band's packed bytes (``width``
    bins lie in consecutive bytes; ``rows`` holds the bands ``places`` names,
    in order) folded into a hash seeded by its place."""
    band_bytes = width * sketch.bits // 8
    word = min(band_bytes, 8)
    bands = len(places)
    words = rows.view(np.dtype(f"<u{word}")).reshape(len(rows), bands, band_bytes // word).astype(np.uint64)
    seeds = _seeds(width, np.asarray(places, dtype=np.int64).tobytes())
    hashed = np.broadcast_to(seeds, (len(rows), bands)).copy()
    for column in range(words.shape[2]):
        hashed = mix64_array(hashed ^ words[:, :, column])
    return hashed


@functools.lru_cache(maxsize=8)
def _keyed_by_fill(sketch: Sketch) -> dict[int, npt.NDArray[np.bool_]]:
    """Per band width w: whether a band of f = 0..w filled bins is keyed, its
    codes and the places of its filled bins (log2 C(w, f)) carrying at least
    MIN_BAND_BITS bits."""
    code_bits = math.log2((1 << sketch.bits) - 1)
    log_factorial = np.array([math.lgamma(n + 1) for n in range(sketch.bins + 1)])
    out = {}
    for width in _widths(sketch):
        f = np.arange(width + 1)
        places = (log_factorial[width] - log_factorial[f] - log_factorial[width - f]) / math.log(2)
        out[width] = f * code_bits + places >= MIN_BAND_BITS
    return out
