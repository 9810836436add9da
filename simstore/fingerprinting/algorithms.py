"""The text fingerprint's versions, one registry over the same tokens.

Every version normalises and tokenises alike (one
:class:`~simstore.fingerprinting.tokens.TokenBatch` a batch), makes the same
n-gram features (:mod:`simstore.fingerprinting.features`), weighs and votes them
alike (:mod:`simstore.fingerprinting.vote`); a version names how a feature is
hashed:

- ``simstore-text-simhash-1``: each feature string's UTF-8 bytes hashed with
  XXH3-64 (seed ``seed``), one call a distinct feature; the only version
  with ``tfidf`` and ``top_n``, which need the feature strings;
- ``simstore-text-simhash-2`` (the default): tokens hashed and n-grams folded
  as :mod:`simstore.fingerprinting.hashing` states, with numpy over a whole
  batch (several times faster: version 1 spent about 70 % of its time in
  per-feature Python calls, issue 21).

A store records its version and keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidValueError
from simstore.fingerprinting.features import count_features, features, ngram_features
from simstore.fingerprinting.hashing import feature_hashes
from simstore.fingerprinting.tokens import NoTokensError, TokenBatch, refusal
from simstore.fingerprinting.vote import top_features, vote, vote_batch, weigh

__all__ = [
    "ALGORITHM",
    "ALGORITHMS",
    "ALGORITHM_1",
    "ALGORITHM_2",
    "FEATURE_HASH",
    "FEATURE_HASH_1",
    "FEATURE_HASH_2",
    "UNRECORDED_SETTINGS",
    "Algorithm",
    "batch_fingerprints",
    "token_fingerprints",
]

Fingerprints = tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]


@dataclass(frozen=True)
class Algorithm:
    """One version of the text fingerprint.

    ``fingerprints(batch, ngrams, weighting, top_n, seed)`` gives each text's
    fingerprint and number of distinct features, and raises
    :class:`NoTokensError` for the first text without tokens.
    """

    name: str
    #: The feature hash, recorded beside the name.
    feature_hash: str
    weightings: tuple[str, ...]
    #: Whether it can keep only the ``top_n`` heaviest features.
    top_n: bool
    #: Whether it needs each text's tokens as strings (``TokenBatch.strings``).
    strings: bool
    fingerprints: Callable[[TokenBatch, Sequence[int], str, int | None, int], Fingerprints]


def _version_1(
    batch: TokenBatch, ngrams: Sequence[int], weighting: str, top_n: int | None, seed: int
) -> Fingerprints:
    assert batch.strings is not None, "version 1 hashes feature strings"
    values = np.zeros(len(batch), dtype=np.uint64)
    counts = np.zeros(len(batch), dtype=np.int64)
    for index, tokens in enumerate(batch.strings):
        if not tokens:
            raise NoTokensError(index)
        distinct, tf = count_features(features(tokens, ngrams))
        weights = weigh(distinct, tf, weighting)
        values[index] = vote(*top_features(feature_hashes(distinct, seed), weights, top_n))
        counts[index] = len(distinct)
    return values, counts


def _version_2(
    batch: TokenBatch, ngrams: Sequence[int], weighting: str, top_n: int | None, seed: int
) -> Fingerprints:
    if not len(batch):
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    hashes, tokens_per_text = batch.token_hashes(seed)
    return vote_batch(*ngram_features(hashes, tokens_per_text, ngrams), weighting)


ALGORITHM_1 = "simstore-text-simhash-1"
FEATURE_HASH_1 = "xxh3_64"
ALGORITHM_2 = "simstore-text-simhash-2"
FEATURE_HASH_2 = "poly64-moremur"
#: The algorithm of new fingerprinters (and so of new stores), and its feature hash.
ALGORITHM = ALGORITHM_2
FEATURE_HASH = FEATURE_HASH_2

#: Every version this simstore implements, by name.
ALGORITHMS: dict[str, Algorithm] = {
    ALGORITHM_1: Algorithm(
        name=ALGORITHM_1,
        feature_hash=FEATURE_HASH_1,
        weightings=("binary", "tf", "log", "tfidf"),
        top_n=True,
        strings=True,
        fingerprints=_version_1,
    ),
    ALGORITHM_2: Algorithm(
        name=ALGORITHM_2,
        feature_hash=FEATURE_HASH_2,
        weightings=("binary", "tf", "log"),
        top_n=False,
        strings=False,
        fingerprints=_version_2,
    ),
}

#: The settings of format-1 stores whose meta records none (made before
#: settings were recorded): frozen here, so that a change of the defaults can
#: never silently change how such a store fingerprints text.
UNRECORDED_SETTINGS: dict[str, object] = {
    "algorithm": "simstore-text-simhash-1",
    "hash": "xxh3_64",
    "seed": 0,
    "ngrams": [1, 2],
    "weighting": "log",
    "top_n": None,
    "hmm": True,
}


def batch_fingerprints(
    texts: Sequence[str],
    *,
    ngrams: Sequence[int] = (1, 2),
    weighting: str = "log",
    seed: int = 0,
    hmm: bool = True,
    start: int = 0,
) -> Fingerprints:
    """Version-2 fingerprints of validated ``texts`` and each one's number
    of distinct features.

    Raises :class:`InvalidValueError` naming the index (``start`` + position)
    of the first text without features.
    """
    try:
        return _version_2(TokenBatch.of_texts(texts, hmm=hmm), ngrams, weighting, None, seed)
    except NoTokensError as missing:
        raise refusal(texts, missing, start) from None


def token_fingerprints(
    token_lists: Sequence[Sequence[str]],
    *,
    ngrams: Sequence[int] = (1, 2),
    weighting: str = "log",
    seed: int = 0,
) -> Fingerprints:
    """:func:`batch_fingerprints` of texts already cut into tokens
    (:func:`simstore.fingerprinting.text.tokenise` of normalised text): for
    benchmarks that compare settings without segmenting again."""
    try:
        return _version_2(TokenBatch.of_tokens(token_lists), ngrams, weighting, None, seed)
    except NoTokensError as missing:
        raise InvalidValueError(f"token list at index {missing.index} is empty") from None
