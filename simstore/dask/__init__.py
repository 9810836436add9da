"""Corpus-scale dedup and sharded stores on Dask (the optional ``dask`` extra).

Install with ``pip install 'simstore[dask]'``. Every function takes a Dask
DataFrame (or Bag, for :func:`fingerprint`) and returns a lazy Dask
collection, except :func:`build_stores`, which writes files and so runs at
once. They work on any Dask scheduler: the threads of one process, a
``distributed.LocalCluster``, or a cluster of many machines.

- :func:`fingerprint`: text to uint64 fingerprints, per partition, in the workers.
- :func:`near_duplicate_pairs`: Manku et al.'s batch mode. For every
  permutation table each document emits ``(table, leading prefix)``; a
  shuffle brings equal ones into one partition, where the same vectorised
  comparison as :meth:`simstore.Store.near_duplicate_pairs` runs; a pair is
  kept only by the first table whose prefix it shares, so the union over
  tables has no duplicates without any dedup step.
- :func:`clusters`: connected components of those pairs, with the
  single-machine representative policies.
- :func:`build_stores`: one store file per shard (a document's shard is the
  hash of its key, :func:`simstore.index.sharding.shard_of`), for
  :class:`simstore.ShardedStore` to serve.
- :func:`against`: a new batch deduplicated against existing stores, without
  inserting it.

Rows are told apart and ordered by their *position* in the input (partition
number, then row), never by the DataFrame's index, so any index works; "the
first" document of a pair or cluster is the one earlier in the input, as in a
store filled in input order.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

try:
    import dask
    import dask.bag as db
    import dask.dataframe as dd
    import pandas as pd
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("simstore.dask needs Dask: pip install 'simstore[dask]'") from exc

import numpy as np

from simstore.dask.partitioned import (
    CLUSTER_COLUMNS,
    Grouping,
    band_pairs,
    bucket_forest,
    checked_fingerprints,
    cluster_members,
    distinct_pairs,
    empty_frame,
    finished_pairs,
    judged_forest,
    labelled_parts,
    left_halves,
    pack_keys,
    picked_members,
    plain_value,
    positions,
    right_pairs,
    routed_edges,
    scatter_bands,
    scatter_partition,
    unpack_keys,
    with_side,
)
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.fingerprinting.sketch import Sketch, SketchRows, check_similarity, sketch_rows
from simstore.index.permute import Table, validate_k
from simstore.index.prefix_shuffle import combine_forests
from simstore.index.sharding import check_shards, shards_of_packed
from simstore.layout.choose import DEFAULT_K, LayoutRequest, choose_layout
from simstore.options import Options
from simstore.store.arguments import check_flag
from simstore.store.dedup import KEEP_POLICIES, KeepPolicy
from simstore.store.opening import MODES
from simstore.store.opening import open as open_store
from simstore.store.sharded import ShardedStore

__all__ = [
    "against",
    "build_stores",
    "clusters",
    "fingerprint",
    "fingerprint_and_sketch",
    "near_duplicate_pairs",
]

#: How many forests one task of the component tree combines.
FOREST_FAN_IN = 8
#: Input partitions per bucket of the pair search by default (and per group
#: that pairs and cluster members visit): fewer buckets, fewer tasks (the
#: scheduler's cost is per task), more memory per task.
PARTITIONS_PER_BUCKET = 4

_FINGERPRINT_META = pd.Series(dtype="uint64", name="fingerprint")
_SKETCHED_META = {"fingerprint": "uint64", "sketch": "object"}
_PAIRS_META = {"key_a": "object", "key_b": "object", "distance": "uint8", "similarity": "float64"}
_AGAINST_META = {"key": "object", "match_key": "object", "distance": "uint8", "similarity": "float64"}
_WRITTEN_META = {"shard": "int64", "path": "object", "documents": "int64"}


# ------------------------------------------------------------- fingerprints


def fingerprint(
    data: dd.DataFrame | dd.Series | db.Bag,
    text_column: str | None = None,
    fingerprinter: Fingerprinter | None = None,
) -> dd.Series:
    """The fingerprint of every text, computed per partition in the workers.

    Args:
        data: a Dask DataFrame (give ``text_column``), a Dask Series of
            texts, or a Dask Bag of texts or of mappings (give
            ``text_column`` as the mapping key).
        text_column: the column (or mapping key) holding the text.
        fingerprinter: the settings (default ``Fingerprinter()``); a store
            that will hold these fingerprints must use the same.

    Returns:
        A Dask Series of uint64 named ``fingerprint``: for a DataFrame or
        Series, with the input's index and partitions; for a Bag, one
        partition per Bag partition with a fresh index. A text that cannot
        be fingerprinted fails the computation with simstore's error naming
        its index within the partition.
    """
    fingerprinter = _check_fingerprinter(fingerprinter)
    if isinstance(data, db.Bag):
        parts = [
            dask.delayed(_bag_fingerprints)(part, text_column, fingerprinter) for part in data.to_delayed()
        ]
        return dd.from_delayed(parts, meta=_FINGERPRINT_META, verify_meta=False)
    texts = _text_series(data, text_column, "a Dask DataFrame, Series or Bag")
    return texts.map_partitions(_series_fingerprints, fingerprinter, meta=_FINGERPRINT_META)


def _text_series(data: object, text_column: str | None, expected: str) -> dd.Series:
    """The texts of a Dask DataFrame's ``text_column``, or a Dask Series itself."""
    if isinstance(data, dd.DataFrame):
        if text_column is None:
            raise InvalidValueError("text_column= names the column of texts to fingerprint")
        _check_columns(data, [text_column])
        return data[text_column]
    if not isinstance(data, dd.Series):
        raise InvalidTypeError(f"expected {expected}, got {type(data).__name__}")
    return data


