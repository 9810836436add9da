"""Verified answers: the similarity of each match and ``min_similarity``.

The oracle: a query's answer equals a brute-force scan of the stored
fingerprints within ``k``, filtered by the same sketch estimate, at every
``k`` and threshold, through merges and reopening."""

from __future__ import annotations

import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore import Fingerprinter
from simstore.errors import InvalidTypeError, InvalidValueError, ParameterMismatchError
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard
from simstore.layout.choose import DEFAULT_K

pytestmark = pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")

VOCABULARY = [f"word{i}" for i in range(300)]


def _corpus(seed: int, bases: int = 12, variants: int = 4) -> dict[str, str]:
    """Base texts and edited variants of each: near-duplicates at many distances."""
    rng = random.Random(seed)
    texts: dict[str, str] = {}
    for base in range(bases):
        words = rng.choices(VOCABULARY, k=rng.randint(20, 120))
        texts[f"b{base}"] = " ".join(words)
        for variant in range(variants):
            edited = list(words)
            for _ in range(rng.randint(0, 1 + variant * 3)):
                edited[rng.randrange(len(edited))] = rng.choice(VOCABULARY)
            texts[f"b{base}v{variant}"] = " ".join(edited)
    return texts


def _brute_force(
    query: str, texts: dict[str, str], k: int, threshold: float | None, table_bands: int | None = None
) -> list[tuple[str, int, float]]:
    """Within ``k`` (or, in a store whose band table keeps ``table_bands``
    bands a width, sharing one of them) and at least ``threshold`` similar."""
    fingerprinter = Fingerprinter()
    keys = list(texts)
    fingerprints, sketches = fingerprinter.fingerprints_and_sketches([texts[key] for key in keys])
    query_fp, query_sketch = fingerprinter.fingerprint_and_sketch(query)
    distances = [bin(int(fp) ^ query_fp).count("1") for fp in fingerprints]
    estimates = estimate_jaccard(np.frombuffer(query_sketch, np.uint8), sketches)
    shares = [False] * len(keys)
    if table_bands is not None:
        rows = np.vstack([np.frombuffer(query_sketch, np.uint8), np.asarray(sketches)])
        found = band_keys(rows, Sketch(), table_bands)
        wanted = set(found.keys[found.rows == 0].tolist())
        shares = [bool(wanted & set(found.keys[found.rows == row].tolist())) for row in range(1, len(rows))]
    expected = [
        (key, distance, float(estimate))
        for key, distance, estimate, shared in zip(keys, distances, estimates, shares, strict=True)
        if (distance <= k or shared) and (threshold is None or estimate >= threshold)
    ]
    return sorted(expected, key=lambda item: (item[1], item[0]))


def _answer(matches: list[simstore.Match]) -> list[tuple[str, int, float]]:
    return [(str(m.key), m.distance, m.similarity) for m in matches]  # type: ignore[misc]


@pytest.mark.parametrize("threshold", [None, 0.0, 0.5, 0.8, 0.9, 1.0])
def test_query_equals_brute_force_with_threshold_at_every_k(tmp_path: Path, threshold: float | None) -> None:
    texts = _corpus(1)
    # min_similarity=0 at open: None in a call then means no threshold, not the default's.
    with simstore.open(tmp_path / "s.simstore", "c", k=5, min_similarity=0.0, merge_threshold=20) as store:
        keys = list(texts)
        store.add_many(keys[:30], texts=[texts[key] for key in keys[:30]])  # into the tables
        for key in keys[30:]:
            store.add(key, texts[key])  # the delta, merged now and then
        for query_key in keys[::5]:
            for k in range(6):
                got = store.query(text=texts[query_key], k=k, min_similarity=threshold)
                expected = _brute_force(texts[query_key], texts, k, threshold, store.bands)
                assert _answer(got) == expected
    with simstore.open(tmp_path / "s.simstore", "r") as store:
        for query_key in keys[::7]:
            got = store.query(text=texts[query_key], min_similarity=threshold)
            assert _answer(got) == _brute_force(texts[query_key], texts, 5, threshold, store.bands)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), threshold=st.floats(0, 1), k=st.integers(0, 4))
