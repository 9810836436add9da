"""Version 2 of the text fingerprint (``simstore-text-simhash-2``): the
features of a whole batch hashed and voted with numpy over its UTF-8 bytes.

Version 1 (:mod:`simstore.fingerprinting.fingerprinter`) calls XXH3 once per distinct feature and
counts features with a ``Counter``: about 70 % of its time went to per-feature
Python calls (issue 21), which capped English near 10 MB/s a core. Version 2
keeps version 1's normalisation, tokens, n-grams, weights and vote, and
changes only the feature hash, so that it can be computed for every token of
a batch at once:

- **token hash**: the token's UTF-8 bytes ``b_0 .. b_{L-1}`` give
  ``r = sum(b_i * P**(L-1-i)) mod 2**64`` (``P`` = :data:`POLY`), and the
  token's hash is ``mix64(r + L * LENGTH_MULT + salt)`` where
  ``salt = mix64(seed ^ SEED_XOR)`` and ``mix64`` is Pelle Evensen's
  "moremur" finaliser (xor-shift 27, multiply, xor-shift 33, multiply,
  xor-shift 27: a bijection that spreads every input bit over the output);
- **n-gram hash** (``n >= 2``) of tokens with hashes ``t_0 .. t_{n-1}``:
  ``a = t_0``, then ``a = a * NGRAM_MULT + t_j mod 2**64`` for each next
  ``t_j``, and the feature's hash is ``mix64(a + n * NGRAM_SALT)``; a text
  with fewer tokens than every ``n`` has the one feature of all its tokens,
  hashed with ``n`` = its token count (as version 1 joins them all);
- the unigram feature's hash is the token's hash.

Counts, weights (``binary``, ``tf``, ``log``; not ``tfidf`` or ``top_n``,
which need the feature strings) and the vote are version 1's. Two features
are the same if their 64-bit hashes are equal.

The polynomial hash modulo ``2**64`` has known engineered collisions (Thue-
Morse strings of thousands of bytes), harmless for deduplication: a collision
merges two features of one document, it cannot make two documents look alike.

:func:`fingerprint_reference` is the same algorithm in plain Python, one text
at a time: the specification the batch code is tested against.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidValueError
from simstore.fingerprinting.text import normalise, tokenise

__all__ = [
    "ALGORITHM",
    "FEATURE_HASH",
    "batch_fingerprints",
    "batch_fingerprints_and_shingles",
    "batch_shingles",
    "feature_counts",
    "fingerprint_reference",
    "mix64",
    "no_features_message",
    "shingles_reference",
    "token_fingerprints",
    "token_hash",
]

ALGORITHM = "simstore-text-simhash-2"
FEATURE_HASH = "poly64-moremur"
WEIGHTINGS: tuple[str, ...] = ("binary", "tf", "log")

# Odd 64-bit constants: odd multipliers are invertible modulo 2**64, so no
# information is lost when multiplying. POLY is the golden-ratio constant.
POLY = 0x9E3779B97F4A7C15
LENGTH_MULT = 0xC2B2AE3D27D4EB4F
NGRAM_MULT = 0x165667B19E3779F9
NGRAM_SALT = 0x27D4EB2F165667C5
SEED_XOR = 0x85EBCA77C2B2AE63
_MASK = (1 << 64) - 1
_POLY_INVERSE = pow(POLY, -1, 1 << 64)

# -- the specification, one text at a time --------------------------------


# MurmurHash3's fmix64 was tried first: on 1000 unrelated KJV verses the
# mean distance between fingerprints came out 0.2-0.3 bits below version 1's
# and moremur's (20 seeds each, 2.5 standard errors), and its bit flips for
# inputs one apart spread with SD 3.93 instead of 4: similar tokens (their
# polynomials differ by small amounts) hashed slightly alike.
_MIX_A = 0x3C79AC492BA7B653
_MIX_B = 0x1C69B3F74AC4AE35


def mix64(value: int) -> int:
    """Pelle Evensen's moremur finaliser of an unsigned 64-bit int."""
    value ^= value >> 27
    value = (value * _MIX_A) & _MASK
    value ^= value >> 33
    value = (value * _MIX_B) & _MASK
    return value ^ (value >> 27)


