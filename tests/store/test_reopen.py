"""Persistence across processes, and what open() refuses.

Reopening in a fresh process (and opening from a second process while the first still has
the file open) gives identical answers, delta included. Files that are not stores, stores
from a newer format, truncated stores and mismatched parameters are refused with the
documented errors, leaving foreign files byte-for-byte untouched.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import numpy as np
import pytest

import simstore

Key = str | bytes | int

# -- helpers ---------------------------------------------------------------------

# Child processes print a pickled answer on stdout; ``path`` and ``arg`` are given to them.
CHILD_PRELUDE = """
import pickle, sys
import numpy as np
import simstore
path = sys.argv[1]
arg = pickle.loads(bytes.fromhex(sys.argv[2]))
def answer(value):
    sys.stdout.buffer.write(pickle.dumps(value))
"""

# Everything a reader can observe, as plain data: the child's snapshot() must equal ours.
SNAPSHOT = """
def snapshot(store, queries):
    return {
        "len": len(store),
        "keys": list(store),
        "items": list(store.items()),
        "records": [tuple(store.get(key)) for key in store],
        "answers": [
            [[tuple(m) for m in row] for row in store.query_many(np.array(queries, dtype=np.uint64), k=k)]
            for k in range(store.k + 1)
        ],
        "docs": store.stats().docs,
        "delta_docs": store.stats().delta_docs,
        "k": store.k,
        "blocks": store.blocks,
        "check": store.check(),
    }
"""
snapshot_namespace: dict[str, Any] = {"np": np}
exec(SNAPSHOT, snapshot_namespace)
snapshot: Callable[[simstore.Store, list[int]], dict[str, Any]] = snapshot_namespace["snapshot"]


def run_child(body: str, path: str, arg: object = None) -> Any:
    """Run ``body`` in a fresh interpreter and return what it passed to answer()."""
    script = CHILD_PRELUDE + SNAPSHOT + textwrap.dedent(body)
    completed = subprocess.run(
        [sys.executable, "-c", script, path, pickle.dumps(arg).hex()],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr.decode(errors="replace")
    return pickle.loads(completed.stdout) if completed.stdout else None


def digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def lock_of(path: str) -> str:
    return path + "-lock"


def near(rng: np.random.Generator, fingerprint: int, distance: int) -> int:
    for bit in rng.choice(64, size=distance, replace=False).tolist():
        fingerprint ^= 1 << bit
    return fingerprint


def populate(store: simstore.Store, rng: np.random.Generator) -> list[int]:
    """Mixed keys, metadata, merged and unmerged documents, replacements and removals.
    Leaves a non-empty delta; returns query fingerprints near the stored ones."""
    bases = rng.integers(0, 2**64, 30, dtype=np.uint64).tolist()
    keys: list[Key] = [f"url-{i}" for i in range(30)]
    store.add_many(keys, bases, metas=[{"i": i} for i in range(30)])
    store.add_many([b"raw-1", 7, -(2**63), "x" * 2000], [near(rng, b, 1) for b in bases[:4]])
    store.merge()
    for i, base in enumerate(bases[:20]):
        store.add(i, fingerprint=near(rng, base, 2), meta={"n": [i, "two"]})
    store.add("url-3", fingerprint=near(rng, bases[3], 3))  # replace a merged doc
    store.add(5, fingerprint=near(rng, bases[5], 1))  # replace a delta doc
    store.remove("url-4")  # from the tables
    store.remove(6)  # from the delta
    assert store.stats().delta_docs > 0
    return bases + [near(rng, base, d) for base in bases[:10] for d in range(5)]


# -- reopen in another process -----------------------------------------------------


@pytest.mark.parametrize("mode", ["r", "w", "c"])
def test_fresh_process_sees_identical_answers_delta_included(store_path: str, mode: str) -> None:
    """Closing without merging and reopening in a new process gives the same keys, records,
    query answers and delta; nothing acknowledged is lost."""
    rng = np.random.default_rng(1)
    with simstore.open(store_path, k=3, merge_on_close=False, merge_threshold=10_000) as store:
        queries = populate(store, rng)
        expected = snapshot(store, queries)
    assert expected["delta_docs"] > 0
    child = run_child(
        """
        with simstore.open(path, arg["mode"], merge_on_close=False) as store:
            answer(snapshot(store, arg["queries"]))
        """,
        store_path,
        {"mode": mode, "queries": queries},
    )
    assert child == expected
    assert child["check"] == []


def test_reopen_with_merge_on_close_merges_and_keeps_answers(store_path: str) -> None:
    """The default close merges the delta; the answers after reopening are unchanged."""
    rng = np.random.default_rng(2)
    with simstore.open(store_path, k=3, merge_threshold=10_000) as store:
        queries = populate(store, rng)
        expected = snapshot(store, queries)
    with simstore.open(store_path, "r") as reopened:
        after = snapshot(reopened, queries)
    assert after["delta_docs"] == 0
    assert {**after, "delta_docs": None} == {**expected, "delta_docs": None}


def test_second_process_sees_every_committed_add_while_first_is_open(store_path: str) -> None:
    """A process that opens the file while another holds it open sees merged and unmerged adds."""
    rng = np.random.default_rng(3)
    with simstore.open(store_path, k=3, merge_on_close=False, merge_threshold=10_000) as store:
        queries = populate(store, rng)
        expected = snapshot(store, queries)
        child = run_child(
            """
            with simstore.open(path, "r") as store:
                answer(snapshot(store, arg))
            """,
            store_path,
            queries,
        )
        assert child == expected
        # and the writer goes on working after the reader has come and gone
        store.add("after", fingerprint=queries[0])
        assert "after" in [match.key for match in store.query(fingerprint=queries[0], k=0)]


WRITER = """
with simstore.open(path, "w", merge_on_close=False, merge_threshold=10_000) as store:
    for key, fingerprint in arg.get("add", []):
        store.add(key, fingerprint=fingerprint)
    if arg.get("add_many"):
        keys, fps = arg["add_many"]
        store.add_many(keys, np.array(fps, dtype=np.uint64))
    for key in arg.get("remove", []):
        store.remove(key)
    if arg.get("merge"):
        store.merge()
