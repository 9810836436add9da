"""Hugging Face ``datasets``: deduplicate a ``Dataset`` within itself, or
against an existing store, without holding it in memory (issue 22).

A ``Dataset`` is Arrow on disk, memory-mapped: both functions read its text
column a batch at a time (``batch_size`` rows), and return a ``Dataset``
built with ``select`` (an index mapping over the same Arrow data, not a
copy) or, when annotating, with the provenance columns added. Install the
``datasets`` package (the optional ``datasets`` extra); this module imports
it only through the objects it is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.io.tables import check_keep, cluster_rows

__all__ = ["against_dataset", "dedup_dataset"]

#: Rows read from the dataset at a time.
BATCH_ROWS = 10_000
#: The columns ``annotate=True`` adds, in this order.
PROVENANCE_COLUMNS = ("cluster_id", "duplicate_of", "distance", "similarity", "cluster_size")


def _texts(dataset: Any, text_column: str, batch_size: int) -> Iterator[tuple[int, list[str]]]:
    """``(first row, texts)`` of each batch of ``dataset``'s text column."""
    if text_column not in dataset.column_names:
        raise InvalidValueError(f"no column {text_column!r}; the dataset has {dataset.column_names}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidValueError(f"batch_size must be a positive int, got {batch_size!r}")
    column = dataset.select_columns([text_column])
    for start in range(0, len(dataset), batch_size):
        texts = column[start : start + batch_size][text_column]
        if any(not isinstance(text, str) for text in texts):
            raise InvalidTypeError(f"column {text_column!r} must hold strings, without nulls")
        yield start, texts


def dedup_dataset(
    dataset: Any,
    text_column: str = "text",
    id_column: str | None = None,
    *,
    k: int | None = None,
    min_similarity: float | None = None,
    keep: str = "first",
    linkage: str = "star",
    annotate: bool = False,
    store_path: str | os.PathLike[str] | None = None,
    batch_size: int = BATCH_ROWS,
) -> Any:
    """The rows of ``dataset`` that are kept, one per cluster of
    near-duplicates (as :func:`simstore.dedup_table` chooses them); with
    ``annotate``, every row with the columns ``cluster_id``, ``duplicate_of``
    (``id_column``'s value of the row kept in its place, or its position),
    ``distance``, ``similarity`` and ``cluster_size`` (how many rows its
    cluster holds; 1 for a row in no cluster) added instead.

    Documents are stored under their row positions, in a temporary store or
    ``store_path`` (created if missing, and kept)."""
    check_keep(keep)
    if id_column is not None and id_column not in dataset.column_names:
        raise InvalidValueError(f"no column {id_column!r}; the dataset has {dataset.column_names}")
    batches = (
        (range(start, start + len(texts)), texts) for start, texts in _texts(dataset, text_column, batch_size)
    )
    found = cluster_rows(
        batches,
        None,  # documents are stored under their row positions
        len(dataset),
        k=k,
        min_similarity=min_similarity,
        keep=keep,
        linkage=linkage,
        store_path=store_path,
    )
    if not annotate:
        return dataset.select(np.flatnonzero(found.kept))
    duplicate_of: list[Any] = found.duplicate_of
    if id_column is not None:
        ids = dataset[id_column]
        duplicate_of = [None if row is None else ids[row] for row in duplicate_of]
    return _with_columns(
        dataset, found.cluster_id, duplicate_of, found.distance, found.similarity, found.cluster_size.tolist()
    )


def against_dataset(
    dataset: Any,
    store: Any,
    text_column: str = "text",
    *,
    k: int | None = None,
    min_similarity: float | None = None,
    annotate: bool = False,
    batch_size: int = BATCH_ROWS,
) -> Any:
    """The rows of ``dataset`` with no near-duplicate in ``store`` (an open
    :class:`simstore.Store` or :class:`simstore.ShardedStore`), inserting
    nothing: a new crawl deduplicated against an old one. With ``annotate``,
    every row, with ``duplicate_of`` (the closest stored match's key),
    ``distance`` and ``similarity`` added (``cluster_id`` is null, and
    ``cluster_size`` null for a matched row, which was not clustered, and 1
    for the others, as ``simstore dedup --against --annotate`` gives them)."""
    count = len(dataset)
    duplicate_of: list[Any] = [None] * count
    distance: list[int | None] = [None] * count
    similarity: list[float | None] = [None] * count
    cluster_size: list[int | None] = [1] * count
    for start, texts in _texts(dataset, text_column, batch_size):
        # The closest match is all a row needs: the query stops at it.
        answers = store.query_many(texts=texts, k=k, min_similarity=min_similarity, limit=1)
        for offset, matches in enumerate(answers):
            if matches:
                closest = matches[0]  # sorted by distance, then key
                duplicate_of[start + offset] = closest.key
                distance[start + offset] = closest.distance
                similarity[start + offset] = closest.similarity
                cluster_size[start + offset] = None
    if not annotate:
        return dataset.select([row for row in range(count) if duplicate_of[row] is None])
    return _with_columns(dataset, [None] * count, duplicate_of, distance, similarity, cluster_size)


def _with_columns(dataset: Any, *columns: list[Any]) -> Any:
    for name in PROVENANCE_COLUMNS:
        if name in dataset.column_names:
            raise InvalidValueError(f"the dataset already has a column {name!r}")
    for name, values in zip(PROVENANCE_COLUMNS, columns, strict=True):
        dataset = dataset.add_column(name, values)
    return dataset
