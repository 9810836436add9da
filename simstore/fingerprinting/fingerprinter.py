"""64-bit simhash fingerprints of text (Chinese, other scripts, or mixed) and
of dense vectors.

The text algorithm, exactly (so that other tools can reproduce it):

1. **Normalise** (:func:`simstore.fingerprinting.text.normalise`): NFKC, ``str.casefold``,
   NFKC again, white-space controls to a space and other Cc/Cf characters
   removed, white-space runs collapsed to one space and stripped.
2. **Tokenise** (:func:`simstore.fingerprinting.text.tokenise`): runs of Han ideographs are
   segmented by jieba (bundled dictionary, ``HMM=hmm``); runs of other word
   characters (``\\w`` plus combining marks) are one token each; each
   character of category So (emoji) is a token; the rest is dropped.
3. **Features**: for each ``n`` in ``ngrams`` (default ``(1, 2)``), in that
   order, every run of ``n`` consecutive tokens joined by one U+0020 space
   (tokens never contain spaces; ``n = 1`` gives the tokens themselves). A
   text with fewer tokens than every ``n`` has the single feature of all its
   tokens joined.
4. **Hash**, which the algorithm's version names: version 1
   (``simstore-text-simhash-1``) encodes each feature string as UTF-8 and
   hashes it with **XXH3-64** (``xxhash.xxh3_64_intdigest(data, seed)``),
   seed ``seed`` (default 0), giving an unsigned 64-bit integer; version 2
   (``simstore-text-simhash-2``, the default) hashes tokens and folds n-grams
   as :mod:`simstore.fingerprinting.version2` states, with numpy over a whole batch.
5. **Weights** (integers, so the vote is exact on every machine), per
   distinct feature string, from how often it occurs (``tf``):

   - ``binary``: 1 (each distinct feature votes once),
   - ``tf``: ``tf``,
   - ``log``: ``round(1000 * (1 + ln tf))`` (damped counts; the default),
   - ``tfidf``: ``round(1000 * tf * idf)`` where ``idf`` is the mean, over the
     feature's tokens, of jieba's bundled IDF table (``analyse/idf.txt``),
     words not in the table taking the table's median as jieba does.

   With ``top_n`` set, only the ``top_n`` distinct features of highest
   weight vote (ties go to the smaller hash value), like the C++ simhash
   that keeps jieba's top keywords.
6. **Vote**: for each bit ``i`` (bit 0 is the least significant) the tally is
   the sum of ``+weight`` over features whose hash has bit ``i`` set and
   ``-weight`` over those whose hash has it clear; bit ``i`` of the
   fingerprint is 1 where the tally is **strictly positive** (a tie gives 0).

Empty text and text without features raise
:class:`~simstore.errors.InvalidValueError` (an all-zero fingerprint would
silently match every other empty document). Text with fewer than
:data:`SHORT_TEXT_FEATURES` distinct features is fingerprinted, with a
:class:`ShortTextWarning`: a one-word edit moves many of its bits.

Vectors (:func:`fingerprint_vector`) use random-hyperplane simhash: bit ``i``
is 1 where the dot product of the vector with hyperplane ``i`` is positive;
the 64 hyperplanes for dimension ``d`` are Gaussian, drawn from numpy's
PCG64 bit generator seeded with ``seed`` (see :func:`hyperplanes`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import xxhash

from simstore.errors import InvalidTypeError, InvalidValueError, warn_caller
from simstore.fingerprinting import version2
from simstore.fingerprinting.pool import Workers, chunks, fingerprint_in_processes
from simstore.fingerprinting.sketch import SHINGLE_TOKENS, Sketch, SketchRows, sketches_of_shingles
from simstore.fingerprinting.text import as_text, jieba_idf, normalise, segmenter_info, tokenise

__all__ = [
    "ALGORITHM",
    "ALGORITHMS",
    "ALGORITHM_1",
    "FEATURE_HASH",
    "FEATURE_HASH_1",
    "SHORT_TEXT_FEATURES",
    "WEIGHTINGS",
    "Fingerprinter",
    "ShortTextWarning",
    "count_features",
    "feature_hashes",
    "features",
    "fingerprint",
    "fingerprint_vector",
    "hyperplanes",
    "segmenter_info",
    "top_features",
    "vote",
    "weigh",
]

#: Name and version of the text pipeline (normalise, tokenise, features,
#: weights, vote) described in the module docstring.
ALGORITHM_1 = "simstore-text-simhash-1"
#: Version 1's feature hash: XXH3 64-bit over the feature's UTF-8 bytes.
FEATURE_HASH_1 = "xxh3_64"
#: The algorithm of new fingerprinters (and so of new stores): version 2,
#: version 1 with a feature hash computed with numpy for a whole batch
#: (:mod:`simstore.fingerprinting.version2`), several times faster. A store keeps the
#: algorithm it was made with.
ALGORITHM = version2.ALGORITHM
FEATURE_HASH = version2.FEATURE_HASH
#: Each algorithm and its feature hash.
ALGORITHMS: dict[str, str] = {ALGORITHM_1: FEATURE_HASH_1, version2.ALGORITHM: version2.FEATURE_HASH}
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
# Single texts shorter than this (characters) take version 2's plain-Python
# feature path (equal results; see Fingerprinter._counted).
_SMALL_TEXT = 300
#: The verification sketch of new fingerprinters (see :class:`Sketch`).
DEFAULT_SKETCH = Sketch()

#: Fewer distinct features than this gives a :class:`ShortTextWarning`.
SHORT_TEXT_FEATURES = 8

Weighting = Literal["binary", "tf", "log", "tfidf"]
WEIGHTINGS: tuple[str, ...] = ("binary", "tf", "log", "tfidf")
_MAX_NGRAM = 8
_MASK64 = (1 << 64) - 1


class ShortTextWarning(UserWarning):
    """The text has so few features that its fingerprint is coarse: a single
    edited word moves many bits, so near-duplicates may be missed."""


# -- the pipeline, one pure function a step ---------------------------------


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


def feature_hashes(feature_strings: Sequence[str], seed: int = 0) -> npt.NDArray[np.uint64]:
    """XXH3-64 (with ``seed``) of each feature's UTF-8 bytes, as uint64."""
    encoded = map(str.encode, feature_strings)
    if seed:
        hashed = map(functools.partial(xxhash.xxh3_64_intdigest, seed=seed), encoded)
    else:
        hashed = map(xxhash.xxh3_64_intdigest, encoded)
    return np.fromiter(hashed, dtype=np.uint64, count=len(feature_strings))


