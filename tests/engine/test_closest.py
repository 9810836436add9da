"""Queries with ``limit=``: the first ``limit`` matches of the unlimited,
sorted answer, which itself equals a brute-force scan; and the scan plan
that lets them stop early."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simstore
from simstore.engine import runs
from simstore.engine import tableset as tables
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard, estimate_jaccard_one
from simstore.index.scan_plan import scan_plan
from simstore.layout import planner

EXAMPLES = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SKETCH = Sketch()


def _rank(key: object) -> tuple[int, object]:
    if isinstance(key, int):
        return (0, key)
    if isinstance(key, bytes):
        return (1, key)
    return (2, key)


def _key(index: int) -> object:
    return (index, f"doc-{index}", f"doc-{index}".encode())[index % 3]


def _near(rng: np.random.Generator, fingerprint: int, most_bits: int) -> int:
    for bit in rng.choice(64, size=int(rng.integers(0, most_bits + 1)), replace=False).tolist():
        fingerprint ^= 1 << bit
    return fingerprint


def _sketch_near(rng: np.random.Generator, base: np.ndarray) -> np.ndarray:
    """A sketch sharing a random share of ``base``'s bytes (some are left all zero: no sketch)."""
    if rng.random() < 0.1:
        return np.zeros_like(base)
    row = base.copy()
    changed = rng.random(len(row)) < rng.random()
    row[changed] = rng.integers(1, 256, int(changed.sum()), dtype=np.uint8)
    return row


class Corpus:
    """Documents gathered around a few centres, many of them copies (boilerplate):
    hundreds of matches a query, at every distance up to k and beyond."""

    def __init__(self, seed: int, k: int, docs: int) -> None:
        rng = np.random.default_rng(seed)
        centres = rng.integers(0, 2**64, int(rng.integers(1, 5)), dtype=np.uint64).tolist()
        self.centre_sketches = rng.integers(1, 256, (len(centres), SKETCH.nbytes), dtype=np.uint8)
        picks = rng.integers(0, len(centres), docs)
        copies = rng.random(docs) < 0.4
        self.fingerprints = np.array(
            [
                centres[c] if copy else _near(rng, centres[c], k + 2)
                for c, copy in zip(picks, copies, strict=True)
            ],
            dtype=np.uint64,
        )
        self.sketches = np.array([_sketch_near(rng, self.centre_sketches[c]) for c in picks], dtype=np.uint8)
        order = rng.permutation(docs)  # keys in no relation to distance
        self.keys = [_key(int(index)) for index in order]
        query_picks = rng.integers(0, len(centres), 12)
        self.queries = np.array([_near(rng, centres[c], 2) for c in query_picks], dtype=np.uint64)
        self.query_sketches = np.array([_sketch_near(rng, self.centre_sketches[c]) for c in query_picks])
        self.rng = rng

    def brute(self, query: int, k: int) -> list[tuple[object, int]]:
        distances = np.bitwise_count(self.fingerprints ^ np.uint64(query))
        hits = [(self.keys[i], int(distances[i])) for i in np.flatnonzero(distances <= k)]
        return sorted(hits, key=lambda hit: (hit[1], _rank(hit[0])))


def _fill(store: simstore.Store, corpus: Corpus, batches: int) -> None:
    """Add the corpus in ``batches`` add_many calls with a merge after each
    but the last: several runs per table, and the last batch in the delta."""
    cuts = np.linspace(0, len(corpus.keys), batches + 1).astype(int).tolist()
    for number, (start, stop) in enumerate(itertools.pairwise(cuts)):
        store.add_many(
            corpus.keys[start:stop], corpus.fingerprints[start:stop], sketches=corpus.sketches[start:stop]
        )
        if number < batches - 1:
            store.merge()


def _check(store: simstore.Store, corpus: Corpus, k: int, limits: list[int], threshold: float) -> None:
    """Every limited answer equals the unlimited one cut short; the unlimited one, brute force."""
    for query in corpus.queries.tolist():
        full = store.query(fingerprint=query, k=k)
        assert [(m.key, m.distance) for m in full] == corpus.brute(query, k)
        for limit in limits:
            assert store.query(fingerprint=query, k=k, limit=limit) == full[:limit]
    for similarity in (0.0, threshold):
        unlimited = store.query_many(
            corpus.queries, k=k, sketches=corpus.query_sketches, min_similarity=similarity
        )
        for limit in limits:
            limited = store.query_many(
                corpus.queries, k=k, sketches=corpus.query_sketches, min_similarity=similarity, limit=limit
            )
            assert limited == [matches[:limit] for matches in unlimited]