def test_query_many_equals_query(
    tmp_path_factory: pytest.TempPathFactory, seed: int, threshold: float, k: int
) -> None:
    texts = _corpus(seed, bases=5, variants=3)
    path = tmp_path_factory.mktemp("many") / "s.simstore"
    with simstore.open(path, "n", k=4, min_similarity=0.0) as store:
        store.add_many(list(texts), texts=list(texts.values()))
        queries = list(texts.values())[::3]
        batch = store.query_many(texts=queries, k=k, min_similarity=threshold)
        for query, matches in zip(queries, batch, strict=True):
            assert matches == store.query(text=query, k=k, min_similarity=threshold)
            assert _answer(matches) == _brute_force(query, texts, k, threshold, store.bands)


def test_documents_without_a_sketch_are_kept_unjudged(tmp_path: Path) -> None:
    text = " ".join(VOCABULARY[:50])
    with simstore.open(tmp_path / "s.simstore", "c") as store:
        fingerprint = store.add("text", text)
        store.add("bare", fingerprint=fingerprint)
        matches = store.query(text=text, min_similarity=0.99)
        assert [(m.key, m.similarity) for m in matches] == [("bare", None), ("text", 1.0)]
        # Re-added as a bare fingerprint, a document loses its old sketch.
        store.add("text", fingerprint=fingerprint)
        assert {m.similarity for m in store.query(text=text)} == {None}
        assert store.check() == []


def test_query_by_fingerprint_has_no_similarity(tmp_path: Path) -> None:
    text = " ".join(VOCABULARY[:50])
    with simstore.open(tmp_path / "s.simstore", "c") as store:
        fingerprint = store.add("a", text)
        assert store.query(fingerprint)[0].similarity is None
        with pytest.raises(InvalidValueError, match="query's text"):
            store.query(fingerprint, min_similarity=0.5)
        with pytest.raises(InvalidValueError, match="query's text"):
            store.query_many([fingerprint], min_similarity=0.5)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-0.1, InvalidValueError),
        (1.5, InvalidValueError),
        (float("nan"), InvalidValueError),
        ("0.9", InvalidTypeError),
        (True, InvalidTypeError),
    ],
)
def test_bad_threshold_is_refused_and_changes_nothing(
    tmp_path: Path, value: object, error: type[Exception]
) -> None:
    text = " ".join(VOCABULARY[:50])
    with simstore.open(tmp_path / "s.simstore", "c") as store:
        store.add("a", text)
        with pytest.raises(error):
            store.query(text=text, min_similarity=value)  # type: ignore[arg-type]
        with pytest.raises(error):
            store.add_if_new("b", text, min_similarity=value)  # type: ignore[arg-type]
        assert store.keys() == ["a"]


def test_store_without_sketches_refuses_a_threshold(tmp_path: Path) -> None:
    text = " ".join(VOCABULARY[:50])
    with simstore.open(tmp_path / "s.simstore", "c", fingerprinter=Fingerprinter(sketch=None)) as store:
        store.add("a", text)
        assert store.sketch is None
        assert store.query(text=text)[0].similarity is None
        with pytest.raises(InvalidValueError, match="keeps none"):
            store.query(text=text, min_similarity=0.5)


def test_add_if_new_inserts_past_dissimilar_candidates(tmp_path: Path) -> None:
    words = VOCABULARY[:100]
    base = " ".join(words)
    edited = " ".join([*words[:50], "changed", *words[51:]])  # 3 of 98 shingles differ
    with simstore.open(tmp_path / "s.simstore", "c", k=8) as store:
        store.add("base", base)
        near = store.query(text=edited)
        assert [m.key for m in near] == ["base"]
        similarity = near[0].similarity
        assert similarity is not None
        assert 0.8 < similarity < 1.0
        # Asked for more similarity than the candidate has, it is inserted...
        assert store.add_if_new("v", edited, min_similarity=1.0) == []
        assert "v" in store
        # ...and with less, the candidates are the answer and nothing is inserted.
        matches = store.add_if_new("w", edited, min_similarity=0.5)
        assert [m.key for m in matches] == ["v", "base"]
        assert "w" not in store


