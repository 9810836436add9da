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

import numpy as np

from simstore.engine import columns
from simstore.engine._lmdb import Database, Txn
from simstore.errors import CorruptStoreError
from simstore.index.band_runs import BandRun

__all__ = ["view_band_run", "write_band_run"]


def write_band_run(txn: Txn, database: Database, run_id: int, run: BandRun) -> None:
    """Put ``run`` as run ``run_id``'s band values in table 0's ``database``."""
    ids = run.ids.astype(np.dtype("<u4") if columns.id_width(run.ids) == 4 else np.dtype("<u8"))
    for kind, payload in ((columns.BAND_KEYS, run.keys.astype("<u4")), (columns.BAND_IDS, ids)):
        if not txn.put(
            columns.run_key(run_id, kind), columns.encode(kind, payload), db=database, overwrite=False
        ):
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