def _salt(seed: int) -> int:
    return mix64(seed ^ SEED_XOR)


def token_hash(token: bytes, seed: int = 0) -> int:
    """The version-2 hash of one token's UTF-8 bytes."""
    polynomial = 0
    for byte in token:
        polynomial = (polynomial * POLY + byte) & _MASK
    return mix64((polynomial + len(token) * LENGTH_MULT + _salt(seed)) & _MASK)


def _ngram_hash(hashes: Sequence[int]) -> int:
    folded = hashes[0]
    for value in hashes[1:]:
        folded = (folded * NGRAM_MULT + value) & _MASK
    return mix64((folded + len(hashes) * NGRAM_SALT) & _MASK)


def _weight(count: int, weighting: str) -> int:
    if weighting == "binary":
        return 1
    if weighting == "tf":
        return count
    return int(np.rint(1000.0 * (1.0 + np.log(float(count)))))


def feature_counts(
    text: str, *, ngrams: Sequence[int] = (1, 2), seed: int = 0, hmm: bool = True
) -> Counter[int]:
    """Version 2's feature hashes of one text and how often each occurs, in
    plain Python. Raises :class:`InvalidValueError` for text without features."""
    tokens = tokenise(normalise(text), hmm=hmm)
    hashes = [token_hash(token.encode(), seed) for token in tokens]
    features: list[int] = []
    for n in ngrams:
        if n == 1:
            features.extend(hashes)
        else:
            features.extend(_ngram_hash(hashes[k : k + n]) for k in range(len(hashes) - n + 1))
    if not features and hashes:
        features.append(_ngram_hash(hashes))
    if not features:
        raise InvalidValueError(no_features_message(text))
    return Counter(features)


def fingerprint_reference(
    text: str, *, ngrams: Sequence[int] = (1, 2), weighting: str = "log", seed: int = 0, hmm: bool = True
) -> tuple[int, int]:
    """Version-2 fingerprint of one text and its distinct-feature count, in
    plain Python (slow; the specification). Raises :class:`InvalidValueError`
    for text without features."""
    counts = feature_counts(text, ngrams=ngrams, seed=seed, hmm=hmm)
    tally = [0] * 64
    for feature, count in counts.items():
        weight = _weight(count, weighting)
        for bit in range(64):
            tally[bit] += weight if feature >> bit & 1 else -weight
    return sum(1 << bit for bit in range(64) if tally[bit] > 0), len(counts)


def no_features_message(text: str) -> str:
    """Why ``text`` has no features (the message of :class:`InvalidValueError`)."""
    if not normalise(text):
        return "text is empty (or only white space and control characters)"
    return (
        "text has no features: it holds no words, Chinese characters or emoji (only punctuation or symbols)"
    )


# -- the batch path ---------------------------------------------------------

_U64 = np.uint64


def _byte_table(predicate: object) -> npt.NDArray[np.bool_]:
    return np.array([predicate(code) for code in range(256)], dtype=np.bool_)  # type: ignore[operator]


# ASCII controls that normalisation removes (white-space ones become a space,
# which separates tokens anyway): removing them joins the words around them.
_DROP = _byte_table(lambda code: (code < 0x20 or code == 0x7F) and not chr(code).isspace())
# Token bytes: ASCII word characters, and every byte of a non-ASCII
# character (non-ASCII text reaches the batch as its tokens joined by spaces).
_WORD = _byte_table(lambda code: code >= 0x80 or chr(code).isalnum() or code == 0x5F)
# Column j of row v: bit j of the byte value v (bit 0 = least significant).
# Bins of one tally (texts x digit values): 2 MB of float64.
_TALLY_BINS = 1 << 18