def count_features(feature_strings: Iterable[str]) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The distinct feature strings (in order of first occurrence) and how
    often each occurs (its term frequency)."""
    counts = Counter(feature_strings)
    return list(counts), np.fromiter(counts.values(), dtype=np.int64, count=len(counts))


def weigh(distinct: Sequence[str], counts: npt.NDArray[np.int64], weighting: str) -> npt.NDArray[np.int64]:
    """Integer weights of distinct features from their counts (see the
    module docstring for each ``weighting``)."""
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


# Float64 sums of integers are exact below 2**53, whatever the order of
# summation, so the fast BLAS path is used only under that bound.
_EXACT_FLOAT_SUM = 2**53


def vote(hashes: npt.NDArray[np.uint64], weights: npt.NDArray[np.int64]) -> int:
    """The weighted bit vote: bit ``i`` is 1 where the features with bit ``i``
    set outweigh those with it clear (ties give 0). Bit 0 is the LSB."""
    # One row of 64 bits per feature, column i = bit i: little-endian bytes,
    # each unpacked least significant bit first.
    as_bytes = hashes.astype("<u8", copy=False).view(np.uint8).reshape(-1, 8)
    bits = np.unpackbits(as_bytes, axis=1, bitorder="little")
    total = int(weights.sum())
    positive: npt.NDArray[np.float64] | npt.NDArray[np.int64]
    if total < _EXACT_FLOAT_SUM:
        positive = weights.astype(np.float64) @ bits
    else:
        positive = weights @ bits.astype(np.int64)
    # tally = positive - (total - positive); compare without forming it.
    winners = 2 * positive > total
    return int(np.packbits(winners, bitorder="little").view("<u8")[0])


# -- the settings object ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fingerprinter:
    """Frozen text-fingerprinting settings; picklable, so it can be sent to
    worker processes.

    ``ngrams``: the shingle sizes whose features are used together, as a
    strictly increasing tuple (``(1, 2)``: words and word pairs).
    ``weighting``: ``"log"`` (1 + ln tf, damped counts), ``"binary"`` (each
    distinct feature votes once), ``"tf"`` or ``"tfidf"`` (jieba's IDF table).
    ``top_n``: keep only that many highest-weight features (None = all).
    ``hmm``: let jieba's HMM find words missing from its dictionary.
    ``seed``: seed of the feature hash.
    ``algorithm``: :data:`ALGORITHM` (version 2, the default) or
    :data:`ALGORITHM_1`, whose feature hash is XXH3-64 per feature string
    (several times slower; the only one with ``tfidf`` and ``top_n``).
    ``sketch``: the verification sketch made beside each fingerprint
    (:class:`simstore.fingerprinting.sketch.Sketch`, 128 bytes by default), which estimates
    how much text two documents share; ``None`` makes none (stores made
    before sketches existed have none).
    """

    ngrams: tuple[int, ...] = (1, 2)
    weighting: Weighting = "log"
    top_n: int | None = None
    hmm: bool = True
    seed: int = 0
    algorithm: str = ALGORITHM
    sketch: Sketch | None = DEFAULT_SKETCH

    def __post_init__(self) -> None:
        _check_ngrams(self.ngrams)
        if not isinstance(self.weighting, str):
            raise InvalidTypeError(f"weighting must be str, not {type(self.weighting).__name__}")
        if self.weighting not in WEIGHTINGS:
            raise InvalidValueError(
                f"weighting must be one of {', '.join(WEIGHTINGS)}; got {self.weighting!r}"
            )
        if self.top_n is not None:
            _check_int("top_n", self.top_n, 1, None)
        if not isinstance(self.hmm, bool):
            raise InvalidTypeError(f"hmm must be bool, not {type(self.hmm).__name__}")
        _check_int("seed", self.seed, 0, _MASK64)
        if self.sketch is not None and not isinstance(self.sketch, Sketch):
            raise InvalidTypeError(
                f"sketch must be a simstore.Sketch or None, not {type(self.sketch).__name__}"
            )
        if self.algorithm not in ALGORITHMS:
            raise InvalidValueError(
                f"algorithm must be one of {', '.join(ALGORITHMS)}; got {self.algorithm!r}"
            )
        if self.algorithm == version2.ALGORITHM and (
            self.weighting not in version2.WEIGHTINGS or self.top_n is not None
        ):
            # Both need the feature strings, which version 2 never builds.
            raise InvalidValueError(
                f"weighting={self.weighting!r} and top_n={self.top_n!r} need "
                f"algorithm={ALGORITHM_1!r}; {version2.ALGORITHM!r} supports the weightings "
                f"{', '.join(version2.WEIGHTINGS)} without top_n"
            )

    # -- fingerprints --

    def fingerprint(self, text: str) -> int:
        """The 64-bit fingerprint of ``text`` (``str``, or UTF-8 ``bytes``).

        Raises :class:`InvalidValueError` for text that is empty or has no
        features; warns :class:`ShortTextWarning` for very short text.
        """
        value, count = self._counted(as_text(text))
        if count < SHORT_TEXT_FEATURES:
            warn_caller(_short_message(count), ShortTextWarning)
        return value

    def _counted(self, text: str) -> tuple[int, int]:
        """Fingerprint of a validated ``text`` and its distinct-feature count."""
        if self.algorithm == ALGORITHM_1:
            return self._fingerprint_counted(text)
        if len(text) < _SMALL_TEXT:
            # The batch path's ~60 numpy calls cost about 0.2 ms whatever the
            # size; a short text's few features are hashed faster in Python.
            tf = version2.feature_counts(text, ngrams=self.ngrams, seed=self.seed, hmm=self.hmm)
            hashes = np.fromiter(tf, dtype=np.uint64, count=len(tf))
            tfs = np.fromiter(tf.values(), dtype=np.int64, count=len(tf))
            return vote(hashes, weigh([], tfs, self.weighting)), len(tf)
        try:
            values, counts = self._batch([text], 0)
        except InvalidValueError:
            raise InvalidValueError(version2.no_features_message(text)) from None
        return int(values[0]), int(counts[0])

    def _batch(self, texts: list[str], start: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """Version 2's fingerprints and distinct-feature counts of ``texts``."""
        return version2.batch_fingerprints(
            texts, ngrams=self.ngrams, weighting=self.weighting, seed=self.seed, hmm=self.hmm, start=start
        )

    def fingerprint_many(
        self, texts: Iterable[str], processes: int | None = 1, *, workers: Workers | None = None
    ) -> npt.NDArray[np.uint64]:
        """Fingerprints of ``texts`` in order, as a uint64 array, equal to
        calling :meth:`fingerprint` on each.

        ``processes=1`` (the default) works in this process and starts no
        other. ``processes=n`` spreads chunks of about a million characters
        over this process and ``n - 1`` worker processes, started only if the
        input holds more than one chunk. ``None`` starts workers only where
        they pay: after the first 16M characters (``pool.AUTO_MIN_CHARS``),
        one per core the load average leaves idle. Workers cost 0.6-0.8 s of
        CPU to start, 2.2 s more at their first Han text (jieba's
        dictionary), need no ``__main__`` guard in the caller's script, and
        end with this process. ``workers`` (a :class:`simstore.fingerprinting.pool.Workers`,
        in place of ``processes``) keeps them across calls, started once.
        Texts are read lazily, chunk by chunk.

        One :class:`ShortTextWarning` counts all short texts; an unusable text
        raises naming its index (the first one, whichever process found it).
        """
        return self._many(texts, processes, sketches=False, workers=workers)[0]

    def fingerprints_and_sketches(
        self, texts: Iterable[str], processes: int | None = 1, *, workers: Workers | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]:
        """:meth:`fingerprint_many` of ``texts``, and each text's verification
        sketch (a ``(len(texts), sketch.nbytes)`` uint8 array) made from the
        same tokens in the same pass. Raises :class:`InvalidValueError` if
        this fingerprinter has no sketch (``sketch=None``)."""
        sketch = self._sketch()
        fingerprints, sketches = self._many(texts, processes, sketches=True, workers=workers)
        if sketches is None:
            sketches = np.zeros((len(fingerprints), sketch.nbytes), dtype=np.uint8)
        return fingerprints, SketchRows(sketches, sketch)

    def fingerprint_and_sketch(self, text: str) -> tuple[int, bytes]:
        """The fingerprint and the packed verification sketch of one text."""
        self._sketch()
        text = as_text(text)
        try:
            # One numpy pass for both: hashing the shingles in Python cost
            # 0.5 ms a query of a few hundred words (bench_verify.py).
            values, short, rows = self._fingerprint_chunk([text], 0, sketches=True)
        except InvalidValueError:
            raise InvalidValueError(version2.no_features_message(text)) from None
        if short:
            count = int(self._counted(text)[1])
            warn_caller(_short_message(count), ShortTextWarning)
        assert rows is not None
        return int(values[0]), rows[0].tobytes()

    def _sketch(self) -> Sketch:
        if self.sketch is None:
            raise InvalidValueError("this fingerprinter makes no sketches (sketch=None)")
        return self.sketch

    def _many(
        self, texts: Iterable[str], processes: int | None, *, sketches: bool, workers: Workers | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8] | None]:
        if processes is not None:
            _check_int("processes", processes, 1, None)

        def local(texts: list[str], start: int) -> tuple[npt.NDArray[np.uint64], int, Any]:
            return self._fingerprint_chunk(texts, start, sketches=sketches)

        results = fingerprint_in_processes(
            self.settings(), chunks(texts), local, processes, sketches=sketches, workers=workers
        )
        values: list[npt.NDArray[np.uint64]] = []
        rows: list[npt.NDArray[np.uint8]] = []
        short = count = 0
        for chunk_values, chunk_short, chunk_sketches in results:
            values.append(chunk_values)
            if chunk_sketches is not None:
                rows.append(chunk_sketches)
            short += chunk_short
            count += len(chunk_values)
        if short:
            warn_caller(
                f"{short} of {count} texts have fewer than "
                f"{SHORT_TEXT_FEATURES} distinct features; their fingerprints are coarse",
                ShortTextWarning,
            )
        if not values:
            return np.zeros(0, dtype=np.uint64), None
        return np.concatenate(values), (np.concatenate(rows) if rows else None)

    def _fingerprint_chunk(
        self, texts: list[str], start: int, *, sketches: bool = False
    ) -> tuple[npt.NDArray[np.uint64], int, npt.NDArray[np.uint8] | None]:
        """Fingerprints of validated ``texts``, how many were short, and
        their sketches if ``sketches``; runs in worker processes too, so an
        error names the index in the batch (``start`` is the index of
        ``texts[0]``)."""
        sketch = self._sketch() if sketches else None
        if self.algorithm != ALGORITHM_1:
            if sketch is None:
                fingerprints, counts = self._batch(texts, start)
                return fingerprints, int(np.count_nonzero(counts < SHORT_TEXT_FEATURES)), None
            fingerprints, counts, shingles, starts = version2.batch_fingerprints_and_shingles(
                texts,
                shingle=SHINGLE_TOKENS,
                ngrams=self.ngrams,
                weighting=self.weighting,
                seed=self.seed,
                hmm=self.hmm,
                start=start,
            )
            short = int(np.count_nonzero(counts < SHORT_TEXT_FEATURES))
            return fingerprints, short, sketches_of_shingles(shingles, starts, sketch)
        values: list[int] = []
        short = 0
        for offset, text in enumerate(texts):
            try:
                value, count = self._fingerprint_counted(text)
            except InvalidValueError as exc:
                raise InvalidValueError(f"text at index {start + offset}: {exc}") from None
            values.append(value)
            short += count < SHORT_TEXT_FEATURES
        rows = None
        if sketch is not None:
            shingles, starts = version2.batch_shingles(
                texts, shingle=SHINGLE_TOKENS, seed=self.seed, hmm=self.hmm, start=start
            )
            rows = sketches_of_shingles(shingles, starts, sketch)
        return np.array(values, dtype=np.uint64), short, rows

    def _fingerprint_counted(self, text: str) -> tuple[int, int]:
        """Fingerprint of a validated ``text`` and its distinct-feature count."""
        normalised = normalise(text)
        if not normalised:
            raise InvalidValueError("text is empty (or only white space and control characters)")
        feature_strings = features(tokenise(normalised, hmm=self.hmm), self.ngrams)
        if not feature_strings:
            raise InvalidValueError(
                "text has no features: it holds no words, Chinese characters or emoji "
                "(only punctuation or symbols)"
            )
        distinct, counts = count_features(feature_strings)
        hashes = feature_hashes(distinct, self.seed)
        weights = weigh(distinct, counts, self.weighting)
        return vote(*top_features(hashes, weights, self.top_n)), len(distinct)

    # -- settings --

    def settings(self) -> dict[str, Any]:
        """Every setting that shapes fingerprints, as a msgpack-able dict
        (including the pipeline's name and the feature hash and its seed)."""
        return {
            "algorithm": self.algorithm,
            "hash": ALGORITHMS[self.algorithm],
            "seed": self.seed,
            "ngrams": list(self.ngrams),
            "weighting": self.weighting,
            "top_n": self.top_n,
            "hmm": self.hmm,
            "sketch": None if self.sketch is None else self.sketch.settings(),
        }

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Fingerprinter:
        """The :class:`Fingerprinter` whose :meth:`settings` equal ``settings``.

        Every key :meth:`settings` writes must be present; an unknown or
        missing key, or an algorithm or hash this version does not
        implement, raises :class:`InvalidValueError`.
        """
        if not isinstance(settings, Mapping):
            raise InvalidTypeError(f"settings must be a mapping, not {type(settings).__name__}")
        expected = set(cls().settings())
        unknown = sorted(map(str, set(settings) - expected))
        # Settings recorded before sketches existed have no "sketch": none.
        missing = sorted(expected - set(settings) - {"sketch"})
        if unknown or missing:
            raise InvalidValueError(f"fingerprint settings: unknown keys {unknown}, missing keys {missing}")
        algorithm = settings["algorithm"]
        if algorithm not in ALGORITHMS:
            raise InvalidValueError(
                f"fingerprint settings name algorithm {algorithm!r}; "
                f"this version implements {', '.join(map(repr, ALGORITHMS))}"
            )
        if settings["hash"] != ALGORITHMS[algorithm]:
            raise InvalidValueError(
                f"fingerprint settings name hash {settings['hash']!r}; "
                f"{algorithm} uses only {ALGORITHMS[algorithm]!r}"
            )
        fields = {f.name: settings[f.name] for f in dataclasses.fields(cls) if f.name != "sketch"}
        raw_sketch = settings.get("sketch")
        fields["sketch"] = None if raw_sketch is None else Sketch.from_settings(raw_sketch)
        ngrams = fields["ngrams"]
        if isinstance(ngrams, (list, tuple)):
            fields["ngrams"] = tuple(ngrams)  # msgpack gives lists back
        return cls(**fields)


