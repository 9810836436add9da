"""One normalise-and-tokenise pass (simstore.fingerprinting.tokens): each text is
cut into tokens once whatever is made from it, and the small-batch shortcuts
(token hashes in Python, one text's vote, a few features' vote) equal the
general numpy paths."""

# The texts hold Chinese punctuation on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore import Fingerprinter, ShortTextWarning
from simstore.fingerprinting import text, tokens, vote
from simstore.fingerprinting.algorithms import ALGORITHM_1, ALGORITHM_2, ALGORITHMS
from simstore.fingerprinting.features import ngram_features, owners
from simstore.fingerprinting.hashing import token_hash
from simstore.fingerprinting.tokens import NoTokensError, TokenBatch

_PIECES = [
    *"abcXYZ019_ ,.!\t\n",
    "\x01",
    "\x7f",
    "中文",
    "北京",
    "。",
    "é",
    "ß",
    "😀",
    "हिन्दी",
    "\u200b",
    "x" * 40,
]
_TEXT = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=30).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(_TEXT, max_size=8), st.sampled_from([0, 1, 2**64 - 1]))
def test_token_hashes_in_python_equal_numpy(texts: list[str], seed: int) -> None:
    batch = TokenBatch.of_texts(texts, hmm=True)

    def hashed(small_batch_bytes: int) -> tuple[list[int], list[int]] | int:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tokens, "SMALL_BATCH_BYTES", small_batch_bytes)
            try:
                values, counts = TokenBatch(batch.parts).token_hashes(seed)
            except NoTokensError as missing:
                return missing.index
        return values.tolist(), counts.tolist()

    python, numpy_path = hashed(1 << 30), hashed(0)
    assert python == numpy_path
    if not isinstance(python, int):  # each token's hash is the specification's
        words = [token.encode() for one in texts for token in text.tokenise(text.normalise(one))]
        assert python[0] == [token_hash(word, seed) for word in words]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=60), min_size=1, max_size=6),
    st.sampled_from([(1,), (1, 2), (2, 3)]),
    st.sampled_from(["binary", "tf", "log"]),
)
def test_every_vote_strategy_gives_the_same_fingerprints(
    token_lists: list[list[int]], ngrams: tuple[int, ...], weighting: str
) -> None:
    """One text alone (sort and vote), a block of few features (unpacked
    bits) and a block of many (bincount per digit) vote alike, in a batch and
    text by text."""
    # Small token values repeat, so that counts (and weights) vary.
    hashes = np.array([token_hash(bytes([value])) for one in token_lists for value in one], dtype=np.uint64)
    per_text = np.array([len(one) for one in token_lists], dtype=np.int64)

    def voted(small_block: int) -> list[tuple[int, int]]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(vote, "SMALL_BLOCK_FEATURES", small_block)
            values, counts = vote.vote_batch(*ngram_features(hashes, per_text, ngrams), weighting)
        return list(zip(values.tolist(), counts.tolist(), strict=True))

    alone = []
    for index in range(len(token_lists)):
        low = int(per_text[:index].sum())
        one = hashes[low : low + per_text[index]]
        values, counts = vote.vote_batch(*ngram_features(one, per_text[index : index + 1], ngrams), weighting)
        alone.append((int(values[0]), int(counts[0])))
    assert voted(1 << 30) == voted(0) == alone


def _count_normalisations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each text normalised (:func:`text.fold`, the first steps of
    :func:`text.normalise` and of :func:`text.token_text`, looked up at
    every call)."""
    seen: list[str] = []
    fold = text.fold

    def counted(one: str) -> str:
        seen.append(one)
        return fold(one)

    monkeypatch.setattr(text, "fold", counted)
    return seen


@pytest.mark.parametrize("algorithm", [ALGORITHM_1, ALGORITHM_2])
@pytest.mark.parametrize(
    "sample",
    ["短文本。", "Ein kurzer Satz über Größe", "我们在北京看到了很多人，天气很好。" * 20],
    ids=["short-chinese", "short-german", "long-chinese"],
)
def test_a_text_is_normalised_once_for_its_fingerprint_and_sketch(
    algorithm: str, sample: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Short texts went through the text path twice (once more to count their
    features for the warning), and version 1 with sketches twice (once for
    each); now once, whatever is made from it."""
    fingerprinter = Fingerprinter(algorithm=algorithm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShortTextWarning)
        expected = fingerprinter.fingerprint(sample)
        seen = _count_normalisations(monkeypatch)
        value, _ = fingerprinter.fingerprint_and_sketch(sample)
        assert len(seen) == 1
        seen.clear()
        fingerprints, _ = fingerprinter.fingerprints_and_sketches([sample, sample])
        assert len(seen) == 2
    assert value == expected
    assert fingerprints.tolist() == [expected, expected]


def test_the_warning_counts_come_from_the_same_pass() -> None:
    fingerprinter = Fingerprinter()
    with pytest.warns(ShortTextWarning, match="only 3 distinct feature"):
        fingerprinter.fingerprint_and_sketch("北京 天气")  # 北京, 天气, 北京 天气


def test_every_algorithm_is_one_registry_entry() -> None:
    for name, algorithm in ALGORITHMS.items():
        assert algorithm.name == name
        assert Fingerprinter(algorithm=name).settings()["hash"] == algorithm.feature_hash
    assert ALGORITHMS[ALGORITHM_1].strings
    assert not ALGORITHMS[ALGORITHM_2].strings


def test_no_production_module_imports_the_reference() -> None:
    package = Path(__file__).resolve().parent.parent / "simstore"
    importers = []
    for path in package.rglob("*.py"):
        if path.name == "reference.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            if "simstore.fingerprinting.reference" in names:
                importers.append(str(path.relative_to(package)))
    assert importers == []


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
def test_add_query_and_add_if_new_normalise_a_short_text_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import simstore

    sample = "北京天气。"
    with simstore.open(str(tmp_path / "s.simstore"), "n", k=3) as store:
        store.add("warm", text="天气很好。")  # the first text also checks the segmenter
        seen = _count_normalisations(monkeypatch)
        store.add("a", text=sample)
        assert len(seen) == 1
        store.query(text=sample)
        assert len(seen) == 2
        store.add_if_new("b", text=sample)
        assert len(seen) == 3


@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=12),
    st.booleans(),
    st.data(),
)
def test_owners_names_each_position_s_text_as_a_binary_search_does(
    per_text: list[int], with_end: bool, data: st.DataObject
) -> None:
    """Texts may be empty (two equal starts: the later text owns the position)."""
    starts = np.concatenate(([0], np.cumsum(per_text))).astype(np.int64)
    total = int(starts[-1])
    if not with_end:
        starts = starts[:-1]
    if not total:
        return
    low = data.draw(st.integers(0, total - 1))
    high = data.draw(st.integers(low + 1, total))
    expected = np.searchsorted(starts, np.arange(low, high), side="right") - 1
    assert owners(starts, low, high).tolist() == expected.tolist()
