"""The specifications: the fingerprint and the sketch in plain Python, one
text at a time, straight from the documented steps.

Slow and obviously correct; the tests hold the fast paths to them. No
production module imports this one (``tests/test_reference.py`` checks).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from simstore.errors import InvalidValueError
from simstore.fingerprinting.hashing import MASK, mix64, ngram_hash, token_hash
from simstore.fingerprinting.sketch import SKETCH_SALT, Sketch
from simstore.fingerprinting.text import normalise, tokenise
from simstore.fingerprinting.tokens import no_features_message

__all__ = ["feature_counts", "fingerprint_reference", "shingles_reference", "sketch_reference"]


def _weight(count: int, weighting: str) -> int:
    if weighting == "binary":
        return 1
    if weighting == "tf":
        return count
    return int(np.rint(1000.0 * (1.0 + np.log(float(count)))))


def feature_counts(
    text: str, *, ngrams: Sequence[int] = (1, 2), seed: int = 0, hmm: bool = True
) -> Counter[int]:
    """Version 2's feature hashes of one text and how often each occurs.
    Raises :class:`InvalidValueError` for text without features."""
    tokens = tokenise(normalise(text), hmm=hmm)
    hashes = [token_hash(token.encode(), seed) for token in tokens]
    features: list[int] = []
    for n in ngrams:
        if n == 1:
            features.extend(hashes)
        else:
            features.extend(ngram_hash(hashes[k : k + n]) for k in range(len(hashes) - n + 1))
    if not features and hashes:
        features.append(ngram_hash(hashes))
    if not features:
        raise InvalidValueError(no_features_message(text))
    return Counter(features)


def fingerprint_reference(
    text: str, *, ngrams: Sequence[int] = (1, 2), weighting: str = "log", seed: int = 0, hmm: bool = True
) -> tuple[int, int]:
    """Version-2 fingerprint of one text and its distinct-feature count.
    Raises :class:`InvalidValueError` for text without features."""
    counts = feature_counts(text, ngrams=ngrams, seed=seed, hmm=hmm)
    tally = [0] * 64
    for feature, count in counts.items():
        weight = _weight(count, weighting)
        for bit in range(64):
            tally[bit] += weight if feature >> bit & 1 else -weight
    return sum(1 << bit for bit in range(64) if tally[bit] > 0), len(counts)


def shingles_reference(text: str, *, shingle: int, seed: int = 0, hmm: bool = True) -> list[int]:
    """The shingle hashes of one text (with repeats; a text of fewer tokens
    has the one shingle of all its tokens). Raises :class:`InvalidValueError`
    for text without tokens."""
    tokens = tokenise(normalise(text), hmm=hmm)
    if not tokens:
        raise InvalidValueError(no_features_message(text))
    hashes = [token_hash(token.encode(), seed) for token in tokens]
    if len(hashes) < shingle:
        return [ngram_hash(hashes)]
    return [ngram_hash(hashes[k : k + shingle]) for k in range(len(hashes) - shingle + 1)]


def sketch_reference(shingle_hashes: Sequence[int], sketch: Sketch) -> bytes:
    """One text's packed sketch from its shingle hashes."""
    bins = sketch.bins
    shift = 64 - (bins.bit_length() - 1)
    smallest: dict[int, int] = {}
    for shingle in shingle_hashes:
        value = mix64(shingle ^ SKETCH_SALT)
        slot = value >> shift
        if value < smallest.get(slot, MASK + 1):
            smallest[slot] = value
    modulus = (1 << sketch.bits) - 1
    codes = [(smallest[i] & 0xFFFFFFFF) % modulus + 1 if i in smallest else 0 for i in range(bins)]
    per_byte = 8 // sketch.bits
    return bytes(
        sum(codes[i + j] << (sketch.bits * j) for j in range(per_byte)) for i in range(0, bins, per_byte)
    )
