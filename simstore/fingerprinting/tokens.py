"""One normalise-and-tokenise pass over a batch of texts: :class:`TokenBatch`.

Every fingerprint algorithm and the verification sketch start from the same
tokens (:mod:`simstore.fingerprinting.text` says how text becomes tokens), so a
batch is cut into tokens once, and each consumer takes what it needs from the
one :class:`TokenBatch`:

- each text as **bytes whose word runs are exactly its tokens** (``parts``):
  ASCII text lower-cased (the rest of its normalisation is done on the bytes:
  NFKC leaves ASCII as it is, ``casefold`` is ``lower``, and the controls are
  dropped when the tokens are found), other text as
  :func:`simstore.fingerprinting.text.token_text` gives it (folded, and either
  its few non-word characters replaced or its tokens joined by spaces);
- every token's **version-2 hash**, text after text, and each text's token
  count (:meth:`TokenBatch.token_hashes`, per seed, computed once): what
  version 2's features and every sketch's shingles are folded from;
- each text's tokens as **strings** (``strings``), only for an algorithm that
  hashes feature strings (version 1).

Token hashes of a small batch are computed in Python (with the tokens seen
before remembered), of a large one with numpy over the batch's bytes
:data:`SEGMENT_BYTES` at a time; both give the hashes of
:func:`simstore.fingerprinting.hashing.token_hash`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidValueError
from simstore.fingerprinting.hashing import (
    LENGTH_MULT,
    MASK,
    POLY,
    POLY_INVERSE,
    U64,
    mix64_array,
    power_table,
)
from simstore.fingerprinting.hashing import salt as seed_salt
from simstore.fingerprinting.hashing import token_hash as python_token_hash
from simstore.fingerprinting.text import normalise, token_text, tokenise

__all__ = [
    "PIECE_CHARS",
    "PIECE_ENDS",
    "SEGMENT_BYTES",
    "SMALL_BATCH_BYTES",
    "NoTokensError",
    "TokenBatch",
    "no_features_message",
    "refusal",
]

Hashes = npt.NDArray[np.uint64]
Counts = npt.NDArray[np.int64]


class NoTokensError(Exception):
    """Text ``index`` of a batch has no tokens (so no features)."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


def refusal(texts: Sequence[str], missing: NoTokensError, start: int | None) -> InvalidValueError:
    """The error for text ``missing.index`` of ``texts``, naming its index
    (``start`` + position) in the caller's batch; ``start=None`` for a
    single text, whose error names none."""
    message = no_features_message(texts[missing.index])
    if start is None:
        return InvalidValueError(message)
    return InvalidValueError(f"text at index {start + missing.index}: {message}")


def no_features_message(text: str) -> str:
    """Why ``text`` has no features (the message of :class:`InvalidValueError`)."""
    if not normalise(text):
        return "text is empty (or only white space and control characters)"
    return (
        "text has no features: it holds no words, Chinese characters or emoji (only punctuation or symbols)"
    )