def fingerprint_and_sketch(
    data: dd.DataFrame | dd.Series, text_column: str | None = None, fingerprinter: Fingerprinter | None = None
) -> dd.DataFrame:
    """:func:`fingerprint` and each text's verification sketch, made in the
    same pass: a Dask DataFrame with the input's index and partitions and the
    columns ``fingerprint`` (uint64) and ``sketch`` (bytes), for the
    ``sketch_column=`` and ``min_similarity=`` of :func:`near_duplicate_pairs`,
    :func:`clusters` and :func:`against`."""
    fingerprinter = _check_fingerprinter(fingerprinter)
    if fingerprinter.sketch is None:
        raise InvalidValueError("the fingerprinter makes no sketches (sketch=None)")
    texts = _text_series(data, text_column, "a Dask DataFrame or Series")
    return texts.map_partitions(_series_sketches, fingerprinter, meta=empty_frame(_SKETCHED_META))


def _series_sketches(texts: pd.Series, fingerprinter: Fingerprinter) -> pd.DataFrame:
    values, sketches = fingerprinter.fingerprints_and_sketches(texts.tolist(), processes=1)
    rows = [row.tobytes() for row in sketches]
    return pd.DataFrame(
        {"fingerprint": pd.Series(values, dtype="uint64"), "sketch": pd.Series(rows, dtype=object)},
    ).set_axis(texts.index)


def _series_fingerprints(texts: pd.Series, fingerprinter: Fingerprinter) -> pd.Series:
    # One process per worker: Dask already spreads partitions over cores,
    # and a worker's daemon process may not start processes of its own.
    values = fingerprinter.fingerprint_many(texts.tolist(), processes=1)
    return pd.Series(values, index=texts.index, name="fingerprint", dtype="uint64")


def _bag_fingerprints(
    items: Sequence[Any], text_column: str | None, fingerprinter: Fingerprinter
) -> pd.Series:
    texts = list(items) if text_column is None else [item[text_column] for item in items]
    return pd.Series(fingerprinter.fingerprint_many(texts, processes=1), name="fingerprint", dtype="uint64")


# -------------------------------------------------------------------- pairs


