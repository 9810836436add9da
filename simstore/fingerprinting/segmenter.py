"""Which segmenter cuts Han runs into words, and what shapes its words.

Chinese words are jieba's (0.42.1's bundled dictionary, a private
``jieba.Tokenizer``, so ``jieba.load_userdict`` elsewhere in the program
cannot change fingerprints). ``SIMSTORE_SEGMENTER=rjieba`` (with the
``fast-chinese`` extra, rjieba: jieba-rs, at a release checked against
jieba 0.42.1's dictionary) cuts with rjieba instead: about 14 times faster
(the benchmark corpora's Han runs, HMM on: 15.4 against 1.1 s of CPU), with
no dictionary to load at start-up (jieba's takes about 2 s in a fresh
process).

rjieba gives jieba's words on every Han run of the benchmark corpora
(19,591 documents, 2.8M characters) and on random strings of ideographs and
of dictionary words, but not always where jieba's HMM has a tie to break:
runs that repeat a character or a short unit (``子子子子子``, ``常大常大常大``)
were cut differently in about 1 % of such strings. Those blocks are handed
to jieba (:data:`_PERIODIC`), and rjieba gets only the blocks jieba itself
segments. What it gives is still another program's reading of the same
model, so a store records it (:func:`segmenter_info`): opened by a process
cutting with jieba, it warns that fingerprints may differ
(:class:`~simstore.results.SegmenterChangedWarning`), as for a new jieba.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simstore.errors import InvalidValueError

__all__ = [
    "JIEBA_DICT_SHA256",
    "RJIEBA_CHECKED",
    "SEGMENTERS",
    "cut_function",
    "jieba_idf",
    "segmenter_in_use",
    "segmenter_info",
]

#: rjieba releases checked against jieba 0.42.1 (with :data:`JIEBA_DICT_SHA256`).
RJIEBA_CHECKED = frozenset({"0.2.2"})
#: SHA-256 of jieba 0.42.1's bundled ``dict.txt``: the dictionary rjieba's
#: words were checked against (rjieba carries its own copy).
JIEBA_DICT_SHA256 = "7197c3211ddd98962b036cdf40324d1ea2bfaa12bd028e68faa70111a88e12a8"
#: What ``SIMSTORE_SEGMENTER`` may say: ``jieba`` (the default) or ``rjieba``.
SEGMENTERS = ("jieba", "rjieba")

Cut = Callable[[str, bool], list[str]]


@functools.cache
def cut_function() -> Cut:
    """``cut(text, hmm)``: the words of ``text`` (Han runs joined by spaces)."""
    if segmenter_in_use().startswith("rjieba"):
        return _rjieba_cut
    return _jieba_cut


def _jieba_cut(text: str, hmm: bool) -> list[str]:
    return _jieba_tokenizer().lcut(text, HMM=hmm)  # type: ignore[no-any-return]


@functools.cache
def segmenter_in_use() -> str:
    """The segmenter that cuts Han runs in this process, with its version:
    ``"jieba 0.42.1"``, or ``"rjieba 0.2.2"`` where ``SIMSTORE_SEGMENTER``
    asks for it. An rjieba that is missing, of an unchecked release, or
    beside another jieba dictionary raises :class:`InvalidValueError`."""
    asked = os.environ.get("SIMSTORE_SEGMENTER", "jieba")
    if asked not in SEGMENTERS:
        raise InvalidValueError(f"SIMSTORE_SEGMENTER must be one of {', '.join(SEGMENTERS)}; got {asked!r}")
    if asked == "jieba":
        return f"jieba {importlib.metadata.version('jieba')}"
    if importlib.util.find_spec("rjieba") is None:
        raise InvalidValueError(
            "SIMSTORE_SEGMENTER=rjieba, but rjieba is not installed: pip install 'simstore[fast-chinese]'"
        )
    version = importlib.metadata.version("rjieba")
    if version not in RJIEBA_CHECKED:
        raise InvalidValueError(
            f"SIMSTORE_SEGMENTER=rjieba, but rjieba {version} was not checked against jieba's "
            f"words (checked: {', '.join(sorted(RJIEBA_CHECKED))})"
        )
    if _jieba_info()["jieba_dict_sha256"] != JIEBA_DICT_SHA256:
        raise InvalidValueError(
            "SIMSTORE_SEGMENTER=rjieba, but the installed jieba's dictionary is not jieba 0.42.1's, "
            "which rjieba's words were checked against"
        )
    return f"rjieba {version}"


# The blocks jieba 0.42.1 segments (its ``re_han_default``, of which only
# these ideographs can be in a Han run); every other character is a word of
# its own (white space included). rjieba's blocks also take the ideographs
# of the extensions and the compatibility block, and cut them otherwise.
_JIEBA_BLOCK = re.compile("([\u4e00-\u9fd5]+)")
_OUTSIDE_BLOCKS = re.compile("[^\u4e00-\u9fd5 ]")
# A unit of one to four characters three or more times in a row: where
# jieba's HMM meets ties, which rjieba breaks otherwise.
_PERIODIC = re.compile(r"(.{1,4})\1\1")


def _rjieba_cut(text: str, hmm: bool) -> list[str]:
    """jieba's words of ``text`` (Han runs joined by spaces), by rjieba:
    the blocks jieba would segment go to rjieba (those that repeat a short
    unit to jieba itself), and the characters between them are one word
    each, as jieba makes them."""
    import rjieba

    if _OUTSIDE_BLOCKS.search(text) is None and _PERIODIC.search(text) is None:
        # Only jieba's ideographs and the spaces between runs, which both
        # cut alike: one call.
        return rjieba.cut(text, hmm=hmm)
    words: list[str] = []
    for index, piece in enumerate(_JIEBA_BLOCK.split(text)):
        if not index % 2:
            words.extend(piece)
        elif _PERIODIC.search(piece) is None:
            words.extend(rjieba.cut(piece, hmm=hmm))
        else:
            words.extend(_jieba_cut(piece, hmm))
    return words


@functools.cache
def _jieba_tokenizer() -> Any:
    """A private, initialised jieba tokenizer with the bundled dictionary."""
    # Imported here so that importing simstore never loads jieba (its import
    # is quick, but its dictionary takes about a second to load).
    import jieba

    tokenizer = jieba.Tokenizer()
    # jieba logs its start-up ("Building prefix dict ...", "Loading model
    # cost ...") at DEBUG on its own stderr handler. Raised to WARNING for this
    # call only: its errors (an unwritable cache) still show, and the level
    # its other users in the process chose is put back.
    logger = logging.getLogger("jieba")
    level = logger.level
    if level < logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        tokenizer.initialize()
    finally:
        logger.setLevel(level)
    return tokenizer


def _jieba_dir() -> Path:
    """The installed jieba package's directory, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("jieba")
    if spec is None or spec.origin is None:
        raise InvalidValueError("jieba is not installed; it is needed for Chinese text")
    return Path(spec.origin).parent


