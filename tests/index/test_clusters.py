"""Clusters: vectorised union-find against a plain one, and Store.clusters against
union-find over the brute-force pairs."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import numpy as np
import pytest
from _oracles import plain_union_find, planted
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.index.clusters import components, groups, pick_longest
from simstore.index.pairs import brute_force_pairs
from simstore.store.dedup import Cluster


@settings(max_examples=100, deadline=None)
@given(
    node_count=st.integers(1, 60),
    data=st.data(),
)
def test_components_equal_plain_union_find(node_count: int, data: st.DataObject) -> None:
    edges = data.draw(
        st.lists(st.tuples(st.integers(0, node_count - 1), st.integers(0, node_count - 1)), max_size=80)
    )
    left = np.array([a for a, _ in edges], dtype=np.int64)
    right = np.array([b for _, b in edges], dtype=np.int64)
    labels = components(node_count, left, right)
    assert labels.tolist() == plain_union_find(node_count, edges)
    expected_groups: dict[int, list[int]] = {}
    for node, label in enumerate(labels.tolist()):
        expected_groups.setdefault(label, []).append(node)
    assert [g.tolist() for g in groups(labels)] == sorted(g for g in expected_groups.values() if len(g) > 1)


def test_long_chain_is_one_component() -> None:
    """A chain of 100,000 nodes given in reverse joins into one component quickly."""
    count = 100_000
    left = np.arange(count - 1, 0, -1)
    labels = components(count, left, left - 1)
    assert np.all(labels == 0)


def test_pick_longest() -> None:
    assert pick_longest([None, None]) == 0
    assert pick_longest([1, 5, 5, 2]) == 1
    assert pick_longest([True, 0]) == 0  # bools are not lengths


@pytest.fixture
def path() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        yield os.path.join(folder, "clusters.simstore")


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(0, 3), repeats=st.integers(0, 4))
def test_store_clusters_equal_union_find_over_brute_force_pairs(seed: int, k: int, repeats: int) -> None:
    """Store.clusters(k) == the components (size > 1) of the brute-force pair graph,
    members in the order added, cluster_id the first member's internal id."""
    fingerprints = planted(seed, 50, 8, 5, 3)
    if repeats:  # exact repeats of one fingerprint, the degenerate case
        fingerprints = np.concatenate([fingerprints, np.repeat(fingerprints[:1], repeats)])
    keys = [f"doc{index}" for index in range(len(fingerprints))]
    edges = [(i, j) for i, j, _ in brute_force_pairs(fingerprints, k)]
    labels = plain_union_find(len(keys), edges)
    expected: dict[int, list[str]] = {}
    for index, label in enumerate(labels):
        expected.setdefault(label, []).append(keys[index])
    expected_clusters = [members for _, members in sorted(expected.items()) if len(members) > 1]
    with tempfile.TemporaryDirectory() as folder, simstore.open(os.path.join(folder, "s"), k=3) as store:
        store.add_many(keys, fingerprints)
        clusters = store.clusters(k=k)
    assert [cluster.members for cluster in clusters] == expected_clusters
    assert all(cluster.representative == cluster.members[0] for cluster in clusters)
    # Internal ids are given in the order added, from 0.
    assert [cluster.cluster_id for cluster in clusters] == [keys.index(m[0]) for m in expected_clusters]


def test_chains_are_joined(path: str) -> None:
    """A~B and B~C but A and C 4 bits apart: one cluster of three at k=2."""
    with simstore.open(path, k=3) as store:
        store.add_many(["A", "B", "C", "far"], [0b0000, 0b0011, 0b1111, 0xFFFF_0000_0000_0000])
        assert simstore.hamming(0b0000, 0b1111) == 4
        (cluster,) = store.clusters(k=2)
    assert cluster.members == ["A", "B", "C"]
    assert cluster.size == 3
    assert cluster.duplicates == ["B", "C"]