def near_duplicate_pairs(
    ddf: dd.DataFrame,
    key_column: str = "key",
    fingerprint_column: str = "fingerprint",
    k: int = DEFAULT_K,
    layout: Any = None,
    *,
    npartitions: int | None = None,
    sketch_column: str | None = None,
    min_similarity: float | None = None,
    fingerprinter: Fingerprinter | None = None,
    bands: bool | None = None,
) -> dd.DataFrame:
    """Every pair of rows whose fingerprints are within ``k`` bits, each pair once.

    Equal to :meth:`simstore.Store.near_duplicate_pairs` of a store holding
    the same rows, added in input order.

    Args:
        ddf: one row per document.
        key_column: the documents' keys (str, bytes or int).
        fingerprint_column: their fingerprints (uint64, or ints in
            ``0 .. 2**64 - 1``).
        k: the largest distance reported.
        layout: the permutation tables, as for :func:`simstore.open`: a
            :class:`simstore.Layout` from :func:`simstore.plan` or a
            sequence of :class:`simstore.Table`; by default Manku's one-level
            layout of ``k + 2`` blocks. Each table costs 8 bytes per distinct
            fingerprint of a partition in the shuffle, and a table with a
            short prefix makes large groups: pick with :func:`simstore.plan`.
        npartitions: buckets of each shuffle (default: the input's
            partitions, so a bucket receives about one input partition's
            fingerprints per table). More buckets, less memory per task.
        sketch_column: the rows' verification sketches (bytes, as
            :func:`fingerprint_and_sketch` makes them); each pair then gets
            its estimated ``similarity``.
        min_similarity: drop pairs less similar than this (needs ``sketch_column``).
        fingerprinter: the settings the sketches were made with (default
            ``Fingerprinter()``): their geometry.
        bands: also pair rows whose sketches share a band, however far apart
            their fingerprints, when they reach ``min_similarity`` (as
            :meth:`simstore.Store.near_duplicate_pairs`): a third shuffle
            sends each row's band keys (about 20, 24 bytes each) to the
            bucket the key hashes to. ``None`` (the default): on when
            ``sketch_column`` and ``min_similarity`` are given, as in a
            store; ``True`` needs them.

    Returns:
        A lazy Dask DataFrame with columns ``key_a`` (the row earlier in the
        input), ``key_b``, ``distance`` and ``similarity`` (NaN without
        sketches), in no particular order, one partition per input partition.
    """
    k, tables = _tables_for(k, layout)
    sketch, threshold = _verification(ddf, sketch_column, min_similarity, fingerprinter)
    bands = _checked_bands(bands, sketch, threshold)
    columns = {key_column: "key", fingerprint_column: "fingerprint"}
    if sketch_column is not None:
        columns[sketch_column] = "sketch"
    _check_columns(ddf, list(columns))
    buckets = _bucket_count(ddf, npartitions)
    frames = _frames(ddf, columns)
    grouping = Grouping.of(len(frames), buckets)
    scattered = _scattered(frames, fingerprint_column, tables, buckets)
    pairs = _position_pairs(scattered, tables, k, grouping, firsts=False)
    if bands and sketch is not None:
        pairs += _band_pairs(frames, fingerprint_column, sketch, k, grouping, buckets)
    names = ["key", *(["sketch"] if sketch_column is not None else [])]
    found = _looked_up(frames, grouping, pairs, names, finished_pairs, sketch, threshold)
    return _collection(found, _PAIRS_META)


def _verification(
    ddf: object, sketch_column: str | None, min_similarity: object, fingerprinter: object
) -> tuple[Sketch | None, float | None]:
    """The sketch geometry and threshold of a call, checked."""
    threshold = None if min_similarity is None else check_similarity(min_similarity)
    if sketch_column is None:
        if threshold is not None:
            raise InvalidValueError("min_similarity= needs sketch_column= (see fingerprint_and_sketch)")
        return None, None
    sketch = _check_fingerprinter(fingerprinter).sketch
    if sketch is None:
        raise InvalidValueError("sketch_column= needs a fingerprinter that makes sketches")
    return sketch, threshold


def _checked_bands(bands: object, sketch: Sketch | None, threshold: float | None) -> bool:
    """``bands=``, checked: it needs sketches and a threshold to judge by
    (``None``: bands wherever they are given)."""
    if bands is None:
        return sketch is not None and threshold is not None
    asked = check_flag("bands", bands)
    if asked and (sketch is None or threshold is None):
        raise InvalidValueError("bands=True needs sketch_column= and min_similarity= to judge the pairs by")
    return asked


def _band_pairs(
    frames: list[Any], column: str, sketch: Sketch, k: int, grouping: Grouping, buckets: int
) -> list[list[Any]]:
    """The pairs sharing a band more than ``k`` bits apart, as one more
    source of pairs for :func:`_looked_up` (one part per group)."""
    scattered = [
        list(_task(scatter_bands, buckets)(frame, number, column, sketch, buckets))
        for number, frame in enumerate(frames)
    ]
    found = [
        list(_task(band_pairs, grouping.count)(k, grouping, *[parts[b] for parts in scattered]))
        for b in range(buckets)
    ]
    return [[_task(distinct_pairs)(*[part[g] for part in found]) for g in range(grouping.count)]]


