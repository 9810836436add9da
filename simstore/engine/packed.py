"""A bulk write's user keys, packed once and held compactly.

A list of a million packed int keys costs 44 MiB as bytes objects, more than
everything else a bulk load holds, and a write keeps its keys for the whole
transaction (a step runs again after the map grows). Held as one bytes object
and an offset per key, the same keys take 13 MiB; the bytes objects
LMDB takes are made a slice at a time, as the other columns of a bulk write
are (:data:`simstore.engine.records.WRITE_SLICE`).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from simstore.engine import records
from simstore.engine.records import (
    MAX_DIRECT_KEY_BYTES,
    big_endian_bytes,
    lookup_keys,
    sliced,
    strictly_ascending,
)
from simstore.index.permute import U64Array
from simstore.keys import pack_keys

IntArray = npt.NDArray[np.int64]
#: Positions in a batch: a range, a list or an array of them.
Positions = Sequence[int] | IntArray


class PackedKeys:
    """The msgpack encodings of a batch's keys, in the order given.

    ``ascending`` holds when every key's lookup sorts after the one before it
    (then no key repeats, and the key table takes them in this order);
    ``hashed`` when some key is too long to be its own lookup.
    """

    def __init__(self, blob: bytes, offsets: IntArray, *, ascending: bool, hashed: bool) -> None:
        self._blob = blob
        self._offsets = offsets  # key i is blob[offsets[i] : offsets[i + 1]]
        self.ascending = ascending
        self.hashed = hashed

    @classmethod
    def of(cls, keys: Iterable[object]) -> PackedKeys:
        """Pack and check ``keys`` a slice at a time (a bad key raises as
        :func:`~simstore.keys.pack_key` does), never holding them all as
        objects: a ``range`` or a generator of ids is not made into a list."""
        return cls._joined_from(pack_keys(chunk) for chunk in _chunks(keys))

    def subset(self, positions: IntArray) -> PackedKeys:
        """The keys at ``positions``, on their own (a shard's share)."""
        return self._joined_from(self.take(positions[part]) for part in sliced(len(positions)))

    @classmethod
    def _joined_from(cls, slices: Iterable[list[bytes]]) -> PackedKeys:
        """Packed keys given a slice at a time."""
        check = _AscendingCheck()
        blob, offsets = _joined(map(check.seen, slices))
        hashed = bool(len(offsets) > 1 and np.diff(offsets).max() > MAX_DIRECT_KEY_BYTES)
        return cls(blob, offsets, ascending=check.ascending, hashed=hashed)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @property
    def total_bytes(self) -> int:
        return len(self._blob)

    def at(self, position: int) -> bytes:
        """The packed key at ``position``."""
        return self._blob[int(self._offsets[position]) : int(self._offsets[position + 1])]

    def take(self, positions: Positions) -> list[bytes]:
        """The packed keys at ``positions``."""
        starts, ends = self._bounds(positions)
        same_width = self._same_width(positions, starts, ends)
        if same_width is not None:
            return same_width.tolist()  # type: ignore[no-any-return]
        return self._cut(starts, ends)

    def record_values(self, fingerprints: U64Array, positions: Positions) -> list[bytes]:
        """Document records (8-byte big-endian fingerprint, then packed key)
        of ``fingerprints`` and the keys at ``positions``."""
        starts, ends = self._bounds(positions)
        same_width = self._same_width(positions, starts, ends)
        if same_width is None:
            return list(map(operator.add, big_endian_bytes(fingerprints), self._cut(starts, ends)))
        rows = np.empty(len(same_width), dtype=[("fingerprint", ">u8"), ("key", same_width.dtype)])
        rows["fingerprint"] = fingerprints
        rows["key"] = same_width
        return rows.view(f"V{rows.dtype.itemsize}").tolist()

    def _bounds(self, positions: Positions) -> tuple[IntArray, IntArray]:
        """``(starts, ends)`` in the blob of the keys at ``positions`` (a
        ``range`` is sliced, not indexed)."""
        if isinstance(positions, range) and positions.step == 1:
            return (
                self._offsets[positions.start : positions.stop],
                self._offsets[positions.start + 1 : positions.stop + 1],
            )
        index = np.asarray(positions, dtype=np.int64)
        return self._offsets[index], self._offsets[index + 1]

    def _cut(self, starts: IntArray, ends: IntArray) -> list[bytes]:
        """The blob's byte strings from ``starts`` to ``ends``; slicing it by
        slice objects keeps the loop in C."""
        return list(map(self._blob.__getitem__, map(slice, starts.tolist(), ends.tolist())))

    def _same_width(
        self, positions: Positions, starts: IntArray, ends: IntArray
    ) -> npt.NDArray[np.void] | None:
        """The keys at ``positions`` (from ``starts`` to ``ends`` in the blob)
        as one array of fixed-width byte strings when they all have the same
        length (int keys mostly do), else ``None``: numpy then makes the
        bytes objects at C speed, 2 ms for 64K keys against 15 ms for slicing
        the blob key by key (measured)."""
        if not len(starts):
            return None
        width = int(ends[0] - starts[0])
        if not bool(np.all(ends - starts == width)):
            return None
        if isinstance(positions, range) and positions.step == 1:
            return np.frombuffer(self._blob, dtype=f"V{width}", count=len(starts), offset=int(starts[0]))
        every_byte = np.frombuffer(self._blob, dtype=np.uint8)
        rows: npt.NDArray[np.void] = every_byte[starts[:, np.newaxis] + np.arange(width)].view(f"V{width}")
        return rows.ravel()

    def lookups(self, positions: Positions) -> list[bytes]:
        """The key-table lookups of the keys at ``positions``."""
        return lookup_keys(self.take(positions))

    def distinct(self) -> tuple[Positions, IntArray | None]:
        """``(positions, key_order)``: the position of each distinct key's last
        occurrence (a repeated key keeps its last value), in the order of
        their first occurrences (the order a batch's documents are numbered
        in); and the order of ``positions`` that sorts their lookups as the
        key table does (``None``: they are sorted already)."""
        if self.ascending:
            return range(len(self)), None
        blob, offsets = self._blob, self._offsets
        if self.hashed:  # rare: keys over MAX_DIRECT_KEY_BYTES are found by a digest
            everything = range(len(self))
            blob, offsets = _joined(self.lookups(everything[part]) for part in sliced(len(self)))
        order, run_starts = byte_order(np.frombuffer(blob, dtype=np.uint8), offsets)
        if run_starts.all():  # no key repeats
            return range(len(self)), order
        # byte_order keeps equal keys in their given order: a run's first
        # element is the key's first occurrence, its last the last.
        firsts = order[run_starts]
        lasts = order[np.flatnonzero(np.append(run_starts[1:], True))]
        by_first = np.argsort(firsts)
        key_order = np.empty_like(by_first)
        key_order[by_first] = np.arange(len(by_first))
        return lasts[by_first], key_order

    def sliced(self, positions: Positions) -> Iterator[bytes]:
        """:meth:`take` of ``positions``, made a slice at a time."""
        return itertools.chain.from_iterable(self.take(positions[part]) for part in sliced(len(positions)))

    def sliced_lookups(self, positions: Positions) -> Iterator[bytes]:
        """:meth:`lookups` of ``positions``, made a slice at a time."""
        return itertools.chain.from_iterable(self.lookups(positions[part]) for part in sliced(len(positions)))


class _AscendingCheck:
    """Whether the lookups of the packed keys :meth:`seen` so far, slice after
    slice, are strictly ascending."""

    def __init__(self) -> None:
        self.ascending = True
        self._last: list[bytes] = []

    def seen(self, packed: list[bytes]) -> list[bytes]:
        if self.ascending:
            lookups = self._last + lookup_keys(packed)
            self.ascending = strictly_ascending(lookups)
            self._last = lookups[-1:]
        return packed


def _joined(slices: Iterable[list[bytes]]) -> tuple[bytes, IntArray]:
    """``(blob, offsets)`` of byte strings given a slice at a time: string
    ``i`` is ``blob[offsets[i] : offsets[i + 1]]``."""
    parts: list[bytes] = []
    lengths: list[IntArray] = [np.zeros(1, dtype=np.int64)]
    for strings in slices:
        lengths.append(np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)))
        parts.append(b"".join(strings))
    return b"".join(parts), np.cumsum(np.concatenate(lengths))


