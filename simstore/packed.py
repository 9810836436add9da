"""A bulk write's user keys, packed once and held compactly.

A list of a million packed int keys costs 44 MiB as bytes objects, more than
everything else a bulk load holds, and a write keeps its keys for the whole
transaction (a step runs again after the map grows). Held as one bytes object
and the end offset of each key, the same keys take 13 MiB; the bytes objects
LMDB takes are made a slice at a time, as the other columns of a bulk write
are (:data:`simstore.records.WRITE_SLICE`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from simstore import records
from simstore.records import lookup_keys, pack_keys, sliced, strictly_ascending

Positions = Sequence[int]


class PackedKeys:
    """The msgpack encodings of a batch's keys, in the order given.

    ``ascending`` holds when every key's lookup sorts after the one before it
    (then no key repeats, and the key table takes them in this order).
    """

    def __init__(self, blob: bytes, offsets: npt.NDArray[np.int64], *, ascending: bool) -> None:
        self._blob = blob
        self._offsets = offsets  # key i is blob[offsets[i] : offsets[i + 1]]
        self.ascending = ascending

    @classmethod
    def of(cls, keys: Iterable[object]) -> PackedKeys:
        """Pack and check ``keys`` a slice at a time (a bad key raises as
        :func:`~simstore.records.pack_key` does), never holding them all as
        objects: a ``range`` or a generator of ids is not made into a list."""
        parts: list[bytes] = []
        lengths: list[npt.NDArray[np.int64]] = [np.zeros(1, dtype=np.int64)]
        ascending = True
        last_lookup: list[bytes] = []
        for chunk in _chunks(keys):
            packed = pack_keys(chunk)
            if ascending:
                lookups = last_lookup + lookup_keys(packed)
                ascending = strictly_ascending(lookups)
                last_lookup = lookups[-1:]
            lengths.append(np.fromiter(map(len, packed), dtype=np.int64, count=len(packed)))
            parts.append(b"".join(packed))
        return cls(b"".join(parts), np.cumsum(np.concatenate(lengths)), ascending=ascending)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @property
    def total_bytes(self) -> int:
        return len(self._blob)

    def at(self, position: int) -> bytes:
        """The packed key at ``position``."""
        return self._blob[int(self._offsets[position]) : int(self._offsets[position + 1])]

    def take(self, positions: Positions) -> list[bytes]:
        """The packed keys at ``positions`` (a ``range`` is sliced, not indexed)."""
        if isinstance(positions, range) and positions.step == 1:
            starts = self._offsets[positions.start : positions.stop]
            ends = self._offsets[positions.start + 1 : positions.stop + 1]
        else:
            index = np.asarray(positions, dtype=np.int64)
            starts, ends = self._offsets[index], self._offsets[index + 1]
        # Slicing the blob by slice objects keeps the loop in C.
        return list(map(self._blob.__getitem__, map(slice, starts.tolist(), ends.tolist())))

    def lookups(self, positions: Positions) -> list[bytes]:
        """The key-table lookups of the keys at ``positions``."""
        return lookup_keys(self.take(positions))

    def sliced_lookups(self, positions: Positions) -> Iterator[bytes]:
        """:meth:`lookups` of ``positions``, made a slice at a time."""
        return itertools.chain.from_iterable(self.lookups(positions[part]) for part in sliced(len(positions)))


def _chunks(keys: Iterable[object]) -> Iterator[list[object]]:
    """``keys`` in lists of at most ``WRITE_SLICE``; a numpy array's items as
    Python ints (converted in C, a slice at a time)."""
    if isinstance(keys, np.ndarray):
        for part in sliced(len(keys)):
            yield keys[part].tolist()
        return
    iterator = iter(keys)
    while chunk := list(itertools.islice(iterator, records.WRITE_SLICE)):
        yield chunk
