"""Text preparation for fingerprinting: normalise, then tokenise.

Both steps are pure functions of their input (and of the Unicode database of
the running Python, and of the jieba dictionary for Chinese; see
:func:`simstore.fingerprinting.segmenter.segmenter_info`, which the store
records so that a change is noticed).

``normalise(text)``
    1. Unicode NFKC (this also maps full-width ASCII, U+FF01..U+FF5E, to
       half-width ASCII and the ideographic space U+3000 to a plain space),
    2. case-fold (``str.casefold``: ``Straße`` -> ``strasse``), then NFKC again
       because case folding can undo normalisation,
    3. control characters: white-space controls (tab, newline, ...) become a
       space; every other character of category Cc or Cf (NUL, zero-width
       space, zero-width joiner, soft hyphen, byte-order mark, ...) is removed,
    4. runs of white space collapse to one space, with none at either end.

``tokenise(normalised_text)``
    The text is cut into runs of three kinds, in document order:

    - a run of Han ideographs (CJK Unified Ideographs and extensions, and
      U+3007 ideographic zero) is segmented by jieba (its bundled dictionary, HMM on by default)
      with a private ``jieba.Tokenizer``, so ``jieba.load_userdict`` elsewhere
      in the program cannot change fingerprints (or by rjieba, which cuts the
      same words faster: :mod:`simstore.fingerprinting.segmenter`);
    - a run of other word characters (letters and digits of any script, the
      underscore, and combining marks, so that ``हिन्दी`` stays one word) is
      one token; scripts written without spaces other than Chinese (Thai,
      Japanese kana, ...) therefore give one token per unbroken run;
    - a single character of category So (emoji, ``©``, ...) is a token of its
      own, so that emoji-only text still has features;

    and everything else (punctuation, other symbols, white space) separates
    tokens and is dropped.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.segmenter import cut_function

__all__ = [
    "as_text",
    "fold",
    "normalise",
    "segment_han",
    "token_text",
    "tokenise",
]

# Han ideographs: CJK Unified Ideographs, extension A, the compatibility block
# (NFKC maps most of it into the unified block anyway), extensions B..H in
# planes 2 and 3, and the ideographic number zero.
_HAN = "\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\U00030000-\U000323af"

# Separator placed between Han runs so one jieba call segments them all:
# jieba cuts its input at white space and segments each block on its own, so
# the result is the same as one call per run, only faster.
_RUN_SEPARATOR = " "


def as_text(text: object) -> str:
    """Return ``text`` as a ``str``, validated for fingerprinting.

    ``str`` is taken as it is; ``bytes``/``bytearray``/``memoryview`` must be
    UTF-8 and are decoded. Anything else raises :class:`InvalidTypeError`;
    invalid UTF-8 and lone surrogates raise :class:`InvalidValueError`.
    """
    if isinstance(text, str):
        result = text
    elif isinstance(text, (bytes, bytearray, memoryview)):
        try:
            result = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidValueError(f"text bytes are not valid UTF-8: {exc}") from None
    else:
        raise InvalidTypeError(f"text must be str (or UTF-8 bytes), not {type(text).__name__}")
    _reject_surrogates(result)
    return result


def _reject_surrogates(text: str) -> None:
    """Raise if ``text`` holds a lone surrogate (it has no UTF-8 encoding)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValueError(
            f"text contains a lone surrogate at index {exc.start} (not a valid Unicode string)"
        ) from None


@functools.cache
def _control_table() -> dict[int, str | None]:
    """The ``str.translate`` table of step 3 of :func:`normalise`."""
    # Built from the Unicode database rather than written out, so it follows
    # the running Python's Unicode version like NFKC and casefold do. Cc and
    # Cf characters live below U+30000 and in the tags block of plane 14.
    table: dict[int, str | None] = {}
    for code in (*range(0x30000), *range(0xE0000, 0xE1000)):
        char = chr(code)
        if unicodedata.category(char) in ("Cc", "Cf"):
            table[code] = " " if char.isspace() else None
    return table


