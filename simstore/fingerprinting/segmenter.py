"""Which segmenter cuts Han runs into words, and what shapes its words.

Chinese words are jieba's (0.42.1's bundled dictionary, a private
``jieba.Tokenizer``, so ``jieba.load_userdict`` elsewhere in the program
cannot change fingerprints). Where the optional ``rjieba`` (jieba-rs, the
``fast-chinese`` extra) is installed at a release checked to cut exactly as
jieba does with that same dictionary, it cuts instead: the same words some
20-30 times faster, with no dictionary to load at start-up (jieba's takes
about 2 s in a fresh process). ``SIMSTORE_SEGMENTER=jieba`` keeps jieba
whatever is installed.

The check behind :data:`RJIEBA_SAME_CUT`: every Han run of the benchmark
corpora (19,591 documents, 2.8M characters) and 20,000 random strings of
dictionary words and of random ideographs (which exercise the HMM), with
the HMM on and off (``benchmarks/experiments/ab_segmenters.py``); the tests
check it again on random strings wherever rjieba is installed.
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
    "RJIEBA_SAME_CUT",
    "SEGMENTERS",
    "cut_function",
    "jieba_idf",
    "segmenter_in_use",
    "segmenter_info",
]

#: rjieba releases that cut as jieba 0.42.1 does (with :data:`JIEBA_DICT_SHA256`).
RJIEBA_SAME_CUT = frozenset({"0.2.2"})
#: SHA-256 of jieba 0.42.1's bundled ``dict.txt``: the dictionary rjieba's
#: words were checked against (rjieba carries its own copy).
JIEBA_DICT_SHA256 = "7197c3211ddd98962b036cdf40324d1ea2bfaa12bd028e68faa70111a88e12a8"
#: What ``SIMSTORE_SEGMENTER`` may say: ``auto`` (rjieba where it cuts as
#: jieba does, the default) or ``jieba``.
SEGMENTERS = ("auto", "jieba")

Cut = Callable[[str, bool], list[str]]


@functools.cache
def cut_function() -> Cut:
    """``cut(text, hmm)``: the words of ``text`` as jieba's ``lcut`` gives them."""
    if segmenter_in_use().startswith("rjieba"):
        return _rjieba_cut
    tokenizer = _jieba_tokenizer()
    return lambda text, hmm: tokenizer.lcut(text, HMM=hmm)


# The blocks jieba 0.42.1 segments (its ``re_han_default``, of which only
# these ideographs can be in a Han run); every other character is a word of
# its own (white space included). rjieba's blocks also take the ideographs
# of the extensions and the compatibility block, and cut them otherwise.
_JIEBA_BLOCK = re.compile("([\u4e00-\u9fd5]+)")
_OUTSIDE_BLOCKS = re.compile("[^\u4e00-\u9fd5 ]")


def _rjieba_cut(text: str, hmm: bool) -> list[str]:
    """jieba's words of ``text`` (Han runs joined by spaces), by rjieba:
    the blocks jieba would segment go to rjieba, one at a time, the
    characters between them are one word each, as jieba makes them."""
    import rjieba

    if _OUTSIDE_BLOCKS.search(text) is None:
        # Only jieba's ideographs and the spaces between runs, which both
        # cut alike (checked): one call.
        return rjieba.cut(text, hmm=hmm)
    words: list[str] = []
    for index, piece in enumerate(_JIEBA_BLOCK.split(text)):
        if index % 2:
            words.extend(rjieba.cut(piece, hmm=hmm))
        else:
            words.extend(piece)
    return words


@functools.cache
def segmenter_in_use() -> str:
    """The segmenter that cuts Han runs in this process, with its version:
    ``"rjieba 0.2.2"`` or ``"jieba 0.42.1"``."""
    asked = os.environ.get("SIMSTORE_SEGMENTER", "auto")
    if asked not in SEGMENTERS:
        raise InvalidValueError(f"SIMSTORE_SEGMENTER must be one of {', '.join(SEGMENTERS)}; got {asked!r}")
    jieba = f"jieba {importlib.metadata.version('jieba')}"
    if asked == "jieba" or importlib.util.find_spec("rjieba") is None:
        return jieba
    version = importlib.metadata.version("rjieba")
    if version not in RJIEBA_SAME_CUT or segmenter_info()["jieba_dict_sha256"] != JIEBA_DICT_SHA256:
        return jieba
    return f"rjieba {version}"


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


@functools.cache
def segmenter_info() -> dict[str, str]:
    """Versions and checksums of everything besides the settings that shapes a
    fingerprint: jieba's version, SHA-256 of its bundled ``dict.txt`` and of
    ``analyse/idf.txt`` (used by TF-IDF weighting), and the Unicode version of
    this Python (NFKC, case folding and word characters follow it).

    jieba is not initialised (nor imported) to compute this.
    """
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
