"""ShardedStore: several files answer exactly as one store holding everything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _oracles import planted
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.index.sharding import shard_of


def fill_shards(tmp_path: Path, keys: list[object], fingerprints: np.ndarray, shards: int) -> list[str]:
    paths = [str(tmp_path / f"shard-{number}.simstore") for number in range(shards)]
    owners = np.array([shard_of(key, shards) for key in keys])
    for number, path in enumerate(paths):
        rows = np.flatnonzero(owners == number).tolist()
        with simstore.open(path, "n", k=4) as store:
            store.add_many([keys[row] for row in rows], fingerprints[rows])
    return paths


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), shards=st.integers(1, 4), k=st.integers(0, 4))
def test_sharded_queries_equal_one_store(
    tmp_path_factory: pytest.TempPathFactory, seed: int, shards: int, k: int
) -> None:
    tmp_path = tmp_path_factory.mktemp("sharded")
    fingerprints = planted(seed, singles=200, clusters=15, size=4, k=4)
    keys: list[object] = [f"doc{i}" if i % 3 else i for i in range(len(fingerprints))]
    paths = fill_shards(tmp_path, keys, fingerprints, shards)
    with simstore.open(str(tmp_path / "one.simstore"), "n", k=4) as one:
        one.add_many(keys, fingerprints)
        queries = np.concatenate([fingerprints[:40] ^ np.uint64(0b1001), fingerprints[40:60]])
        with simstore.ShardedStore(paths) as sharded:
            assert len(sharded) == len(one)
            assert sharded.query_many(queries, k=k) == one.query_many(queries, k=k)
            for query in queries[:10].tolist():
                assert sharded.query(query, k=k) == one.query(query, k=k)
            assert sorted(map(str, sharded)) == sorted(map(str, one))
            for key in keys[:20]:
                assert key in sharded
                assert sharded.get(key) == one.get(key)


def test_text_queries_and_routed_writes(tmp_path: Path) -> None:
    texts = [f"document number {i} about the quick brown fox and its many lazy dogs" for i in range(30)]
    paths = [str(tmp_path / f"s{i}.simstore") for i in range(3)]
    for path in paths:
        simstore.open(path, "n").close()
    with (
        simstore.ShardedStore(paths, readonly=False) as sharded,
        simstore.open(str(tmp_path / "one.simstore"), "n") as one,
    ):
        for i, text in enumerate(texts):
            sharded.add(f"k{i}", text, meta={"i": i})
            one.add(f"k{i}", text, meta={"i": i})
        sharded.add_many(["m1", "m2"], [5, 6], metas=[{"a": 1}, None])
        one.add_many(["m1", "m2"], [5, 6], metas=[{"a": 1}, None])
        assert sharded.query(text=texts[3]) == one.query(text=texts[3])
        assert sharded.query_many(texts=texts[:5]) == one.query_many(texts=texts[:5])
        for key in ["k1", "k7", "m1", "m2"]:
            owner = shard_of(key, 3)
            assert key in sharded.shards[owner]
            assert sum(key in shard for shard in sharded.shards) == 1
        sharded.remove("k7")
        assert "k7" not in sharded
        with pytest.raises(simstore.KeyNotFoundError):
            sharded.remove("k7")
        assert sharded["m1"] == simstore.Record("m1", 5, {"a": 1})


def test_refuses_mismatched_or_bad_shards(tmp_path: Path) -> None:
    a, b, c = (str(tmp_path / name) for name in ("a.simstore", "b.simstore", "c.simstore"))
    simstore.open(a, "n", k=3).close()
    simstore.open(b, "n", k=4).close()
    simstore.open(c, "n", k=3, fingerprinter=simstore.Fingerprinter(ngrams=(1,))).close()
    with pytest.raises(simstore.ShardMismatchError, match=r"k: 3 in .*a\.simstore, 4 here"):
        simstore.ShardedStore([a, b])
    with pytest.raises(simstore.ParameterMismatchError, match="fingerprinter"):
        simstore.ShardedStore([a, c])
    with pytest.raises(simstore.InvalidValueError, match="listed twice"):
        simstore.ShardedStore([a, a])
    with pytest.raises(simstore.InvalidValueError, match="at least one"):
        simstore.ShardedStore([])
    with pytest.raises(simstore.InvalidTypeError, match="not a single path"):
        simstore.ShardedStore(a)  # type: ignore[arg-type]
    with pytest.raises(simstore.StoreNotFoundError):
        simstore.ShardedStore([a, str(tmp_path / "missing.simstore")])
    # A refused open closes what it opened: the shard opens again at once.
    simstore.open(a, "r").close()
    with simstore.ShardedStore([a]) as sharded, pytest.raises(simstore.ReadOnlyError):
        sharded.add("x", fingerprint=1)


def test_shard_of_is_stable_and_typed() -> None:
    # Pinned: a shard assignment must never change between versions, or
    # routed adds would miss the shards an earlier build wrote.
    assert [shard_of(key, 16) for key in ("a", b"a", 1, "https://example.com/")] == PINNED
    with pytest.raises(simstore.InvalidTypeError):
        shard_of(1.5, 4)
    with pytest.raises(simstore.InvalidValueError):
        shard_of("a", 0)


PINNED = [8, 8, 11, 8]


def test_sharded_add_many_routes_every_key_and_refuses_bad_input_before_writing(tmp_path: Path) -> None:
    """Each key lands in the shard shard_of names, with its last value; a bad
    meta anywhere in the batch writes no shard at all."""
    paths = [str(tmp_path / f"s{i}.simstore") for i in range(3)]
    for path in paths:
        simstore.open(path, "n").close()
    keys: list[object] = [*range(50), *[f"doc{i}" for i in range(50)], 7, "doc3"]
    fingerprints = np.arange(len(keys), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    with simstore.ShardedStore(paths, readonly=False) as sharded:
        with pytest.raises(simstore.InvalidValueError, match="msgpack"):
            sharded.add_many(keys, fingerprints, metas=[{"ok": 1}] * (len(keys) - 1) + [{"bad": object()}])
        assert len(sharded) == 0
        sharded.add_many(
            np.array(keys, dtype=object), fingerprints, metas=[{"i": i} for i in range(len(keys))]
        )
        expected = {key: index for index, key in enumerate(keys)}  # a repeated key keeps its last
        assert len(sharded) == len(expected)
        for key, index in expected.items():
            record = sharded.get(key)
            assert record is not None
            assert record.fingerprint == int(fingerprints[index])
            assert record.meta == {"i": index}
            assert key in sharded.shards[shard_of(key, 3)]