"""


def model_snapshot(model: dict[Key, int], queries: list[int], k: int) -> list[list[list[tuple[Any, ...]]]]:
    def rank(key: Key) -> tuple[int, Key]:
        return (0, key) if isinstance(key, int) else (1, key) if isinstance(key, bytes) else (2, key)

    answers = []
    for qk in range(k + 1):
        rows = []
        for query in queries:
            hits = [(key, (fp ^ query).bit_count(), fp, None, None) for key, fp in model.items()]
            hits = [hit for hit in hits if hit[1] <= qk]
            rows.append(sorted(hits, key=lambda hit: (hit[1], rank(hit[0]))))
        answers.append(rows)
    return answers


@pytest.mark.parametrize("reader_mode", ["r", "w"])
def test_open_store_sees_later_commits_of_another_process(store_path: str, reader_mode: str) -> None:
    """A Store that stays open sees adds, replacements, removals and merges that another
    process commits afterwards, whether they sit in the delta or in the tables."""
    rng = np.random.default_rng(4)
    bases = rng.integers(0, 2**64, 20, dtype=np.uint64).tolist()
    model: dict[Key, int] = {f"base-{i}": fp for i, fp in enumerate(bases)}
    with simstore.open(store_path, k=3) as store:
        store.add_many(list(model), bases)
    queries = bases + [near(rng, base, 2) for base in bases]
    with simstore.open(store_path, reader_mode, merge_on_close=False) as reader:
        assert snapshot(reader, queries)["answers"] == model_snapshot(model, queries, 3)

        # unmerged adds, a replacement and removals (from the tables and from the delta)
        added = {f"new-{i}": near(rng, base, i % 4) for i, base in enumerate(bases)}
        run_child(WRITER, store_path, {"add": list(added.items())})
        model.update(added)
        assert reader.stats().delta_docs == len(added)
        run_child(
            WRITER,
            store_path,
            {"add": [("base-0", bases[1]), (99, bases[2])], "remove": ["base-5", "new-7"]},
        )
        model.update({"base-0": bases[1], 99: bases[2]})
        del model["base-5"], model["new-7"]
        seen = snapshot(reader, queries)
        assert seen["answers"] == model_snapshot(model, queries, 3)
        assert seen["items"] == list(model.items())
        assert seen["check"] == []

        # a merge by the other process, then more unmerged adds on top of it
        run_child(WRITER, store_path, {"merge": True})
        assert reader.stats().delta_docs == 0
        assert snapshot(reader, queries)["answers"] == model_snapshot(model, queries, 3)
        more = {b"late-%d" % i: near(rng, base, 1) for i, base in enumerate(bases[:5])}
        run_child(WRITER, store_path, {"add_many": (list(more), list(more.values()))})
        model.update(more)
        seen = snapshot(reader, queries)
        assert seen["answers"] == model_snapshot(model, queries, 3)
        assert seen["items"] == list(model.items())
        assert seen["delta_docs"] == len(more)
        assert seen["check"] == []
        if reader_mode == "w":
            # the long-open writer's own writes continue from the other process's state
            reader.add("mine", fingerprint=bases[3])
            model["mine"] = bases[3]
            assert snapshot(reader, queries)["answers"] == model_snapshot(model, queries, 3)
            assert reader.check() == []


def test_open_reader_survives_map_growth_by_another_process(store_path: str) -> None:
    """A reader with a small map keeps working after another process grew the file past it."""
    with simstore.open(store_path, k=3, map_size=65536) as store:
        store.add("first", fingerprint=1)
    with simstore.open(store_path, "r", map_size=65536) as reader:
        assert len(reader) == 1
        count = 3000
        keys = [f"grown-{i}" for i in range(count)]
        fps = list(range(10**6, 10**6 + count))
        run_child(
            """
            with simstore.open(path, "w", map_size=65536, merge_threshold=500, sync=False) as store:
                for start in range(0, len(arg[0]), 250):
                    store.add_many(arg[0][start:start + 250], arg[1][start:start + 250])
                answer(store.stats().map_size)
            """,
            store_path,
            (keys, fps),
        )
        assert os.path.getsize(store_path) > 65536
        assert len(reader) == count + 1
        assert reader.get("grown-2999") == simstore.Record("grown-2999", fps[-1], None)
        assert [m.key for m in reader.query(fingerprint=fps[10], k=0)] == ["grown-10"]
        assert reader.check() == []


# -- parameters and format version ----------------------------------------------------


def test_mismatched_parameters_are_all_listed(store_path: str) -> None:
    """k and blocks both differing: one ParameterMismatchError naming both, with
    (stored, requested) pairs; the store is untouched and still opens."""
    with simstore.open(store_path, k=3, blocks=5) as store:
        store.add("a", fingerprint=5)
    before = digest(store_path)
    with pytest.raises(simstore.ParameterMismatchError) as caught:
        simstore.open(store_path, k=2, blocks=6)
    assert caught.value.differences == {"k": (3, 2), "blocks": (5, 6)}
    assert isinstance(caught.value, simstore.SimstoreError)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert "k" in message
    assert "blocks" in message
    assert digest(store_path) == before
    with simstore.open(store_path, "r") as store:
        assert store.k == 3
        assert store.blocks == 5
        assert len(store) == 1


@pytest.mark.parametrize(
    ("requested", "differences"),
    [
        ({"k": 4}, {"k": (3, 4)}),
        ({"blocks": 4}, {"blocks": (5, 4)}),
        ({"k": 0, "blocks": 1}, {"k": (3, 0), "blocks": (5, 1)}),
        ({"k": 3, "blocks": 6}, {"blocks": (5, 6)}),
    ],
)
@pytest.mark.parametrize("mode", ["r", "w", "c"])
def test_each_mismatch_is_refused_in_every_mode(
    store_path: str, mode: str, requested: dict[str, int], differences: dict[str, tuple[int, int]]
) -> None:
    """Any explicit parameter differing from the file is refused, in every open mode."""
    simstore.open(store_path, k=3, blocks=5).close()
    with pytest.raises(simstore.ParameterMismatchError) as caught:
        simstore.open(store_path, mode, **requested)  # type: ignore[arg-type]
    assert caught.value.differences == differences


@pytest.mark.parametrize("requested", [{}, {"k": 3}, {"blocks": 5}, {"k": 3, "blocks": 5}, {"k": None}])
def test_matching_or_omitted_parameters_open(store_path: str, requested: dict[str, Any]) -> None:
    """Omitted (None) or equal parameters mean the file decides."""
    simstore.open(store_path, k=3, blocks=5).close()
    with simstore.open(store_path, "w", **requested) as store:
        assert (store.k, store.blocks) == (3, 5)


def test_parameters_come_from_the_file_not_the_defaults(store_path: str) -> None:
    """A store made with k=2, blocks=6 reopens as such without being told."""
    simstore.open(store_path, k=2, blocks=6).close()
    with simstore.open(store_path) as store:
        assert (store.k, store.blocks, store.stats().tables) == (2, 6, 15)


def _rewrite_meta(path: str, change: Callable[[dict[str, Any]], None]) -> None:
    env = lmdb.open(path, subdir=False, max_dbs=600, lock=True)
    try:
        meta_db = env.open_db(b"meta", create=False)
        with env.begin(write=True) as txn:
            record = msgpack.unpackb(txn.get(b"meta", db=meta_db), raw=False)
            change(record)
            txn.put(b"meta", msgpack.packb(record, use_bin_type=True), db=meta_db)
    finally:
        env.close()


@pytest.mark.parametrize("mode", ["r", "w", "c"])
def test_newer_format_version_is_refused(tmp_path: Path, store_path: str, mode: str) -> None:
    """A meta record claiming format version 99 raises FormatVersionError and is not modified."""
    with simstore.open(store_path, k=3) as store:
        store.add("a", fingerprint=1)
    newer = str(tmp_path / "newer.simstore")
    shutil.copyfile(store_path, newer)
    _rewrite_meta(newer, lambda record: record.update(version=99))
    before = digest(newer)
    with pytest.raises(simstore.FormatVersionError) as caught:
        simstore.open(newer, mode)
    assert isinstance(caught.value, simstore.SimstoreError)
    assert "99" in str(caught.value)
    assert digest(newer) == before


def test_mode_n_replaces_a_newer_format_store(store_path: str) -> None:
    """A newer simstore's store is still a simstore store: mode 'n' replaces it with a new,
    empty, current-format store."""
    simstore.open(store_path, k=3).close()
    _rewrite_meta(store_path, lambda record: record.update(version=99))
    with simstore.open(store_path, "n", k=1) as store:
        assert (len(store), store.k, store.stats().format_version) == (0, 1, 3)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda record: record.update(version=0), id="version-0"),
        pytest.param(lambda record: record.update(version="1"), id="version-str"),
        pytest.param(lambda record: record.pop("tables"), id="no-tables"),
        pytest.param(lambda record: record.update(k=-1), id="bad-k"),
        pytest.param(lambda record: record["tables"][0][0].pop(), id="short-bit-order"),
        pytest.param(lambda record: record.update(tables=[]), id="no-table"),
    ],
)
def test_damaged_meta_record_is_corrupt(store_path: str, change: Callable[[dict[str, Any]], None]) -> None:
    """A simstore meta record with impossible contents raises CorruptStoreError, not a crash."""
    simstore.open(store_path, k=3).close()
    _rewrite_meta(store_path, change)
    with pytest.raises(simstore.CorruptStoreError):
        simstore.open(store_path, "r")


# -- foreign files ---------------------------------------------------------------------


def _random_bytes(path: str) -> None:
    with open(path, "wb") as handle:
        handle.write(np.random.default_rng(5).bytes(20_000))


def _short_random_bytes(path: str) -> None:
    with open(path, "wb") as handle:
        handle.write(b"not a store, just some text\n" * 3)


def _foreign_lmdb(path: str) -> None:
    env = lmdb.open(path, subdir=False, max_dbs=4)
    other = env.open_db(b"other")
    with env.begin(write=True) as txn:
        txn.put(b"hello", b"world", db=other)
    env.close()


def _foreign_lmdb_main_keys(path: str) -> None:
    env = lmdb.open(path, subdir=False)
    with env.begin(write=True) as txn:
        txn.put(b"meta", b"a plain key that happens to be called meta")
        txn.put(b"zzz", b"more")
    env.close()


def _foreign_lmdb_with_meta_db(path: str) -> None:
    env = lmdb.open(path, subdir=False, max_dbs=4)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"colour", b"blue", db=meta)
    env.close()


def _empty_lmdb(path: str) -> None:
    env = lmdb.open(path, subdir=False)
    with env.begin(write=True) as txn:
        txn.put(b"x", b"y")
        txn.delete(b"x")
    env.close()


FOREIGN = {
    "random-bytes": _random_bytes,
    "short-text": _short_random_bytes,
    "lmdb-named-db": _foreign_lmdb,
    "lmdb-main-keys": _foreign_lmdb_main_keys,
    "lmdb-meta-db": _foreign_lmdb_with_meta_db,
    "lmdb-empty": _empty_lmdb,
}


def make_foreign(path: str, kind: str) -> str:
    """Write a foreign file, remove any lock file its writer left, return its digest."""
    FOREIGN[kind](path)
    if os.path.exists(lock_of(path)):
        os.remove(lock_of(path))
    return digest(path)


FOREIGN_CASES = [
    pytest.param(kind, mode, id=f"{kind}-{mode}") for kind in sorted(FOREIGN) for mode in ("r", "w", "c", "n")
]


@pytest.mark.parametrize(("kind", "mode"), FOREIGN_CASES)
def test_foreign_file_is_refused_and_untouched(store_path: str, kind: str, mode: str) -> None:
    """Random bytes and LMDB files written by other programs (or holding nothing) raise
    NotAStoreError in every mode; the file's bytes are unchanged and no lock file is left."""
    before = make_foreign(store_path, kind)
    with pytest.raises(simstore.NotAStoreError) as caught:
        simstore.open(store_path, mode)
    assert isinstance(caught.value, simstore.SimstoreError)
    assert os.path.exists(store_path)
    assert digest(store_path) == before
    assert not os.path.exists(lock_of(store_path))