@EXAMPLES
@given(
    seed=st.integers(0, 2**32 - 1),
    layout=st.sampled_from([(2, None), (3, None), (3, 6), (4, None), (5, 7)]),
    docs=st.integers(1, 400),
    batches=st.integers(1, 3),
    query_k=st.integers(0, 5),
    threshold=st.floats(0.05, 0.95),
)
def test_limited_queries_are_the_unlimited_answer_cut_short(
    seed: int, layout: tuple[int, int | None], docs: int, batches: int, query_k: int, threshold: float
) -> None:
    k, blocks = layout
    corpus = Corpus(seed, k, docs)
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "closest.simstore")
        with simstore.open(path, "n", k=k, blocks=blocks, merge_on_close=False) as store:
            _fill(store, corpus, batches)
            _check(store, corpus, min(query_k, k), [1, 2, 7, 1000], threshold)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), docs=st.integers(50, 400))
def test_limited_queries_in_crowded_tables(seed: int, docs: int) -> None:
    """Tables whose prefixes hold many entries each are searched bucket by
    bucket in one numpy pass (TableSet._find_crowded); limits stop there too."""
    corpus = Corpus(seed, 3, docs)
    with (
        tempfile.TemporaryDirectory() as folder,
        simstore.open(str(Path(folder) / "crowded.simstore"), "n", k=3, merge_on_close=False) as store,
    ):
        _fill(store, corpus, 2)
        store.query(fingerprint=0)  # the catalog adopted: crowded is not recomputed until it changes
        store._engine.tableset.crowded = True
        _check(store, corpus, 3, [1, 3], 0.5)


def test_limit_is_refused_unless_a_positive_int(store: simstore.Store) -> None:
    store.add("a", fingerprint=1)
    for bad in (0, -1):
        with pytest.raises(simstore.InvalidValueError, match="limit"):
            store.query(fingerprint=1, limit=bad)
    for wrong in (1.0, "1", True):
        with pytest.raises(simstore.InvalidTypeError, match="limit"):
            store.query_many([1], limit=wrong)
    with pytest.raises(simstore.InvalidValueError, match="limit"):
        store.add_if_new("b", fingerprint=1, limit=0)
    assert "b" not in store


