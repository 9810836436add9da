"""Joining sorted runs: the merge equals sorting from scratch, whatever the
runs hold (equal fingerprints across runs, a newer run holding an older id,
a document held twice)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from simstore.index.column_merge import (
    fingerprint_then_id_order,
    first_of_each,
    id_bytes_kept,
    ids_stretch_into,
    keys_stretch_into,
    merge_first,
    merge_rotated,
    rotated_column,
    rotated_stretch_into,
    stretch_count,
    stretch_cuts,
)
from simstore.index.multi_index import MultiIndex

SCHEME = MultiIndex((21, 21, 22), (1, 1, 1))
# Few distinct values, so that runs share fingerprints and ids.
entries = st.lists(st.tuples(st.sampled_from([0, 1, 5, 2**63, 2**64 - 1]), st.integers(0, 6)), max_size=12)


def _runs(drawn: list[list[tuple[int, int]]]) -> list[tuple[np.ndarray, np.ndarray]]:
    runs = []
    for run in drawn:
        run = sorted(run)  # each run sorted by fingerprint, ties by id
        runs.append(
            (
                np.array([fp for fp, _ in run], dtype=np.uint64),
                np.array([doc for _, doc in run], dtype=np.uint32),
            )
        )
    return runs


@given(st.lists(entries, min_size=1, max_size=4))
def test_merge_first_sorts_by_fingerprint_then_id(drawn: list[list[tuple[int, int]]]) -> None:
    runs = _runs(drawn)
    fingerprints = np.concatenate([fps for fps, _ in runs])
    ids = np.concatenate([doc_ids for _, doc_ids in runs])
    out = np.empty(len(fingerprints), dtype=np.uint64)
    order = merge_first(fingerprints, ids, out)
    expected = sorted(zip(fingerprints.tolist(), ids.tolist(), strict=True))
    assert list(zip(out.tolist(), ids[order].tolist(), strict=True)) == expected

    keep = first_of_each(out, ids[order])
    kept = (
        expected
        if keep is None
        else [pair for pair, flag in zip(expected, keep.tolist(), strict=True) if flag]
    )
    assert kept == sorted(set(expected))


@given(st.lists(st.lists(st.integers(0, 2**64 - 1), max_size=10), min_size=1, max_size=4))
def test_rotated_columns_merge_or_are_made_as_sorting_would(drawn: list[list[int]]) -> None:
    fingerprints = np.array([fp for run in drawn for fp in run], dtype=np.uint64)
    for table in range(SCHEME.tables):
        columns = [np.sort(SCHEME.rotate(np.array(run, dtype=np.uint64), table)) for run in drawn]
        expected = np.sort(SCHEME.rotate(fingerprints, table))
        merged = np.empty(len(fingerprints), dtype=np.uint64)
        merge_rotated(columns, merged)
        made = np.empty(len(fingerprints), dtype=np.uint64)
        rotated_column(SCHEME, table, fingerprints, made)
        assert np.array_equal(merged, expected)
        assert np.array_equal(made, expected)


@given(
    st.lists(entries, min_size=1, max_size=4),
    st.integers(1, 6),
    st.data(),
)
def test_a_join_a_stretch_at_a_time_equals_sorting_the_entries_kept(
    drawn: list[list[tuple[int, int]]], chunk: int, data: st.DataObject
) -> None:
    runs = _runs(drawn)
    kept = [
        data.draw(
            st.none()
            | st.lists(st.booleans(), min_size=len(fps), max_size=len(fps)).map(
                lambda flags: np.array(flags, dtype=bool)
            )
        )
        for fps, _ in runs
    ]
    total = sum(len(fps) for fps, _ in runs)
    fingerprints, ids = [fps for fps, _ in runs], [doc_ids for _, doc_ids in runs]
    out_ids = np.full(total, 7, dtype=np.uint32)
    cuts = stretch_cuts(fingerprints, chunk)
    written, repeated = 0, []
    for stretch in range(stretch_count(cuts)):
        left, twice = ids_stretch_into(fingerprints, ids, kept, cuts, stretch, out_ids, written)
        written += left
        repeated.append(twice)
    out = np.full(written, 7, dtype=np.uint64)
    filled = 0
    for stretch in range(stretch_count(cuts)):
        filled += keys_stretch_into(fingerprints, ids, kept, cuts, stretch, out, filled, repeated[stretch])
    assert filled == written
    expected = sorted(
        {
            (fp, doc)
            for (fps, ids), keep in zip(runs, kept, strict=True)
            for fp, doc, flag in zip(
                fps.tolist(), ids.tolist(), [True] * len(fps) if keep is None else keep.tolist(), strict=True
            )
            if flag
        }
    )
    assert list(zip(out[:written].tolist(), out_ids[:written].tolist(), strict=True)) == expected


@given(
    st.lists(
        st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([0, 3, 2**64 - 1]), max_size=10),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 6),
)
def test_rotated_columns_merged_or_made_a_stretch_at_a_time_are_sorted_whole(
    drawn: list[list[int]], chunk: int
) -> None:
    fingerprints = np.array([fp for run in drawn for fp in run], dtype=np.uint64)
    for table in range(SCHEME.tables):
        columns = [np.sort(SCHEME.rotate(np.array(run, dtype=np.uint64), table)) for run in drawn]
        expected = np.sort(SCHEME.rotate(fingerprints, table))
        merged = np.empty(len(fingerprints), dtype=np.uint64)
        cuts, at = stretch_cuts(columns, chunk), 0
        for stretch in range(stretch_count(cuts)):
            at += rotated_stretch_into(columns, cuts, stretch, merged, at)
        made = np.empty(len(fingerprints), dtype=np.uint64)
        rotated_column(SCHEME, table, fingerprints, made, chunk)
        assert np.array_equal(merged, expected)
        assert np.array_equal(made, expected)


@given(st.lists(st.lists(st.integers(0, 50), max_size=30), min_size=1, max_size=4), st.integers(1, 8))
def test_stretches_cut_every_column_at_the_same_values(drawn: list[list[int]], chunk: int) -> None:
    columns = [np.array(sorted(run), dtype=np.uint64) for run in drawn]
    cuts = stretch_cuts(columns, chunk)
    stretches = len(cuts[0]) - 1
    assert all(
        len(cut) == stretches + 1 and cut[0] == 0 and cut[-1] == len(column)
        for cut, column in zip(cuts, columns, strict=True)
    )
    assert all(bool(np.all(np.diff(cut) >= 0)) for cut in cuts)
    # Every value of stretch j is below every value of stretch j + 1, in every column.
    for stretch in range(stretches - 1):
        below = [column[cut[stretch] : cut[stretch + 1]] for column, cut in zip(columns, cuts, strict=True)]
        above = [column[cut[stretch + 1] : cut[-1]] for column, cut in zip(columns, cuts, strict=True)]
        top = max((int(part.max()) for part in below if len(part)), default=-1)
        bottom = min((int(part.min()) for part in above if len(part)), default=2**64)
        assert top < bottom


def test_stretches_are_about_the_chunk_long() -> None:
    rng = np.random.default_rng(5)
    columns = [np.sort(rng.integers(0, 2**64, size, dtype=np.uint64)) for size in (40_000, 25_000, 5_000, 0)]
    cuts = stretch_cuts(columns, 7_000)
    lengths = sum(np.diff(cut) for cut in cuts)
    assert len(lengths) >= 8
    assert int(lengths.max()) <= 2 * 7_000
    assert int(lengths.sum()) == 70_000


def test_a_join_takes_8_byte_ids_only_if_an_id_it_keeps_needs_them() -> None:
    small = np.array([1, 2, 3], dtype=np.uint32)
    large = np.array([5, 1 << 40, 7], dtype=np.uint64)
    assert id_bytes_kept([small, small], [None, None], chunk=2) == 4
    assert id_bytes_kept([small, large], [None, None], chunk=2) == 8
    assert id_bytes_kept([small, large], [None, np.array([True, False, True])], chunk=2) == 4
    assert id_bytes_kept([large], [np.array([False, True, False])], chunk=1) == 8


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 1, 5, 2**63, 2**64 - 1]) | st.integers(0, 2**64 - 1), st.integers(0, 9)
        ),
        max_size=40,
    )
)
def test_the_fingerprint_then_id_order_is_lexsorts(entries_drawn: list[tuple[int, int]]) -> None:
    fingerprints = np.array([fp for fp, _ in entries_drawn], dtype=np.uint64)
    ids = np.array([doc for _, doc in entries_drawn], dtype=np.uint32)
    order = fingerprint_then_id_order(fingerprints, ids)
    expected = np.lexsort((ids, fingerprints))
    # Equal (fingerprint, id) pairs may come in either order: compare what the orders give.
    assert np.array_equal(fingerprints[order], fingerprints[expected])
    assert np.array_equal(ids[order], ids[expected])
    assert sorted(order.tolist()) == list(range(len(entries_drawn)))
