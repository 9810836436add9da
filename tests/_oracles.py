"""Oracles and corpora shared by tests in several folders: planted
near-duplicate fingerprints, families of near-duplicate fingerprints, the
pairs of a pair search as tuples, and a textbook union-find."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def planted(seed: int, singles: int, clusters: int, size: int, k: int) -> np.ndarray:
    """Random fingerprints plus ``clusters`` groups of ``size`` near-duplicates: each
    member flips up to ``k`` random bits of the previous one (so groups form chains),
    with some exact repeats, in shuffled order."""
    rng = np.random.default_rng(seed)
    values = [int(v) for v in rng.integers(0, 2**64, singles, dtype=np.uint64)]
    for _ in range(clusters):
        current = int(rng.integers(0, 2**64, dtype=np.uint64))
        for _ in range(size):
            values.append(current)
            flips = int(rng.integers(0, k + 1))
            for bit in rng.choice(64, size=flips, replace=False).tolist():
                current ^= 1 << bit
    rng.shuffle(values)
    return np.array(values, dtype=np.uint64)


def pair_tuples(chunks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[tuple[int, int, int]]:
    """``(left, right, distance)`` chunks of a pair search as ``(smaller, larger,
    distance)`` tuples, in the order found (repeats kept, to be counted)."""
    found = []
    for left, right, distance in chunks:
        for a, b, d in zip(left.tolist(), right.tolist(), distance.tolist(), strict=True):
            found.append((min(a, b), max(a, b), d))
    return found


def plain_union_find(node_count: int, edges: list[tuple[int, int]]) -> list[int]:
    """The oracle: a dict-free textbook union-find, labels = smallest node of the component."""
    parent = list(range(node_count))

    def find(node: int) -> int:
        while parent[node] != node:
            node = parent[node]
        return node

    for a, b in edges:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)
    return [find(node) for node in range(node_count)]


def fingerprint_families(seed: int, count: int, flips: int = 3, per_family: int = 4) -> np.ndarray:
    """``count`` fingerprints in families of about ``per_family``: bases drawn with
    replacement (so exact repeats), each copy with up to ``flips`` random bits flipped."""
    rng = np.random.default_rng(seed)
    bases = rng.integers(0, 2**63, size=max(1, count // per_family), dtype=np.uint64) * np.uint64(2)
    chosen = bases[rng.integers(0, len(bases), size=count)]
    for _ in range(flips):
        bits = rng.integers(0, 64, size=count).astype(np.uint64)
        chosen = np.where(rng.random(count) < 0.5, chosen ^ (np.uint64(1) << bits), chosen)
    return chosen.astype(np.uint64)