def test_keep_policies(path: str) -> None:
    with simstore.open(path, k=3) as store:
        store.add("short", fingerprint=1, meta={"length": 10})
        store.add("long", fingerprint=3, meta={"length": 99})
        store.add("none", fingerprint=7)
        store.add("alone", fingerprint=0xF0F0_0000_0000_0000)
        assert [c.representative for c in store.clusters()] == ["short"]
        assert [c.representative for c in store.clusters(keep="longest")] == ["long"]
        assert [c.representative for c in store.clusters(keep=lambda records: records[-1].key)] == ["none"]
        assert [c.representative for c in store.clusters(keep=lambda records: records[1])] == ["long"]
        seen: list[list[simstore.Record]] = []
        store.clusters(keep=lambda records: seen.append(records) or records[0].key)
        assert [record.meta for record in seen[0]] == [{"length": 10}, {"length": 99}, None]
        with pytest.raises(simstore.InvalidValueError, match="not a member"):
            store.clusters(keep=lambda records: "alone")
        with pytest.raises(simstore.InvalidValueError, match="keep must be"):
            store.clusters(keep="shortest")
        with pytest.raises(simstore.InvalidTypeError):
            store.clusters(keep=lambda records: 1.5)  # type: ignore[arg-type,return-value]


def test_cluster_ids_are_stable(path: str) -> None:
    """The same store gives the same ids after reopening and after unrelated adds and
    removals; ids do not depend on which table found a pair first."""
    with simstore.open(path, k=3) as store:
        store.add_many(["x", "a", "b", "c", "d"], [0xF0F0_F0F0_F0F0_F0F0, 0, 1, 0xFF00, 0xFF01])
        before = store.clusters()
    with simstore.open(path) as store:
        assert store.clusters() == before
        store.add("y", fingerprint=0x0F0F_0F0F_0000_0000)
        store.remove("x")
        after = store.clusters()
    assert after == before
    assert [(c.cluster_id, c.members) for c in before] == [(1, ["a", "b"]), (3, ["c", "d"])]


def test_empty_store_and_no_duplicates(path: str) -> None:
    with simstore.open(path) as store:
        assert store.clusters() == []
        far = (1 << 63) | (1 << 62) | (1 << 61) | (1 << 60) | (1 << 59) | (1 << 58)  # 6 bits > the default k
        store.add_many(["a", "b"], [0, far])
        assert store.clusters() == []
        assert isinstance(store.clusters(k=0), list)


def test_cluster_is_a_named_tuple() -> None:
    cluster = Cluster(4, "a", ["a", "b"])
    assert cluster._asdict() == {
        "cluster_id": 4,
        "representative": "a",
        "members": ["a", "b"],
        "worst_distance": 0,
        "worst_similarity": None,
        "distances": (),
        "similarities": (),
    }


SKETCH = simstore.Sketch()


def sketch_like(base: np.ndarray, changed: float, rng: np.random.Generator) -> np.ndarray:
    """``base`` with about ``changed`` of its bins given other (non-empty) codes."""
    codes = np.stack([base & 0x0F, base >> 4], axis=1).reshape(-1).copy()
    moved = rng.random(len(codes)) < changed
    codes[moved] = (codes[moved] + rng.integers(1, 15, int(moved.sum()))) % 15 + 1
    return (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)


def random_sketch(rng: np.random.Generator) -> np.ndarray:
    codes = rng.integers(1, 16, 2 * SKETCH.nbytes)
    return (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)


def similarity(first: np.ndarray, second: np.ndarray) -> float:
    return float(simstore.estimate_jaccard(first, second, SKETCH)[0])