def byte_order(data: npt.NDArray[np.uint8], offsets: IntArray) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """``(order, run_starts)`` of the byte strings ``data[offsets[i] :
    offsets[i + 1]]``: ``order`` sorts them as LMDB compares keys (bytewise,
    the shorter first when one is the other's prefix), keeping equal strings
    in their given order; ``run_starts[j]`` is true where string ``order[j]``
    differs from string ``order[j - 1]``.

    A most-significant-first radix sort in numpy: each round sorts the
    strings still tied by their next eight bytes. It holds a few arrays of
    the strings' count, where sorting them as Python bytes objects holds
    every one as an object (44 MiB for a million int keys, 90 MiB for a
    million URLs) and ran slower for int keys (0.46 s against 0.94 s for a
    million shuffled; 0.82 s against 0.62 s for URLs).
    """
    count = len(offsets) - 1
    # Narrow types where they fit: the arrays below are a batch's count long
    # each, several at a time (10M URL keys: ~90 bytes a key at the peak).
    index_type = np.int32 if count < 2**31 else np.int64
    starts = offsets[:-1]
    lengths = np.diff(offsets).astype(np.int32 if len(data) < 2**31 else np.int64)
    order = np.arange(count, dtype=index_type)
    run_starts = np.zeros(count, dtype=bool)
    run_starts[:1] = True
    tied = np.ones(count, dtype=bool)  # in a run of 2+ not yet told apart
    depth = 0
    while count > 1 and (slots := np.flatnonzero(tied)).size:
        # Runs are contiguous and wholly tied or not, so sorting the tied
        # slots by (run, word, length left) and writing them back in place
        # splits each run without moving it.
        items = order[slots]
        run_ids = np.cumsum(run_starts, dtype=np.int32)[slots]
        # 9 stands for "goes on past this word": a string that ends inside it
        # sorts before its zero-padded equal that goes on.
        remaining = lengths[items]
        remaining -= depth
        left = np.clip(remaining, 0, 9, out=remaining).astype(np.uint8)
        del remaining
        positions = starts[items]
        positions += depth
        word = _word_at(data, positions, left)
        del positions
        by = np.lexsort((left, word, run_ids))
        order[slots] = items[by]
        word, left, run_ids = word[by], left[by], run_ids[by]
        new_run = np.ones(len(slots), dtype=bool)
        new_run[1:] = (run_ids[1:] != run_ids[:-1]) | (word[1:] != word[:-1]) | (left[1:] != left[:-1])
        run_starts[slots] = new_run
        new_run_ids = np.cumsum(new_run) - 1
        tied[slots] = (np.bincount(new_run_ids)[new_run_ids] > 1) & (left == 9)
        depth += 8
    return order.astype(np.int64, copy=False), run_starts


def _word_at(
    data: npt.NDArray[np.uint8], starts: IntArray, left: npt.NDArray[np.uint8]
) -> npt.NDArray[np.uint64]:
    """The eight bytes from each of ``starts`` as a big-endian uint64, zero
    past each string's ``left`` bytes."""
    word = np.zeros(len(starts), dtype=np.uint64)
    where = np.empty_like(starts)
    byte = np.empty(len(starts), dtype=np.uint64)
    for index in range(8):
        np.add(starts, index, out=where)
        np.minimum(where, len(data) - 1, out=where)
        byte[:] = data[where]
        byte[left <= index] = 0
        np.left_shift(byte, np.uint64(56 - 8 * index), out=byte)
        np.bitwise_or(word, byte, out=word)
    return word


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
