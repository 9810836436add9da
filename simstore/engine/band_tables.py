"""Format 4's band table at the LMDB boundary: a run's band keys written,
viewed in place and checked.

A run's band keys and their ids (:class:`simstore.index.band_runs.BandRun`)
are two values of table 0's sub-database under the run's id
(:data:`simstore.engine.columns.BAND_KEYS`, :data:`~simstore.engine.columns.BAND_IDS`),
beside its columns: written in the transaction that writes the run, dropped
with it (:func:`simstore.engine.column_tables.drop_run` drops every kind), and
viewed in place like them (``txn`` reads buffers: no copy).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import numpy as np
import numpy.typing as npt

from simstore.engine import columns
from simstore.engine._lmdb import Database, Txn
from simstore.errors import CorruptStoreError
from simstore.index import band_runs, column_merge
from simstore.index.band_runs import BandRun

__all__ = ["view_band_run", "write_band_run", "write_joined_band_run"]


def write_band_run(
    txn: Txn, database: Database, run_id: int, run: BandRun, make: columns.MakeValue = bytearray
) -> None:
    """Put ``run`` as run ``run_id``'s band values in table 0's ``database``
    (each built in a buffer ``make`` gives)."""
    for kind, value in _band_values(run, make):
        _put_new(txn, database, run_id, kind, value)


def _band_values(run: BandRun, make: columns.MakeValue) -> list[tuple[int, columns.ValueBuffer]]:
    """``run``'s two band values, ``(kind, value)``, sealed."""
    ids = run.ids.astype(np.dtype("<u4") if columns.id_width(run.ids) == 4 else np.dtype("<u8"))
    return [
        (kind, columns.encode(kind, payload, make=make))
        for kind, payload in ((columns.BAND_KEYS, run.keys.astype("<u4")), (columns.BAND_IDS, ids))
    ]


#: :func:`join_band_values`: yields the values (``(kind, value)``) each step
#: finished and is sent the band runs viewed afresh; returns the entry count.
BandJoinSteps = Generator[list[tuple[int, columns.ValueBuffer]], Sequence[BandRun], int]


def write_joined_band_run(
    txn: Txn,
    database: Database,
    run_id: int,
    runs: Sequence[BandRun],
    kept: Sequence[npt.NDArray[np.bool_] | None],
    make: columns.MakeValue = bytearray,
) -> None:
    """Put as run ``run_id``'s band values the join of ``runs`` (oldest
    first), keeping the entries ``kept[i]`` keeps of ``runs[i]`` (``None``:
    all): :func:`join_band_values` in one go."""

    def put(finished: tuple[int, columns.ValueBuffer]) -> None:
        _put_new(txn, database, run_id, *finished)

    columns.put_each_step(join_band_values(runs, kept, make), runs, put)


def join_band_values(
    runs: Sequence[BandRun],
    kept: Sequence[npt.NDArray[np.bool_] | None],
    make: columns.MakeValue = bytearray,
) -> BandJoinSteps:
    """The band values of the join :func:`write_joined_band_run` puts, merged
    straight into them (8 bytes an entry, and a stretch's arrays) a stretch
    at a time: each ``yield`` gives the values finished since the last
    (``(kind, value)``, sealed) and takes the same runs viewed afresh, as
    :func:`simstore.engine.column_tables.join_values` does. Returns the
    entry count."""
    chunk = column_merge.CHUNK_ENTRIES
    if column_merge.id_bytes_kept([run.ids for run in runs], kept, chunk) > 4:
        # A kept id past 32 bits (over 4G documents): the whole-array join, one step.
        dropped = [None if keep is None else run.ids[~keep] for run, keep in zip(runs, kept, strict=True)]
        joined = band_runs.join_band_runs(runs, dropped)
        yield _band_values(joined, make)
        return len(joined)
    total = sum(
        len(run) if keep is None else int(np.count_nonzero(keep))
        for run, keep in zip(runs, kept, strict=True)
    )
    keys_value, keys = columns.allocate(total, 4, make)
    ids_value, ids = columns.allocate(total, 4, make)
    cuts = column_merge.stretch_cuts([run.keys for run in runs], chunk)
    entries = 0
    for stretch in range(column_merge.stretch_count(cuts)):
        entries += band_runs.band_stretch_into(runs, kept, cuts, stretch, keys, ids, entries)
        runs = yield []
    yield [
        (kind, columns.seal_filled(value, kind, payload, entries, make))
        for kind, value, payload in (
            (columns.BAND_KEYS, keys_value, keys),
            (columns.BAND_IDS, ids_value, ids),
        )
    ]
    return entries


def _put_new(txn: Txn, database: Database, run_id: int, kind: int, value: columns.ValueBuffer) -> None:
    if not txn.put(columns.run_key(run_id, kind), value, db=database, overwrite=False):
        raise CorruptStoreError(f"table 0 already holds the band keys of run {run_id}")


def view_band_run(txn: Txn, database: Database, run_id: int, *, verify: bool = False) -> BandRun:
    """Run ``run_id``'s band keys and ids, in place.

    Raises:
        CorruptStoreError: a value is missing or damaged, or the two
            disagree; with ``verify``, also a CRC that fails or keys out of
            order (what ``check()`` asks).
    """
    values = []
    for kind in (columns.BAND_KEYS, columns.BAND_IDS):
        raw = txn.get(columns.run_key(run_id, kind), db=database)
        if raw is None:
            raise CorruptStoreError(f"run {run_id} lacks its band keys (value {kind} of table 0)")
        values.append(columns.decode(raw, kind, verify=verify)[0])
    keys, ids = values
    if keys.dtype.itemsize != 4 or len(keys) != len(ids):
        raise CorruptStoreError(
            f"run {run_id}'s band keys and ids disagree ({len(keys)} keys, {len(ids)} ids)"
        )
    if verify and len(keys) > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
        raise CorruptStoreError(f"run {run_id}'s band keys are out of order")
    return BandRun(keys, ids)
