"""64-bit simhash fingerprints of text (Chinese, other scripts, or mixed):
:class:`Fingerprinter`, its settings, and one pass from texts to
fingerprints and sketches.

The text algorithm, exactly (so that other tools can reproduce it):

1. **Normalise** (:func:`simstore.fingerprinting.text.normalise`): NFKC, ``str.casefold``,
   NFKC again, white-space controls to a space and other Cc/Cf characters
   removed, white-space runs collapsed to one space and stripped.
2. **Tokenise** (:func:`simstore.fingerprinting.text.tokenise`): runs of Han ideographs are
   segmented by jieba (bundled dictionary, ``HMM=hmm``); runs of other word
   characters (``\\w`` plus combining marks) are one token each; each
   character of category So (emoji) is a token; the rest is dropped.
3. **Features** (:mod:`simstore.fingerprinting.features`): for each ``n`` in
   ``ngrams`` (default ``(1, 2)``), in that order, every run of ``n``
   consecutive tokens. A text with fewer tokens than every ``n`` has the
   single feature of all its tokens.
4. **Hash**, which the algorithm's version names
   (:mod:`simstore.fingerprinting.algorithms`): version 1
   (``simstore-text-simhash-1``) joins a feature's tokens with one U+0020
   space, encodes it as UTF-8 and hashes it with **XXH3-64**
   (``xxhash.xxh3_64_intdigest(data, seed)``), seed ``seed`` (default 0);
   version 2 (``simstore-text-simhash-2``, the default) hashes tokens and
   folds n-grams as :mod:`simstore.fingerprinting.hashing` states.
5. **Weights** (:mod:`simstore.fingerprinting.vote`), integers, per distinct
   feature from how often it occurs (``tf``): ``binary`` 1, ``tf``,
   ``log`` ``round(1000 * (1 + ln tf))`` (the default), ``tfidf`` (version 1)
   ``round(1000 * tf * idf)`` with jieba's IDF table. With ``top_n`` set
   (version 1), only the ``top_n`` distinct features of highest weight vote
   (ties go to the smaller hash value).
6. **Vote**: for each bit ``i`` (bit 0 is the least significant) the tally is
   the sum of ``+weight`` over features whose hash has bit ``i`` set and
   ``-weight`` over those whose hash has it clear; bit ``i`` of the
   fingerprint is 1 where the tally is **strictly positive** (a tie gives 0).

Steps 1-2 run once a batch (:class:`~simstore.fingerprinting.tokens.TokenBatch`),
whatever the version, and the verification sketch
(:mod:`simstore.fingerprinting.sketch`) is made from the same tokens.

Empty text and text without features raise
:class:`~simstore.errors.InvalidValueError` (an all-zero fingerprint would
silently match every other empty document). Text with fewer than
:data:`SHORT_TEXT_FEATURES` distinct features is fingerprinted, with a
:class:`ShortTextWarning`: a one-word edit moves many of its bits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError, warn_caller
from simstore.fingerprinting._check import check_int
from simstore.fingerprinting.algorithms import ALGORITHM, ALGORITHM_1, ALGORITHMS
from simstore.fingerprinting.pool import Workers, chunks, fingerprint_in_processes
from simstore.fingerprinting.sketch import Sketch, SketchRows, sketches_of_batch
from simstore.fingerprinting.text import as_text
from simstore.fingerprinting.tokens import NoTokensError, TokenBatch, refusal

__all__ = [
    "DEFAULT_SKETCH",
    "SHORT_TEXT_FEATURES",
    "WEIGHTINGS",
    "Fingerprinter",
    "ShortTextWarning",
    "fingerprint",
]

#: The verification sketch of new fingerprinters (see :class:`Sketch`).
DEFAULT_SKETCH = Sketch()

#: Fewer distinct features than this gives a :class:`ShortTextWarning`.
SHORT_TEXT_FEATURES = 8

Weighting = Literal["binary", "tf", "log", "tfidf"]
WEIGHTINGS: tuple[str, ...] = ("binary", "tf", "log", "tfidf")
_MAX_NGRAM = 8
_MASK64 = (1 << 64) - 1

Fingerprints = npt.NDArray[np.uint64]
Rows = npt.NDArray[np.uint8]


class ShortTextWarning(UserWarning):
    """The text has so few features that its fingerprint is coarse: a single
    edited word moves many bits, so near-duplicates may be missed."""


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
            check_int("top_n", self.top_n, 1, None)
        if not isinstance(self.hmm, bool):
            raise InvalidTypeError(f"hmm must be bool, not {type(self.hmm).__name__}")
        check_int("seed", self.seed, 0, _MASK64)
        if self.sketch is not None and not isinstance(self.sketch, Sketch):
            raise InvalidTypeError(
                f"sketch must be a simstore.Sketch or None, not {type(self.sketch).__name__}"
            )
        algorithm = ALGORITHMS.get(self.algorithm)
        if algorithm is None:
            raise InvalidValueError(
                f"algorithm must be one of {', '.join(ALGORITHMS)}; got {self.algorithm!r}"
            )
        if self.weighting not in algorithm.weightings or (self.top_n is not None and not algorithm.top_n):
            # Both need the feature strings, which version 2 never builds.
            raise InvalidValueError(
                f"weighting={self.weighting!r} and top_n={self.top_n!r} need "
                f"algorithm={ALGORITHM_1!r}; {algorithm.name!r} supports the weightings "
                f"{', '.join(algorithm.weightings)} without top_n"
            )

    # -- fingerprints --

    def fingerprint(self, text: str) -> int:
        """The 64-bit fingerprint of ``text`` (``str``, or UTF-8 ``bytes``).

        Raises :class:`InvalidValueError` for text that is empty or has no
        features; warns :class:`ShortTextWarning` for very short text.
        """
        values, counts, _ = self._pass([as_text(text)], None, sketches=False)
        _warn_if_short(int(counts[0]))
        return int(values[0])

    def fingerprint_and_sketch(self, text: str) -> tuple[int, bytes]:
        """The fingerprint and the packed verification sketch of one text,
        made from the same tokens in the same pass."""
        self._sketch()
        values, counts, rows = self._pass([as_text(text)], None, sketches=True)
        _warn_if_short(int(counts[0]))
        assert rows is not None
        return int(values[0]), rows[0].tobytes()

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

    def _sketch(self) -> Sketch:
        if self.sketch is None:
            raise InvalidValueError("this fingerprinter makes no sketches (sketch=None)")
        return self.sketch

    def _pass(
        self, texts: list[str], start: int | None, *, sketches: bool
    ) -> tuple[Fingerprints, npt.NDArray[np.int64], Rows | None]:
        """Fingerprints of validated ``texts``, each one's number of distinct
        features, and their sketches if ``sketches``: one normalise-and-
        tokenise pass for all three. A text without features raises naming
        its index (``start`` + position; none for ``start=None``)."""
        algorithm = ALGORITHMS[self.algorithm]
        sketch = self._sketch() if sketches else None
        batch = TokenBatch.of_texts(texts, hmm=self.hmm, strings=algorithm.strings)
        try:
            values, counts = algorithm.fingerprints(batch, self.ngrams, self.weighting, self.top_n, self.seed)
            rows = None if sketch is None else sketches_of_batch(batch, self.seed, sketch)
        except NoTokensError as missing:
            raise refusal(texts, missing, start) from None
        return values, counts, rows

    def _fingerprint_chunk(
        self, texts: list[str], start: int, *, sketches: bool = False
    ) -> tuple[Fingerprints, int, Rows | None]:
        """Fingerprints of validated ``texts``, how many were short, and
        their sketches if ``sketches``; runs in worker processes too, so an
        error names the index in the batch (``start`` is the index of
        ``texts[0]``)."""
        values, counts, rows = self._pass(texts, start, sketches=sketches)
        return values, int(np.count_nonzero(counts < SHORT_TEXT_FEATURES)), rows

    def _many(
        self, texts: Iterable[str], processes: int | None, *, sketches: bool, workers: Workers | None = None
    ) -> tuple[Fingerprints, Rows | None]:
        if processes is not None:
            check_int("processes", processes, 1, None)

        def local(texts: list[str], start: int) -> tuple[Fingerprints, int, Any]:
            return self._fingerprint_chunk(texts, start, sketches=sketches)

        results = fingerprint_in_processes(
            self.settings(), chunks(texts), local, processes, sketches=sketches, workers=workers
        )
        values: list[Fingerprints] = []
        rows: list[Rows] = []
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

    # -- settings --

    def settings(self) -> dict[str, Any]:
        """Every setting that shapes fingerprints, as a msgpack-able dict
        (including the pipeline's name and the feature hash and its seed)."""
        return {
            "algorithm": self.algorithm,
            "hash": ALGORITHMS[self.algorithm].feature_hash,
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
        if settings["hash"] != ALGORITHMS[algorithm].feature_hash:
            raise InvalidValueError(
                f"fingerprint settings name hash {settings['hash']!r}; "
                f"{algorithm} uses only {ALGORITHMS[algorithm].feature_hash!r}"
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
        check_int("each of ngrams", n, 1, _MAX_NGRAM)
    if list(ngrams) != sorted(set(ngrams)):
        raise InvalidValueError(f"ngrams must be strictly increasing; got {ngrams}")


def _warn_if_short(count: int) -> None:
    """Warn :class:`ShortTextWarning` if one text has few distinct features."""
    if count < SHORT_TEXT_FEATURES:
        warn_caller(_short_message(count), ShortTextWarning)


def _short_message(count: int) -> str:
    """The :class:`ShortTextWarning` message for one text."""
    return (
        f"text has only {count} distinct feature(s) (fewer than {SHORT_TEXT_FEATURES}); "
        "its fingerprint is coarse and a one-word edit moves many bits"
    )


def fingerprint(text: str, **settings: Any) -> int:
    """One-call helper: ``Fingerprinter(**settings).fingerprint(text)``."""
    return Fingerprinter(**settings).fingerprint(text)
