"""add_if_new: look-up and insert in one transaction; racing processes never double-insert."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

import simstore


def test_inserts_only_when_nothing_is_near(store: simstore.Store) -> None:
    """An empty result means inserted; a near-duplicate returns its matches and is not stored."""
    assert store.add_if_new("a", fingerprint=0b1111_0000) == []
    assert "a" in store
    matches = store.add_if_new("b", fingerprint=0b1111_0001, meta={"url": "b"})
    assert [(m.key, m.distance) for m in matches] == [("a", 1)]
    assert "b" not in store
    assert store.add_if_new("c", fingerprint=0b1111_0001 ^ (0xFF << 40), k=1) == []
    assert "c" in store


def test_k_limits_what_counts_as_near(store: simstore.Store) -> None:
    store.add("a", fingerprint=0)
    assert store.add_if_new("b", fingerprint=0b111, k=2) == []
    assert [(m.key, m.distance) for m in store.add_if_new("c", fingerprint=0b11, k=2)] == [("b", 1), ("a", 2)]


def test_matches_carry_meta_on_request(store: simstore.Store) -> None:
    store.add("a", fingerprint=5, meta={"title": "A"})
    [match] = store.add_if_new("b", fingerprint=4, with_meta=True)
    assert match.meta == {"title": "A"}
    assert store.query(fingerprint=5, with_meta=True)[0].meta == {"title": "A"}
    assert store.query(fingerprint=5)[0].meta is None


RACER = textwrap.dedent(
    """
    import sys, time
    import simstore
    path, name, start, offered = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    fingerprints = [int(line) for line in open(offered).read().split()]
    with simstore.open(path, "w", sync=False) as store:
        while time.time() < start:
            time.sleep(0.001)
        inserted = sum(
            1 for i, fp in enumerate(fingerprints) if not store.add_if_new(f"{name}-{i}", fingerprint=fp)
        )
    print(inserted)
    """
)


def test_two_racing_processes_never_both_insert_a_near_duplicate(store_path: str, tmp_path: Path) -> None:
    """Two writers offer the same 300 documents (one copy each, a bit apart): each is stored once."""
    rng = np.random.default_rng(11)
    base = rng.integers(0, 2**64, 300, dtype=np.uint64)
    with simstore.open(store_path, k=3):
        pass
    start = time.time() + 1.0
    racers = []
    for name, flip in (("left", 0), ("right", 1)):
        offered = tmp_path / f"{name}.txt"
        offered.write_text("\n".join(str(int(fp) ^ flip) for fp in base.tolist()))
        racers.append(
            subprocess.Popen(
                [sys.executable, "-c", RACER, store_path, name, str(start), str(offered)],
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    inserted = [int(racer.communicate(timeout=120)[0]) for racer in racers]
    assert sum(inserted) == 300
    with simstore.open(store_path, "r") as store:
        assert len(store) == 300
        for fp in base.tolist():
            assert len(store.query(fingerprint=fp, k=1)) == 1
        assert store.check() == []
