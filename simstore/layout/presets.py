"""What a new store opened with ``min_similarity=J`` keeps, and the threshold
it verifies matches at, so that it finds the pairs whose similarity is ``J``
or more.

Two facts shape it (``benchmarks/results/similarity_presets.md``):

- **The fingerprint alone cannot reach J = 0.8.** 97 % of the real pairs at
  ``J >= 0.8`` lie within 11 bits, and Manku's or multi-index tables at
  k = 11 cost far more than a band table beside k = 5: the band table finds
  pairs by the sketch itself, whatever their fingerprints' distance.
- **The sketch's estimate is noisy.** A pair just above ``J`` is estimated
  below it about half the time, so a store that verified at ``J`` itself
  would keep about 92 % of the pairs at ``0.8 <= J < 1``, whatever finds
  them. The preset verifies at ``J`` less twice the estimate's standard
  error (:func:`verification_threshold`: 0.75 for 0.8, 0.862 for 0.9), and
  the pairs it lets in below ``J`` are still near-duplicates (none of them
  below 0.5 on any corpus or seed).

Nothing here does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "PRESET_K",
    "ExactThreshold",
    "SimilarityPreset",
    "named_threshold",
    "preset_bands",
    "similarity_preset",
    "verification_threshold",
]

#: The radius of a preset's fingerprint tables: the default's (the band
#: table, not k, carries the recall below J = 0.97).
PRESET_K = 5
#: Bands kept a width for thresholds from :data:`WIDE_BANDS_BELOW` up: the
#: default table's 8 (every pair at 0.9 <= J < 1 of every corpus, worst seed).
NARROW_BANDS = 8
#: Below this threshold a preset keeps :data:`WIDE_BANDS` a width: at
#: 0.8 <= J < 1, 8 a width found 96.2 % and 16 found 99.3 % (worst seed).
WIDE_BANDS_BELOW = 0.9
WIDE_BANDS = 16
#: Standard errors of the estimate between the similarity named and the
#: threshold a preset verifies at.
MARGIN_ERRORS = 2.0
#: Band keys a long document (every sketch bin filled) keeps, by bands a
#: width: the mean over the unrelated long documents of the real-text
#: corpora, five seeds (benchmarks/results/similarity_presets.md); a
#: paragraph keeps fewer (6.4-8.1 keys at 16 a width).
KEYS_PER_LONG_DOCUMENT = {8: 7.85, 16: 15.7}
#: Bytes an entry of the band table: a 4-byte key and a 4-byte id.
BAND_ENTRY_BYTES = 8


class ExactThreshold(float):
    """A ``min_similarity`` for :func:`simstore.open` that a new store keeps
    as it is, not lowered by :func:`verification_threshold`: matches must be
    estimated at this or more (an import keeps its export's threshold so).

    >>> ExactThreshold(0.75) == 0.75
    True
    """

    __slots__ = ()


@dataclass(frozen=True)
class SimilarityPreset:
    """A new store's settings for finding pairs at ``similarity`` or more."""

    #: The similarity the caller named.
    similarity: float
    #: The estimate a match must reach (``Store.min_similarity``).
    threshold: float
    #: Bands of each width the band table keeps a document.
    bands_per_width: int
    k: int = PRESET_K


def verification_threshold(similarity: float, bins: int) -> float:
    """The estimate a pair of true similarity ``similarity`` reaches about
    39 times in 40: ``similarity`` less :data:`MARGIN_ERRORS` standard
    errors of a ``bins``-bin sketch's estimate at that similarity, rounded
    down to a thousandth.

    >>> verification_threshold(0.8, 256), verification_threshold(0.9, 256)
    (0.75, 0.862)
    >>> verification_threshold(1.0, 256), verification_threshold(0.0, 256)
    (1.0, 0.0)
    """
    error = math.sqrt(similarity * (1.0 - similarity) / bins)
    lowered = max(0.0, similarity - MARGIN_ERRORS * error)
    # A thousandth's rounding, with a hair of slack so that 0.75 stays 0.75.
    return math.floor(lowered * 1000 + 1e-9) / 1000


def named_threshold(similarity: float | None, stored: float | None, bins: int | None) -> float | None:
    """The threshold ``similarity`` stands for in a store that verifies from
    ``stored`` with sketches of ``bins`` bins: ``stored`` where
    ``similarity`` names it (the similarity a store made for it verifies
    from, or the very value), else ``similarity`` itself (``None`` stays
    ``None``; a store without either has nothing to name).

    >>> named_threshold(0.8, 0.75, 256), named_threshold(0.75, 0.75, 256), named_threshold(0.9, 0.75, 256)
    (0.75, 0.75, 0.9)
    """
    if similarity is None or stored is None or bins is None:
        return similarity
    if similarity == stored or verification_threshold(similarity, bins) == stored:
        return stored
    return similarity


def preset_bands(similarity: float) -> int:
    """Bands a width the band table of a store finding pairs at ``similarity`` keeps.

    >>> preset_bands(0.97), preset_bands(0.9), preset_bands(0.8)
    (8, 8, 16)
    """
    return NARROW_BANDS if similarity >= WIDE_BANDS_BELOW else WIDE_BANDS


def band_bytes_per_document(bands_per_width: int) -> float | None:
    """The band table's bytes for a long document, measured (``None`` where
    no corpus was measured with that many bands a width).

    >>> band_bytes_per_document(8), band_bytes_per_document(3)
    (62.8, None)
    """
    keys = KEYS_PER_LONG_DOCUMENT.get(bands_per_width)
    return None if keys is None else keys * BAND_ENTRY_BYTES


def similarity_preset(similarity: float, bins: int) -> SimilarityPreset:
    """The settings of a new store opened with ``min_similarity=similarity``
    whose sketches have ``bins`` bins."""
    return SimilarityPreset(similarity, verification_threshold(similarity, bins), preset_bands(similarity))
