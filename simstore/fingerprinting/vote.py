"""Weights and the weighted bit vote.

**Weights** (integers, so the vote is exact on every machine), per distinct
feature, from how often it occurs in its text (``tf``):

- ``binary``: 1 (each distinct feature votes once),
- ``tf``: ``tf``,
- ``log``: ``round(1000 * (1 + ln tf))`` (damped counts; the default),
- ``tfidf`` (version 1 only): ``round(1000 * tf * idf)`` where ``idf`` is
  the mean, over the feature's tokens, of jieba's bundled IDF table, words
  not in the table taking the table's median as jieba does.

**Vote**: for each bit ``i`` (bit 0 is the least significant) the tally is
the sum of ``+weight`` over features whose hash has bit ``i`` set and
``-weight`` over those whose hash has it clear; bit ``i`` of the fingerprint
is 1 where the tally is **strictly positive** (a tie gives 0).

:func:`vote` votes one text's features; :func:`vote_batch` counts, weighs
and votes the features of a whole batch, text by text, with one of two
strategies that give equal results: each feature's 64 bits unpacked and
summed (few features: short texts), or one ``bincount`` a digit of every
hash (many).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from simstore.fingerprinting.hashing import U64
from simstore.fingerprinting.segmenter import jieba_idf

__all__ = ["BLOCK_FEATURES", "SMALL_BLOCK_FEATURES", "top_features", "vote", "vote_batch", "weigh"]

#: Sorted features counted and voted at a time (see :func:`_block_end`):
#: the arrays made for them stay a few MB however long a text is.
BLOCK_FEATURES = 1 << 18
#: A block of at most this many distinct features is voted bit by bit
#: (unpacked), a larger one digit by digit (bincount).
SMALL_BLOCK_FEATURES = 4096


def weigh(distinct: Sequence[str], counts: npt.NDArray[np.int64], weighting: str) -> npt.NDArray[np.int64]:
    """Integer weights of distinct features from their counts (see the
    module docstring for each ``weighting``; ``distinct`` is only read by
    ``tfidf``)."""
    if weighting == "binary":
        return np.ones_like(counts)
    if weighting == "tf":
        return counts
    if weighting == "log":
        # Damped counts, scaled to integers so that the vote stays exact.
        return np.rint(1000.0 * (1.0 + np.log(counts))).astype(np.int64)
    idf = np.fromiter(map(_feature_idf, distinct), dtype=np.float64, count=len(distinct))
    return np.rint(1000.0 * counts * idf).astype(np.int64)


def _feature_idf(feature: str) -> float:
    """Mean jieba IDF of a feature's words (the table's median if absent)."""
    table, median = jieba_idf()
    words = feature.split(" ")
    return math.fsum(table.get(w, median) for w in words) / len(words)


def top_features(
    hashes: npt.NDArray[np.uint64], weights: npt.NDArray[np.int64], top_n: int | None
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """The ``top_n`` features of highest weight (all if ``top_n`` is None);
    ties go to the smaller hash value so that the choice is deterministic."""
    if top_n is None or len(hashes) <= top_n:
        return hashes, weights
    keep = np.lexsort((hashes, -weights))[:top_n]
    return hashes[keep], weights[keep]


# Float sums of integers are exact below 2**24 (float32) and 2**53 (float64),
# whatever the order of summation, so the BLAS paths are used only under
# those bounds (of the weights' magnitudes: every partial sum stays under).
_EXACT_FLOAT32_SUM = 2**24
_EXACT_FLOAT_SUM = 2**53


def vote(hashes: npt.NDArray[np.uint64], weights: npt.NDArray[np.int64]) -> int:
    """The weighted bit vote of one text's distinct features: bit ``i`` is 1
    where the features with bit ``i`` set outweigh those with it clear (ties
    give 0). Bit 0 is the LSB."""
    # One row of 64 bits per feature, column i = bit i: little-endian bytes,
    # each unpacked least significant bit first.
    bits = _bits(hashes)
    total = int(weights.sum())
    magnitude = int(np.abs(weights).sum())
    positive: npt.NDArray[np.float32] | npt.NDArray[np.float64] | npt.NDArray[np.int64]
    if magnitude < _EXACT_FLOAT32_SUM:
        # Single precision: half the bytes of the bits converted, 0.6x the
        # time of double at 1,500 features (most texts' weights sum far under).
        positive = weights.astype(np.float32) @ bits.astype(np.float32)
    elif magnitude < _EXACT_FLOAT_SUM:
        positive = weights.astype(np.float64) @ bits
    else:
        positive = weights @ bits.astype(np.int64)
    # tally = positive - (total - positive); compare without forming it.
    winners = 2 * positive > total
    return int(np.packbits(winners, bitorder="little").view("<u8")[0])


def _bits(hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint8]:
    """A ``(len(hashes), 64)`` array of each hash's bits, bit 0 first."""
    as_bytes = hashes.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")


