"""relayout: new tables built beside the old, switched in one commit, nothing lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import simstore


def brute(fingerprints: dict[str, int], query: int, k: int) -> list[tuple[int, str]]:
    return sorted(
        ((fp ^ query).bit_count(), key) for key, fp in fingerprints.items() if (fp ^ query).bit_count() <= k
    )


def filled(store: simstore.Store, rng: np.random.Generator, count: int) -> dict[str, int]:
    base = rng.integers(0, 2**64, count, dtype=np.uint64)
    model = {f"d{i}": int(fp) for i, fp in enumerate(base.tolist())}
    for i, fp in enumerate(base[:50].tolist()):
        model[f"n{i}"] = fp ^ (1 << (i % 64)) ^ (1 << ((i * 7) % 64))
    keys = list(model)
    store.add_many(keys[: count // 2], np.array([model[key] for key in keys[: count // 2]], dtype=np.uint64))
    for key in keys[count // 2 :]:
        store.add(key, fingerprint=model[key])  # some stay in the delta
    return model


@pytest.mark.parametrize(("new_k", "new_blocks"), [(3, 6), (3, 4), (2, 5), (4, 7)])
def test_relayout_keeps_every_document_and_exact_answers(
    store_path: str, new_k: int, new_blocks: int
) -> None:
    rng = np.random.default_rng(new_blocks)
    with simstore.open(store_path, k=3, merge_threshold=300) as store:
        model = filled(store, rng, 1000)
        store.relayout(k=new_k, blocks=new_blocks)
        assert (store.k, store.blocks) == (new_k, new_blocks)
        assert len(store.tables) == len(simstore.permute.one_level_tables(new_k, new_blocks))
        assert store.stats().delta_docs == 0
        assert store.check() == []
        queries = [model[f"n{i}"] for i in range(50)] + rng.integers(0, 2**64, 20, dtype=np.uint64).tolist()
        for query in queries:
            assert [(m.distance, m.key) for m in store.query(fingerprint=query)] == brute(model, query, new_k)
        store.add("after", fingerprint=123)  # writes keep working in the new layout
        model["after"] = 123
    with simstore.open(store_path, "r") as reopened:
        assert reopened.k == new_k
        assert dict(reopened.items()) == model
        assert reopened.check() == []


def test_relayout_refuses_conflicting_requests(store: simstore.Store) -> None:
    with pytest.raises(simstore.InvalidValueError):
        store.relayout(blocks=5, expected_docs=10)
    with pytest.raises(simstore.InvalidValueError):
        store.relayout(k=3, blocks=3)  # blocks must exceed k
    assert store.blocks == 5


OTHER_PROCESS = textwrap.dedent(
    """
    import sys, simstore
    with simstore.open(sys.argv[1], "w") as store:
        store.relayout(blocks=int(sys.argv[2]))
    """
)


def test_open_store_follows_a_relayout_by_another_process(store_path: str) -> None:
    """A Store open in this process picks up another process's new layout at its next call."""
    rng = np.random.default_rng(3)
    with simstore.open(store_path, k=3, merge_threshold=10_000) as store:
        model = filled(store, rng, 400)
        before = {key: store.query(fingerprint=fp) for key, fp in list(model.items())[:30]}
        subprocess.run([sys.executable, "-c", OTHER_PROCESS, store_path, "7"], check=True)
        assert store.blocks == 5  # nothing noticed yet
        after = {key: store.query(fingerprint=fp) for key, fp in list(model.items())[:30]}
        assert store.blocks == 7
        assert after == before
        store.add("late", fingerprint=77)
        assert store.check() == []
