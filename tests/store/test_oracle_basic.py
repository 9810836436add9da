"""The oracle, first cut: query results equal a brute-force Hamming scan."""

from __future__ import annotations

import numpy as np
import pytest

import simstore


def planted(rng: np.random.Generator, count: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Random fingerprints plus, for the first few, neighbours at 0..k+1 bits."""
    base = rng.integers(0, 2**64, count, dtype=np.uint64, endpoint=False)
    neighbours = []
    for index in range(min(count, 50)):
        for distance in range(k + 2):
            bits = rng.choice(64, size=distance, replace=False)
            flipped = int(base[index])
            for bit in bits:
                flipped ^= 1 << int(bit)
            neighbours.append(flipped)
    return base, np.array(neighbours, dtype=np.uint64)


def brute(fingerprints: np.ndarray, keys: list[str], query: int, k: int) -> list[tuple[int, str]]:
    distances = np.bitwise_count(fingerprints ^ np.uint64(query))
    return sorted((int(distances[i]), keys[i]) for i in np.flatnonzero(distances <= k))


@pytest.mark.parametrize("merge_threshold", [1, 300, 10_000])
def test_query_equals_brute_force(store_path: str, merge_threshold: int) -> None:
    rng = np.random.default_rng(7)
    base, neighbours = planted(rng, 500, 3)
    fingerprints = np.concatenate([base, neighbours])
    keys = [f"doc-{i}" for i in range(len(fingerprints))]
    with simstore.open(store_path, k=3, merge_threshold=merge_threshold) as store:
        store.add_many(keys[:400], fingerprints[:400])
        for key, fingerprint in zip(keys[400:], fingerprints[400:].tolist(), strict=True):
            store.add(key, fingerprint=fingerprint)
        queries = np.concatenate([neighbours[:100], rng.integers(0, 2**64, 20, dtype=np.uint64)])
        batch = store.query_many(queries)
        for query, batch_result in zip(queries.tolist(), batch, strict=True):
            for k in range(4):
                got = [(m.distance, m.key) for m in store.query(fingerprint=query, k=k)]
                assert got == brute(fingerprints, keys, query, k)
            assert [(m.distance, m.key) for m in batch_result] == brute(fingerprints, keys, query, 3)
