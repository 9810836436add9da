"""Format 3's run values in a real LMDB file: written, viewed in place with
no copy, searched exactly, checked, and refused when damaged."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import lmdb
import numpy as np
import pytest
from _oracles import planted

from simstore.engine import columns
from simstore.engine.band_tables import join_band_values, view_band_run, write_band_run, write_joined_band_run
from simstore.engine.column_tables import (
    drop_run,
    join_run,
    join_values,
    snapshot_in_place,
    view_run,
    write_run,
)
from simstore.errors import CorruptStoreError
from simstore.index.band_runs import build_band_run, join_band_runs
from simstore.index.column_search import build_run, search
from simstore.index.multi_index import MultiIndex, choose

SCHEME = MultiIndex((21, 21, 22), (1, 1, 1))


@pytest.fixture
def env(tmp_path: Path) -> Iterator[lmdb.Environment]:
    environment = lmdb.open(str(tmp_path / "runs"), max_dbs=8, map_size=1 << 28)
    yield environment
    environment.close()


def tables(env: lmdb.Environment, count: int) -> list[object]:
    return [env.open_db(f"t{table}".encode()) for table in range(count)]


def brute_force(stored: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int) -> list[tuple[int, int]]:
    distances = np.bitwise_count(queries[:, np.newaxis] ^ stored[np.newaxis, :])
    rows, found = np.nonzero(distances <= k)
    return sorted(zip(rows.tolist(), ids[found].tolist(), strict=True))


@pytest.mark.parametrize("k", [0, 3, 5, 8])
def test_written_runs_viewed_in_place_answer_as_a_brute_force_scan(env: lmdb.Environment, k: int) -> None:
    scheme = choose(k, 10_000)
    databases = tables(env, scheme.tables)
    first = planted(seed=k, singles=3000, clusters=100, size=5, k=k)
    second = planted(seed=k + 100, singles=500, clusters=20, size=4, k=k)
    first_ids = np.arange(len(first), dtype=np.uint64)
    second_ids = np.arange(len(first), len(first) + len(second), dtype=np.uint64) + (1 << 40)
    with env.begin(write=True) as txn:
        assert write_run(txn, databases, scheme, 1, first, first_ids) == len(first)
        assert write_run(txn, databases, scheme, 7, second, second_ids) == len(second)
    queries = np.concatenate([first[:200], second[:50] ^ np.uint64(1 << 63)])
    with env.begin(buffers=True) as txn:
        found = []
        for run_id, entries in ((1, len(first)), (7, len(second))):
            viewed = view_run(txn, databases, scheme, run_id, entries, verify=True)
            assert len(viewed.directories) == scheme.tables
            matches = search(scheme, viewed, queries, k)
            found += list(zip(matches.queries.tolist(), matches.ids.tolist(), strict=True))
            directories = [directory.positions for directory in viewed.directories]
            for column in (viewed.fingerprints, viewed.ids, *viewed.rotated, *directories):
                assert not column.flags.owndata  # a view of the map, not a copy
                assert column.ctypes.data % 8 == 0
    stored = np.concatenate([first, second])
    ids = np.concatenate([first_ids, second_ids])
    assert sorted(found) == brute_force(stored, ids, queries, k)


def test_ids_past_32_bits_take_8_bytes_and_small_ones_4(env: lmdb.Environment) -> None:
    databases = tables(env, SCHEME.tables)
    fingerprints = np.array([5, 6, 7], dtype=np.uint64)
    with env.begin(write=True) as txn:
        write_run(txn, databases, SCHEME, 1, fingerprints, np.array([1, 2, 3], dtype=np.uint64))
        write_run(txn, databases, SCHEME, 2, fingerprints, np.array([1, 2, 1 << 33], dtype=np.uint64))
    with env.begin(buffers=True) as txn:
        assert view_run(txn, databases, SCHEME, 1, 3).ids.dtype.itemsize == 4
        wide = view_run(txn, databases, SCHEME, 2, 3)
        assert wide.ids.dtype.itemsize == 8
        assert sorted(wide.ids.tolist()) == [1, 2, 1 << 33]


def test_an_empty_run_is_a_run_that_finds_nothing(env: lmdb.Environment) -> None:
    databases = tables(env, SCHEME.tables)
    empty = np.empty(0, dtype=np.uint64)
    with env.begin(write=True) as txn:
        write_run(txn, databases, SCHEME, 1, empty, empty)
    with env.begin(buffers=True) as txn:
        viewed = view_run(txn, databases, SCHEME, 1, 0, verify=True)
        assert len(search(SCHEME, viewed, np.array([0, 1], dtype=np.uint64), 5)) == 0


def test_a_run_id_is_written_once_and_dropped_whole(env: lmdb.Environment) -> None:
    databases = tables(env, SCHEME.tables)
    fingerprints = np.array([1, 2, 3], dtype=np.uint64)
    with env.begin(write=True) as txn:
        write_run(txn, databases, SCHEME, 4, fingerprints, fingerprints)
    with env.begin(write=True) as txn, pytest.raises(CorruptStoreError, match="already holds run 4"):
        write_run(txn, databases, SCHEME, 4, fingerprints, fingerprints)
    with env.begin(write=True) as txn:
        drop_run(txn, databases, 4)
    with env.begin(buffers=True) as txn:
        for database in databases:
            assert txn.stat(database)["entries"] == 0
        with pytest.raises(CorruptStoreError, match="lacks value"):
            view_run(txn, databases, SCHEME, 4, 3)


def _flipped(value: bytearray, offset: int) -> bytearray:
    value[offset] ^= 1
    return value


def _set(value: bytearray, offset: int, byte: int) -> bytearray:
    value[offset] = byte
    return value


def _damage(env: lmdb.Environment, database: object, key: bytes, change: object) -> None:
    with env.begin(write=True) as txn:
        value = bytearray(txn.get(key, db=database))
        value = change(value)
        txn.put(key, bytes(value), db=database)


@pytest.mark.parametrize(
    ("table", "kind", "change", "plain_too"),
    [
        (0, columns.KEYS, lambda v: v[: columns.HEADER.size] + v[columns.HEADER.size + 8 * 5000 - 8 :], True),
        (1, columns.KEYS, lambda v: _flipped(v, 40), False),
        (0, columns.IDS, lambda v: _set(v, 0, 9), True),
        (2, columns.DIRECTORY, lambda v: v[:8], True),
        (1, columns.DIRECTORY, lambda v: _set(v, columns.HEADER.size + 4, 1), False),
    ],
    ids=["keys cut short", "keys bit flipped", "ids kind wrong", "directory truncated", "directory wrong"],
)
def test_damage_is_reported_as_corruption(
    env: lmdb.Environment, table: int, kind: int, change: object, plain_too: bool
) -> None:
    databases = tables(env, SCHEME.tables)
    rng = np.random.default_rng(3)
    fingerprints = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    with env.begin(write=True) as txn:
        write_run(txn, databases, SCHEME, 1, fingerprints, np.arange(5000, dtype=np.uint64))
    _damage(env, databases[table], columns.run_key(1, kind), change)
    with env.begin(buffers=True) as txn:
        with pytest.raises(CorruptStoreError):
            view_run(txn, databases, SCHEME, 1, 5000, verify=True)
        if plain_too:  # damage found without the CRC pass, by every reader
            with pytest.raises(CorruptStoreError):
                view_run(txn, databases, SCHEME, 1, 5000)


def test_a_key_that_is_no_run_value_is_refused() -> None:
    assert columns.parse_key(columns.run_key(3, columns.IDS)) == (3, columns.IDS)
    with pytest.raises(CorruptStoreError):
        columns.parse_key(b"\x00\x00\x00\x03\x09")
    with pytest.raises(CorruptStoreError):
        columns.parse_key(b"\x00\x00\x00\x03")


@pytest.mark.parametrize("k", [3, 5, 8])
def test_a_snapshot_in_place_reads_the_map_and_answers_as_a_brute_force_scan(
    env: lmdb.Environment, k: int
) -> None:
    scheme = choose(k, 10_000)
    databases = tables(env, scheme.tables)
    parts = [
        planted(seed=k, singles=4000, clusters=100, size=5, k=k),
        planted(seed=k + 7, singles=300, clusters=10, size=3, k=k),
    ]
    ids = [np.arange(len(parts[0]), dtype=np.uint64), np.arange(len(parts[1]), dtype=np.uint64) + (1 << 35)]
    with env.begin(write=True) as txn:
        for run_id, (part, part_ids) in enumerate(zip(parts, ids, strict=True), start=1):
            write_run(txn, databases, scheme, run_id, part, part_ids)
    queries = np.concatenate([parts[0][:150], parts[1][:30] ^ np.uint64(3)])
    with env.begin(buffers=True) as txn:
        snapshot = snapshot_in_place(txn, databases, scheme, [(1, len(parts[0])), (2, len(parts[1]))])
        assert not snapshot.words.flags.owndata  # the map itself, nothing copied
        assert snapshot.words.nbytes < 40 * (len(parts[0]) + len(parts[1])) + 2 * 8 * 2**22
        matches = snapshot.search(queries, k)
        got = sorted(zip(matches.queries.tolist(), matches.ids.tolist(), strict=True))
    assert got == brute_force(np.concatenate(parts), np.concatenate(ids), queries, k)


@pytest.mark.parametrize("wide_ids", [False, True], ids=["32-bit ids", "ids past 32 bits"])
def test_a_joined_band_run_written_a_stretch_at_a_time_equals_the_whole_join(
    env: lmdb.Environment, wide_ids: bool
) -> None:
    rng = np.random.default_rng(11)
    runs = []
    for size in (300, 120, 0, 50):
        ids = rng.integers(0, 40, size).astype(np.uint64)
        if wide_ids:
            ids[::7] += np.uint64(1 << 40)
        runs.append(
            build_band_run(rng.integers(0, 2**64, size, dtype=np.uint64) & ~np.uint64((1 << 58) - 1), ids)
        )
    dropped = [np.array([3, 4], dtype=np.uint64), None, None, np.array([], dtype=np.uint64)]
    kept = [
        None if gone is None or not len(gone) else ~np.isin(run.ids, gone)
        for run, gone in zip(runs, dropped, strict=True)
    ]
    expected = join_band_runs(runs, dropped)
    (database,) = tables(env, 1)
    with mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", 16), env.begin(write=True) as txn:
        write_joined_band_run(txn, database, 9, runs, kept)
        written = view_band_run(txn, database, 9, verify=True)
        assert np.array_equal(written.keys, expected.keys)
        assert np.array_equal(written.ids.astype(np.uint64), expected.ids.astype(np.uint64))


def test_a_written_run_is_laid_out_as_build_run_lays_it_out(env: lmdb.Environment) -> None:
    rng = np.random.default_rng(12)
    fingerprints = rng.integers(0, 2**64, 5_000, dtype=np.uint64)
    fingerprints[::3] = fingerprints[0]  # ties, broken by id
    ids = rng.permutation(5_000).astype(np.uint32)
    expected = build_run(SCHEME, fingerprints, ids)
    databases = tables(env, SCHEME.tables)
    with mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", 700), env.begin(write=True) as txn:
        write_run(txn, databases, SCHEME, 4, fingerprints, ids)
        written = view_run(txn, databases, SCHEME, 4, 5_000, verify=True)
        for table in range(SCHEME.tables):
            assert np.array_equal(written.column(table), expected.column(table))
            assert np.array_equal(written.directories[table].positions, expected.directories[table].positions)
        assert np.array_equal(written.ids, expected.ids)


def stepped_afresh(
    env: lmdb.Environment,
    viewed: Callable[[Any], list[Any]],
    start: Callable[[list[Any]], Generator[Any, Any, int]],
) -> tuple[list[tuple[Any, ...]], int, int]:
    """Drive a join's steps as a join prepared outside a write would: a new
    read transaction for every step, the runs ``viewed`` in it, the values
    each step finished kept (as bytes) to the end. Returns the values, how
    many steps were taken, and the entry count."""
    reader = env.begin(buffers=True)
    steps = start(viewed(reader))
    values: list[tuple[Any, ...]] = []
    taken = 0
    try:
        finished = next(steps)
        while True:
            values += [(*item[:-1], bytes(item[-1])) for item in finished]
            taken += 1
            reader.abort()
            reader = env.begin(buffers=True)
            finished = steps.send(viewed(reader))
    except StopIteration as done:
        return values, taken, int(done.value)
    finally:
        reader.abort()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [1, 3, 16])
def test_a_join_stepped_with_its_runs_viewed_afresh_equals_the_join_in_one_go(
    env: lmdb.Environment, seed: int, chunk: int
) -> None:
    """join_values driven as a join prepared outside a write would be: a new
    read transaction for every step, the runs viewed in it, the finished
    values kept until the end. Its values are byte for byte those join_run
    puts in one go, whose entries are each kept (fingerprint, id) once."""
    rng = np.random.default_rng(seed)
    scheme = SCHEME if seed % 2 else MultiIndex((32, 32), (1, 1))
    databases = tables(env, scheme.tables)
    runs: list[tuple[int, np.ndarray, np.ndarray]] = []
    with env.begin(write=True) as txn:
        for run_id, size in enumerate(rng.integers(0, 60, 4).tolist(), start=1):
            fingerprints = rng.integers(0, 2**64, size, dtype=np.uint64)
            fingerprints[::5] &= ~np.uint64((1 << 60) - 1)  # crowded prefixes
            ids = rng.integers(0, 1 << 20, size).astype(np.uint64)
            if runs and size:
                # A document given back a fingerprint an older run holds for it.
                fingerprints[0], ids[0] = (
                    runs[0][1][0] if len(runs[0][1]) else 7,
                    runs[0][2][0] if len(runs[0][2]) else 7,
                )
            write_run(txn, databases, scheme, run_id, fingerprints, ids)
            runs.append((run_id, fingerprints, ids))
    kept = [None if rng.random() < 0.4 else rng.random(len(fps)) < 0.7 for _run_id, fps, _ids in runs]

    def viewed(txn: lmdb.Transaction) -> list[object]:
        return [view_run(txn, databases, scheme, run_id, len(fps)) for run_id, fps, _ids in runs]

    with mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", chunk):
        values, taken, entries = stepped_afresh(env, viewed, lambda runs: join_values(scheme, runs, kept))
        held = {(table, kind): value for table, kind, value in values}
        with env.begin(write=True, buffers=True) as txn:
            assert join_run(txn, databases, scheme, 99, viewed(txn), kept) == entries  # type: ignore[arg-type]
            put = {
                (table, kind): bytes(txn.get(columns.run_key(99, kind), db=databases[table]))
                for table in range(scheme.tables)
                for kind in (columns.KEYS, columns.IDS, columns.DIRECTORY)
                if txn.get(columns.run_key(99, kind), db=databases[table]) is not None
            }
    # (A run's mask is over its entries as stored: sorted by fingerprint, then id.)
    expected: set[tuple[int, int]] = set()
    with env.begin(buffers=True) as txn:
        for run, keep in zip(viewed(txn), kept, strict=True):
            pairs = zip(run.fingerprints.tolist(), run.ids.tolist(), strict=True)  # type: ignore[attr-defined]
            expected |= {pair for at, pair in enumerate(pairs) if keep is None or keep[at]}
    assert entries == len(expected)
    assert held == put
    assert taken > 1 or not entries
    if entries:
        with env.begin(buffers=True) as txn:
            joined = view_run(txn, databases, scheme, 99, entries, verify=True)
            assert sorted(zip(joined.fingerprints.tolist(), joined.ids.tolist(), strict=True)) == sorted(
                expected
            )


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_a_band_join_stepped_with_its_runs_viewed_afresh_equals_the_join_in_one_go(
    env: lmdb.Environment, wide: bool, chunk: int
) -> None:
    """join_band_values driven with a new read transaction per step and the
    values held to the end: byte for byte what write_joined_band_run puts."""
    rng = np.random.default_rng(chunk)
    (database,) = tables(env, 1)
    sizes = (90, 0, 40, 25)
    with env.begin(write=True) as txn:
        for run_id, size in enumerate(sizes, start=1):
            ids = rng.integers(0, 30, size).astype(np.uint64)
            if wide:
                ids[::5] += np.uint64(1 << 40)
            keys = rng.integers(0, 2**64, size, dtype=np.uint64) & ~np.uint64((1 << 59) - 1)
            write_band_run(txn, database, run_id, build_band_run(keys, ids))
    run_ids = range(1, len(sizes) + 1)
    with env.begin(buffers=True) as txn:
        lengths = [len(view_band_run(txn, database, run_id)) for run_id in run_ids]
    kept = [None, None, rng.random(lengths[2]) < 0.5, rng.random(lengths[3]) < 0.8]

    def viewed(txn: lmdb.Transaction) -> list[object]:
        return [view_band_run(txn, database, run_id) for run_id in run_ids]

    with mock.patch("simstore.index.column_merge.CHUNK_ENTRIES", chunk):
        values, taken, entries = stepped_afresh(env, viewed, lambda runs: join_band_values(runs, kept))
        held = dict(values)
        with env.begin(write=True, buffers=True) as txn:
            write_joined_band_run(txn, database, 99, viewed(txn), kept)  # type: ignore[arg-type]
            put = {kind: bytes(txn.get(columns.run_key(99, kind), db=database)) for kind in held}
            assert len(view_band_run(txn, database, 99, verify=True)) == entries
    assert set(held) == {columns.BAND_KEYS, columns.BAND_IDS}
    assert held == put
    assert taken > 1 or wide
