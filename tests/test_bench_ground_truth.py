"""The real-text benchmark's all-pairs Jaccard (benchmarks/suite/realtext_truth.py) against brute force."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scipy")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "suite"))

import realtext_truth as truth


def _near_copies(seed: int, n: int) -> list[list[str]]:
    """Token lists of random lengths (0..60) over a small vocabulary, many of them
    edited copies of others, so every Jaccard band is populated."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(12)]
    docs: list[list[str]] = []
    for _ in range(n):
        if docs and rng.random() < 0.6:
            tokens = list(rng.choice(docs))
            for _ in range(rng.randrange(4)):
                if tokens and rng.random() < 0.5:
                    tokens[rng.randrange(len(tokens))] = rng.choice(vocab)
                else:
                    tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(vocab))
        else:
            tokens = [rng.choice(vocab) for _ in range(rng.randrange(61))]
        docs.append(tokens)
    return docs


def _python_jaccard(a: set[str], b: set[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8, 0.97, 1.0])
def test_similar_pairs_equals_brute_force(seed: int, threshold: float) -> None:
    docs = _near_copies(seed, 120)
    matrix = truth.shingle_matrix(docs)
    found = truth.similar_pairs(matrix, threshold, block=17)
    sets = [truth.shingles(d) for d in docs]
    expected = [
        (i, j, _python_jaccard(sets[i], sets[j]))
        for i in range(len(docs))
        for j in range(i + 1, len(docs))
        if _python_jaccard(sets[i], sets[j]) >= threshold
    ]
    assert list(zip(found.first.tolist(), found.second.tolist(), strict=True)) == [
        (i, j) for i, j, _ in expected
    ]
    np.testing.assert_allclose(found.jaccard, [v for _, _, v in expected])
    brute = truth.brute_force_pairs(matrix, threshold)
    assert np.array_equal(brute.first, found.first)
    assert np.array_equal(brute.second, found.second)


def test_jaccard_of_given_pairs_and_short_texts() -> None:
    docs = [["a", "b", "c", "d"], ["a", "b", "c", "e"], ["a", "b"], ["a", "b"], [], ["x"]]
    matrix = truth.shingle_matrix(docs)
    # abc,bcd vs abc,bce: 1/3; "a b" vs "a b": 1; an empty text: 0.
    got = truth.jaccard(matrix, [0, 2, 0, 4, 4], [1, 3, 2, 5, 4], budget=3)
    np.testing.assert_allclose(got, [1 / 3, 1.0, 0.0, 0.0, 0.0])


def test_threshold_is_checked() -> None:
    with pytest.raises(ValueError, match="threshold"):
        truth.similar_pairs(truth.shingle_matrix([["a"]]), 0.0)


def test_pairs_within_and_lookup_match_brute_force() -> None:
    quality = pytest.importorskip("realtext_quality")
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2**63, 40, dtype=np.uint64)
    flips = np.uint64(1) << rng.integers(0, 64, (400, 6)).astype(np.uint64)
    fingerprints = base[rng.integers(0, 40, 400)] ^ np.bitwise_xor.reduce(
        flips * (rng.random((400, 6)) < 0.5), 1
    )
    first, second, distance = quality.pairs_within(fingerprints, k_max=5, block=37)
    expected = [
        (i, j, int(np.bitwise_count(fingerprints[i] ^ fingerprints[j])))
        for i in range(400)
        for j in range(i + 1, 400)
        if np.bitwise_count(fingerprints[i] ^ fingerprints[j]) <= 5
    ]
    got = sorted(zip(first.tolist(), second.tolist(), distance.tolist(), strict=True))
    assert got == expected
    docs = _near_copies(1, 60)
    matrix = truth.shingle_matrix(docs)
    corpus = quality.Corpus(
        "t",
        [" ".join(d) for d in docs],
        np.array([len(d) for d in docs]),
        matrix,
        truth.similar_pairs(matrix, 0.5),
    )
    a, b = np.triu_indices(60, 1)
    exact = truth.jaccard(matrix, a, b)
    looked = corpus.lookup(a.astype(np.int64), b.astype(np.int64))
    np.testing.assert_allclose(looked[exact >= 0.5], exact[exact >= 0.5])
    assert (looked[exact < 0.5] == -1).all()
