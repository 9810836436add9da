"""The entries a bulk write puts into the permutation tables, sorted as the
tables keep them, one table ahead of the writes."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor, Future
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.index.permute import Table, U64Array

#: Document ids, uint32 when they fit, else uint64.
IdArray = npt.NDArray[np.unsignedinteger[Any]]


def sorted_entries(
    table: Table, fingerprints: U64Array, doc_ids: IdArray, known_bits: int = 64
) -> tuple[U64Array, IdArray]:
    """``(permuted keys, doc ids)`` of a batch in ``table``, sorted by
    ``(permuted key, doc id)``; only the leading ``known_bits`` bits of each
    key are kept (a run records no more), the rest are zero.

    When the ids fit in the bits a run does not record, each key and its id
    are one 64-bit integer, sorted in place: no argsort's index array or
    gathers (for a 10M-entry run, 120 MB less at a time, and faster).
    Otherwise equal permuted keys are rare, so an unstable argsort (five
    times faster than a stable one for a million keys, measured) is tried
    first and the full two-key sort is paid for only when a key repeats.
    """
    permuted = table.permute_array(fingerprints)
    id_bits = int(doc_ids.max()).bit_length() if doc_ids.size else 0
    free_bits = 64 - known_bits
    if known_bits < 64 and id_bits <= free_bits:
        low_mask = np.uint64((1 << free_bits) - 1)
        permuted &= ~low_mask
        permuted |= doc_ids
        permuted.sort()
        sorted_ids = (permuted & low_mask).astype(doc_ids.dtype)
        permuted &= ~low_mask
        return permuted, sorted_ids
    if known_bits < 64:
        permuted &= np.uint64(((1 << known_bits) - 1) << free_bits)
    sorted_ids = doc_ids[np.argsort(permuted)]
    # Sorted in place rather than gathered by the order: the sorted keys are
    # the same whatever order ties take, and this runs beside a write, so
    # one array less at a time counts (the sort itself is hidden).
    permuted.sort()
    if permuted.size > 1 and bool(np.any(permuted[1:] == permuted[:-1])):
        # Put each run of equal keys' ids in order (lexsort is stable and
        # the keys are sorted already).
        sorted_ids = sorted_ids[np.lexsort((sorted_ids, permuted))]
    return permuted, sorted_ids


class TableWrites:
    """The documents one bulk write puts into every table, with each table's
    sorted entries made one table ahead on ``sorter``: numpy releases the
    GIL, so the next table's sort runs on the other core while LMDB writes
    this one's.
    """

    def __init__(
        self,
        doc_ids: U64Array,
        fingerprints: U64Array,
        tables: tuple[Table, ...],
        sorter: Executor,
        known_bits: Sequence[int],
    ) -> None:
        # Held as uint32 when they fit: half the memory of the two tables'
        # entries in flight.
        fits = not doc_ids.size or int(doc_ids.max()) <= np.iinfo(np.uint32).max
        self.doc_ids: IdArray = doc_ids.astype(np.uint32) if fits else doc_ids
        self.fingerprints = fingerprints
        self.tables = tables
        # Per table, the leading bits of each key the run records.
        self.known_bits = tuple(known_bits)
        self._sorter = sorter
        self._sorting: dict[int, Future[tuple[U64Array, IdArray]]] = {}

    def entries(self, index: int) -> tuple[U64Array, IdArray]:
        """Table ``index``'s ``(permuted keys, doc ids)``, sorted; starts
        sorting the next table's. Asking again for the same table (a step
        runs again after the map grows) gives the same arrays."""
        try:
            for stale in [other for other in self._sorting if other < index]:
                del self._sorting[stale]
            for wanted in (index, index + 1):
                if wanted < len(self.tables) and wanted not in self._sorting:
                    self._sorting[wanted] = self._sorter.submit(
                        sorted_entries,
                        self.tables[wanted],
                        self.fingerprints,
                        self.doc_ids,
                        self.known_bits[wanted],
                    )
            return self._sorting[index].result()
        except BaseException:
            # Interrupted (or the sort failed): the sorter's shutdown then
            # waits for the sort under way only, not for the one queued.
            for future in self._sorting.values():
                future.cancel()
            raise