def _controls_stripped(text: str) -> str:
    """Steps 3 and 4 of :func:`normalise`: controls that are white space
    become a space and the others are removed, then white space collapses.

    ``str.split`` breaks at exactly the characters ``str.isspace`` names, so
    collapsing first turns every white-space control into a space; what is
    left to remove then shows as a character ``str.isprintable`` refuses,
    which most texts hold none of (a scan in C, no regex)."""
    collapsed = " ".join(text.split())
    if collapsed.isprintable():
        return collapsed
    # A regex scan of the (rare) controls with a constant replacement: a
    # str.translate of every character took ten times as long on Chinese
    # text (issue 21).
    return " ".join(_removed_controls().sub("", collapsed).split())


@functools.cache
def _removed_controls() -> re.Pattern[str]:
    """Runs of the characters :func:`_control_table` removes."""
    removed = [code for code, replacement in _control_table().items() if replacement is None]
    return re.compile(f"[{_char_class(sorted(removed))}]+")


def normalise(text: str) -> str:
    """Return ``text`` normalised (NFKC, case-folded, controls removed, white
    space collapsed); see the module docstring for the exact steps."""
    return _controls_stripped(fold(text))


def fold(text: str) -> str:
    """Steps 1 and 2 of :func:`normalise`: NFKC, case-folded, NFKC again."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def token_text(text: str, *, hmm: bool = True) -> str:
    """``text`` (not normalised) as a string whose *word runs* are exactly
    ``tokenise(normalise(text), hmm=hmm)``, in order.

    A word run is a maximal run of characters that are ASCII letters, digits
    or ``_``, or not ASCII at all: the runs a bytes pattern
    ``[0-9A-Za-z_\\x80-\\xff]+`` finds in the UTF-8 encoding, which is how
    :mod:`simstore.fingerprinting.tokens` reads them. Text without combining
    marks is not cut into tokens but for its Han runs (see
    :func:`_word_runs`); other text is tokenised and its tokens joined by
    spaces.
    """
    folded = fold(text)
    runs = _word_runs(folded, hmm)
    if runs is not None:
        return runs
    return " ".join(tokenise(_controls_stripped(folded), hmm=hmm))


#: Most distinct characters :func:`_word_runs` replaces (one scan of the
#: text each); a text with more is tokenised instead.
_MOST_REPLACED = 64
#: ASCII that is never replaced: printable characters and white space.
_PLAIN_ASCII = frozenset(char for char in map(chr, range(128)) if char.isprintable() or char.isspace())


def _word_runs(folded: str, hmm: bool) -> str | None:
    """:func:`token_text` of a text after :func:`fold`, when it has no
    combining marks; ``None`` when it has (the token pattern must cut it),
    or too many kinds of character to replace.

    Without marks, the token pattern's words are runs of ``\\w`` (and each
    So symbol alone): a text's tokens are already its word runs once each
    distinct character that is neither ASCII nor a word character is
    replaced, in one ``str.replace`` (a scan in C) each: by nothing where
    :func:`normalise` removes it (controls), by a space where it separates
    tokens, by itself between spaces where it is a token alone (So
    symbols). Han runs, which the segmenter cuts, are then replaced by
    their words, spaced apart from what touches them. Typical text holds a
    handful of such characters (curly quotes, dashes, a soft hyphen,
    full-width punctuation): replacing them took a fifth of the time of
    finding every token with the regex and joining them (English text).
    """
    # Other text and Han runs alternate: the runs are the odd parts, and
    # only the other text's characters are looked at (Chinese has hundreds).
    # Text with no Han near its start is not searched for runs (the regex
    # scan of a long text cost as much as the rest): a Han character found
    # among the others later is a "mark" to _replacement, and the token
    # pattern cuts the text instead, right, only slower.
    parts = [folded] if _HAN_CHAR.search(folded, 0, _HAN_LOOK) is None else _HAN_RUN.split(folded)
    replaced: list[tuple[str, str]] = []
    for char in frozenset("".join(parts[0::2])).difference(_PLAIN_ASCII):
        replacement = _replacement(char)
        if replacement is None:
            return None
        if replacement != char:
            replaced.append((char, replacement))
    if len(replaced) > _MOST_REPLACED:
        return None
    if replaced:
        for char, replacement in replaced:
            folded = folded.replace(char, replacement)
        # (A control removed between two Han runs joins them.)
        parts = _HAN_RUN.split(folded) if len(parts) > 1 else [folded]
    if len(parts) == 1:
        return parts[0]
    parts[1::2] = segmented_runs(parts[1::2], hmm=hmm)
    return " ".join(parts)


@functools.lru_cache(maxsize=1 << 16)
def _replacement(char: str) -> str | None:
    """What :func:`_word_runs` puts for ``char`` (a control, or a character
    past ASCII outside the Han runs): ``None`` for a combining mark (or Han),
    whose text the token pattern must cut."""
    control = _control_table().get(ord(char), char)
    if control != char:
        return "" if control is None else " "
    kind = _char_kind(char)
    if kind == _SPECIAL:
        return None
    if kind == _SYMBOL:
        return f" {char} "
    return char if _WORD.match(char) else " "


def _char_class(codes: list[int]) -> str:
    """A regular-expression character class body matching ``codes`` (sorted),
    written as ranges so that the class stays short."""
    parts: list[str] = []
    start = previous = codes[0]
    for code in [*codes[1:], -1]:
        if code != previous + 1:
            first, last = re.escape(chr(start)), re.escape(chr(previous))
            parts.append(first if start == previous else f"{first}-{last}")
            start = code
        previous = code
    return "".join(parts)


@functools.cache
def _token_pattern() -> re.Pattern[str]:
    """The regular expression whose matches are, in order, Han runs, words
    and So symbols."""
    # Python's \w leaves out combining marks (categories Mn, Mc, Me), which
    # would split Devanagari, Thai or Arabic words with vowel signs, so marks
    # may continue a word. Built from the running Python's Unicode database.
    marks: list[int] = []
    symbols: list[int] = []
    for code in (*range(0x30000), *range(0xE0000, 0xE1000)):
        category = unicodedata.category(chr(code))
        if category[0] == "M":
            marks.append(code)
        elif category == "So":
            symbols.append(code)
    # The classes of marks and symbols are long lists of ranges that the
    # regex engine scans one by one; no ASCII character is in either, so a
    # cheap non-ASCII look-ahead skips them at spaces and punctuation.
    non_ascii = r"(?=[^\x00-\x7f])"
    word = rf"[^\W{_HAN}]+(?:{non_ascii}[{_char_class(marks)}]+[^\W{_HAN}]*)*"
    # Words first: they are the most common match (the classes are disjoint).
    return re.compile(rf"{word}|[{_HAN}]+|{non_ascii}[{_char_class(symbols)}]")


_HAN_CHAR = re.compile(rf"[{_HAN}]")
_HAN_RUN = re.compile(rf"([{_HAN}]+)")
_ASCII_WORD = re.compile(r"\w+", re.ASCII)
_WORD = re.compile(r"\w+")


def tokenise(text: str, *, hmm: bool = True) -> list[str]:
    """Cut normalised ``text`` into tokens in document order.

    Han runs go through jieba (``hmm`` chooses jieba's HMM for words not in
    its dictionary), other words are whole tokens, and each So-category
    symbol (emoji) is a token; punctuation and white space are dropped.
    """
    if text.isascii():
        # Same cut (no Han, marks or So symbols in ASCII), by a simpler regex.
        return _ASCII_WORD.findall(text)
    if _HAN_CHAR.search(text, 0, _HAN_LOOK) is None:
        # Text without Han or marks (most non-ASCII text outside Asia: curly
        # quotes, dashes, accents, box drawing) is cut by a plain word
        # pattern, itself a few times faster than the whole one; its
        # distinct characters say whether it qualifies.
        plain = _plain_pattern(frozenset(text))
        if plain is not None:
            return plain.findall(text)
    return _cut_by_token_pattern(text, hmm)


#: Characters of a text searched for Han before its distinct characters are
#: taken (Chinese text goes to the whole pattern at once).
_HAN_LOOK = 256


def _plain_pattern(chars: frozenset[str]) -> re.Pattern[str] | None:
    """A pattern that cuts a text made of ``chars`` as the token pattern
    does, if none of them is Han or a mark: words (``\\w+``, the token
    pattern's words when there are neither), and each So symbol among
    ``chars`` alone. ``None`` if a character is Han or a mark."""
    symbols = []
    for char in chars:
        if char > "\x7f":
            kind = _char_kind(char)
            if kind == _SPECIAL:
                return None
            if kind == _SYMBOL:
                symbols.append(char)
    if not symbols:
        return _WORD
    return _words_and_symbols(frozenset(symbols))


_PLAIN, _SYMBOL, _SPECIAL = 0, 1, 2


@functools.lru_cache(maxsize=1 << 16)
def _char_kind(char: str) -> int:
    """Whether a character is Han or a mark (which the token pattern treats
    apart from words), a So symbol (a token alone), or neither."""
    category = unicodedata.category(char)
    if category[0] == "M" or _HAN_CHAR.match(char):
        return _SPECIAL
    return _SYMBOL if category == "So" else _PLAIN


@functools.lru_cache(maxsize=1024)
def _words_and_symbols(symbols: frozenset[str]) -> re.Pattern[str]:
    """Words, or one of ``symbols`` (So characters: never word characters)."""
    return re.compile(rf"\w+|[{_char_class(sorted(map(ord, symbols)))}]")


def _cut_by_token_pattern(text: str, hmm: bool) -> list[str]:
    """:func:`tokenise` of non-ASCII text by the whole token pattern, Han
    runs segmented."""
    # findall does the whole cut in C; only text with Han needs a second look.
    pieces: list[str] = _token_pattern().findall(text)
    if not _HAN_CHAR.search(text):
        return pieces
    is_han = [_HAN_CHAR.match(piece) is not None for piece in pieces]
    segmented = iter(segment_han([p for p, han in zip(pieces, is_han, strict=True) if han], hmm=hmm))
    tokens: list[str] = []
    for piece, han in zip(pieces, is_han, strict=True):
        if han:
            tokens.extend(next(segmented))
        else:
            tokens.append(piece)
    return tokens


def segment_han(runs: list[str], *, hmm: bool = True) -> list[list[str]]:
    """Segment each run of Han characters as jieba does (see
    :mod:`simstore.fingerprinting.segmenter`); one word list per run."""
    return [words.split(" ") for words in segmented_runs(runs, hmm=hmm)]


def segmented_runs(runs: list[str], *, hmm: bool = True) -> list[str]:
    """:func:`segment_han` of each run, its words joined by single spaces
    (a Han word holds no space): what :func:`token_text` puts in its place."""
    # jieba segments each run on its own (see _RUN_SEPARATOR), so a run's
    # words never depend on its neighbours and can be remembered: runs
    # repeat across documents (15 % of the Han characters of the benchmark
    # corpora, far more among near-duplicates). They are remembered joined,
    # as the caller wants them, and cut and split by C-level calls: the
    # Python loop over every word and the joins took more time than rjieba.
    cache = _segment_cache(hmm)
    found = list(map(cache.get, runs))
    if None not in found:
        return found  # type: ignore[return-value]
    missing = list(dict.fromkeys(run for run, words in zip(runs, found, strict=True) if words is None))
    # Runs joined by one separator: " ".join of the words puts three spaces
    # where a run ends (word, separator, word), and single ones inside a run.
    cut = " ".join(cut_function()(_RUN_SEPARATOR.join(missing), hmm))
    new = dict(zip(missing, cut.split(" " + _RUN_SEPARATOR + " "), strict=True))
    if len(cache) + len(new) > _SEGMENT_CACHE_RUNS:
        cache.clear()  # bounded memory; a rare refill costs less than an LRU's bookkeeping
    cache.update(new)
    return [new[run] if words is None else words for run, words in zip(runs, found, strict=True)]


# How many distinct runs segmented_runs remembers (per HMM setting); a run
# takes about 200 bytes with its words.
_SEGMENT_CACHE_RUNS = 100_000


@functools.cache
def _segment_cache(hmm: bool) -> dict[str, str]:
    return {}
