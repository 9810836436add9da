"""The verification sketch: a small estimate of the Jaccard similarity of
two documents' word 3-shingles, independent of the 64-bit fingerprint.

The fingerprint finds candidates (documents within ``k`` bits); the sketch
then tells how much text a candidate really shares with the query, so that
``k`` can grow for recall without template pages and unrelated texts that
happen to land a few bits apart being reported (issue 20).

The algorithm (``oph-shingle3-1``), one-permutation MinHash with empty bins
(Li, Owen and Zhang, NIPS 2012), exactly:

1. **Shingles**: the text's tokens (normalised and tokenised as for the
   fingerprint, in the same pass), hashed as fingerprint version 2 hashes
   tokens, and every run of 3 consecutive tokens folded into one 64-bit hash
   as version 2 folds an n-gram (:mod:`simstore.fingerprinting.hashing`), whatever
   the fingerprint's version; a text of 1 or 2 tokens is the one
   shingle of all its tokens. The shingles are a set: repeats count once.
2. **Bins**: each shingle hash ``s`` is mixed again, ``v = mix64(s ^
   SKETCH_SALT)``; its top ``log2(bins)`` bits choose its bin. Each bin keeps
   the smallest ``v`` that falls in it.
3. **Codes**: a bin's code is ``1 + (low 32 bits of its smallest v) mod (2**bits
   - 1)``, or 0 when no shingle fell in it; ``bins`` codes of ``bits`` bits are
   packed little-end first, ``8 // bits`` to a byte: ``bins * bits / 8``
   bytes a document (128 by default).
4. **Estimate** of two sketches: of the bins where at least one is non-empty
   (``U``), those whose codes are equal and non-zero (``E``), and those where
   both are non-empty (``B``); codes of different minima collide with
   chance ``1/C``, ``C = 2**bits - 1``, so the estimated Jaccard is
   ``(C * E - B) / ((C - 1) * U)``, clipped to [0, 1].

Without the code collisions (many bits) the estimate ``E / U`` is unbiased
(Li et al.); for short texts with fewer shingles than bins it is close to
exact, since nearly every shingle has a bin of its own. Nothing here does I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.features import ngram_features, owners
from simstore.fingerprinting.hashing import mix64_array
from simstore.fingerprinting.tokens import NoTokensError, TokenBatch, refusal

__all__ = [
    "SHINGLE_TOKENS",
    "SKETCH_ALGORITHM",
    "HeldSketch",
    "Sketch",
    "SketchRows",
    "U8Array",
    "batch_shingles",
    "check_similarity",
    "code_low_bits",
    "code_words",
    "estimate_jaccard",
    "estimate_jaccard_one",
    "filled_code_bits",
    "filled_words",
    "sketch_rows",
    "sketches_of_batch",
    "sketches_of_shingles",
]

SKETCH_ALGORITHM = "oph-shingle3-1"
#: Tokens per shingle: word 3-shingles, the unit the issue's ground truth uses.
SHINGLE_TOKENS = 3
SKETCH_SALT = 0xD6E8FEB86659FD93
_CODE_BITS = (2, 4, 8)
U8Array = npt.NDArray[np.uint8]
_MASK = (1 << 64) - 1
_U64 = np.uint64
#: Shingles made into sketches at a time: the arrays made for them stay a
#: few MB however long a text is.
BLOCK_FEATURES = 1 << 18


class SketchRows(np.ndarray):
    """Sketches as rows of bytes, one a document, that remember the
    :class:`Sketch` they were made with (``sketch``), so that a store given
    them can refuse another geometry: 512 bins of 2 bits and 256 of 4 are
    both 128 bytes. Slices and copies keep it; a plain uint8 array (read
    back from a file, say) has none and is taken on trust."""

    sketch: Sketch | None

    def __new__(cls, rows: U8Array, sketch: Sketch) -> SketchRows:
        made = np.asarray(rows).view(cls)
        made.sketch = sketch
        return made

    def __array_finalize__(self, source: object) -> None:
        self.sketch = getattr(source, "sketch", None)


@dataclass(frozen=True)
class Sketch:
    """Settings of the verification sketch: ``bins`` (a power of two, 8 to
    4096) codes of ``bits`` bits each (2, 4 or 8; 0 in a code marks an empty
    bin). More bins estimate more precisely; more bits make chance code
    collisions rarer. The default, 256 bins of 4 bits, is 128 bytes a
    document."""

    bins: int = 256
    bits: int = 4

    def __post_init__(self) -> None:
        for name in ("bins", "bits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"sketch {name} must be an int, not {type(value).__name__}")
        if self.bits not in _CODE_BITS:
            raise InvalidValueError(f"sketch bits must be one of {_CODE_BITS}; got {self.bits}")
        if not 8 <= self.bins <= 4096 or self.bins & (self.bins - 1):
            raise InvalidValueError(f"sketch bins must be a power of two from 8 to 4096; got {self.bins}")

    @property
    def nbytes(self) -> int:
        """Bytes of one document's sketch."""
        return self.bins * self.bits // 8

    def settings(self) -> dict[str, Any]:
        """The settings as a msgpack-able map (stored with the fingerprint's)."""
        return {"algorithm": SKETCH_ALGORITHM, "bins": self.bins, "bits": self.bits}

    @classmethod
    def from_settings(cls, settings: object) -> Sketch:
        """The :class:`Sketch` whose :meth:`settings` equal ``settings``."""
        if not isinstance(settings, Mapping):
            raise InvalidValueError(f"sketch settings must be a map, not {type(settings).__name__}")
        if set(settings) != {"algorithm", "bins", "bits"}:
            raise InvalidValueError(f"sketch settings have keys {sorted(map(str, settings))}")
        if settings["algorithm"] != SKETCH_ALGORITHM:
            raise InvalidValueError(
                f"sketch settings name algorithm {settings['algorithm']!r}; "
                f"this version implements {SKETCH_ALGORITHM!r}"
            )
        return cls(bins=settings["bins"], bits=settings["bits"])