def _collection(parts: list[Any], columns: dict[str, str]) -> dd.DataFrame:
    """A Dask DataFrame of the delayed pandas frames ``parts``, keys as they
    are (Dask would otherwise make object columns Arrow strings, int keys too)."""
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_delayed(parts, meta=empty_frame(columns), verify_meta=False)


def _task(function: Callable[..., Any], nout: int | None = None) -> Any:
    """``function`` as a Dask task; with ``nout``, one that returns that many parts."""
    return dask.delayed(function, nout=nout)


def _frames(ddf: dd.DataFrame, columns: Mapping[str, str]) -> list[Any]:
    """The input partitions (delayed pandas frames, in order), with only
    ``columns``, renamed as mapped."""
    return list(ddf[list(columns)].rename(columns=dict(columns)).to_delayed())


def _scattered(frames: list[Any], column: str, tables: tuple[Table, ...], buckets: int) -> list[list[Any]]:
    """Per bucket, what every partition sends it in the two shuffles
    (:func:`scatter_partition`): one part per (partition, bucket)."""
    scattered = [
        list(_task(scatter_partition, buckets)(frame, number, column, tables, buckets))
        for number, frame in enumerate(frames)
    ]
    return [[parts[bucket] for parts in scattered] for bucket in range(buckets)]


def _position_pairs(
    scattered: list[list[Any]], tables: tuple[Table, ...], k: int, grouping: Grouping, *, firsts: bool
) -> list[list[Any]]:
    """Per bucket, its pairs of positions cut by the group of
    ``position_a``: every pair of documents (``firsts``: of each
    fingerprint's first document) within ``k`` bits."""
    buckets = len(scattered)
    edges = [list(_task(routed_edges, buckets)(tables, k, buckets, *scattered[b])) for b in range(buckets)]
    halves = [
        list(
            _task(left_halves, buckets + 1)(
                buckets, len(scattered[b]), firsts, *scattered[b], *[edge[b] for edge in edges]
            )
        )
        for b in range(buckets)
    ]
    return [
        list(
            _task(right_pairs, grouping.count)(
                grouping,
                len(scattered[b]),
                firsts,
                *scattered[b],
                halves[b][buckets],
                *[half[b] for half in halves],
            )
        )
        for b in range(buckets)
    ]


def _looked_up(
    frames: list[Any],
    grouping: Grouping,
    pairs: list[list[Any]],
    names: Sequence[str],
    finish: Callable[..., Any],
    *finish_arguments: Any,
) -> list[Any]:
    """Per group of input partitions, ``finish(*finish_arguments, columns)``
    of the pairs whose second row it holds, with both rows' ``names``
    columns: the pairs travel to the group of their first row, then of
    their second."""
    groups = grouping.count
    members = [[frames[n] for n in grouping.members(g)] for g in range(groups)]
    with_a = [
        list(
            _task(with_side, groups)(
                members[g], grouping.size * g, "a", names, grouping, *[part[g] for part in pairs]
            )
        )
        for g in range(groups)
    ]
    return [
        _task(_finish_side_b)(
            finish, finish_arguments, members[g], grouping.size * g, names, *[part[g] for part in with_a]
        )
        for g in range(groups)
    ]


def _finish_side_b(
    finish: Callable[..., Any],
    arguments: tuple[Any, ...],
    frames: list[pd.DataFrame],
    first: int,
    names: Sequence[str],
    *parts: Any,
) -> Any:
    return finish(*arguments, with_side(frames, first, "b", names, None, *parts))


# ----------------------------------------------------------------- clusters