def segmenter_info() -> dict[str, str]:
    """Versions and checksums of everything besides the settings that shapes a
    fingerprint: jieba's version, SHA-256 of its bundled ``dict.txt`` and of
    ``analyse/idf.txt`` (used by TF-IDF weighting), the Unicode version of
    this Python (NFKC, case folding and word characters follow it), and
    ``segmenter`` where another program than jieba cuts (rjieba).

    jieba is not initialised (nor imported) to compute this.
    """
    segmenter = segmenter_in_use()
    info = dict(_jieba_info())
    if not segmenter.startswith("jieba "):
        info["segmenter"] = segmenter
    return info


@functools.cache
def _jieba_info() -> dict[str, str]:
    folder = _jieba_dir()
    return {
        "jieba": importlib.metadata.version("jieba"),
        "jieba_dict_sha256": _sha256(folder / "dict.txt"),
        "jieba_idf_sha256": _sha256(folder / "analyse" / "idf.txt"),
        "unicode": unicodedata.unidata_version,
    }


def _sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(functools.partial(handle.read, 1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@functools.cache
def jieba_idf() -> tuple[dict[str, float], float]:
    """jieba's bundled IDF table (``analyse/idf.txt``) and its median value,
    which jieba itself gives to words not in the table."""
    table: dict[str, float] = {}
    with open(_jieba_dir() / "analyse" / "idf.txt", encoding="utf-8") as handle:
        for line in handle:
            word, _, value = line.strip().partition(" ")
            if value:
                table[word] = float(value)
    values = sorted(table.values())
    return table, values[len(values) // 2]
