"""The entries a bulk write puts into the permutation tables, sorted as the
tables keep them, one table ahead of the writes."""

from __future__ import annotations

from concurrent.futures import Executor, Future

import numpy as np

from simstore.permute import Table, U64Array


def sorted_entries(table: Table, fingerprints: U64Array, doc_ids: U64Array) -> tuple[U64Array, U64Array]:
    """``(permuted keys, doc ids)`` of a batch in ``table``, sorted as the table keeps them."""
    permuted = table.permute_array(fingerprints)
    order = sorted_order(permuted, doc_ids)
    return permuted[order], doc_ids[order]


def sorted_order(permuted: U64Array, doc_ids: U64Array) -> np.ndarray:
    """The order that sorts entries by ``(permuted key, doc id)``, as dupsort
    tables keep them.

    Equal permuted keys are rare, so an unstable sort (five times faster than
    a stable one for a million keys, measured) is tried first and the full
    two-key sort is paid for only when a key repeats.
    """
    order = np.argsort(permuted)
    ordered = permuted[order]
    if ordered.size > 1 and bool(np.any(ordered[1:] == ordered[:-1])):
        return np.lexsort((doc_ids, permuted))
    return order


class TableWrites:
    """The documents one bulk write puts into every table, with each table's
    sorted entries made one table ahead on ``sorter``: numpy releases the
    GIL, so the next table's sort runs on the other core while LMDB writes
    this one's.

    ``every_fingerprint`` holds every stored fingerprint once a table's
    bitmaps had to be rebuilt, for the other tables of the same write (a
    merge's steps share one: no document changes during a merge).
    """

    def __init__(
        self, doc_ids: U64Array, fingerprints: U64Array, tables: tuple[Table, ...], sorter: Executor
    ) -> None:
        self.doc_ids = doc_ids
        self.fingerprints = fingerprints
        self.tables = tables
        self.every_fingerprint: list[U64Array] = []
        self._sorter = sorter
        self._sorting: dict[int, Future[tuple[U64Array, U64Array]]] = {}

    def entries(self, index: int) -> tuple[U64Array, U64Array]:
        """Table ``index``'s ``(permuted keys, doc ids)``, sorted; starts
        sorting the next table's. Asking again for the same table (a step
        runs again after the map grows) gives the same arrays."""
        for stale in [other for other in self._sorting if other < index]:
            del self._sorting[stale]
        for wanted in (index, index + 1):
            if wanted < len(self.tables) and wanted not in self._sorting:
                self._sorting[wanted] = self._sorter.submit(
                    sorted_entries, self.tables[wanted], self.fingerprints, self.doc_ids
                )
        return self._sorting[index].result()