def clusters(
    ddf: dd.DataFrame,
    key_column: str = "key",
    fingerprint_column: str = "fingerprint",
    k: int = DEFAULT_K,
    keep: KeepPolicy = "first",
    *,
    length_column: str | None = None,
    layout: Any = None,
    npartitions: int | None = None,
    sketch_column: str | None = None,
    min_similarity: float | None = None,
    fingerprinter: Fingerprinter | None = None,
    bands: bool | None = None,
) -> dd.DataFrame:
    """The connected components of the near-duplicate pair graph.

    Without a similarity threshold, the same clusters and representatives as
    :meth:`simstore.Store.clusters` on a store holding the same rows, added
    in input order (with one, rows of one fingerprint are judged on the first
    of them here, apart by their sketches there: see docs/dask.md).

    Args:
        ddf, key_column, fingerprint_column, k, layout, npartitions: as for
            :func:`near_duplicate_pairs`.
        keep: the representative: ``"first"`` (earliest in the input),
            ``"longest"`` (largest ``length_column``; ties and missing
            lengths as in :meth:`simstore.Store.clusters`), or a callable
            given the members as :class:`simstore.Record` objects in input
            order (``meta`` is ``{"length": ...}`` when ``length_column`` is
            given) and returning the key to keep.
        length_column: the lengths ``keep="longest"`` compares.
        sketch_column, min_similarity, fingerprinter: as for
            :func:`near_duplicate_pairs`: pairs less similar do not link
            (judged on the first row of each fingerprint).
        bands: as for :func:`near_duplicate_pairs`: rows sharing a band
            link when they reach ``min_similarity`` (judged on their own
            sketches), however far apart their fingerprints.

    Returns:
        A lazy Dask DataFrame with one row per member of every cluster of two
        or more documents: ``cluster_id`` (the position of its first member:
        stable for the same input and partitioning), ``position`` (the
        member's), ``key``, ``representative``, and the member's
        ``distance`` and (with ``sketch_column``) estimated ``similarity``
        to it: a member is a duplicate of its representative, as
        ``simstore dedup --annotate`` reports it. Documents with no
        near-duplicate are in no cluster.

    Rows with equal fingerprints are joined directly and pairs are computed
    between distinct fingerprints only, so heavy exact duplication costs
    nothing quadratic. The components are found over fingerprints by a tree
    of tasks that each combine up to eight forests; the last holds one pair
    of fingerprints per distinct fingerprint that has a near-duplicate (16
    bytes each) in one worker, and every bucket reads it.
    """
    k, tables = _tables_for(k, layout)
    if not (callable(keep) or keep in KEEP_POLICIES):
        raise InvalidValueError(f"keep must be 'first', 'longest' or a callable, got {keep!r}")
    if keep == "longest" and length_column is None:
        raise InvalidValueError("keep='longest' needs length_column= to compare")
    sketch, threshold = _verification(ddf, sketch_column, min_similarity, fingerprinter)
    bands = _checked_bands(bands, sketch, threshold)
    columns = {key_column: "key", fingerprint_column: "fingerprint"}
    if length_column is not None:
        columns[length_column] = "length"
    if sketch_column is not None:
        columns[sketch_column] = "sketch"
    _check_columns(ddf, list(columns))
    buckets = _bucket_count(ddf, npartitions)
    frames = _frames(ddf, columns)
    grouping = Grouping.of(len(frames), buckets)
    groups = grouping.count
    scattered = _scattered(frames, fingerprint_column, tables, buckets)
    if threshold is not None:
        # Links are judged on each fingerprint's first row, so the pairs
        # of those rows meet their sketches before any component is formed.
        pairs = _position_pairs(scattered, tables, k, grouping, firsts=True)
        if bands and sketch is not None:
            pairs += _band_pairs(frames, fingerprint_column, sketch, k, grouping, buckets)
        names = ["fingerprint", "sketch"]
        forests = _looked_up(frames, grouping, pairs, names, judged_forest, sketch, threshold)
    else:
        forests = [_task(bucket_forest)(tables, k, *scattered[b]) for b in range(buckets)]
    while len(forests) > 1:
        forests = [
            _task(combine_forests)(*forests[start : start + FOREST_FAN_IN])
            for start in range(0, len(forests), FOREST_FAN_IN)
        ]
    labelled = [
        list(_task(labelled_parts, groups)(forests[0], grouping, *scattered[b])) for b in range(buckets)
    ]
    columns_kept = list(columns.values())
    picked = [
        list(
            _task(picked_members, groups)(
                [frames[n] for n in grouping.members(g)],
                grouping.size * g,
                columns_kept,
                groups,
                *[part[g] for part in labelled],
            )
        )
        for g in range(groups)
    ]
    found = [
        _task(cluster_members)(
            keep, None if length_column is None else "length", sketch, *[part[g] for part in picked]
        )
        for g in range(groups)
    ]
    return _collection(found, CLUSTER_COLUMNS)


# ------------------------------------------------------------------- stores


