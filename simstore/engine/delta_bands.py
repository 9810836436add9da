"""The band keys of the delta's documents, in memory: the part of a format-4
store's band table that the runs do not hold yet.

The delta (:mod:`simstore.engine.delta`) holds fingerprints only; a
document's band keys come from its sketch, which the ``sketches``
sub-database holds. So the keys are made when a band look-up first needs
them: the delta lists the documents put since (``Delta.touched``), and
:meth:`DeltaBands.refresh` reads their sketches in the look-up's own
transaction and bands them. Keys of documents the delta has since let go, or
of an older text of a document, stay until the delta is cleared (a merge):
every document a look-up finds is verified against its sketch as it is now.

Keys are held in a few sorted arrays of geometrically growing size (a new
array is merged into the last while it is at least half its size) behind a
dict of the latest few thousand, so that a single add costs a dict insert per
key and a look-up a few ``searchsorted`` calls.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from simstore.engine._lmdb import Txn
from simstore.engine.column_tableset import BandSource
from simstore.engine.delta import Delta
from simstore.index.band_runs import equal_ranges
from simstore.index.permute import U64Array

__all__ = ["DeltaBands"]

#: Keys the dict holds before they are sorted into an array.
RECENT_KEYS = 4096


class DeltaBands:
    """The band keys of one :class:`~simstore.engine.delta.Delta`'s documents."""

    def __init__(self, source: BandSource, delta: Delta) -> None:
        self.source = source
        self.delta = delta
        delta.touched = []
        self.era = delta.era
        self._recent: dict[int, list[int]] = {}
        self._recent_keys = 0
        self._sorted: list[tuple[U64Array, U64Array]] = []

    def refresh(self, txn: Txn) -> None:
        """Band the documents put into the delta since the last refresh
        (all of them after a clear), from their sketches in ``txn``."""
        delta = self.delta
        if delta.era != self.era:
            self.era = delta.era
            self._recent, self._recent_keys, self._sorted = {}, 0, []
        touched = delta.touched
        if not touched:
            return
        delta.touched = []
        try:
            made = list(self.source.entries(txn, np.unique(np.array(touched, dtype=np.uint64))))
        except BaseException:
            delta.touched = touched + (delta.touched or [])  # banded by the next refresh
            raise
        ids = np.concatenate([chunk_ids for chunk_ids, _ in made]) if made else np.zeros(0, np.uint64)
        keys = np.concatenate([chunk_keys for _, chunk_keys in made]) if made else np.zeros(0, np.uint64)
        if len(keys) + self._recent_keys <= RECENT_KEYS:
            for key, doc_id in zip(keys.tolist(), ids.tolist(), strict=True):
                self._recent.setdefault(key, []).append(doc_id)
            self._recent_keys += len(keys)
            return
        if self._recent:
            held = [(key, doc_id) for key, members in self._recent.items() for doc_id in members]
            keys = np.concatenate([keys, np.array([key for key, _ in held], dtype=np.uint64)])
            ids = np.concatenate([ids, np.array([doc_id for _, doc_id in held], dtype=np.uint64)])
            self._recent, self._recent_keys = {}, 0
        self._add_sorted(keys, ids)

    def _add_sorted(self, keys: U64Array, ids: U64Array) -> None:
        order = np.argsort(keys)  # (ties in any order: a look-up returns them unordered)
        arrays = self._sorted
        arrays.append((keys[order], ids[order]))
        while len(arrays) > 1 and 2 * len(arrays[-1][0]) >= len(arrays[-2][0]):
            (newer_keys, newer_ids), (older_keys, older_ids) = arrays.pop(), arrays.pop()
            merged_keys = np.concatenate([older_keys, newer_keys])
            merged_ids = np.concatenate([older_ids, newer_ids])
            order = np.argsort(merged_keys, kind="stable")  # two sorted runs: one merge pass
            arrays.append((merged_keys[order], merged_ids[order]))

    def look_up(self, keys: U64Array) -> tuple[npt.NDArray[np.int64], U64Array]:
        """``(positions, doc_ids)``: the documents holding key ``keys[positions[j]]``."""
        if not self._recent and not self._sorted:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
        positions: list[int] = []
        found: list[int] = []
        if self._recent:
            for position, key in enumerate(keys.tolist()):
                members = self._recent.get(key)
                if members is not None:
                    positions += [position] * len(members)
                    found += members
        out_positions = [np.array(positions, dtype=np.int64)]
        out_ids = [np.array(found, dtype=np.uint64)]
        for sorted_keys, ids in self._sorted:
            at, owner = equal_ranges(sorted_keys, keys)
            out_positions.append(owner)
            out_ids.append(ids[at])
        return np.concatenate(out_positions), np.concatenate(out_ids)