def test_a_star_holds_documents_sharing_a_members_fingerprint_to_its_representative(path: str) -> None:
    """A document sharing a member's fingerprint but less like the
    representative leaves the star (it was dropped by dedup, 0.71 like the
    document kept); components do not join it either, since with a threshold
    documents of one fingerprint are judged apart unless they share their sketch."""
    rng = np.random.default_rng(7)
    kept = random_sketch(rng)
    member = sketch_like(kept, 0.05, rng)
    collider = sketch_like(kept, 0.6, rng)
    assert similarity(member, kept) > 0.85
    assert similarity(collider, kept) < 0.5
    # The member and the collider share a fingerprint 2 bits from the representative's.
    fingerprints = np.array([1 << 40, (1 << 40) ^ 0b11, (1 << 40) ^ 0b11], dtype=np.uint64)
    with simstore.open(path, "n", k=3) as store:
        store.add_many(
            ["kept", "member", "collider"], fingerprints, sketches=np.stack([kept, member, collider])
        )
        [star] = store.clusters(linkage="star", min_similarity=0.8)
        [component] = store.clusters(linkage="components", min_similarity=0.8)
    assert star.members == ["kept", "member"]
    assert star.worst_similarity is not None
    assert star.worst_similarity >= 0.8
    # As near_duplicate_pairs(min_similarity=0.8) has it: the collider pairs with no one.
    assert component.members == ["kept", "member"]
    assert component.worst_similarity is not None
    assert component.worst_similarity >= 0.8


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1), groups_count=st.integers(1, 4), threshold=st.sampled_from([0.5, 0.8, 0.9])
)
def test_every_star_member_is_near_and_similar_to_its_representative(
    seed: int, groups_count: int, threshold: float
) -> None:
    """linkage="star": every member within k bits and min_similarity of its
    representative, and no document in two clusters, whatever fingerprints
    the documents share."""
    rng = np.random.default_rng(seed)
    keys: list[str] = []
    fingerprints: list[int] = []
    sketches: list[np.ndarray] = []
    for group in range(groups_count):
        base = int(rng.integers(0, 2**63))
        base_sketch = random_sketch(rng)
        variants = [base ^ int(bit) for bit in (0, 1 << 5, 1 << 17 | 1 << 40)]
        for copy in range(int(rng.integers(2, 7))):
            keys.append(f"g{group}-{copy}")
            fingerprints.append(variants[int(rng.integers(0, len(variants)))])
            sketches.append(sketch_like(base_sketch, float(rng.choice([0.0, 0.05, 0.3, 0.7])), rng))
    sketch_of = dict(zip(keys, sketches, strict=True))
    fingerprint_of = dict(zip(keys, fingerprints, strict=True))
    with tempfile.TemporaryDirectory() as folder, simstore.open(os.path.join(folder, "s"), k=3) as store:
        store.add_many(keys, np.array(fingerprints, dtype=np.uint64), sketches=np.stack(sketches))
        clusters = store.clusters(linkage="star", min_similarity=threshold)
    seen: set[str] = set()
    for cluster in clusters:
        assert not seen & set(cluster.members)
        seen |= set(cluster.members)
        representative = cluster.representative
        for member in cluster.duplicates:
            assert (fingerprint_of[member] ^ fingerprint_of[representative]).bit_count() <= 3
            assert similarity(sketch_of[member], sketch_of[representative]) >= threshold
        # Each member's own figures, as provenance reports them.
        leader, leader_sketch = fingerprint_of[representative], sketch_of[representative]
        members = cluster.members
        assert cluster.distances == tuple((fingerprint_of[m] ^ leader).bit_count() for m in members)
        expected = tuple(similarity(sketch_of[m], leader_sketch) for m in members)
        assert cluster.similarities == pytest.approx(expected)
        assert cluster.worst_distance == max(cluster.distances)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), threshold=st.sampled_from([0.5, 0.8, 0.9]))
def test_components_with_a_threshold_are_those_of_the_pairs(seed: int, threshold: float) -> None:
    """Documents sharing fingerprints but not their text (and exact copies sharing both):
    components equal the connected components of near_duplicate_pairs(min_similarity=t),
    and every star member is as similar as t to its representative."""
    rng = np.random.default_rng(seed)
    bases = [random_sketch(rng) for _ in range(3)]
    keys, fingerprints, sketches = [], [], []
    for index in range(30):
        base = bases[int(rng.integers(0, 3))]
        sketch = base if rng.random() < 0.3 else sketch_like(base, float(rng.choice([0.03, 0.1, 0.6])), rng)
        keys.append(f"d{index}")
        fingerprints.append((1 << 40) ^ int(rng.choice([0, 0b11, 0b1100, 1 << 30])))
        sketches.append(sketch)
    with tempfile.TemporaryDirectory() as folder, simstore.open(os.path.join(folder, "s"), "n", k=3) as store:
        store.add_many(keys, np.array(fingerprints, dtype=np.uint64), sketches=np.stack(sketches))
        pairs = list(store.near_duplicate_pairs(min_similarity=threshold))
        found = store.clusters(linkage="components", min_similarity=threshold)
        stars = store.clusters(linkage="star", min_similarity=threshold)
    parent = {key: key for key in keys}

    def root(key: str) -> str:
        while parent[key] != key:
            key = parent[key]
        return key

    for pair in pairs:
        parent[root(pair.key_a)] = root(pair.key_b)
    expected: dict[str, list[str]] = {}
    for key in keys:
        expected.setdefault(root(key), []).append(key)
    assert sorted(cluster.members for cluster in found) == sorted(g for g in expected.values() if len(g) > 1)
    for star in stars:
        assert star.worst_similarity is None or star.worst_similarity >= threshold