def test_replacing_documents_replaces_their_sketches(tmp_path: Path) -> None:
    first, second = " ".join(VOCABULARY[:60]), " ".join(VOCABULARY[100:160])
    with simstore.open(tmp_path / "s.simstore", "c", k=3) as store:
        store.add_many(["a", "b"], texts=[first, first])
        store.add_many(["a"], texts=[second])  # a replaced key in a batch
        store.add("b", second)  # and one at a time
        assert {(m.key, m.similarity) for m in store.query(text=second)} == {("a", 1.0), ("b", 1.0)}
        store.remove("a")
        assert store.check() == []


def test_sketch_settings_are_stored_and_a_mismatch_refused_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    fingerprinter = Fingerprinter(sketch=Sketch(bins=512, bits=2))
    with simstore.open(path, "c", fingerprinter=fingerprinter) as store:
        store.add("a", " ".join(VOCABULARY[:40]))
    with simstore.open(path, "r") as store:
        assert store.sketch == Sketch(bins=512, bits=2)
    code = (
        "import sys, simstore\n"
        "from simstore.fingerprinting.sketch import Sketch\n"
        "try:\n"
        "    simstore.open(sys.argv[1], 'r', fingerprinter=simstore.Fingerprinter())\n"
        "except simstore.ParameterMismatchError as exc:\n"
        "    print('refused', exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("refused")
    assert "sketch" in result.stdout
    with pytest.raises(ParameterMismatchError, match="sketch"):
        simstore.open(path, "w", fingerprinter=Fingerprinter(sketch=None))


def test_sketches_of_another_geometry_are_refused(tmp_path: Path) -> None:
    """Sketches made with 512 bins of 2 bits are 128 bytes, as the default's 256 of 4, but
    mean something else: add_many and query_many refuse them (also a slice of them), and
    nothing is written; the store's own fingerprinter's sketches, or a plain array of the
    right width (read back from a file), are taken."""
    texts = [" ".join(random.Random(seed).choices(VOCABULARY, k=60)) for seed in range(6)]
    with simstore.open(tmp_path / "s.simstore", "c") as store:
        foreign_fps, foreign = Fingerprinter(sketch=Sketch(bins=512, bits=2)).fingerprints_and_sketches(texts)
        with pytest.raises(InvalidValueError, match="512 bins of 2 bits"):
            store.add_many(["foreign"], foreign_fps[:1], sketches=foreign[:1])
        with pytest.raises(InvalidValueError, match="512 bins of 2 bits"):
            store.query_many(foreign_fps, sketches=foreign)
        assert len(store) == 0
        own_fps, own = store.fingerprinter.fingerprints_and_sketches(texts)
        store.add_many([f"d{i}" for i in range(6)], own_fps, sketches=own)
        store.add_many(["plain"], own_fps[:1], sketches=np.array(own[:1]).view(np.ndarray))
        assert [match.key for match in store.query(text=texts[0], k=0)] == ["d0", "plain"]


def test_stores_made_before_sketches_still_answer(tmp_path: Path) -> None:
    # The shipped format-1 store, migrated, keeps its settings: no sketch.
    data = Path(__file__).parents[1] / "data" / "format1.simstore"
    target = tmp_path / "migrated.simstore"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        simstore.migrate(data, target)
    with simstore.open(target, "r") as store:
        assert store.sketch is None
        key = next(iter(store))
        assert store.query(store[key].fingerprint)[0].similarity is None


# -- pairs and clusters ---------------------------------------------------


@pytest.mark.parametrize("threshold", [None, 0.3, 0.8])
def test_pairs_equal_brute_force_filtered_by_the_estimate(tmp_path: Path, threshold: float | None) -> None:
    texts = _corpus(5)
    keys = list(texts)
    fingerprinter = Fingerprinter()
    fingerprints, sketches = fingerprinter.fingerprints_and_sketches(list(texts.values()))
    banded = band_keys(sketches, fingerprinter.sketch)
    band_sets = [set(banded.keys[banded.rows == i].tolist()) for i in range(len(keys))]
    expected, within = set(), set()
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            distance = bin(int(fingerprints[i]) ^ int(fingerprints[j])).count("1")
            estimate = float(estimate_jaccard(sketches[i], sketches[j])[0])
            if threshold is None or estimate >= threshold:
                pair = (keys[i], keys[j], distance, estimate)
                if distance <= 4:
                    within.add(pair)
                if distance <= 4 or band_sets[i] & band_sets[j]:  # the store's threshold (0.0) bands too
                    expected.add(pair)
    with simstore.open(tmp_path / "s.simstore", "c", k=4, min_similarity=0.0, merge_threshold=25) as store:
        for key in keys:
            store.add(key, texts[key])
        got = set(store.near_duplicate_pairs(min_similarity=threshold))  # bands by default
        assert set(store.near_duplicate_pairs(min_similarity=threshold, bands=False)) == within
    assert got == expected


def _star_model(fingerprints: list[int], k: int) -> dict[int, list[int]]:
    """Leader clustering over distinct fingerprints in order of first
    appearance: ``{leader position: member positions}`` of groups of two or more."""
    leaders: list[int] = []  # distinct fingerprints leading, in order
    leader_of: dict[int, int] = {}
    for fingerprint in dict.fromkeys(fingerprints):
        near = [lead for lead in leaders if bin(lead ^ fingerprint).count("1") <= k]
        if near:
            leader_of[fingerprint] = near[0]
        else:
            leaders.append(fingerprint)
            leader_of[fingerprint] = fingerprint
    groups: dict[int, list[int]] = {}
    for position, fingerprint in enumerate(fingerprints):
        groups.setdefault(leader_of[fingerprint], []).append(position)
    return {members[0]: members for members in groups.values() if len(members) > 1}


@settings(max_examples=40, deadline=None)
@given(
    seeds=st.lists(st.integers(0, 7), min_size=2, max_size=40),
    flips=st.lists(st.integers(0, 63), min_size=40, max_size=40),
    k=st.integers(0, 3),
)
def test_star_clusters_equal_the_leader_model(
    tmp_path_factory: pytest.TempPathFactory, seeds: list[int], flips: list[int], k: int
) -> None:
    # Few bases, each copied with a bit or two flipped: chains and exact copies.
    bases = [(0x9E3779B97F4A7C15 * (seed + 1)) & ((1 << 64) - 1) for seed in range(8)]
    fingerprints = []
    for index, seed in enumerate(seeds):
        value = bases[seed] ^ (1 << flips[index]) if index % 3 else bases[seed]
        fingerprints.append(value ^ (1 << flips[-index - 1]) if index % 5 == 4 else value)
    path = tmp_path_factory.mktemp("star") / "s.simstore"
    with simstore.open(path, "n", k=3) as store:
        store.add_many(range(len(fingerprints)), np.array(fingerprints, dtype=np.uint64))
        clusters = store.clusters(k, linkage="star")
    model = _star_model(fingerprints, k)
    assert {c.representative: c.members for c in clusters} == model
    for cluster in clusters:
        representative = fingerprints[cluster.representative]  # type: ignore[index]
        distances = [bin(fingerprints[m] ^ representative).count("1") for m in cluster.members]  # type: ignore[index]
        assert cluster.worst_distance == max(distances) <= k
        assert cluster.worst_similarity is None  # bare fingerprints: nothing to judge


def test_star_bounds_members_where_components_chain(tmp_path: Path) -> None:
    # A chain a~b~c~d, each step 2 bits: one component, but a and d are 6 apart.
    steps = [0, 0b11, 0b1111, 0b111111]
    with simstore.open(tmp_path / "s.simstore", "c", k=3) as store:
        store.add_many(["a", "b", "c", "d"], np.array(steps, dtype=np.uint64))
        [component] = store.clusters(2)
        assert component.members == ["a", "b", "c", "d"]
        assert component.worst_distance == 6
        star = store.clusters(2, linkage="star")
        assert [(c.representative, c.members, c.worst_distance) for c in star] == [
            ("a", ["a", "b"], 2),
            ("c", ["c", "d"], 2),
        ]
        with pytest.raises(InvalidValueError, match="linkage"):
            store.clusters(2, linkage="single")
        with pytest.raises(InvalidValueError, match="callable"):
            store.clusters(2, keep=lambda records: records[0].key, linkage="star")


def test_star_with_longest_leads_with_the_longest(tmp_path: Path) -> None:
    with simstore.open(tmp_path / "s.simstore", "c", k=3) as store:
        store.add_many(
            ["short", "long", "other"],
            np.array([0, 0b1, 0b11], dtype=np.uint64),
            metas=[{"length": 5}, {"length": 50}, {"length": 7}],
        )
        [cluster] = store.clusters(1, keep="longest", linkage="star")
        assert cluster.representative == "long"
        assert cluster.members == ["short", "long", "other"]


def test_clusters_with_a_threshold_split_dissimilar_texts(tmp_path: Path) -> None:
    words = VOCABULARY[:100]
    base = " ".join(words)
    close = " ".join([*words[:50], "changed", *words[51:]])
    with simstore.open(tmp_path / "s.simstore", "c", k=8) as store:
        store.add_many(["base", "close"], texts=[base, close])
        [cluster] = store.clusters()
        assert cluster.worst_similarity is not None
        assert 0.8 < cluster.worst_similarity < 1
        assert store.clusters(min_similarity=cluster.worst_similarity) == [cluster]
        assert store.clusters(min_similarity=min(1.0, cluster.worst_similarity + 1e-9)) == []


# -- the store's own threshold ----------------------------------------------


def test_a_stored_threshold_chooses_the_store_and_applies_by_default(tmp_path: Path) -> None:
    from simstore.layout.presets import PRESET_K, verification_threshold

    words = VOCABULARY[:100]
    base = " ".join(words)
    edited = " ".join([*words[:50], "changed", *words[51:]])
    path = tmp_path / "s.simstore"
    threshold = verification_threshold(0.99, Fingerprinter().sketch.bins)  # type: ignore[union-attr]
    assert 0.97 < threshold < 0.99
    with simstore.open(path, "c", min_similarity=0.99) as store:
        assert (store.k, store.bands) == (PRESET_K, 8)
        assert store.min_similarity == threshold
        fingerprint = store.add("base", base)
        near = store.query(text=edited, min_similarity=0.0)
        assert [m.key for m in near] == ["base"]
        assert near[0].similarity is not None
        assert near[0].similarity < threshold
        assert store.query(text=edited) == []  # the stored threshold applies
        assert store.add_if_new("edited", edited) == []  # so this is new
        assert [m.key for m in store.query(fingerprint)] == ["base", "edited"]  # no sketch: unjudged
        assert list(store.near_duplicate_pairs()) == []
        assert len(list(store.near_duplicate_pairs(min_similarity=0.5))) == 1
    with simstore.open(path, "r") as store:
        assert store.min_similarity == threshold
    with pytest.raises(ParameterMismatchError, match="min_similarity"):
        simstore.open(path, "r", min_similarity=0.9)
    for asked in (0.99, threshold):  # the similarity named, or the threshold itself
        with simstore.open(path, "r", min_similarity=asked):
            pass


@pytest.mark.parametrize(
    ("similarity", "bands"), [(1.0, 8), (0.97, 8), (0.9, 8), (0.85, 16), (0.8, 16), (0.5, 16)]
)
def test_a_similarity_preset_keeps_bands_beside_the_default_k(
    tmp_path: Path, similarity: float, bands: int
) -> None:
    from simstore.layout.presets import verification_threshold

    with simstore.open(tmp_path / "s.simstore", "c", min_similarity=similarity) as store:
        assert (store.k, store.bands) == (DEFAULT_K, bands)
        assert store.min_similarity == verification_threshold(similarity, 256)
        assert store.min_similarity <= similarity
        assert "bands a width" in store.stats().layout_name


def test_a_similarity_preset_without_a_band_table_takes_the_k_that_finds_it(tmp_path: Path) -> None:
    from simstore.layout.planner import k_for_similarity
    from simstore.layout.presets import preset_bands, verification_threshold

    for name, options in (("none", {"bands": False}), ("manku", {"blocks": 12})):
        with simstore.open(tmp_path / f"{name}.simstore", "c", min_similarity=0.8, **options) as store:
            assert (store.k, store.bands) == (k_for_similarity(0.8), None)
            assert store.min_similarity == verification_threshold(0.8, 256)
    with simstore.open(tmp_path / "k.simstore", "c", k=3, min_similarity=0.8) as store:
        assert (store.k, store.bands) == (3, None)  # an explicit k wins; k = 3 keeps no band table
    with pytest.raises(InvalidValueError, match="band table"):
        simstore.open(tmp_path / "k2.simstore", "c", k=3, blocks=5, min_similarity=0.8, bands=True)
    with simstore.open(tmp_path / "k3.simstore", "c", k=3, min_similarity=0.8, bands=True) as store:
        assert (store.k, store.bands) == (3, preset_bands(0.8))  # asked for: kept


def test_verification_threshold_is_monotone_and_below_the_similarity() -> None:
    from simstore.layout.presets import verification_threshold

    for bins in (64, 256, 1024):
        thresholds = [verification_threshold(j / 100, bins) for j in range(101)]
        assert thresholds == sorted(thresholds)
        assert all(0.0 <= t <= j / 100 for j, t in enumerate(thresholds))
    # More bins, a steadier estimate: a threshold closer to the similarity.
    coarse, default, fine = (verification_threshold(0.8, bins) for bins in (64, 256, 1024))
    assert coarse < default < fine


def test_threshold_table_and_bad_thresholds_at_open(tmp_path: Path) -> None:
    from simstore.layout.planner import K_FOR_SIMILARITY, k_for_similarity

    thresholds = [similarity for similarity, _ in K_FOR_SIMILARITY]
    assert thresholds == sorted(thresholds, reverse=True)
    ks = [k_for_similarity(t) for t in (1.0, 0.95, 0.85, 0.5, 0.0)]
    assert ks == sorted(ks)  # a lower threshold never needs a smaller k
    with simstore.open(tmp_path / "k.simstore", "c", k=2, min_similarity=0.9) as store:
        assert store.k == 2  # an explicit k wins
    assert simstore.plan(None, 1e6, min_similarity=0.9)[0].k == k_for_similarity(0.9)
    assert simstore.best_layout(6, 1e6).k == 6
    with pytest.raises(InvalidValueError, match="min_similarity"):
        simstore.plan(None, 1e6)
    with pytest.raises(InvalidValueError):
        simstore.open(tmp_path / "bad.simstore", "c", min_similarity=2)
    with pytest.raises(InvalidValueError, match="sketch"):
        simstore.open(
            tmp_path / "bad.simstore", "c", min_similarity=0.9, fingerprinter=Fingerprinter(sketch=None)
        )
    assert not (tmp_path / "bad.simstore").exists()


def test_sketch_of_and_rows_of_zeros(tmp_path: Path) -> None:
    texts = [" ".join(VOCABULARY[:50]), " ".join(VOCABULARY[60:120])]
    fingerprints, sketches = Fingerprinter().fingerprints_and_sketches(texts)
    sketches[1] = 0  # a row of zeros: this document has no sketch
    with simstore.open(tmp_path / "s.simstore", "c") as store:
        store.add_many(["a", "b"], fingerprints, sketches=sketches)
        assert store.sketch_of("a") == sketches[0].tobytes()
        assert store.sketch_of("b") is None
        assert store.stats().sketched_docs == 1
        with pytest.raises(simstore.KeyNotFoundError):
            store.sketch_of("missing")
        with pytest.raises(InvalidValueError, match="rows of 128 bytes"):
            store.add_many(["c"], fingerprints[:1], sketches=sketches[:, :64].copy())
        with pytest.raises(InvalidTypeError):
            store.add_many(["c"], fingerprints[:1], sketches=sketches[:1].astype(np.int16))
        with pytest.raises(InvalidTypeError, match="sketches= goes with fingerprints="):
            store.add_many(["c"], texts=texts[:1], sketches=sketches[:1])
        assert "c" not in store


def test_a_large_batch_with_sketches_and_metadata_reserves_its_room(tmp_path: Path) -> None:
    """The map is grown once, ahead of the transaction: sketches and metadata left out of
    the estimate made the transaction fill the map and rerun once per growth step
    (400K documents took 48 s instead of 1.6)."""
    rng = np.random.default_rng(2)
    count = 60_000
    with simstore.open(tmp_path / "big.simstore", "n", sync=False) as store:
        env = store._engine.env
        before = env.map_changes
        store.add_many(
            [f"k{i}" for i in range(count)],
            rng.integers(0, 2**64, count, dtype=np.uint64),
            sketches=rng.integers(1, 255, (count, 128), dtype=np.uint8),
            metas=[{"url": "https://example.com/" + "x" * 60}] * count,
        )
        assert env.map_changes - before <= 1
        assert len(store) == count