def vote_batch(
    features: npt.NDArray[np.uint64], feature_starts: npt.NDArray[np.int64], weighting: str
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Each text's fingerprint and number of distinct features, from the
    feature hashes of texts lying back to back in ``features`` (text ``i``'s
    from ``feature_starts[i]`` to ``feature_starts[i + 1]``; each slice is
    sorted in place). ``weighting`` is ``binary``, ``tf`` or ``log``."""
    count = len(feature_starts) - 1
    if count == 1 and len(features) <= BLOCK_FEATURES:
        return _vote_one(features, weighting)
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
        if len(distinct) <= SMALL_BLOCK_FEATURES:
            _unpacked_tallies(distinct, weights, text_of_group, positive)
        else:
            _bit_tallies(distinct, weights, text_of_group, positive)
        low = high
    winners = 2.0 * positive > totals[:, None]
    packed = np.packbits(winners, axis=1, bitorder="little")
    return packed.view("<u8").reshape(count).astype(np.uint64), distinct_per_text


def _vote_one(
    features: npt.NDArray[np.uint64], weighting: str
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """:func:`vote_batch` of one text's features (sorted in place): its
    distinct features weighed and voted by :func:`vote`, a handful of numpy
    calls where the batch's bookkeeping costs some fifty (a short text's
    whole fingerprint took less)."""
    features.sort()
    first = np.empty(len(features), dtype=np.bool_)
    first[:1] = True
    np.not_equal(features[1:], features[:-1], out=first[1:])
    group_starts = np.flatnonzero(first)
    counts = np.empty(len(group_starts), dtype=np.int64)
    counts[:-1] = group_starts[1:] - group_starts[:-1]
    counts[-1:] = len(features) - group_starts[-1:]
    value = vote(features[group_starts], weigh([], counts, weighting))
    return np.array([value], dtype=np.uint64), np.array([len(counts)], dtype=np.int64)


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


def _unpacked_tallies(
    hashes: npt.NDArray[np.uint64],
    weights: npt.NDArray[np.float64],
    text_of_hash: npt.NDArray[np.int64],
    positive: npt.NDArray[np.float64],
) -> None:
    """:func:`_bit_tallies` by unpacking each hash's 64 bits: a handful of
    numpy calls, for blocks of few features (a short text's)."""
    weighted = _bits(hashes) * weights[:, None]
    # Each text's hashes are consecutive; sum their rows text by text.
    text_starts = np.flatnonzero(np.diff(text_of_hash, prepend=-1))
    positive[text_of_hash[text_starts]] += np.add.reduceat(weighted, text_starts, axis=0)


# Bins of one tally (texts x digit values): 2 MB of float64.
_TALLY_BINS = 1 << 18


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
        mask = U64(values_per_digit - 1)
        for digit in range(64 // digit_bits):
            values = ((block_hashes >> U64(digit * digit_bits)) & mask).astype(np.int64)
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
