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
        assert len(store.tables) == len(simstore.index.permute.one_level_tables(new_k, new_blocks))
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
    layout = store.stats().layout_name
    with pytest.raises(simstore.InvalidValueError):
        store.relayout(blocks=5, expected_docs=10)
    with pytest.raises(simstore.InvalidValueError):
        store.relayout(k=3, blocks=3)  # blocks must exceed k
    for bad_k in ("3", 3.0):
        with pytest.raises(simstore.InvalidTypeError):  # "3" was a TypeError from inside
            store.relayout(k=bad_k)  # type: ignore[arg-type]
    assert store.stats().layout_name == layout


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
        assert store.blocks is None  # a multi-index layout: nothing noticed yet
        after = {key: store.query(fingerprint=fp) for key, fp in list(model.items())[:30]}
        assert store.blocks == 7
        assert after == before
        store.add("late", fingerprint=77)
        assert store.check() == []


def test_a_relayout_that_fills_the_map_is_retried_whole(
    store_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt fills the map after it has dropped the old tables (LMDB closes
    their handles at once, though the transaction aborts); the retry must open them
    afresh, or it drops the new tables that reused those handles and leaves a store
    that cannot be opened (2 of 128 two-step re-layouts did, found by a user)."""
    import lmdb

    from simstore.engine.tableset import TableSet

    fingerprints = {i: i * 0x9E3779B97F4A7C15 % 2**64 for i in range(300)}
    with simstore.open(store_path, "n", k=5) as store:
        store.add_many(list(fingerprints), list(fingerprints.values()))
        real_write_run = TableSet.write_run
        attempts = []

        def fills_once(self: TableSet, *args: object, **kwargs: object) -> object:
            attempts.append(1)
            if len(attempts) == 1:
                raise lmdb.MapFullError("MDB_MAP_FULL")
            return real_write_run(self, *args, **kwargs)

        monkeypatch.setattr(TableSet, "write_run", fills_once)
        store.relayout(blocks=6)
        monkeypatch.undo()
        assert len(attempts) == 2
        store.relayout(blocks=7)
        assert store.check() == []
    with simstore.open(store_path, "r") as reader:
        assert len(reader) == 300
        assert reader.check() == []
        for key in (0, 150, 299):
            assert [m.key for m in reader.query(fingerprint=fingerprints[key], k=0)] == [key]


@pytest.mark.parametrize("sync", [True, False])
def test_threads_keep_working_while_another_thread_relayouts(store_path: str, sync: bool) -> None:
    """Queries, adds (durable ones flush outside the lock) and bulk adds in other
    threads of the same Store while one thread re-lays it out again and again: no
    error, and every add is there afterwards."""
    import threading

    rng = np.random.default_rng(4)
    base = rng.integers(0, 2**64, 2000, dtype=np.uint64)
    errors: list[BaseException] = []
    stop = threading.Event()
    with simstore.open(store_path, "n", k=3, sync=sync) as store:
        store.add_many([f"b{i}" for i in range(2000)], base)
        added: list[str] = []

        def guarded(body: object) -> object:
            def run() -> None:
                try:
                    body()  # type: ignore[operator]
                except BaseException as exc:
                    errors.append(exc)

            return run

        def adder() -> None:
            step = 0
            while not stop.is_set():
                store.add(f"a{step}", fingerprint=step * 7919)
                added.append(f"a{step}")
                if step % 50 == 0:
                    store.add_many([f"m{step}-{i}" for i in range(20)], np.arange(20, dtype=np.uint64) + step)
                    added.extend(f"m{step}-{i}" for i in range(20))
                step += 1

        def querier() -> None:
            while not stop.is_set():
                query = int(base[int(rng.integers(0, 2000))])
                assert store.query(fingerprint=query, k=0)[0].fingerprint == query

        threads = [threading.Thread(target=guarded(body)) for body in (adder, adder, querier)]
        for thread in threads:
            thread.start()
        for blocks in (5, 6, 4, 5):
            store.relayout(blocks=blocks)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        assert all(key in store for key in added)
        assert store.check() == []
