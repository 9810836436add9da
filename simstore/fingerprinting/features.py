"""The features of a text: its n-grams.

For each ``n`` in ``ngrams``, in that order, every run of ``n`` consecutive
tokens (``n = 1``: the tokens); a text with fewer tokens than every ``n``
has the one feature of all its tokens.

Version 2 and the verification sketch fold each n-gram's token hashes into
one 64-bit hash (:func:`ngram_features`, a whole :class:`~simstore.fingerprinting.tokens.TokenBatch`
with numpy; the sketch's shingles are its 3-grams); version 1 joins each
n-gram's token strings with one space (:func:`features`) and hashes the
string. Two features are the same if their hashes (version 2) or strings
(version 1) are equal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from simstore.fingerprinting.hashing import MASK, NGRAM_MULT, NGRAM_SALT, U64, mix64_array, ngram_hash

__all__ = ["BLOCK_FEATURES", "count_features", "features", "ngram_features", "owners"]

#: Features (or n-gram windows) handled at a time: the arrays made for them
#: stay a few MB however long a text is.
BLOCK_FEATURES = 1 << 18


def features(tokens: Sequence[str], ngrams: Sequence[int]) -> list[str]:
    """Return the feature strings of ``tokens``: for each ``n`` in ``ngrams``
    every run of ``n`` consecutive tokens joined by a space (``n = 1``: the
    tokens), in that order; a text too short for every ``n`` gives the one
    feature of all its tokens joined."""
    result: list[str] = []
    for n in ngrams:
        if n == 1:
            result.extend(tokens)
        elif len(tokens) >= n:
            # zip of shifted slices builds every window in C, no Python loop.
            result.extend(map(" ".join, zip(*(tokens[i:] for i in range(n)), strict=False)))
    if not result and tokens:
        result.append(" ".join(tokens))
    return result


def count_features(feature_strings: Iterable[str]) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The distinct feature strings (in order of first occurrence) and how
    often each occurs (its term frequency)."""
    counts = Counter(feature_strings)
    return list(counts), np.fromiter(counts.values(), dtype=np.int64, count=len(counts))


def owners(starts: npt.NDArray[np.int64], low: int, high: int) -> npt.NDArray[np.int64]:
    """For each position ``low..high-1`` of items laid out text after text
    (text ``i``'s from ``starts[i]``, ascending, with or without the end
    after the last; ``starts[0] <= low``), the
    text it belongs to: ``np.searchsorted(starts, positions, side="right") - 1``,
    by repeating each text's number over its share of the block (two binary
    searches, not one per position).

    >>> owners(np.array([0, 2, 2, 5]), 1, 6).tolist()
    [0, 2, 2, 2, 3]
    """
    first = int(np.searchsorted(starts, low, side="right")) - 1
    end = int(np.searchsorted(starts, high - 1, side="right"))
    bounds = np.empty(end - first + 1, dtype=np.int64)
    np.clip(starts[first:end], low, high, out=bounds[:-1])
    bounds[-1] = high
    return np.repeat(np.arange(first, end, dtype=np.int64), np.diff(bounds))


def ngram_features(
    hashes: npt.NDArray[np.uint64], tokens_per_text: npt.NDArray[np.int64], ngrams: Sequence[int]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """Every text's version-2 feature hashes, text after text, and the
    ``texts + 1`` offsets where each text's start, from the token hashes of
    :meth:`TokenBatch.token_hashes` (every text has at least one token)."""
    if len(tokens_per_text) == 1 and len(hashes) <= BLOCK_FEATURES:
        return _one_text_features(hashes, ngrams)
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
    folded_features = np.empty(int(feature_starts[-1]), dtype=np.uint64)
    # Each n's features go to their texts' slots, n after n; the windows
    # (window k starts at token k of the batch) a block at a time.
    slot = feature_starts[:-1].copy()
    for n, windows in zip(ngrams, per_text, strict=True):
        last = len(hashes) - n + 1
        for low in range(0, max(last, 0), BLOCK_FEATURES):
            high = min(low + BLOCK_FEATURES, last)
            folded = _fold(hashes, low, high, n)
            first = np.arange(low, high, dtype=np.int64)
            text = owners(token_starts, low, high)
            inside = first + (n - 1) < token_ends[text]  # the window's n tokens share a text
            first, text = first[inside], text[inside]
            folded_features[slot[text] + (first - token_starts[text])] = folded[inside]
        slot += windows
    for index in whole.tolist():
        tokens = hashes[token_starts[index] : token_starts[index] + tokens_per_text[index]]
        folded_features[feature_starts[index]] = ngram_hash([int(value) for value in tokens])
    return folded_features, feature_starts


def _fold(hashes: npt.NDArray[np.uint64], low: int, high: int, n: int) -> npt.NDArray[np.uint64]:
    """The n-gram hashes of the windows starting at tokens ``low..high-1``."""
    folded = hashes[low:high].copy()
    if n > 1:
        for j in range(1, n):
            folded *= U64(NGRAM_MULT)
            folded += hashes[low + j : high + j]
        folded += U64((n * NGRAM_SALT) & MASK)
        folded = mix64_array(folded)
    return folded


def _one_text_features(
    hashes: npt.NDArray[np.uint64], ngrams: Sequence[int]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """:func:`ngram_features` of a batch of one text (no text boundaries to
    look up: a few numpy calls, which is what a short text costs)."""
    blocks = [_fold(hashes, 0, len(hashes) - n + 1, n) for n in ngrams if n <= len(hashes)]
    if blocks:
        folded = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    else:
        folded = np.array([ngram_hash([int(value) for value in hashes])], dtype=np.uint64)
    return folded, np.array([0, len(folded)], dtype=np.int64)