def _check_ngrams(ngrams: object) -> None:
    """Raise unless ``ngrams`` is a non-empty, strictly increasing tuple of
    shingle sizes within 1..8."""
    if not isinstance(ngrams, tuple):
        raise InvalidTypeError(f"ngrams must be a tuple of int, not {type(ngrams).__name__}")
    if not ngrams:
        raise InvalidValueError("ngrams must name at least one shingle size")
    for n in ngrams:
        _check_int("each of ngrams", n, 1, _MAX_NGRAM)
    if list(ngrams) != sorted(set(ngrams)):
        raise InvalidValueError(f"ngrams must be strictly increasing; got {ngrams}")


def _check_int(name: str, value: object, low: int, high: int | None) -> None:
    """Raise unless ``value`` is an int (not bool) within ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be int, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidValueError(f"{name} must be {bound}; got {value}")


def _short_message(count: int) -> str:
    """The :class:`ShortTextWarning` message for one text."""
    return (
        f"text has only {count} distinct feature(s) (fewer than {SHORT_TEXT_FEATURES}); "
        "its fingerprint is coarse and a one-word edit moves many bits"
    )


def fingerprint(text: str, **settings: Any) -> int:
    """One-call helper: ``Fingerprinter(**settings).fingerprint(text)``."""
    value, count = Fingerprinter(**settings)._counted(as_text(text))
    if count < SHORT_TEXT_FEATURES:
        warn_caller(_short_message(count), ShortTextWarning)
    return value


# -- vectors -------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def hyperplanes(dimension: int, seed: int = 0) -> npt.NDArray[np.float64]:
    """The 64 Gaussian hyperplanes (a read-only ``(64, dimension)`` array) of
    :func:`fingerprint_vector`.

    Exactly: ``numpy.random.PCG64(seed).random_raw(64 * dimension)`` gives one
    64-bit draw per entry, row-major; its high and low 32 bits ``a``, ``b``
    give ``u = (a + 0.5) / 2**32`` and ``v = (b + 0.5) / 2**32``, and the
    entry is ``sqrt(-2 ln u) * cos(2 pi v)`` (Box-Muller). Bit generator
    streams are stable across numpy versions, unlike ``Generator`` methods.
    """
    _check_int("dimension", dimension, 1, None)
    _check_int("seed", seed, 0, None)
    raw = np.random.PCG64(seed).random_raw(64 * dimension)
    high = (raw >> np.uint64(32)).astype(np.float64)
    low = (raw & np.uint64(0xFFFFFFFF)).astype(np.float64)
    u = (high + 0.5) / 2.0**32
    v = (low + 0.5) / 2.0**32
    planes = np.sqrt(-2.0 * np.log(u)) * np.cos(2.0 * np.pi * v)
    planes = planes.reshape(64, dimension)
    planes.flags.writeable = False
    return planes


def fingerprint_vector(vectors: npt.ArrayLike, seed: int = 0) -> Any:
    """Random-hyperplane simhash of dense vectors.

    A 1-D vector of length ``d`` gives one ``int``; a 2-D ``(n, d)`` array
    gives a uint64 array of ``n`` fingerprints. Bit ``i`` (0 = LSB) is 1 where
    the dot product with hyperplane ``i`` of :func:`hyperplanes` is positive,
    so the expected bit distance of two vectors is ``64 * angle / pi``.
    Vectors must be real, finite and non-zero (a zero vector has no
    direction). Bits whose dot product is within rounding of 0 may differ
    between machines with different BLAS or SIMD.
    """
    array = _as_vectors(vectors)
    _check_int("seed", seed, 0, None)
    matrix = array.reshape(1, -1) if array.ndim == 1 else array
    planes = hyperplanes(matrix.shape[1], seed)
    winners = (matrix @ planes.T) > 0.0
    packed = np.packbits(winners, axis=1, bitorder="little")
    values = packed.view("<u8").reshape(-1).astype(np.uint64)
    return int(values[0]) if array.ndim == 1 else values


def _as_vectors(vectors: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Validate vectors for :func:`fingerprint_vector`; return them as float64."""
    try:
        array = np.asarray(vectors)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"vectors must be a numeric array: {exc}") from None
    if array.dtype.kind not in "iuf":
        raise InvalidTypeError(f"vectors must be real numbers (int or float), not dtype {array.dtype}")
    if array.ndim not in (1, 2):
        raise InvalidValueError(f"vectors must be 1-D (one vector) or 2-D (one per row); got {array.ndim}-D")
    if array.shape[-1] == 0:
        raise InvalidValueError("vectors must have at least one dimension (d >= 1)")
    floats = array.astype(np.float64)
    rows = floats.reshape(-1, floats.shape[-1])
    bad = ~np.isfinite(rows).all(axis=1)
    if bad.any():
        raise InvalidValueError(f"vector {int(np.argmax(bad))} holds NaN or infinity")
    zero = ~rows.any(axis=1)
    if zero.any():
        raise InvalidValueError(
            f"vector {int(np.argmax(zero))} is all zeros and has no direction to fingerprint"
        )
    return floats