def check_similarity(value: object) -> float:
    """A similarity threshold, checked: a real number from 0 to 1."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise InvalidTypeError(f"min_similarity must be a number, not {type(value).__name__}")
    threshold = float(value)
    if not 0.0 <= threshold <= 1.0:  # NaN fails too
        raise InvalidValueError(f"min_similarity must be from 0 to 1; got {value!r}")
    return threshold


# -- making sketches ----------------------------------------------------------


def sketches_of_batch(batch: TokenBatch, seed: int, sketch: Sketch) -> npt.NDArray[np.uint8]:
    """The packed sketches of a batch's texts, from the token hashes its
    fingerprint used (``seed`` is the fingerprinter's): a ``(texts,
    sketch.nbytes)`` uint8 array. Raises
    :class:`~simstore.fingerprinting.tokens.NoTokensError` for a text without tokens."""
    hashes, tokens_per_text = batch.token_hashes(seed)
    return sketches_of_shingles(*ngram_features(hashes, tokens_per_text, (SHINGLE_TOKENS,)), sketch)


def batch_shingles(
    texts: Sequence[str], *, shingle: int, seed: int = 0, hmm: bool = True, start: int = 0
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """The hashes of the ``shingle``-token shingles of validated ``texts``
    (hashed as n-gram features are; a text of fewer tokens has the one
    shingle of all its tokens) text after text, and the ``len(texts) + 1``
    offsets where each text's start. A text without tokens raises
    :class:`InvalidValueError` naming its index (``start`` + position)."""
    if not texts:
        return np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64)
    try:
        hashes, tokens_per_text = TokenBatch.of_texts(texts, hmm=hmm).token_hashes(seed)
    except NoTokensError as missing:
        raise refusal(texts, missing, start) from None
    return ngram_features(hashes, tokens_per_text, (shingle,))


def sketches_of_shingles(
    shingles: npt.NDArray[np.uint64], starts: npt.NDArray[np.int64], sketch: Sketch
) -> npt.NDArray[np.uint8]:
    """The packed sketches of texts whose shingle hashes lie back to back in
    ``shingles``, text ``i``'s from ``starts[i]`` to ``starts[i + 1]``: a
    ``(texts, sketch.nbytes)`` uint8 array."""
    count = len(starts) - 1
    if count == 1 and len(shingles) <= FEW_SHINGLES:
        return _one_sketch(shingles, sketch)
    bins = sketch.bins
    shift = _U64(64 - (bins.bit_length() - 1))
    smallest = np.full(count * bins, _MASK, dtype=np.uint64)
    filled = np.zeros(count * bins, dtype=np.bool_)
    # A block of shingles at a time: the arrays made for them stay a few MB
    # however long a text is.
    for low in range(0, len(shingles), BLOCK_FEATURES):
        high = min(low + BLOCK_FEATURES, len(shingles))
        mixed = mix64_array(shingles[low:high] ^ _U64(SKETCH_SALT))
        text_of = owners(starts, low, high)
        slot = text_of * bins + (mixed >> shift).astype(np.int64)
        np.minimum.at(smallest, slot, mixed)
        filled[slot] = True
    # Codes of the filled bins only: a short text fills a few of its 256
    # bins, and the modulo of every bin was most of a short text's sketch.
    modulus = _U64((1 << sketch.bits) - 1)
    codes = np.zeros(count * bins, dtype=np.uint8)
    where = np.flatnonzero(filled)
    codes[where] = (smallest[where] & _U64(0xFFFFFFFF)) % modulus + _U64(1)
    return _pack(codes.reshape(count, bins), sketch.bits)


#: A batch of one text of at most this many shingles (a query's, a single
#: add's) is sketched in plain Python: the batch path's two dozen numpy calls
#: took some 65 µs of a 60-word text, three times the Python loop.
FEW_SHINGLES = 512


def _one_sketch(shingles: npt.NDArray[np.uint64], sketch: Sketch) -> npt.NDArray[np.uint8]:
    """:func:`sketches_of_shingles` of one text: its mixed shingles sorted,
    so that a bin's (the top bits') smallest value comes first, and each
    filled bin's code set at its place in one little-endian integer."""
    mixed = mix64_array(shingles ^ _U64(SKETCH_SALT))
    mixed.sort()
    shift = 64 - (sketch.bins.bit_length() - 1)
    bits = sketch.bits
    modulus = (1 << bits) - 1
    packed = 0
    previous = -1
    for value in mixed.tolist():
        slot = value >> shift
        if slot != previous:
            packed |= ((value & 0xFFFFFFFF) % modulus + 1) << (bits * slot)
            previous = slot
    return np.frombuffer(bytearray(packed.to_bytes(sketch.nbytes, "little")), dtype=np.uint8).reshape(1, -1)


