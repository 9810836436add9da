"""``query_many(bands=True)``: a batch of texts matched against the store by
fingerprint (within ``k``) and by sketch band (beyond it), filtered by the
estimate; the oracle is a brute-force scan of the stored fingerprints and
sketches and the queries' own."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import simstore
from simstore.engine import band_search
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard

pytestmark = pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")

VOCABULARY = [f"w{i}" for i in range(3000)]


def _edited(words: list[str], rng: random.Random, edits: int) -> list[str]:
    edited = list(words)
    for _ in range(edits):
        edited[rng.randrange(len(edited))] = rng.choice(VOCABULARY)
    return edited


def _corpus(seed: int, bases: int = 25) -> tuple[dict[str, str], list[str]]:
    """Stored texts of 8 to 150 words with variants, and queries: other
    variants of the same bases, and unrelated texts."""
    rng = random.Random(seed)
    stored: dict[str, str] = {}
    queries: list[str] = []
    for base in range(bases):
        words = rng.choices(VOCABULARY, k=rng.randint(8, 150))
        stored[f"b{base}"] = " ".join(words)
        stored[f"b{base}v"] = " ".join(_edited(words, rng, rng.randint(1, 6)))
        queries.append(" ".join(_edited(words, rng, rng.randint(1, 4))))
        queries.append(" ".join(rng.choices(VOCABULARY, k=rng.randint(8, 150))))
    return stored, queries


def _oracle(
    store: simstore.Store,
    keys: list[str],
    queries: list[str],
    k: int,
    threshold: float,
    per_width: int | None = None,
) -> list[list[tuple[str, int]]]:
    """Per query, ``(key, distance)`` of every stored document within ``k``
    bits or sharing a band (of ``per_width`` bands a width), estimated at
    least ``threshold`` similar; sorted by distance, then key."""
    fingerprints = np.array([store[key].fingerprint for key in keys], dtype=np.uint64)
    rows = np.array([np.frombuffer(store.sketch_of(key) or b"", np.uint8) for key in keys])
    query_fingerprints, query_rows = simstore.Fingerprinter().fingerprints_and_sketches(queries)
    stored_bands = band_keys(rows, Sketch(), per_width)
    query_bands = band_keys(np.asarray(query_rows), Sketch(), per_width)
    stored_sets = [set(stored_bands.keys[stored_bands.rows == i].tolist()) for i in range(len(keys))]
    expected = []
    for q in range(len(queries)):
        query_set = set(query_bands.keys[query_bands.rows == q].tolist())
        matches = []
        for i, key in enumerate(keys):
            distance = int(np.bitwise_count(np.uint64(query_fingerprints[q]) ^ fingerprints[i]))
            estimate = float(estimate_jaccard(np.asarray(query_rows)[q], rows[i])[0])
            if (distance <= k or query_set & stored_sets[i]) and estimate >= threshold:
                matches.append((key, distance))
        expected.append(sorted(matches, key=lambda match: (match[1], match[0])))
    return expected


@pytest.mark.parametrize("table", [False, True], ids=["scan", "band-table"])
@pytest.mark.parametrize(("seed", "k", "threshold"), [(0, 5, 0.8), (1, 0, 0.5), (2, 3, 0.9), (3, 8, 0.7)])
def test_query_many_with_bands_equals_brute_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, k: int, threshold: float, table: bool
) -> None:
    """Without a band table every stored sketch is scanned and banded whole;
    with one (the default) the table's bands (a few a width) are looked up."""
    monkeypatch.setattr(band_search, "SCAN_CHUNK", 7)  # many chunks of stored sketches
    stored, queries = _corpus(seed)
    keys = list(stored)
    with simstore.open(tmp_path / "s.simstore", "n", k=8, merge_threshold=20, bands=table) as store:
        per_width = store._engine.params.bands
        assert (per_width is not None) == table
        for key in keys:  # some in the tables after merges, some in the delta
            store.add(key, stored[key])
        store.remove(keys[3])
        keys.remove(keys[3])
        expected = _oracle(store, keys, queries, k, threshold, per_width)
        got = store.query_many(texts=queries, k=k, min_similarity=threshold, bands=True)
        assert [[(m.key, m.distance) for m in matches] for matches in got] == expected
        assert any(distance > k for matches in expected for _, distance in matches)  # bands found some
        for matches in got:
            assert all(m.similarity is not None and m.similarity >= threshold for m in matches)
        without = store.query_many(texts=queries, k=k, min_similarity=threshold, bands=False)
        assert [[(m.key, m.distance) for m in matches] for matches in without] == [
            [match for match in matches if match[1] <= k] for matches in expected
        ]
        # limit: the closest matches, those within k first.
        limited = store.query_many(texts=queries, k=k, min_similarity=threshold, bands=True, limit=2)
        assert [[(m.key, m.distance) for m in matches] for matches in limited] == [
            matches[:2] for matches in expected
        ]


def test_a_one_word_edit_past_k_is_found_by_its_text(tmp_path: Path) -> None:
    rng = random.Random(11)
    with simstore.open(tmp_path / "s.simstore", "n") as store:
        originals = [" ".join(rng.choices(VOCABULARY, k=rng.randint(50, 80))) for _ in range(200)]
        store.add_many(range(200), texts=originals)
        edits = [text + " appended" for text in originals]
        plain = store.query_many(texts=edits, limit=1, bands=False)
        banded = store.query_many(texts=edits, limit=1, bands=True)
    assert sum(bool(m) and m[0].key == i for i, m in enumerate(banded)) >= 199
    assert sum(bool(m) for m in banded) > sum(bool(m) for m in plain)  # bands reach past k = 5


def test_bands_need_texts_a_threshold_and_a_bool(tmp_path: Path) -> None:
    with simstore.open(tmp_path / "s.simstore", "n") as store:
        store.add("a", "one two three four five six seven eight nine ten")
        with pytest.raises(InvalidValueError, match="texts="):
            store.query_many([store["a"].fingerprint], bands=True)
        with pytest.raises(InvalidTypeError):
            store.query_many(texts=["one two"], bands="yes")  # type: ignore[arg-type]
    with simstore.open(
        tmp_path / "bare.simstore", "n", fingerprinter=simstore.Fingerprinter(sketch=None)
    ) as bare:
        bare.add("a", "one two three four five six seven eight nine ten")
        with pytest.raises(InvalidValueError, match="keeps none"):
            bare.query_many(texts=["one two three"], bands=True)
