"""A band table's runs: the band keys of a run's documents, sorted, for exact look-ups.

A format-4 store keeps, beside each run of its multi-index tables, the band
keys (:func:`simstore.fingerprinting.bands.band_keys` at the store's bands a
width) of the documents the run holds: a column of keys in ascending order and
each key's document id. Only a key's top 32 bits are kept (:func:`short_keys`):
4 bytes a key rather than 8, at the price of an unrelated key matching now and
then (at 100M documents of 8 keys, one in five look-ups), which the caller's
verification turns away; it reads the document's sketch anyway.

A look-up takes every query key against every run in two ``searchsorted``
calls a run. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from simstore.index.ranges import expand_ranges

__all__ = [
    "BandRun",
    "band_stretch_into",
    "build_band_run",
    "equal_ranges",
    "join_band_runs",
    "look_up",
    "packed_entries",
    "short_keys",
    "sorted_band_run",
]

U64Array = npt.NDArray[np.uint64]
U32Array = npt.NDArray[np.uint32]
IntArray = npt.NDArray[np.int64]
IdArray = npt.NDArray[np.unsignedinteger[Any]]

_ID_MASK = (1 << 32) - 1


class BandRun(NamedTuple):
    """One run's band keys (:func:`short_keys`), ascending, ties in id
    order, and the document id of each."""

    keys: U32Array
    ids: IdArray

    def __len__(self) -> int:
        return len(self.keys)


def short_keys(keys: U64Array) -> U32Array:
    """The top 32 bits of 64-bit band keys: what a band run holds."""
    return (np.asarray(keys, dtype=np.uint64) >> np.uint64(32)).astype(np.uint32)


def build_band_run(keys: U64Array, ids: IdArray) -> BandRun:
    """The band run holding key ``keys[j]`` (64-bit) of document ``ids[j]``,
    each ``(key, id)`` once."""
    return sorted_band_run(short_keys(keys), np.asarray(ids))


def join_band_runs(runs: Sequence[BandRun], dropped: Sequence[IdArray | None]) -> BandRun:
    """One band run holding the entries of ``runs`` but those of the
    documents ``dropped[i]`` names in ``runs[i]`` (``None``: none)."""
    keys: list[U32Array] = []
    ids: list[IdArray] = []
    for run, gone in zip(runs, dropped, strict=True):
        if gone is None or not len(gone):
            keys.append(run.keys)
            ids.append(run.ids)
            continue
        kept = ~np.isin(run.ids, gone)
        keys.append(run.keys[kept])
        ids.append(run.ids[kept])
    id_dtype = np.result_type(*(part.dtype for part in ids)) if ids else np.dtype(np.uint32)
    return sorted_band_run(
        np.concatenate(keys) if keys else np.zeros(0, dtype=np.uint32),
        np.concatenate(ids).astype(id_dtype, copy=False) if ids else np.zeros(0, dtype=id_dtype),
        sorted_stretches=True,
    )


def band_stretch_into(
    runs: Sequence[BandRun],
    kept: Sequence[npt.NDArray[np.bool_] | None],
    cuts: Sequence[IntArray],
    stretch: int,
    out_keys: U32Array,
    out_ids: U32Array,
    filled: int,
) -> int:
    """A join of band runs whose ids all fit in 32 bits, stretch ``stretch``
    of it (``cuts``: :func:`~simstore.index.column_merge.stretch_cuts` of the
    runs' keys, cut at the same keys in every run): written from
    ``out_keys[filled]`` and
    ``out_ids[filled]``, the entries ``kept[i]`` keeps of ``runs[i]``
    (``None``: all), sorted by key then id, each once; returns how many.
    Beside the output only a stretch's arrays are held (a join of a whole
    run's at once took some 36 bytes an entry, eight entries a document);
    the stretch reads only its own parts of the runs, which may be viewed
    afresh between stretches."""
    parts: list[U64Array] = []
    for run, keep, cut in zip(runs, kept, cuts, strict=True):
        span = slice(int(cut[stretch]), int(cut[stretch + 1]))
        keys, ids = run.keys[span], run.ids[span]
        if keep is not None:
            keys, ids = keys[keep[span]], ids[keep[span]]
        parts.append(packed_entries(keys, ids))
    packed = np.concatenate(parts)
    del parts
    packed.sort(kind="stable")  # (the runs' sorted stretches, merged)
    if len(packed) > 1:
        packed = packed[np.concatenate([[True], packed[1:] != packed[:-1]])]
    count = len(packed)
    np.right_shift(packed, np.uint64(32), out=out_keys[filled : filled + count], casting="unsafe")
    np.bitwise_and(packed, np.uint64(_ID_MASK), out=out_ids[filled : filled + count], casting="unsafe")
    return count


def look_up(runs: Sequence[BandRun], keys: U64Array) -> tuple[IntArray, IdArray]:
    """``(positions, ids)``: for every entry of ``runs`` whose key is that of
    ``keys[positions[j]]`` (64-bit keys, compared on their top 32 bits), its
    document ``ids[j]``; in no particular order, repeats included."""
    wanted = short_keys(keys)
    positions: list[IntArray] = []
    found: list[IdArray] = []
    for run in runs:
        at, owner = equal_ranges(run.keys, wanted)
        if len(at):
            positions.append(owner)
            found.append(run.ids[at].astype(np.uint64))
    if not positions:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
    return np.concatenate(positions), np.concatenate(found)


def equal_ranges(sorted_keys: npt.NDArray[Any], wanted: npt.NDArray[Any]) -> tuple[IntArray, IntArray]:
    """``(at, owner)``: every position of ``sorted_keys`` (ascending) whose
    key is ``wanted[owner[j]]``, found by two ``searchsorted`` calls."""
    first = np.searchsorted(sorted_keys, wanted, side="left")
    counts = np.searchsorted(sorted_keys, wanted, side="right") - first
    if not counts.any():  # (most of a query's keys, often all, are in no run)
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return expand_ranges(first, counts)


def packed_entries(keys: U32Array, ids: IdArray) -> U64Array:
    """Each entry as one uint64, key high and the id's low 32 bits low:
    ordered by key, then id (for ids that fit in 32 bits), and compared as a set."""
    return (keys.astype(np.uint64) << np.uint64(32)) | (ids.astype(np.uint64) & np.uint64(_ID_MASK))


def sorted_band_run(keys: U32Array, ids: IdArray, *, sorted_stretches: bool = False) -> BandRun:
    """The band run of entries of :func:`short_keys` ``keys`` and ``ids``:
    sorted by key, then id, each once. Where every id fits in 32
    bits, a key and its id are one uint64 (key high): one sort. Entries in
    a few ``sorted_stretches`` (a join's runs, concatenated) are merged by a
    stable sort (timsort finds the stretches: 0.032 s for 3.2M entries in
    two, against 0.05 s); others by numpy's default sort, which on uint64
    takes 0.04 s for 3.2M random entries where the stable one takes 0.48 s
    (SIMD sorting; a 2-core Xeon, numpy 2.4)."""
    if not len(ids) or int(ids.max()) <= _ID_MASK:
        packed = packed_entries(keys, ids)
        packed.sort(kind="stable" if sorted_stretches else None)
        if len(packed) > 1:
            packed = packed[np.concatenate([[True], packed[1:] != packed[:-1]])]
        return BandRun(
            (packed >> np.uint64(32)).astype(np.uint32), (packed & np.uint64(_ID_MASK)).astype(np.uint32)
        )
    order = np.lexsort((ids, keys))
    keys, ids = keys[order], ids[order]
    repeated = (keys[1:] == keys[:-1]) & (ids[1:] == ids[:-1])
    if bool(repeated.any()):
        kept = np.concatenate([[True], ~repeated])
        keys, ids = keys[kept], ids[kept]
    return BandRun(keys, ids)