def _never_written_lmdb(path: str) -> None:
    lmdb.open(path, subdir=False).close()
    os.remove(lock_of(path))


def test_never_written_lmdb_is_taken_over_only_by_creating_modes(store_path: str) -> None:
    """An LMDB file no transaction ever wrote (a store whose creation in place was
    interrupted, or is under way in another process) is no store yet for modes r and w,
    which leave it as it is, but modes c and n make it one."""
    _never_written_lmdb(store_path)
    before = digest(store_path)
    for mode in ("r", "w"):
        with pytest.raises(simstore.StoreNotFoundError, match="nothing was written"):
            simstore.open(store_path, mode)
        assert digest(store_path) == before
    with simstore.open(store_path, "c", k=2) as store:
        store.add("a", fingerprint=1)
    os.remove(store_path)
    os.remove(lock_of(store_path))
    _never_written_lmdb(store_path)
    with simstore.open(store_path, "n", k=2) as store:
        store.add("a", fingerprint=1)
    with simstore.open(store_path, "r") as store:
        assert (store.k, list(store)) == (2, ["a"])


@pytest.mark.parametrize("mode", ["r", "w"])
def test_empty_file_is_not_a_store(store_path: str, mode: str) -> None:
    """A zero-byte file is not a store for the modes that never create one."""
    Path(store_path).touch()
    with pytest.raises(simstore.NotAStoreError):
        simstore.open(store_path, mode)
    assert os.path.getsize(store_path) == 0
    assert not os.path.exists(lock_of(store_path))


