"""``near_duplicate_pairs`` and ``clusters`` with ``bands=True``: pairs within
``k`` bits or sharing a sketch band, filtered by the estimate; the oracle is
a brute-force scan of the stored fingerprints and sketches."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest
from _oracles import plain_union_find

import simstore
from simstore.errors import InvalidTypeError
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard

pytestmark = pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")

VOCABULARY = [f"w{i}" for i in range(3000)]


def _texts(seed: int, bases: int = 30) -> dict[str, str]:
    """Texts of 8 to 150 words and copies with a few words changed."""
    rng = random.Random(seed)
    texts: dict[str, str] = {}
    for base in range(bases):
        words = rng.choices(VOCABULARY, k=rng.randint(8, 150))
        texts[f"b{base}"] = " ".join(words)
        for variant in range(3):
            edited = list(words)
            for _ in range(rng.randint(1, 2 + variant * 3)):
                edited[rng.randrange(len(edited))] = rng.choice(VOCABULARY)
            texts[f"b{base}v{variant}"] = " ".join(edited)
    return texts


def _oracle(store: simstore.Store, keys: list[str], k: int, threshold: float) -> set[tuple[str, str, int]]:
    fingerprints = np.array([store[key].fingerprint for key in keys], dtype=np.uint64)
    rows = np.array([np.frombuffer(store.sketch_of(key) or b"", np.uint8) for key in keys])
    banded = band_keys(rows, Sketch())
    key_sets = [set(banded.keys[banded.rows == i].tolist()) for i in range(len(keys))]
    expected = set()
    for a, b in itertools.combinations(range(len(keys)), 2):
        distance = int(np.bitwise_count(fingerprints[a] ^ fingerprints[b]))
        estimate = float(estimate_jaccard(rows[a], rows[b])[0])
        if (distance <= k or key_sets[a] & key_sets[b]) and estimate >= threshold:
            expected.add((keys[a], keys[b], distance))
    return expected


@pytest.mark.parametrize(("seed", "k", "threshold"), [(0, 5, 0.8), (1, 0, 0.5), (2, 3, 0.9), (3, 8, 0.7)])
def test_pairs_and_clusters_with_bands_equal_brute_force(
    tmp_path: Path, seed: int, k: int, threshold: float
) -> None:
    texts = _texts(seed)
    keys = list(texts)
    with simstore.open(tmp_path / "s.simstore", "n", k=8, merge_threshold=25) as store:
        for key in keys:  # some in the tables after merges, some in the delta
            store.add(key, texts[key])
        expected = _oracle(store, keys, k, threshold)
        got = [
            (pair.key_a, pair.key_b, pair.distance)
            for pair in store.near_duplicate_pairs(k=k, min_similarity=threshold, bands=True)
        ]
        assert len(got) == len(set(got))
        assert set(got) == expected
        assert any(distance > k for _, _, distance in expected)  # the bands found something
        without = {
            (p.key_a, p.key_b, p.distance)
            for p in store.near_duplicate_pairs(k=k, min_similarity=threshold, bands=False)
        }
        assert without == {pair for pair in expected if pair[2] <= k}
        # Clusters are the connected components of the same pairs.
        index = {key: i for i, key in enumerate(keys)}
        roots = plain_union_find(len(keys), [(index[a], index[b]) for a, b, _ in expected])
        components: dict[int, set[str]] = {}
        for key in keys:
            components.setdefault(roots[index[key]], set()).add(key)
        want = sorted(sorted(c) for c in components.values() if len(c) > 1)
        clusters = store.clusters(k=k, min_similarity=threshold, bands=True)
        assert sorted(sorted(map(str, c.members)) for c in clusters) == want
        for cluster in store.clusters(k=k, min_similarity=threshold, bands=True, linkage="star"):
            for _distance, similarity in zip(cluster.distances, cluster.similarities, strict=True):
                assert similarity is not None
                assert similarity >= threshold


def test_exact_copies_are_one_node(tmp_path: Path) -> None:
    """Many copies of one text (and a one-word edit of it, beyond k = 0) give
    every pair once."""
    text = " ".join(random.Random(5).choices(VOCABULARY, k=60))
    edited = text + " appended"
    with simstore.open(tmp_path / "s.simstore", "n", k=5) as store:
        for i in range(40):
            store.add(f"c{i}", text)
        store.add("e", edited)
        pairs = list(store.near_duplicate_pairs(k=0, min_similarity=0.8, bands=True))
        distance = bin(store["e"].fingerprint ^ store["c0"].fingerprint).count("1")
        copies = {(f"c{i}", f"c{j}") for i, j in itertools.combinations(range(40), 2)}
        assert len(pairs) == len({(p.key_a, p.key_b) for p in pairs})
        if distance > 0:
            assert {(p.key_a, p.key_b) for p in pairs} == copies | {(f"c{i}", "e") for i in range(40)}
        [cluster] = store.clusters(k=0, min_similarity=0.8, bands=True)
        assert cluster.size == 41


def test_one_token_edits_of_50_tokens_and_more_are_found(tmp_path: Path) -> None:
    """A copy with one token appended, deleted or replaced, of texts of 50 to
    120 words: pairs with bands find at least 99 % of them at the defaults."""
    rng = random.Random(7)
    texts: dict[str, str] = {}
    for i in range(300):
        words = rng.choices(VOCABULARY, k=rng.randint(50, 120))
        texts[f"t{i}"] = " ".join(words)
        edited = list(words)
        kind = i % 3
        if kind == 0:
            edited.append(rng.choice(VOCABULARY))
        elif kind == 1:
            del edited[rng.randrange(len(edited))]
        else:
            edited[rng.randrange(len(edited))] = rng.choice(VOCABULARY)
        texts[f"t{i}e"] = " ".join(edited)
    with simstore.open(tmp_path / "s.simstore", "n") as store:
        store.add_many(list(texts), texts=list(texts.values()))
        found = {(p.key_a, p.key_b) for p in store.near_duplicate_pairs(bands=True)}
    hits = sum((f"t{i}", f"t{i}e") in found for i in range(300))
    assert hits >= 297


def test_bands_must_be_a_bool(tmp_path: Path) -> None:
    with simstore.open(tmp_path / "s.simstore", "n") as store:
        with pytest.raises(InvalidTypeError):
            store.near_duplicate_pairs(bands="yes")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError):
            store.clusters(bands=1)  # type: ignore[arg-type]