def test_a_copy_settles_after_one_table(store_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With copies of the query stored, limit=1 searches one of Manku's tables, not all."""
    store = simstore.open(store_path, k=3, blocks=5)
    store.add_many(range(300), np.full(300, 12345, dtype=np.uint64))
    store.merge()
    calls: list[int] = []
    real_scan = tables._scan

    def counting_scan(*args: object) -> None:
        calls.append(1)
        real_scan(*args)

    monkeypatch.setattr("simstore.engine.tableset._scan", counting_scan)
    assert [m.key for m in store.query(fingerprint=12345, limit=1)] == [0]
    limited = len(calls)
    calls.clear()
    assert len(store.query(fingerprint=12345)) == 300
    assert limited == 1
    assert len(calls) == len(store.tables) > 1
    store.close()


def test_sharded_store_limit(tmp_path: Path) -> None:
    """Each shard stops at its closest; the closest of those are the answer."""
    rng = np.random.default_rng(3)
    fingerprints = rng.integers(0, 2**64, 5, dtype=np.uint64).repeat(40) ^ rng.integers(
        0, 4, 200, dtype=np.uint64
    )
    paths = [str(tmp_path / f"s{i}.simstore") for i in range(3)]
    for number, path in enumerate(paths):
        with simstore.open(path, "n", k=3) as shard:
            shard.add_many(range(number, 200, 3), fingerprints[number::3])
    with simstore.ShardedStore(paths) as store:
        for query in fingerprints[::40].tolist():
            full = store.query(fingerprint=query)
            assert len(full) >= 40
            assert store.query(fingerprint=query, limit=3) == full[:3]
        full_many = store.query_many(fingerprints[::40])
        assert store.query_many(fingerprints[::40], limit=2) == [found[:2] for found in full_many]


# ------------------------------------------------------------------ the plan


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_scan_plan_bounds_are_sound(data: st.DataObject) -> None:
    """After the first j tables of the plan, a fingerprint differing in fewer
    than settled[j] bits shares the full prefix of one of them."""
    k = data.draw(st.integers(0, 5))
    layouts = planner.candidate_layouts(k, max_tables=60)
    layout = data.draw(st.sampled_from(layouts))
    plan = scan_plan(layout.tables)
    assert sorted(plan.order) == list(range(len(layout.tables)))
    assert plan.settled[0] == 0
    assert plan.settled[-1] == k + 1
    assert list(plan.settled) == sorted(plan.settled)
    visited = data.draw(st.integers(1, len(plan.order)))
    bound = plan.settled[visited]
    if bound == 0:
        return
    flipped = data.draw(st.sets(st.integers(0, 63), max_size=bound - 1))
    prefixes = [set(layout.tables[i].bit_order[: layout.tables[i].prefix_bits]) for i in plan.order[:visited]]
    assert any(not prefix & flipped for prefix in prefixes)


def test_scan_plan_of_a_one_level_layout() -> None:
    """Seven blocks at k = 5 (21 tables): one table settles distance 0, and
    two with disjoint prefixes distance 1."""
    plan = scan_plan(planner.one_level(5, 7).tables)
    assert plan.settled[:4] == (0, 1, 2, 3)
    assert plan.settled[-1] == 6


# ------------------------------------------------------------ the fast paths


@settings(max_examples=200, deadline=None)
@given(
    geometry=st.sampled_from([Sketch(bins, bits) for bins in (8, 256, 1024) for bits in (2, 4, 8)]),
    seed=st.integers(0, 2**32 - 1),
    change=st.floats(0, 1),
    empty=st.floats(0, 1),
)
def test_estimate_jaccard_one_equals_the_numpy_estimate(
    geometry: Sketch, seed: int, change: float, empty: float
) -> None:
    rng = np.random.default_rng(seed)
    first = rng.integers(0, 256, geometry.nbytes, dtype=np.uint8)
    first[rng.random(geometry.nbytes) < empty] = 0
    second = first.copy()
    changed = rng.random(geometry.nbytes) < change
    second[changed] = rng.integers(0, 256, int(changed.sum()), dtype=np.uint8)
    expected = float(estimate_jaccard(first, second, geometry)[0])
    assert estimate_jaccard_one(first.tobytes(), second.tobytes(), geometry) == expected


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), copies=st.integers(1, 200), k=st.integers(1, 5))
def test_probe_in_numpy_equals_probe_one_at_a_time(seed: int, copies: int, k: int) -> None:
    """A bucket crowded with near-copies gives the same candidates whichever way it is tested."""
    rng = np.random.default_rng(seed)
    centre = int(rng.integers(0, 2**64, dtype=np.uint64))
    fingerprints = np.array([_near(rng, centre, k + 3) for _ in range(copies)], dtype=np.uint64)
    with (
        tempfile.TemporaryDirectory() as folder,
        simstore.open(str(Path(folder) / "p.simstore"), "n", k=k) as store,
    ):
        store.add_many(range(copies), fingerprints)
        store.merge()
        answers = {}
        for vector_from in (1, 10**9):
            runs.VECTOR_PROBE, saved = vector_from, runs.VECTOR_PROBE
            try:
                answers[vector_from] = store.query(fingerprint=centre)
            finally:
                runs.VECTOR_PROBE = saved
        assert answers[1] == answers[10**9]


def test_copies_in_a_batch_are_answered_alike(store: simstore.Store) -> None:
    """Queries equal in fingerprint and sketch are answered once; each gets its own list."""
    store.add_many(range(50), np.arange(50, dtype=np.uint64) << np.uint64(40))
    queries = np.array([0, 1 << 40, 0, 7, 0], dtype=np.uint64)
    answers = store.query_many(queries, limit=2)
    assert answers == [store.query(fingerprint=int(query), limit=2) for query in queries]
    answers[0].append(answers[1][0])
    assert answers[2] == answers[4] == store.query(fingerprint=0, limit=2)