class TokenBatch:
    """The tokens of a batch of validated texts, from one normalise-and-
    tokenise pass (see the module docstring for what it holds)."""

    def __init__(self, parts: list[bytes] | None, strings: list[list[str]] | None = None) -> None:
        if parts is None and strings is None:
            raise InvalidValueError("a TokenBatch needs parts or strings")
        self._parts = parts
        #: Each text's tokens as strings, if the batch was made with ``strings=True``.
        self.strings = strings
        self._hashed: dict[int, tuple[Hashes, Counts]] = {}

    @property
    def parts(self) -> list[bytes]:
        """Each text as bytes whose word runs are its tokens (made from
        ``strings`` when first asked for: version 1 without sketches never asks)."""
        if self._parts is None:
            assert self.strings is not None
            self._parts = [" ".join(tokens).encode("utf-8") for tokens in self.strings]
        return self._parts

    @classmethod
    def of_texts(cls, texts: Sequence[str], *, hmm: bool, strings: bool = False) -> TokenBatch:
        """Normalise and tokenise ``texts`` (``hmm``: jieba's HMM for Han
        words missing from its dictionary); ``strings`` keeps each text's
        tokens as strings too."""
        if not strings:
            return cls([_text_bytes(text, hmm) for text in texts])
        token_lists = [
            [token for piece in _pieces(text) for token in tokenise(normalise(piece), hmm=hmm)]
            for text in texts
        ]
        return cls(None, token_lists)

    @classmethod
    def of_tokens(cls, token_lists: Sequence[Sequence[str]]) -> TokenBatch:
        """A batch of texts already cut into tokens (for benchmarks that
        compare settings without segmenting again)."""
        return cls(None, [list(tokens) for tokens in token_lists])

    def __len__(self) -> int:
        return len(self.strings) if self.strings is not None else len(self.parts)

    def token_hashes(self, seed: int) -> tuple[Hashes, Counts]:
        """Every token's version-2 hash (with ``seed``), text after text, and
        how many tokens each text has. Raises :class:`NoTokensError` for
        the first text that has none."""
        hashed = self._hashed.get(seed)
        if hashed is None:
            if sum(map(len, self.parts)) <= SMALL_BATCH_BYTES:
                hashed = _python_token_hashes(self.parts, seed)
            else:
                hashed = _numpy_token_hashes(self.parts, seed)
            self._hashed[seed] = hashed
        empty = np.flatnonzero(hashed[1] == 0)
        if len(empty):
            raise NoTokensError(int(empty[0]))
        return hashed


# -- texts to parts -----------------------------------------------------------


def _text_bytes(text: str, hmm: bool) -> bytes:
    """One text as bytes whose word runs are its tokens; a long non-ASCII one
    normalised and tokenised a piece at a time (see :func:`_pieces`)."""
    if text.isascii():
        # NFKC leaves ASCII as it is and casefold is lower().
        return text.lower().encode("ascii")
    if len(text) <= PIECE_CHARS:
        return token_text(text, hmm=hmm).encode("utf-8")
    return b" ".join(token_text(piece, hmm=hmm).encode("utf-8") for piece in _pieces(text))


#: Characters of a long non-ASCII text normalised and tokenised at a time:
#: its tokens as Python strings took some 10 bytes a byte of text.
PIECE_CHARS = 1 << 20
# Where a piece may end: after white space or Chinese punctuation. None of
# them composes with what follows under NFKC (nor after case folding), nor
# is part of a token, so the tokens of two pieces are those of the whole
# (tests/test_simhash2.py checks the first over every code point).
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


# -- token hashes in Python (small batches) -----------------------------------

#: Batches of at most this many bytes of tokens are hashed in Python: a
#: numpy pass costs some 25 calls whatever the size, more than hashing a
#: short text's few tokens one by one (most of them remembered).
SMALL_BATCH_BYTES = 2048

# ASCII controls that normalisation removes (white-space ones become a space,
# which separates tokens anyway): removing them joins the words around them.
_DROP_BYTES = bytes(code for code in range(128) if (code < 0x20 or code == 0x7F) and not chr(code).isspace())
# Token bytes: ASCII word characters, and every byte of a non-ASCII
# character (non-ASCII text is in parts as its tokens joined by spaces).
_WORD_RUN = re.compile(rb"[0-9A-Za-z_\x80-\xff]+")

# How many distinct tokens the Python path remembers per seed (about 150
# bytes each); cleared when full, like text._segment_cache.
_TOKEN_CACHE_SIZE = 100_000


@functools.lru_cache(maxsize=4)  # a few seeds: a process rarely uses more than one
def _token_cache(seed: int) -> dict[bytes, int]:
    return {}


def _python_token_hashes(parts: list[bytes], seed: int) -> tuple[Hashes, Counts]:
    cache = _token_cache(seed)
    hashes: list[int] = []
    counts: list[int] = []
    for part in parts:
        tokens = _WORD_RUN.findall(part.translate(None, _DROP_BYTES))
        counts.append(len(tokens))
        for token in tokens:
            value = cache.get(token)
            if value is None:
                if len(cache) >= _TOKEN_CACHE_SIZE:
                    cache.clear()
                value = cache[token] = python_token_hash(token, seed)
            hashes.append(value)
    return np.array(hashes, dtype=np.uint64), np.array(counts, dtype=np.int64)