def mix64_array(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """:func:`mix64` of each element (a new array; uint64 arithmetic wraps)."""
    values = values ^ (values >> _U64(27))
    values *= _U64(_MIX_A)
    values ^= values >> _U64(33)
    values *= _U64(_MIX_B)
    values ^= values >> _U64(27)
    return values


@functools.lru_cache(maxsize=4)
def _powers(base: int, count: int) -> npt.NDArray[np.uint64]:
    """``base**i mod 2**64`` for ``i`` in ``0..count-1`` (read-only)."""
    table = np.full(count, base, dtype=np.uint64)
    table[0] = 1
    np.cumprod(table, out=table)  # wraps modulo 2**64, which is the point
    table.flags.writeable = False
    return table


def _power_table(base: int, count: int) -> npt.NDArray[np.uint64]:
    # Cached in sizes rounded up to a power of two so that batches share them.
    return _powers(base, 1 << max(count - 1, 1).bit_length())[:count]


def _batch_bytes(texts: Sequence[str], hmm: bool) -> list[bytes]:
    """Each text as bytes whose word runs are exactly its tokens: ASCII text
    lower-cased (its remaining normalisation is done on the bytes), other
    text normalised and tokenised in Python, tokens joined by spaces; a long
    one a piece at a time (see :func:`_pieces`)."""
    parts: list[bytes] = []
    for text in texts:
        if text.isascii() or len(text) <= PIECE_CHARS:
            parts.append(_text_bytes(text, hmm))
        else:
            parts.append(b" ".join(_text_bytes(piece, hmm) for piece in _pieces(text)))
    return parts


def _text_bytes(text: str, hmm: bool) -> bytes:
    if text.isascii():
        # NFKC leaves ASCII as it is and casefold is lower().
        return text.lower().encode("ascii")
    return " ".join(tokenise(normalise(text), hmm=hmm)).encode("utf-8")


#: Characters of a long non-ASCII text normalised and tokenised at a time:
#: its tokens as Python strings took some 10 bytes a byte of text.
PIECE_CHARS = 1 << 20
# Where a piece may end: after white space or Chinese punctuation. None of
# them composes with what follows under NFKC (nor after case folding), nor
# is part of a token, so the tokens of two pieces are those of the whole
# (tests/fingerprinting/test_simhash2.py checks the first over every code point).
PIECE_ENDS = " \t\n\r\u3002\uff0c\u3001\uff01\uff1f\uff1b\uff1a"
_PIECE_END = re.compile(f"[{PIECE_ENDS}]")


def _pieces(text: str) -> Iterator[str]:
    """``text`` cut after a :data:`PIECE_ENDS` character about every
    :data:`PIECE_CHARS` characters (a text with none stays whole)."""
    start = 0
    while len(text) - start > PIECE_CHARS:
        found = _PIECE_END.search(text, start + PIECE_CHARS)
        if found is None:
            break
        yield text[start : found.end()]
        start = found.end()
    yield text[start:]


def batch_fingerprints(
    texts: Sequence[str],
    *,
    ngrams: Sequence[int] = (1, 2),
    weighting: str = "log",
    seed: int = 0,
    hmm: bool = True,
    start: int = 0,
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Version-2 fingerprints of validated ``texts`` and each one's number
    of distinct features, equal to :func:`fingerprint_reference` of each.

    Raises :class:`InvalidValueError` naming the index (``start`` + position)
    of the first text without features.
    """
    try:
        return _fingerprints_of_parts(_batch_bytes(texts, hmm), ngrams, weighting, seed)
    except _NoFeaturesError as exc:
        index = exc.index
        raise InvalidValueError(
            f"text at index {start + index}: {no_features_message(texts[index])}"
        ) from None


def token_fingerprints(
    token_lists: Sequence[Sequence[str]],
    *,
    ngrams: Sequence[int] = (1, 2),
    weighting: str = "log",
    seed: int = 0,
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """:func:`batch_fingerprints` of texts already cut into ``tokens``
    (:func:`simstore.fingerprinting.text.tokenise` of normalised text): for benchmarks that
    compare settings without segmenting again."""
    parts = [" ".join(tokens).encode("utf-8") for tokens in token_lists]
    try:
        return _fingerprints_of_parts(parts, ngrams, weighting, seed)
    except _NoFeaturesError as exc:
        raise InvalidValueError(f"token list at index {exc.index} is empty") from None


def batch_fingerprints_and_shingles(
    texts: Sequence[str],
    *,
    shingle: int,
    ngrams: Sequence[int] = (1, 2),
    weighting: str = "log",
    seed: int = 0,
    hmm: bool = True,
    start: int = 0,
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """:func:`batch_fingerprints` of ``texts``, and the hashes of their
    ``shingle``-token shingles (hashed as n-gram features are; a text of
    fewer tokens has the one shingle of all its tokens) text after text,
    with the ``len(texts) + 1`` offsets where each text's start: the tokens
    are found and hashed once for both."""
    hashes, tokens_per_text = _tokens_of_texts(texts, seed, hmm, start)
    fingerprints, counts = _vote(*_features(hashes, tokens_per_text, ngrams), weighting)
    return (fingerprints, counts, *_features(hashes, tokens_per_text, (shingle,)))


def batch_shingles(
    texts: Sequence[str], *, shingle: int, seed: int = 0, hmm: bool = True, start: int = 0
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Only the shingles of :func:`batch_fingerprints_and_shingles` (for
    fingerprinters of another algorithm, whose sketches are made the same way)."""
    if not texts:
        return np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64)
    hashes, tokens_per_text = _tokens_of_texts(texts, seed, hmm, start)
    return _features(hashes, tokens_per_text, (shingle,))


def shingles_reference(text: str, *, shingle: int, seed: int = 0, hmm: bool = True) -> list[int]:
    """The shingle hashes of :func:`batch_shingles` for one text, in plain
    Python (with repeats; raises :class:`InvalidValueError` for text without
    tokens)."""
    tokens = tokenise(normalise(text), hmm=hmm)
    if not tokens:
        raise InvalidValueError(no_features_message(text))
    hashes = [token_hash(token.encode(), seed) for token in tokens]
    if len(hashes) < shingle:
        return [_ngram_hash(hashes)]
    return [_ngram_hash(hashes[k : k + shingle]) for k in range(len(hashes) - shingle + 1)]


def _tokens_of_texts(
    texts: Sequence[str], seed: int, hmm: bool, start: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """:func:`_tokens_of_parts` of validated ``texts``; a text without tokens
    raises :class:`InvalidValueError` naming its index (``start`` + position)."""
    try:
        return _tokens_of_parts(_batch_bytes(texts, hmm), seed)
    except _NoFeaturesError as exc:
        index = exc.index
        raise InvalidValueError(
            f"text at index {start + index}: {no_features_message(texts[index])}"
        ) from None


class _NoFeaturesError(Exception):
    def __init__(self, index: int) -> None:
        self.index = index


def _fingerprints_of_parts(
    parts: list[bytes], ngrams: Sequence[int], weighting: str, seed: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """The batch path from :func:`_batch_bytes`' output on; raises
    :class:`_NoFeaturesError` with the index of the first text without tokens."""
    if not parts:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    hashes, tokens_per_text = _tokens_of_parts(parts, seed)
    features, feature_starts = _features(hashes, tokens_per_text, ngrams)
    return _vote(features, feature_starts, weighting)


def _tokens_of_parts(parts: list[bytes], seed: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Every token's hash, text after text, and each text's token count;
    raises :class:`_NoFeaturesError` for the first text without tokens."""
    count = len(parts)
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=count)
    # One space between texts: it is not a token byte, so no token spans two.
    data = np.frombuffer(b" ".join(parts), dtype=np.uint8)
    text_starts = np.zeros(count, dtype=np.int64)
    np.cumsum(lengths[:-1] + 1, out=text_starts[1:])
    drop = _DROP[data]
    if drop.any():
        # A text starts earlier by the bytes dropped before it (counted from
        # their positions: a prefix sum would take 8 bytes a byte of input).
        text_starts -= np.searchsorted(np.flatnonzero(drop), text_starts)
        data = data[~drop]
    del drop
    hashes, tokens_per_text = _token_hashes(data, text_starts, seed)
    empty = np.flatnonzero(tokens_per_text == 0)
    if len(empty):
        raise _NoFeaturesError(int(empty[0]))
    return hashes, tokens_per_text


#: Bytes of a batch hashed at a time: its per-byte arrays (some 30 bytes a
#: byte) stay a few tens of MB however long a text is (a 29 MB document
#: took 950 MB when hashed whole).
SEGMENT_BYTES = 1 << 18


def _token_hashes(
    data: npt.NDArray[np.uint8], text_starts: npt.NDArray[np.int64], seed: int
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Hashes of the word runs of ``data`` (the tokens), and how many tokens
    each text (starting at ``text_starts``) has.

    ``data`` is hashed :data:`SEGMENT_BYTES` at a time. A token cut by a
    segment's end is joined to its rest in the next segment: its polynomial
    so far, times ``P`` to the rest's length, plus the rest's polynomial."""
    pieces: list[npt.NDArray[np.uint64]] = []
    tokens_per_text = np.zeros(len(text_starts), dtype=np.int64)
    # The token that reached the end of the last segment: start, length, polynomial.
    carried: tuple[int, int, int] | None = None
    salt = _U64(_salt(seed))
    for low in range(0, len(data), SEGMENT_BYTES):
        high = min(low + SEGMENT_BYTES, len(data))
        starts, lengths, polynomials = _run_polynomials(data[low:high])
        starts += low
        if carried is not None:
            carried_start, carried_length, carried_polynomial = carried
            if len(starts) and starts[0] == low:  # the carried token goes on
                rest = int(lengths[0])
                joined = carried_polynomial * int(_power_table(POLY, rest + 1)[rest]) + int(polynomials[0])
                starts[0], lengths[0], polynomials[0] = carried_start, carried_length + rest, joined & _MASK
            else:  # it ended with the last segment
                starts = np.concatenate(([carried_start], starts))
                lengths = np.concatenate(([carried_length], lengths))
                polynomials = np.concatenate((np.array([carried_polynomial], dtype=np.uint64), polynomials))
            carried = None
        if high < len(data) and len(starts) and starts[-1] + lengths[-1] == high:
            carried = (int(starts[-1]), int(lengths[-1]), int(polynomials[-1]))
            starts, lengths, polynomials = starts[:-1], lengths[:-1], polynomials[:-1]
        if not len(starts):
            continue
        token_text = np.searchsorted(text_starts, starts, side="right") - 1
        tokens_per_text += np.bincount(token_text, minlength=len(text_starts))
        polynomials += lengths.astype(np.uint64) * _U64(LENGTH_MULT) + salt
        pieces.append(mix64_array(polynomials))
    if not pieces:
        return np.zeros(0, dtype=np.uint64), tokens_per_text
    return (pieces[0] if len(pieces) == 1 else np.concatenate(pieces)), tokens_per_text


def _run_polynomials(
    data: npt.NDArray[np.uint8],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.uint64]]:
    """The start, length and polynomial (``sum(b_i * P**(L-1-i))`` modulo
    ``2**64``) of each word run of ``data``."""
    word = _WORD[data].view(np.int8)
    edges = np.diff(word, prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    del edges
    if not len(starts):
        return starts, starts.copy(), np.zeros(0, dtype=np.uint64)
    # The token bytes back to back; byte i of a token of length L weighs
    # P**(L-1-i) = P**(L-1) * Q**i with Q the inverse of P modulo 2**64, so
    # one prefix sum of b * Q**i (i counted from each token's start) gives
    # every token's polynomial as a difference of two sums.
    token_bytes = data[word.view(np.bool_)].astype(np.uint64)
    del word
    token_lengths = ends - starts
    offsets = np.zeros(len(starts), dtype=np.int64)
    np.cumsum(token_lengths[:-1], out=offsets[1:])
    longest = int(token_lengths.max())
    position = np.arange(len(token_bytes), dtype=np.int64)
    position -= np.repeat(offsets, token_lengths)
    token_bytes *= _power_table(_POLY_INVERSE, longest)[position]
    del position
    sums = np.zeros(len(token_bytes) + 1, dtype=np.uint64)
    np.cumsum(token_bytes, out=sums[1:])
    del token_bytes
    polynomial = sums[offsets + token_lengths] - sums[offsets]
    polynomial *= _power_table(POLY, longest)[token_lengths - 1]
    return starts, token_lengths, polynomial


#: Features (or n-gram windows) handled at a time: the arrays made for them
#: stay a few MB however long a text is.
BLOCK_FEATURES = 1 << 18


def _features(
    hashes: npt.NDArray[np.uint64], tokens_per_text: npt.NDArray[np.int64], ngrams: Sequence[int]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Every text's feature hashes, text after text, and where each text's start."""
    count = len(tokens_per_text)
    token_starts = np.zeros(count, dtype=np.int64)
    np.cumsum(tokens_per_text[:-1], out=token_starts[1:])
    token_ends = token_starts + tokens_per_text
    per_text = [np.maximum(tokens_per_text - (n - 1), 0) for n in ngrams]
    features_per_text = np.sum(per_text, axis=0)
    # Too short for every n: one feature of all the text's tokens.
    whole = np.flatnonzero(features_per_text == 0)
    features_per_text[whole] = 1
    feature_starts = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(features_per_text, out=feature_starts[1:])
    features = np.empty(int(feature_starts[-1]), dtype=np.uint64)
    # Each n's features go to their texts' slots, n after n; the windows
    # (window k starts at token k of the batch) a block at a time.
    slot = feature_starts[:-1].copy()
    for n, windows in zip(ngrams, per_text, strict=True):
        last = len(hashes) - n + 1
        for low in range(0, max(last, 0), BLOCK_FEATURES):
            high = min(low + BLOCK_FEATURES, last)
            folded = hashes[low:high].copy()
            if n > 1:
                for j in range(1, n):
                    folded *= _U64(NGRAM_MULT)
                    folded += hashes[low + j : high + j]
                folded += _U64((n * NGRAM_SALT) & _MASK)
                folded = mix64_array(folded)
            first = np.arange(low, high, dtype=np.int64)
            text = np.searchsorted(token_starts, first, side="right") - 1
            inside = first + (n - 1) < token_ends[text]  # the window's n tokens share a text
            first, text = first[inside], text[inside]
            features[slot[text] + (first - token_starts[text])] = folded[inside]
        slot += windows
    for index in whole.tolist():
        tokens = hashes[token_starts[index] : token_starts[index] + tokens_per_text[index]]
        features[feature_starts[index]] = _ngram_hash([int(value) for value in tokens])
    return features, feature_starts


def _vote(
    features: npt.NDArray[np.uint64], feature_starts: npt.NDArray[np.int64], weighting: str
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Count each text's distinct features, weigh them, and vote the bits."""
    count = len(feature_starts) - 1
    # Sorting each text's slice in place groups equal features; numpy's
    # SIMD sort of values is ~10x faster than an argsort or lexsort of the
    # (text, feature) pairs, even with one call per text.
    for low, high in zip(feature_starts[:-1].tolist(), feature_starts[1:].tolist(), strict=True):
        features[low:high].sort()
    distinct_per_text = np.zeros(count, dtype=np.int64)
    # Integer weights summed in float64 are exact below 2**53, whatever the
    # order (so block by block too): far beyond any text that fits in
    # memory (weights are at most about 1000 * (1 + ln count) per feature).
    totals = np.zeros(count, dtype=np.float64)
    positive = np.zeros((count, 64), dtype=np.float64)
    low = 0
    while low < len(features):
        high = _block_end(features, feature_starts, low)
        block = features[low:high]
        first = np.ones(len(block), dtype=np.bool_)
        first[1:] = block[1:] != block[:-1]
        texts_starting = feature_starts[
            np.searchsorted(feature_starts, low) : np.searchsorted(feature_starts, high)
        ]
        first[texts_starting - low] = True
        group_starts = np.flatnonzero(first)
        del first
        counts = np.diff(group_starts, append=len(block))
        distinct = block[group_starts]
        text_of_group = np.searchsorted(feature_starts, group_starts + low, side="right") - 1
        del group_starts
        if weighting == "binary":
            weights = np.ones(len(counts), dtype=np.float64)
        elif weighting == "tf":
            weights = counts.astype(np.float64)
        else:
            weights = np.rint(1000.0 * (1.0 + np.log(counts)))
        distinct_per_text += np.bincount(text_of_group, minlength=count)
        totals += np.bincount(text_of_group, weights=weights, minlength=count)
        _bit_tallies(distinct, weights, text_of_group, positive)
        low = high
    winners = 2.0 * positive > totals[:, None]
    packed = np.packbits(winners, axis=1, bitorder="little")
    return packed.view("<u8").reshape(count).astype(np.uint64), distinct_per_text


def _block_end(features: npt.NDArray[np.uint64], feature_starts: npt.NDArray[np.int64], low: int) -> int:
    """Where the block of sorted features starting at ``low`` ends: about
    :data:`BLOCK_FEATURES` on, never inside a run of one text's equal
    features (whose count makes their weight)."""
    high = min(low + BLOCK_FEATURES, len(features))
    if high == len(features):
        return high
    text = int(np.searchsorted(feature_starts, high - 1, side="right")) - 1
    text_end = int(feature_starts[text + 1])
    if high == text_end:
        return high
    # The run of the block's last value goes on past it: the block takes all of it.
    return high + int(np.searchsorted(features[high:text_end], features[high - 1], side="right"))


def _bit_tallies(
    hashes: npt.NDArray[np.uint64],
    weights: npt.NDArray[np.float64],
    text_of_hash: npt.NDArray[np.int64],
    positive: npt.NDArray[np.float64],
) -> None:
    """Add to ``positive`` (a ``(texts, 64)`` array), for each text and each
    bit, the summed weight of its features (``hashes``, of the texts
    ``text_of_hash``, in order) whose hash has that bit set."""
    count = len(positive)
    # Each digit of d bits (a nibble or a byte) of every hash is tallied by
    # one bincount over (text, digit value), then sums over the values with
    # each bit set turn tallies per value into tallies per bit: 64 / d
    # passes over the features instead of 64. Bytes suit long texts (fewer
    # passes); nibbles short ones, where 256 bins a text would mostly be 0.
    digit_bits = 8 if len(hashes) >= 64 * count else 4
    values_per_digit = 1 << digit_bits
    # Texts tallied together: bounds the (texts x values) array to a few MB.
    block_texts = max(1, _TALLY_BINS // values_per_digit)
    first_texts = np.arange(0, count, block_texts)
    bounds = np.searchsorted(text_of_hash, [*first_texts.tolist(), count])
    for first_text, (low, high) in zip(
        first_texts.tolist(), itertools.pairwise(bounds.tolist()), strict=True
    ):
        if low == high:
            continue
        texts_here = min(block_texts, count - first_text)
        bins = (text_of_hash[low:high] - first_text) * values_per_digit
        block_hashes, block_weights = hashes[low:high], weights[low:high]
        mask = _U64(values_per_digit - 1)
        for digit in range(64 // digit_bits):
            values = ((block_hashes >> _U64(digit * digit_bits)) & mask).astype(np.int64)
            tally = np.bincount(bins + values, weights=block_weights, minlength=texts_here * values_per_digit)
            for bit in range(digit_bits):
                # The digit values with this bit set, as a strided view: a
                # sum, not a product with a matrix of the values' bits, which
                # numpy hands to a multi-threaded BLAS whose idle threads spin
                # (half again the CPU of the whole fingerprinting on 2 cores,
                # for no time gained). The weights are integers, so any order
                # sums alike.
                with_bit = tally.reshape(texts_here, values_per_digit >> (bit + 1), 2, 1 << bit)[:, :, 1, :]
                positive[first_text : first_text + texts_here, digit * digit_bits + bit] += with_bit.sum(
                    axis=(1, 2)
                )
