"""The column search equals a brute-force Hamming scan, at every k and for
every scheme offered, with repeated fingerprints, and reports each match once."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from _oracles import planted
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.errors import InvalidValueError
from simstore.index.column_search import (
    MAX_DIRECTORY_BITS,
    MIN_DIRECTORY_BITS,
    RunPlace,
    Snapshot,
    build_directory,
    build_run,
    directory_bits,
    search,
)
from simstore.index.multi_index import MultiIndex, choose, exact_schemes


def brute_force(
    stored: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int
) -> list[tuple[int, int, int]]:
    distances = np.bitwise_count(queries[:, np.newaxis] ^ stored[np.newaxis, :]).astype(np.int64)
    rows, columns = np.nonzero(distances <= k)
    return sorted(zip(rows.tolist(), ids[columns].tolist(), distances[rows, columns].tolist(), strict=True))


def found(
    scheme: MultiIndex,
    stored: np.ndarray,
    ids: np.ndarray,
    queries: np.ndarray,
    k: int,
) -> list[tuple[int, int, int]]:
    matches = search(scheme, build_run(scheme, stored, ids), queries, k)
    return sorted(
        zip(matches.queries.tolist(), matches.ids.tolist(), matches.distances.tolist(), strict=True)
    )


def near_queries(stored: np.ndarray, count: int, max_flips: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    queries = stored[rng.integers(0, len(stored), count)].copy()
    for row in range(count):
        for bit in rng.choice(64, size=int(rng.integers(0, max_flips + 1)), replace=False).tolist():
            queries[row] ^= np.uint64(1 << bit)
    return queries


@pytest.mark.parametrize("k", range(13))
def test_every_scheme_equals_brute_force_at_its_k_and_below(k: int) -> None:
    stored = planted(seed=k, singles=600, clusters=40, size=6, k=k)
    ids = np.arange(1000, 1000 + len(stored), dtype=np.uint64)
    queries = np.concatenate(
        [near_queries(stored, 60, k + 2, seed=k), np.array([0, 2**64 - 1], dtype=np.uint64)]
    )
    for scheme in list(exact_schemes(k))[:8]:
        for distance in {0, k // 2, k}:
            expected = brute_force(stored, ids, queries, distance)
            assert found(scheme, stored, ids, queries, distance) == expected, (
                scheme.label(),
                distance,
            )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), min_size=0, max_size=40),
    st.lists(st.integers(0, 2**64 - 1), min_size=0, max_size=8),
    st.integers(0, 12),
    st.data(),
)
def test_search_equals_brute_force(
    stored_values: list[int], query_values: list[int], k: int, data: st.DataObject
) -> None:
    # Queries are near stored ones (with repeats among the stored) so that
    # matches exist: every query's neighbours are stored fingerprints with a
    # few bits flipped.
    stored = np.array(stored_values + stored_values[:3], dtype=np.uint64)
    near = [value ^ (1 << data.draw(st.integers(0, 63))) for value in stored_values[:4]]
    queries = np.array(query_values + near + stored_values[:2], dtype=np.uint64)
    ids = np.array(data.draw(st.permutations(range(len(stored)))), dtype=np.uint64)
    scheme = data.draw(st.sampled_from(list(exact_schemes(k))))
    assert found(scheme, stored, ids, queries, k) == brute_force(stored, ids, queries, k)


def test_each_match_is_reported_once_even_when_every_table_finds_it() -> None:
    scheme = MultiIndex((21, 21, 22), (1, 1, 1))
    stored = np.array([12345, 12345 ^ 1, 2**63], dtype=np.uint64)
    ids = np.array([7, 8, 9], dtype=np.uint64)
    matches = search(scheme, build_run(scheme, stored, ids), np.array([12345], dtype=np.uint64), 5)
    assert sorted(matches.ids.tolist()) == [7, 8]
    assert sorted(matches.distances.tolist()) == [0, 1]


def test_empty_runs_and_batches_find_nothing() -> None:
    scheme = MultiIndex((32, 32), (1, 1))
    empty = np.empty(0, dtype=np.uint64)
    assert len(search(scheme, build_run(scheme, empty, empty), np.array([1, 2], dtype=np.uint64), 3)) == 0
    run = build_run(scheme, np.array([1, 2], dtype=np.uint64), np.array([1, 2], dtype=np.uint64))
    assert len(search(scheme, run, empty, 3)) == 0


def test_a_k_past_the_scheme_is_refused() -> None:
    scheme = MultiIndex((32, 32), (1, 1))
    run = build_run(scheme, np.array([1], dtype=np.uint64), np.array([1], dtype=np.uint64))
    with pytest.raises(InvalidValueError, match="answers k up to 3"):
        search(scheme, run, np.array([1], dtype=np.uint64), 4)
    with pytest.raises(InvalidValueError):
        build_run(scheme, np.array([1, 2], dtype=np.uint64), np.array([1], dtype=np.uint64))


def test_directory_slots_hold_a_few_keys_and_never_pass_the_segment() -> None:
    assert directory_bits(10_000_000, 21) == 21
    assert directory_bits(1_000_000, 21) == 19
    assert directory_bits(10, 21) == MIN_DIRECTORY_BITS
    assert directory_bits(10, 8) == 8
    assert directory_bits(10**10, 64) == MAX_DIRECTORY_BITS
    keys = np.sort(np.random.default_rng(1).integers(0, 2**64, 1000, dtype=np.uint64))
    directory = build_directory(keys, 9)
    slots = (keys >> np.uint64(55)).astype(np.int64)
    for slot in (0, 100, 511):
        assert int(directory.positions[slot]) == int(np.searchsorted(slots, slot))
    assert int(directory.positions[-1]) == 1000
    assert build_directory(keys, 0).positions.tolist() == [0, 1000]
    with pytest.raises(InvalidValueError):
        build_directory(keys, MAX_DIRECTORY_BITS + 1)


@pytest.mark.parametrize("k", [0, 3, 5, 8])
def test_a_snapshot_of_several_runs_equals_brute_force_over_their_union(k: int) -> None:
    # Runs of different sizes (one empty, one a crowd of one repeated
    # fingerprint and its neighbours), searched together.
    scheme = exact_schemes_for_test(k)
    rng = np.random.default_rng(k)
    crowd_value = int(rng.integers(0, 2**63))
    crowd = np.array(
        [crowd_value] * 300 + [crowd_value ^ (1 << bit) for bit in range(0, 64, 3)], dtype=np.uint64
    )
    parts = [planted(seed=k, singles=2000, clusters=50, size=5, k=k), np.empty(0, dtype=np.uint64), crowd]
    ids = [np.arange(len(part), dtype=np.uint64) + 10_000 * index for index, part in enumerate(parts)]
    snapshot = Snapshot.of(
        scheme, [build_run(scheme, part, part_ids) for part, part_ids in zip(parts, ids, strict=True)]
    )
    stored, all_ids = np.concatenate(parts), np.concatenate(ids)
    queries = np.concatenate([near_queries(parts[0], 100, k + 1, seed=k), crowd[:2], crowd[-3:]])
    matches = snapshot.search(queries, k)
    got = sorted(zip(matches.queries.tolist(), matches.ids.tolist(), matches.distances.tolist(), strict=True))
    assert got == brute_force(stored, all_ids, queries, k)
    assert len(got) == len(set(got))


def exact_schemes_for_test(k: int) -> MultiIndex:
    return list(exact_schemes(k))[-1]


@pytest.mark.parametrize("k", [0, 2, 5, 8, 12])
def test_a_query_alone_finds_what_it_finds_in_a_batch(k: int) -> None:
    # One query takes a path of its own (fewer numpy calls): it must agree
    # with the batch and with a brute-force scan, crowds included.
    scheme = choose(k, 10_000)
    crowd = np.full(40, 0xDEADBEEF12345678, dtype=np.uint64)
    stored = np.concatenate([planted(seed=k, singles=1500, clusters=30, size=4, k=k), crowd])
    ids = np.arange(len(stored), dtype=np.uint64) * 3
    snapshot = Snapshot.of(scheme, [build_run(scheme, stored, ids)])
    queries = np.concatenate([near_queries(stored, 25, k + 1, seed=k + 1), crowd[:1] ^ np.uint64(1)])
    batch = snapshot.search(queries, k)
    for row, query in enumerate(queries.tolist()):
        alone = snapshot.search(np.array([query], dtype=np.uint64), k)
        assert sorted(alone.queries.tolist()) == [0] * len(alone)
        got = sorted(zip(alone.ids.tolist(), alone.distances.tolist(), strict=True))
        in_batch = sorted(
            (doc, distance)
            for at, doc, distance in zip(
                batch.queries.tolist(), batch.ids.tolist(), batch.distances.tolist(), strict=True
            )
            if at == row
        )
        assert got == in_batch
        assert got == [(doc, d) for _, doc, d in brute_force(stored, ids, np.array([query], np.uint64), k)]


@given(
    st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 7 << 60, 2**64 - 1]), max_size=60),
    st.integers(0, 12),
    st.integers(1, 9),
)
def test_a_directory_counted_a_stretch_at_a_time_counts_every_slot(
    values: list[int], bits: int, chunk: int
) -> None:
    keys = np.sort(np.array(values, dtype=np.uint64))
    slots = [value >> (64 - bits) if bits else 0 for value in sorted(values)]
    expected = [sum(slot < end for slot in slots) for end in range((1 << bits) + 1)]
    with mock.patch("simstore.index.column_search.DIRECTORY_CHUNK", chunk):
        assert build_directory(keys, bits).positions.tolist() == expected


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 2**63, 2**64 - 1]), min_size=1, max_size=60),
    st.integers(0, 12),
    st.sampled_from([1, 2, 32]),
    st.data(),
)
def test_a_query_alone_equals_brute_force_whichever_path_it_takes(
    values: list[int], k: int, block_keys: int, data: st.DataObject
) -> None:
    # A single query reads each probe's slot as a block of keys when no
    # slot holds more than a block (else it takes the batch's path); with
    # blocks of 1 and 2 keys both paths run, and slots crowd (repeats).
    stored = np.array(values + values[: data.draw(st.integers(0, 5))], dtype=np.uint64)
    ids = np.arange(len(stored), dtype=np.uint64) + 5
    scheme = data.draw(st.sampled_from(list(exact_schemes(k))[:6]))
    with mock.patch("simstore.index.column_search.BLOCK_KEYS", block_keys):
        snapshot = Snapshot.of(scheme, [build_run(scheme, stored, ids)])
    for query in [values[0], values[-1] ^ (1 << data.draw(st.integers(0, 63))), 0, 2**64 - 1]:
        got = sorted(zip(*snapshot.search_one(query, k), strict=True))
        assert got == [(doc, d) for _, doc, d in brute_force(stored, ids, np.array([query], np.uint64), k)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 40) | st.integers(2**64 - 40, 2**64 - 1), min_size=1, max_size=30),
    st.sampled_from([0, 3, 5]),
    st.data(),
)
def test_a_query_alone_never_reads_a_block_past_the_buffer(
    values: list[int], k: int, data: st.DataObject
) -> None:
    # A column that ends where the buffer ends (a store's last value in the
    # map) leaves a block no room to run past its slot: such a snapshot
    # takes the batch's path, and finds what is there. Keys crowd at both
    # ends of the key space, so the last slots are full.
    stored = np.array(values, dtype=np.uint64)
    ids = np.arange(len(stored), dtype=np.uint64)
    scheme = data.draw(st.sampled_from(list(exact_schemes(k))[:4]))
    run = build_run(scheme, stored, ids)
    # Ids, then directories, then the columns, the last table's last of all.
    parts = [run.ids.astype("<u8")] + [
        np.append(d.positions.astype("<u4"), np.zeros(len(d.positions) % 2, "<u4")).view("<u8")
        for d in run.directories
    ]
    parts += [run.column(table).astype("<u8") for table in range(scheme.tables)]
    starts = np.cumsum([0] + [len(part) for part in parts]).tolist()
    tables = scheme.tables
    place = RunPlace(
        entries=len(stored),
        key_words=tuple(starts[1 + tables : 1 + 2 * tables]),
        directory_bits=tuple(d.bits for d in run.directories),
        directory_halves=tuple(2 * start for start in starts[1 : 1 + tables]),
        id_index=starts[0],
        id_bytes=8,
    )
    snapshot = Snapshot(scheme, np.concatenate(parts), [place])
    for query in [values[-1], values[0] ^ 1, 2**64 - 1, 0]:
        got = sorted(zip(*snapshot.search_one(query, k), strict=True))
        assert got == [(doc, d) for _, doc, d in brute_force(stored, ids, np.array([query], np.uint64), k)]


def test_slots_full_on_average_are_read_in_wider_blocks() -> None:
    # A directory of 8-bit slots over 30K keys holds about 120 keys a slot:
    # single queries read blocks that wide (not the batch's path) and still
    # find exactly what a scan finds.
    scheme = MultiIndex((8,) * 8, (0,) * 8)
    stored = planted(seed=3, singles=30_000, clusters=50, size=5, k=5)
    ids = np.arange(len(stored), dtype=np.uint64)
    snapshot = Snapshot.of(scheme, [build_run(scheme, stored, ids)])
    assert snapshot._block_limit > 128
    for query in near_queries(stored, 20, 5, seed=4).tolist():
        assert snapshot._block_candidates(query, 5) is not None
        got = sorted(zip(*snapshot.search_one(query, 5), strict=True))
        assert got == [(doc, d) for _, doc, d in brute_force(stored, ids, np.array([query], np.uint64), 5)]
