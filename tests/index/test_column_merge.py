"""Joining sorted runs: the merge equals sorting from scratch, whatever the
runs hold (equal fingerprints across runs, a newer run holding an older id,
a document held twice)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from simstore.index.column_merge import first_of_each, merge_first, merge_rotated, rotated_column
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