def build_stores(
    ddf: dd.DataFrame,
    path_template: str,
    shards: int,
    *,
    key_column: str = "key",
    fingerprint_column: str = "fingerprint",
    meta_columns: Sequence[str] = (),
    sketch_column: str | None = None,
    mode: str = "c",
    k: int | None = None,
    blocks: int | None = None,
    layout: Any = None,
    fingerprinter: Fingerprinter | None = None,
    expected_docs: int | None = None,
    **options: Any,
) -> list[str]:
    """Write the rows into ``shards`` store files, each key to the shard its
    hash names, and return the paths in shard order (for
    :class:`simstore.ShardedStore`).

    Runs at once on the current scheduler. Each shard is written by one
    task, in one ``add_many`` transaction, so a shard's rows must fit in a
    worker's memory (about 100 bytes a row plus the keys), and a task that
    is lost and retried writes the same shard again: with the default mode
    ``"c"`` that replaces the same keys with the same documents, with
    ``"n"`` it starts the shard afresh. Every shard file is created, even
    one that receives no rows.

    Args:
        ddf: one row per document.
        path_template: a ``str.format`` template with a ``{shard}`` field,
            e.g. ``"/data/crawl-{shard:03d}.simstore"``. Every worker must
            be able to write the path its task is given (a shared file
            system, or a local disk on the machine that will serve it).
        shards: how many store files.
        key_column, fingerprint_column: as for :func:`near_duplicate_pairs`.
        meta_columns: columns stored as each document's ``meta``.
        sketch_column: the rows' verification sketches (see
            :func:`fingerprint_and_sketch`, made with ``fingerprinter``):
            stored with the documents, so that the shards' similarity
            threshold (``min_similarity``) judges their matches. Without it
            the shards keep no sketches, and their documents are kept
            unjudged by any threshold.
        mode: ``"c"`` (add to existing shards, or create them) or ``"n"``
            (replace them); ``"w"`` requires them to exist.
        k, blocks, layout, fingerprinter, **options: as for
            :func:`simstore.open`, the same for every shard.
        expected_docs: the whole corpus's size; each shard is laid out for
            its share.
    """
    shard_count = check_shards(shards)
    if mode not in MODES or mode == "r":
        raise InvalidValueError(f"mode must be 'c', 'n' or 'w', got {mode!r}")
    paths = _shard_paths(path_template, shard_count)
    per_shard = None if expected_docs is None else max(1, expected_docs // shard_count)
    # Refuse bad settings here, before any task runs or any file is touched.
    choose_layout(LayoutRequest(k, blocks, fingerprinter, layout, per_shard))
    Options.from_kwargs(options)
    open_arguments = {
        "k": k,
        "blocks": blocks,
        "layout": layout,
        "fingerprinter": fingerprinter,
        "expected_docs": per_shard,
        **options,
    }
    meta_names = list(meta_columns)
    _check_columns(
        ddf, [key_column, fingerprint_column, *meta_names, *([sketch_column] if sketch_column else [])]
    )
    sketch = (fingerprinter or Fingerprinter()).sketch
    columns = {key_column: "key", fingerprint_column: "fingerprint"}
    columns.update({name: f"meta:{name}" for name in meta_names})
    if sketch_column is not None:
        columns[sketch_column] = "sketch"
    positioned = _positioned(ddf, columns)
    with_shards = positioned.map_partitions(
        _assign_shards, shard_count, meta=positioned._meta.assign(shard=pd.Series(dtype="int64"))
    )
    by_shard = with_shards.set_index("shard", divisions=list(range(shard_count + 1)))
    written = by_shard.map_partitions(
        _write_shard,
        paths,
        meta_names,
        sketch if sketch_column else None,
        mode,
        open_arguments,
        meta=empty_frame(_WRITTEN_META),
    ).compute()
    if sorted(written["shard"].tolist()) != list(range(shard_count)):
        raise InvalidValueError(f"expected one write per shard, got shards {sorted(written['shard'])}")
    return paths


def _shard_paths(path_template: str, shards: int) -> list[str]:
    if not isinstance(path_template, str):
        raise InvalidTypeError(f"path_template must be a str, got {type(path_template).__name__}")
    try:
        paths = [path_template.format(shard=number) for number in range(shards)]
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidValueError(
            f"path_template {path_template!r} must be a str.format template with only a {{shard}} field"
        ) from exc
    if len(set(paths)) != len(paths):
        raise InvalidValueError(f"path_template {path_template!r} gives every shard the same path")
    return paths


def _assign_shards(frame: pd.DataFrame, shard_count: int) -> pd.DataFrame:
    return frame.assign(shard=shards_of_packed(frame["key"].tolist(), shard_count))


def _write_shard(
    frame: pd.DataFrame,
    paths: list[str],
    meta_names: list[str],
    sketch: Sketch | None,
    mode: str,
    open_arguments: Mapping[str, Any],
    partition_info: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    if partition_info is None:  # pragma: no cover - Dask always passes it
        raise InvalidValueError("build_stores needs Dask's partition_info")
    shard = int(partition_info["number"])
    ordered = frame.sort_values("position", kind="stable")
    keys = unpack_keys(ordered["key"])
    fingerprints = checked_fingerprints(ordered["fingerprint"].to_numpy(), "fingerprint")
    metas = None
    if meta_names:
        values = [ordered[f"meta:{name}"].tolist() for name in meta_names]
        metas = [
            {name: plain_value(value) for name, value in zip(meta_names, row, strict=True)}
            for row in zip(*values, strict=True)
        ]
    sketches = None
    if sketch is not None:
        rows, _ = sketch_rows(ordered["sketch"].tolist(), sketch)
        sketches = SketchRows(rows, sketch)
    with open_store(paths[shard], mode, **open_arguments) as store:
        if keys:
            store.add_many(keys, fingerprints, metas=metas, sketches=sketches)
        documents = len(store)
    return pd.DataFrame({"shard": [shard], "path": [paths[shard]], "documents": [documents]})


def against(
    ddf: dd.DataFrame,
    store_paths: Sequence[str | os.PathLike[str]],
    key_column: str = "key",
    fingerprint_column: str = "fingerprint",
    k: int | None = None,
    *,
    sketch_column: str | None = None,
    min_similarity: float | None = None,
    bands: bool | None = None,
) -> dd.DataFrame:
    """The stored documents near each row of a new batch, without inserting it.

    Every worker opens the stores read-only (once per process while tasks
    use them), so the paths must be readable there, and the stores must not
    be open in the worker's process otherwise.

    Args:
        ddf: the new batch.
        store_paths: one store, or the shards of a sharded one (as for
            :class:`simstore.ShardedStore`).
        key_column, fingerprint_column: the batch's columns.
        k: the largest distance (the stores' ``k`` by default).
        sketch_column: the batch's verification sketches (see
            :func:`fingerprint_and_sketch`, with the stores' fingerprinter):
            each match then gets its estimated ``similarity``.
        min_similarity: drop matches less similar than this (the stores'
            own threshold by default, where they have one; needs ``sketch_column``).
        bands: also match stored documents whose sketches share a band with
            a row's, however far apart the fingerprints
            (:meth:`simstore.Store.query_many`). ``None`` (the default): where
            the stores keep a band table and ``sketch_column`` is given; a
            store without one reads every stored sketch once a partition for
            ``True``. Needs ``sketch_column``.

    Returns:
        A lazy Dask DataFrame with one row per (batch row, stored match):
        ``key`` (the batch row's key), ``match_key``, ``distance`` and
        ``similarity`` (NaN where unknown), in no particular order. Rows
        with no match do not appear.
    """
    if isinstance(store_paths, str | bytes | os.PathLike):
        store_paths = [store_paths]
    paths = tuple(os.fspath(path) for path in store_paths)
    if not paths:
        raise InvalidValueError("against() needs at least one store path")
    if k is not None:
        k = validate_k(k)
    threshold = None if min_similarity is None else check_similarity(min_similarity)
    if threshold is not None and sketch_column is None:
        raise InvalidValueError("min_similarity= needs sketch_column= (see fingerprint_and_sketch)")
    if bands is not None and check_flag("bands", bands) and sketch_column is None:
        raise InvalidValueError("bands=True needs sketch_column= (see fingerprint_and_sketch)")
    columns = [key_column, fingerprint_column, *([sketch_column] if sketch_column else [])]
    _check_columns(ddf, columns)
    return ddf[columns].map_partitions(
        _against_partition,
        paths,
        key_column,
        fingerprint_column,
        sketch_column,
        k,
        threshold,
        bands,
        meta=empty_frame(_AGAINST_META),
    )


def _against_partition(
    frame: pd.DataFrame,
    paths: tuple[str, ...],
    key_column: str,
    fingerprint_column: str,
    sketch_column: str | None,
    k: int | None,
    threshold: float | None,
    bands: bool | None = None,
) -> pd.DataFrame:
    fingerprints = checked_fingerprints(frame[fingerprint_column].to_numpy(), fingerprint_column)
    keys: list[Any] = []
    match_keys: list[Any] = []
    distances: list[int] = []
    similarities: list[float] = []
    with _open_stores.using(paths) as store:
        rows = None
        if sketch_column is not None:
            sketch = store.shards[0].sketch
            if sketch is None:
                raise InvalidValueError(f"the store {paths[0]!r} keeps no sketches to compare with")
            rows, present = sketch_rows(frame[sketch_column].tolist(), sketch)
            if not present.all():
                raise InvalidValueError("every row needs a sketch when sketch_column= is given")
        answers = store.query_many(fingerprints, k=k, sketches=rows, min_similarity=threshold, bands=bands)
        for key, matches in zip(frame[key_column].tolist(), answers, strict=True):
            for match in matches:
                keys.append(key)
                match_keys.append(match.key)
                distances.append(match.distance)
                similarities.append(np.nan if match.similarity is None else match.similarity)
    return pd.DataFrame(
        {
            "key": pd.Series(keys, dtype="object"),
            "match_key": pd.Series(match_keys, dtype="object"),
            "distance": pd.Series(distances, dtype="uint8"),
            "similarity": pd.Series(similarities, dtype="float64"),
        }
    )


class _OpenStores:
    """Stores opened by :func:`against` in this worker process, shared by
    its concurrent tasks (LMDB allows one open per file per process) and
    closed when the last task using them is done."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, ...], tuple[ShardedStore, int]] = {}

    @contextmanager
    def using(self, paths: tuple[str, ...]) -> Iterator[ShardedStore]:
        with self._lock:
            store, users = self._open.get(paths) or (ShardedStore(list(paths)), 0)
            self._open[paths] = (store, users + 1)
        try:
            yield store
        finally:
            with self._lock:
                store, users = self._open[paths]
                if users == 1:
                    del self._open[paths]
                    store.close()
                else:
                    self._open[paths] = (store, users - 1)


_open_stores = _OpenStores()


# ------------------------------------------------------------------ helpers


def _tables_for(k: object, layout: Any) -> tuple[int, tuple[Table, ...]]:
    chosen_k, tables, _, _ = choose_layout(LayoutRequest(validate_k(k), None, None, layout, None))
    return chosen_k, tables


def _check_fingerprinter(fingerprinter: object) -> Fingerprinter:
    if fingerprinter is None:
        return Fingerprinter()
    if not isinstance(fingerprinter, Fingerprinter):
        raise InvalidTypeError(
            f"fingerprinter must be a simstore.Fingerprinter, got {type(fingerprinter).__name__}"
        )
    return fingerprinter


def _check_columns(ddf: object, columns: Sequence[str]) -> None:
    if not isinstance(ddf, dd.DataFrame):
        raise InvalidTypeError(f"expected a Dask DataFrame, got {type(ddf).__name__}")
    missing = [column for column in columns if column not in ddf.columns]
    if missing:
        raise InvalidValueError(f"no column {missing[0]!r}; the DataFrame has {list(ddf.columns)}")
    if len(set(columns)) != len(columns):
        raise InvalidValueError(f"a column is named twice in {list(columns)}")


def _bucket_count(ddf: dd.DataFrame, npartitions: object) -> int:
    if npartitions is None:
        partitions = int(ddf.npartitions)
        return max(1, min(partitions, max(2, -(-partitions // PARTITIONS_PER_BUCKET))))
    if isinstance(npartitions, bool) or not isinstance(npartitions, int) or npartitions < 1:
        raise InvalidValueError(f"npartitions must be a positive int, got {npartitions!r}")
    return npartitions


def _positioned(ddf: dd.DataFrame, columns: Mapping[str, str]) -> dd.DataFrame:
    """``ddf``'s ``columns`` renamed as mapped, plus each row's ``position``."""
    selected = ddf[list(columns)].rename(columns=dict(columns))
    meta = selected._meta.assign(position=pd.Series(dtype="int64"))
    if "key" in meta.columns:
        meta["key"] = pd.Series(dtype=object)
    return selected.map_partitions(_add_positions, meta=meta)


def _add_positions(frame: pd.DataFrame, partition_info: Mapping[str, Any] | None = None) -> pd.DataFrame:
    if partition_info is None:  # pragma: no cover - Dask always passes it
        raise InvalidValueError("row positions need Dask's partition_info")
    row_positions = positions(int(partition_info["number"]), len(frame))
    result = frame.reset_index(drop=True).assign(position=row_positions)
    if "key" in result.columns:
        result["key"] = pack_keys(result["key"])
    return result