# -- token hashes with numpy (large batches) ----------------------------------


def _byte_table(predicate: Callable[[int], bool]) -> npt.NDArray[np.bool_]:
    return np.array([predicate(code) for code in range(256)], dtype=np.bool_)


_DROP = _byte_table(lambda code: bytes([code]) in _DROP_BYTES)
_WORD = _byte_table(lambda code: code >= 0x80 or chr(code).isalnum() or code == 0x5F)

#: Bytes of a batch hashed at a time: its per-byte arrays (some 30 bytes a
#: byte) stay a few tens of MB however long a text is (a 29 MB document
#: took 950 MB when hashed whole).
SEGMENT_BYTES = 1 << 18


def _numpy_token_hashes(parts: list[bytes], seed: int) -> tuple[Hashes, Counts]:
    """Every token's hash, text after text, and each text's token count."""
    count = len(parts)
    if not count:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
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
    return _segment_hashes(data, text_starts, seed)


def _segment_hashes(
    data: npt.NDArray[np.uint8], text_starts: npt.NDArray[np.int64], seed: int
) -> tuple[Hashes, Counts]:
    """Hashes of the word runs of ``data`` (the tokens), and how many tokens
    each text (starting at ``text_starts``) has.

    ``data`` is hashed :data:`SEGMENT_BYTES` at a time. A token cut by a
    segment's end is joined to its rest in the next segment: its polynomial
    so far, times ``P`` to the rest's length, plus the rest's polynomial."""
    pieces: list[Hashes] = []
    tokens_per_text = np.zeros(len(text_starts), dtype=np.int64)
    # The token that reached the end of the last segment: start, length, polynomial.
    carried: tuple[int, int, int] | None = None
    salt = U64(seed_salt(seed))
    for low in range(0, len(data), SEGMENT_BYTES):
        high = min(low + SEGMENT_BYTES, len(data))
        starts, lengths, polynomials = _run_polynomials(data[low:high])
        starts += low
        if carried is not None:
            carried_start, carried_length, carried_polynomial = carried
            if len(starts) and starts[0] == low:  # the carried token goes on
                rest = int(lengths[0])
                joined = carried_polynomial * int(power_table(POLY, rest + 1)[rest]) + int(polynomials[0])
                starts[0], lengths[0], polynomials[0] = carried_start, carried_length + rest, joined & MASK
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
        polynomials += lengths.astype(np.uint64) * U64(LENGTH_MULT) + salt
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
    # The token bytes back to back. With Q the inverse of P modulo 2**64, the
    # byte at place g (counted over all of them) of a token starting at
    # place o, of length L, weighs P**(L-1-(g-o)) = Q**g * P**(o+L-1): one
    # prefix sum of b * Q**g (a straight product with a table, no gather)
    # gives every token's sum as a difference of two, and one product a
    # token its polynomial.
    token_bytes = data[word.view(np.bool_)].astype(np.uint64)
    del word
    count = len(token_bytes)
    token_lengths = ends - starts
    token_ends = np.cumsum(token_lengths)
    offsets = token_ends - token_lengths
    # Tables as long as a segment, whatever this one's length: the same two
    # every call, which the cache keeps (tables sized to each call were
    # made afresh for texts of other lengths, a cumprod of up to 2**18).
    table_length = max(count, SEGMENT_BYTES)
    token_bytes *= power_table(POLY_INVERSE, table_length)[:count]
    sums = np.zeros(count + 1, dtype=np.uint64)
    np.cumsum(token_bytes, out=sums[1:])
    del token_bytes
    polynomial = sums[token_ends] - sums[offsets]
    polynomial *= power_table(POLY, table_length).take(token_ends - 1)
    return starts, token_lengths, polynomial