@pytest.mark.parametrize("mode", ["r", "w", "c", "n"])
def test_directory_is_not_a_store(tmp_path: Path, mode: str) -> None:
    """A directory is refused, and not emptied by mode 'n'."""
    (tmp_path / "inside").write_text("keep me")
    with pytest.raises(simstore.NotAStoreError):
        simstore.open(tmp_path, mode)
    assert (tmp_path / "inside").read_text() == "keep me"


def test_truncated_store_is_corrupt_not_a_crash(store_path: str) -> None:
    """A store cut to half the length of its pages in use raises CorruptStoreError (checked
    in a child process, so that a SIGBUS would fail this test rather than kill the test
    run). The file itself runs on to the end of the writer's map."""
    with simstore.open(store_path, k=3) as store:
        store.add_many([f"k{i}" for i in range(5000)], np.arange(5000, dtype=np.uint64) * 7919)
        size = store.stats().bytes_used
    assert os.path.getsize(store_path) > size
    with open(store_path, "r+b") as handle:
        handle.truncate(size // 2)
    outcome = run_child(
        """
        try:
            with simstore.open(path, "r") as store:
                store.check()
            answer("opened")
        except simstore.CorruptStoreError:
            answer("CorruptStoreError")
        except Exception as exc:
            answer(type(exc).__name__)
        """,
        store_path,
    )
    assert outcome == "CorruptStoreError"


# -- modes ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["r", "w"])
def test_missing_store_in_modes_r_and_w(store_path: str, mode: str) -> None:
    """Modes r and w never create: StoreNotFoundError (a FileNotFoundError), nothing created."""
    with pytest.raises(simstore.StoreNotFoundError) as caught:
        simstore.open(store_path, mode)
    assert isinstance(caught.value, FileNotFoundError)
    assert isinstance(caught.value, simstore.SimstoreError)
    assert not os.path.exists(store_path)
    assert not os.path.exists(lock_of(store_path))


def test_mode_c_creates_then_reopens(store_path: str) -> None:
    """Mode 'c' creates a missing store and opens an existing one without losing anything."""
    with simstore.open(store_path, "c", k=2) as store:
        store.add("a", fingerprint=3)
    with simstore.open(store_path, "c") as store:
        assert store.get("a") == simstore.Record("a", 3, None)
        assert store.k == 2


def test_mode_n_replaces_an_existing_store(store_path: str) -> None:
    """Mode 'n' gives a new empty store, even with different parameters."""
    with simstore.open(store_path, k=3) as store:
        store.add_many(["a", "b"], [1, 2])
    with simstore.open(store_path, "n", k=1, blocks=4) as store:
        assert len(store) == 0
        assert (store.k, store.blocks) == (1, 4)
        assert store.query(fingerprint=1) == []
        store.add("c", fingerprint=9)
    with simstore.open(store_path, "r") as store:
        assert list(store) == ["c"]
        assert store.check() == []


def test_mode_n_creates_when_missing(store_path: str) -> None:
    """Mode 'n' on a missing path creates a store."""
    with simstore.open(store_path, "n") as store:
        assert len(store) == 0
        assert store.k == simstore.layout.choose.DEFAULT_K
        assert store.min_similarity == simstore.layout.choose.DEFAULT_MIN_SIMILARITY


def test_mode_r_is_read_only(store_path: str) -> None:
    """Mode 'r' (and readonly=True) give a read-only store."""
    simstore.open(store_path).close()
    for mode, readonly in (("r", False), ("w", True), ("c", True)):
        with simstore.open(store_path, mode, readonly=readonly) as store:
            assert store.readonly
            assert store.stats().readonly
            with pytest.raises(simstore.ReadOnlyError):
                store.add("a", fingerprint=1)
    with simstore.open(store_path, "r") as store:
        assert len(store) == 0


@pytest.mark.parametrize("mode", ["x", "rw", "", "R"])
def test_unknown_mode_is_refused(store_path: str, mode: str) -> None:
    """Only r, w, c, n are modes; nothing is created for another."""
    with pytest.raises(ValueError, match="mode"):
        simstore.open(store_path, mode)
    assert not os.path.exists(store_path)


def test_mode_n_cannot_be_read_only(store_path: str) -> None:
    """A new store cannot be opened read-only."""
    with pytest.raises(ValueError, match="read-only"):
        simstore.open(store_path, "n", readonly=True)
    assert not os.path.exists(store_path)


def test_a_writers_file_is_allocated_to_the_end_of_its_map(tmp_path: Path) -> None:
    """Writes go through LMDB's writable map, so every block of the map must be allocated
    (a write into a hole on a full disk is a SIGBUS, not an error): as the map grows, and
    for the file another process reopens. A reader changes nothing."""
    path = str(tmp_path / "allocated.simstore")

    def allocated(expected_map: int) -> None:
        info = os.stat(path)
        assert info.st_size == expected_map
        assert info.st_blocks * 512 >= info.st_size

    with simstore.open(path, k=3, map_size=1 << 20, sync=False) as store:
        allocated(store.stats().map_size)
        for start in range(0, 60_000, 20_000):  # grows the map on the way
            store.add_many(
                range(start, start + 20_000), np.arange(start, start + 20_000, dtype=np.uint64) * 7919
            )
            allocated(store.stats().map_size)
        assert store.stats().map_size > 1 << 20
        for key in range(200):  # single adds that fill the map grow it too
            store.add(f"single-{key}", fingerprint=key)
        allocated(store.stats().map_size)
    grown = os.path.getsize(path)  # after the merge on close
    with simstore.open(path, "r") as reader:
        assert len(reader) == 60_200
    assert os.path.getsize(path) == grown
    with simstore.open(path, "w") as store:
        allocated(store.stats().map_size)
        assert store.stats().map_size >= grown