def _pack(codes: npt.NDArray[np.uint8], bits: int) -> npt.NDArray[np.uint8]:
    """Codes of ``bits`` bits packed little-end first, ``8 // bits`` a byte."""
    per_byte = 8 // bits
    packed = np.zeros((codes.shape[0], codes.shape[1] // per_byte), dtype=np.uint8)
    for j in range(per_byte):
        packed |= codes[:, j::per_byte] << np.uint8(bits * j)
    return packed


def sketch_rows(items: Sequence[object], sketch: Sketch) -> tuple[U8Array, npt.NDArray[np.bool_]]:
    """Sketches given as bytes (or missing: ``None``, NaN or pandas' NA) as
    rows of a uint8 array, zeros where missing, and which rows are present.
    A sketch of the wrong width raises :class:`InvalidValueError`, and any
    other value (a column of text given as sketches) :class:`InvalidTypeError`."""
    present = np.array([isinstance(item, bytes | bytearray) for item in items], dtype=np.bool_)
    for index in np.flatnonzero(~present).tolist():
        item = items[index]
        nan = isinstance(item, float) and item != item
        if not (item is None or nan or type(item).__name__ == "NAType"):
            raise InvalidTypeError(
                f"a sketch must be bytes (Fingerprinter.fingerprints_and_sketches makes them) or "
                f"missing; got {type(item).__name__} (dask turns a bytes column it was not told "
                "is binary into text: see simstore.dask.fingerprint_and_sketch)"
            )
    rows = np.zeros((len(items), sketch.nbytes), dtype=np.uint8)
    for index in np.flatnonzero(present).tolist():
        raw = items[index]
        assert isinstance(raw, bytes | bytearray)
        if len(raw) != sketch.nbytes:
            raise InvalidValueError(f"a sketch is {len(raw)} bytes; {sketch.nbytes} were expected")
        rows[index] = np.frombuffer(raw, dtype=np.uint8)
    return rows, present


# -- estimating similarity --------------------------------------------------


def estimate_jaccard(
    first: npt.ArrayLike, second: npt.ArrayLike, sketch: Sketch | None = None
) -> npt.NDArray[np.float64]:
    """The estimated Jaccard similarity of each pair of sketches: rows of
    ``first`` against rows of ``second`` (uint8 arrays of ``sketch.nbytes``
    columns, or one sketch's bytes as ``Store.sketch_of`` gives them; either
    may be one row, which is broadcast)."""
    sketch = sketch or Sketch()
    a, b = (
        np.atleast_2d(
            np.frombuffer(rows, dtype=np.uint8)
            if isinstance(rows, bytes | bytearray | memoryview)  # Store.sketch_of's bytes
            else np.asarray(rows, dtype=np.uint8)
        )
        for rows in (first, second)
    )
    if a.shape[-1] != sketch.nbytes or b.shape[-1] != sketch.nbytes:
        raise InvalidValueError(
            f"sketches of {sketch.bins} bins of {sketch.bits} bits are {sketch.nbytes} bytes; "
            f"got rows of {a.shape[-1]} and {b.shape[-1]}"
        )
    # The same sums as HeldSketch.estimate, over machine words: each code's
    # bits OR-ed into its lowest and counted by popcount (a look-up table of
    # the bytes, a gather per byte, took 3.1-3.5x the time for 200K pairs).
    words_a, words_b = code_words(a), code_words(b)
    filled_a = filled_words(words_a, sketch.bits)
    filled_b = filled_words(words_b, sketch.bits)
    union = filled_words(words_a | words_b, sketch.bits)  # bins where either is non-empty
    matched = union - filled_words(words_a ^ words_b, sketch.bits)  # equal and non-empty
    both_filled = filled_a + filled_b - union
    collide = (1 << sketch.bits) - 1
    estimate = (collide * matched - both_filled) / ((collide - 1) * np.maximum(union, 1))
    return np.clip(estimate, 0.0, 1.0)  # type: ignore[no-any-return]


def code_words(rows: U8Array) -> npt.NDArray[np.unsignedinteger[Any]]:
    """Packed sketches (rows of bytes; a sketch is a power of two of at
    least 2 bytes) viewed as rows of little-endian words of up to 8 bytes."""
    size = min(rows.shape[-1], 8)
    return np.ascontiguousarray(rows).view(f"<u{size}")


def filled_words(words: npt.NDArray[np.unsignedinteger[Any]], bits: int) -> npt.NDArray[np.int64]:
    """Each row's filled bins: its codes of ``bits`` packed in words (as
    :func:`code_words` views sketches) that are not 0."""
    low_bits = code_low_bits(bits, words.dtype.itemsize)
    return np.bitwise_count(filled_code_bits(words, bits, low_bits)).sum(axis=-1, dtype=np.int64)  # type: ignore[no-any-return]


#: Per code width: each byte with the lowest bit of each of its codes set.
_LOW_BITS = {2: 0x55, 4: 0x11, 8: 0x01}


def estimate_jaccard_one(first: bytes, second: bytes, sketch: Sketch) -> float:
    """:func:`estimate_jaccard` of one pair of sketches (``sketch.nbytes``
    bytes each, not checked), in Python integers: a few microseconds, where
    the numpy function costs tens for one pair."""
    return HeldSketch(first, sketch).estimate_bytes(second)


class HeldSketch:
    """One sketch (a query's) held as a Python integer, its filled bins
    counted once, to estimate its similarity to a few others
    (:func:`estimate_jaccard_one`, without unpacking and counting the held
    one again for each)."""

    __slots__ = ("_bits", "_collide", "_low_bits", "filled", "value")

    def __init__(self, raw: bytes, sketch: Sketch) -> None:
        self._bits = sketch.bits
        self._low_bits = code_low_bits(sketch.bits, sketch.nbytes)
        self._collide = (1 << sketch.bits) - 1
        #: The sketch's packed bytes as a little-endian integer.
        self.value = int.from_bytes(raw, "little")
        #: Its filled bins.
        self.filled = self.filled_of(self.value)

    def filled_of(self, value: int) -> int:
        """The filled bins of a sketch given as an integer (as :attr:`value`)."""
        return filled_code_bits(value, self._bits, self._low_bits).bit_count()

    def estimate_bytes(self, raw: bytes) -> float:
        """The estimated similarity of the sketch of bytes ``raw`` to this one."""
        value = int.from_bytes(raw, "little")
        return self.estimate(value, self.filled_of(value))

    def estimate(self, value: int, filled: int) -> float:
        """The estimated similarity to this one of the sketch ``value`` (an
        integer, as :attr:`value`) of ``filled`` filled bins."""
        union = self.filled_of(self.value | value)  # bins where either is non-empty
        matched = union - self.filled_of(self.value ^ value)  # equal and non-empty
        both_filled = self.filled + filled - union
        collide = self._collide
        estimate = (collide * matched - both_filled) / ((collide - 1) * max(union, 1))
        return min(max(estimate, 0.0), 1.0)


@functools.lru_cache(maxsize=16)
def code_low_bits(bits: int, nbytes: int) -> int:
    """The lowest bit of every ``bits``-bit code of ``nbytes`` packed bytes, as an int."""
    return int.from_bytes(bytes([_LOW_BITS[bits]]) * nbytes, "little")


#: Packed codes: a Python integer, or an array of unsigned words (each word's
#: codes packed alike: codes never straddle bytes).
PackedCodes = TypeVar("PackedCodes", int, npt.NDArray[np.unsignedinteger[Any]])


def filled_code_bits(value: PackedCodes, bits: int, low_bits: int) -> PackedCodes:
    """``value`` (codes of ``bits`` packed in an int, or in each word of an
    array) with the lowest bit of each non-zero code set and every other bit
    clear (``low_bits``: the lowest bit of every code of an int or a word, see
    :func:`code_low_bits`): its popcount over a stretch is the filled bins
    there."""
    # (numpy's stubs type an unsigned array's ``|`` and ``&`` with an int as
    # signed; NEP 50 keeps the array's unsigned dtype.)
    shift = 1
    while shift < bits:
        value = value | (value >> shift)  # type: ignore[assignment]  # (new: an array given is kept)
        shift <<= 1
    return value & low_bits  # type: ignore[return-value]
