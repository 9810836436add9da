"""Format 3's run values: a multi-index run's sorted columns as LMDB values.

A run of a multi-index scheme (:mod:`simstore.index.column_search`) is, in
each table's sub-database, a few values under the key ``run id (4 bytes,
big-endian) + kind (1 byte)``, so a run's values sit together in key order:

- ``KEYS``: the table's sorted keys (table 0: the fingerprints; table ``i``:
  the fingerprints rotated so that segment ``i`` leads), little-endian uint64;
- ``IDS`` (table 0 only): each fingerprint's document id, little-endian,
  4 or 8 bytes as the run's largest id needs;
- ``DIRECTORY``: for every value of the keys' top ``bits`` bits, the position
  of its first key, and the column's length last (little-endian uint32 or
  uint64): a probe's range starts inside one directory slot;
- ``BAND_KEYS`` and ``BAND_IDS`` (table 0 only, format 4): the band keys of
  the run's documents (:mod:`simstore.index.band_runs`), little-endian
  uint32 in ascending order, and each key's document id.

Each value is a 16-byte header (kind, item size, the directory's bits, a
CRC-32 of the payload, the item count) and then the payload, padded to at
least ``MIN_VALUE_BYTES``. Values that large are stored on LMDB overflow
pages, contiguous in the file and 8-byte aligned in the map, so a reader views
a payload in place with ``np.frombuffer`` and copies nothing; the CRC is
checked by ``check()``, not by every query.

Nothing here does I/O.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Callable, Generator
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from simstore.errors import CorruptStoreError
from simstore.index.column_search import MAX_DIRECTORY_BITS, Directory

KEYS = 0
IDS = 1
DIRECTORY = 2
#: Format 4's band table, in table 0's sub-database (:mod:`simstore.engine.band_tables`):
#: the run's band keys (uint32, ascending) and each one's document id.
BAND_KEYS = 3
BAND_IDS = 4
KINDS = (KEYS, IDS, DIRECTORY, BAND_KEYS, BAND_IDS)

KEY = struct.Struct(">IB")
HEADER = struct.Struct("<BBBxIQ")
#: Values below this size would sit inside LMDB's leaf pages, where their
#: payload is not 8-byte aligned: smaller ones are padded up to it.
MIN_VALUE_BYTES = 2048
_DTYPES: dict[int, np.dtype[Any]] = {4: np.dtype("<u4"), 8: np.dtype("<u8")}
IdArray = npt.NDArray[np.unsignedinteger[Any]]
#: A writable buffer a run value is built in: a ``bytearray``, or a shared
#: map of a scratch file (:mod:`simstore.engine.scratch`).
ValueBuffer = bytearray | mmap.mmap
#: Makes a zeroed :data:`ValueBuffer` of the size asked.
MakeValue = Callable[[int], ValueBuffer]


Item = TypeVar("Item")
Views = TypeVar("Views")


def put_each_step(steps: Generator[list[Item], Views, int], views: Views, put: Callable[[Item], None]) -> int:
    """Drive a join's steps (:func:`simstore.engine.column_tables.join_values`,
    :func:`simstore.engine.band_tables.join_band_values`) in one go, sending
    every step the same ``views`` of the runs and putting each value it
    finished before the next step begins; returns the join's entry count."""
    try:
        finished = next(steps)
        while True:
            while finished:
                put(finished.pop(0))  # (popped: a value put is let go of before the next step)
            finished = steps.send(views)
    except StopIteration as done:
        return int(done.value)


def run_key(run_id: int, kind: int) -> bytes:
    """The key of a run's value of ``kind`` in a table's sub-database."""
    return KEY.pack(run_id, kind)


def parse_key(key: bytes) -> tuple[int, int]:
    """``(run id, kind)`` of a table key; ``CorruptStoreError`` if it is none."""
    if len(key) != KEY.size or key[4] not in KINDS:
        raise CorruptStoreError(f"a table holds a key that is no run value: {key.hex()}")
    run_id, kind = KEY.unpack(key)
    return int(run_id), int(kind)


def id_width(ids: IdArray) -> int:
    """Bytes an id takes in a run holding ``ids``."""
    return 4 if len(ids) == 0 or int(ids.max()) < 1 << 32 else 8


def encode(
    kind: int, payload: npt.NDArray[Any], *, bits: int = 0, make: MakeValue = bytearray
) -> ValueBuffer:
    """One run value: the header, ``payload``'s bytes, padding."""
    if payload.dtype.itemsize not in _DTYPES:
        raise ValueError(f"a run value holds 4- or 8-byte items, not {payload.dtype}")
    value, items = allocate(len(payload), payload.dtype.itemsize, make)
    items[:] = payload
    return seal(value, kind, items, bits=bits)


def allocate(count: int, item_size: int, make: MakeValue = bytearray) -> tuple[ValueBuffer, npt.NDArray[Any]]:
    """A run value of ``count`` items (in a buffer ``make`` gives), and its
    payload as an array to fill in place (then :func:`seal` it): a column is
    written once, not copied into bytes and again into the value."""
    if item_size not in _DTYPES:
        raise ValueError(f"a run value holds 4- or 8-byte items, not {item_size}-byte ones")
    value = make(max(HEADER.size + count * item_size, MIN_VALUE_BYTES))
    return value, np.frombuffer(value, dtype=_DTYPES[item_size], count=count, offset=HEADER.size)


def seal(value: ValueBuffer, kind: int, items: npt.NDArray[Any], *, bits: int = 0) -> ValueBuffer:
    """``value`` (from :func:`allocate`, its payload ``items`` filled) with its header."""
    item_size = items.dtype.itemsize
    crc = zlib.crc32(memoryview(value)[HEADER.size : HEADER.size + len(items) * item_size])
    HEADER.pack_into(value, 0, kind, item_size, bits, crc, len(items))
    return value


def seal_filled(
    value: ValueBuffer, kind: int, items: npt.NDArray[Any], filled: int, make: MakeValue = bytearray
) -> ValueBuffer:
    """:func:`seal` of ``value`` whose payload ``items`` a join filled only
    ``filled`` of (entries held twice were dropped, rarely): sealed as it is
    when full, else a copy of what was filled (in a buffer ``make`` gives),
    so the value is as long as that."""
    if filled == len(items):
        return seal(value, kind, items)
    return encode(kind, items[:filled], make=make)


def decode(value: Any, kind: int, *, verify: bool = False) -> tuple[npt.NDArray[Any], int]:
    """The payload of a run value (a view of ``value``, no copy) and its
    directory bits. ``verify`` checks the CRC too (a pass over the bytes).

    Raises:
        CorruptStoreError: the value is not a run value of ``kind``.
    """
    view = memoryview(value)
    if view.nbytes < HEADER.size:
        raise CorruptStoreError(f"a run value of {view.nbytes} bytes is shorter than its header")
    stored_kind, item_size, bits, crc, count = HEADER.unpack_from(view)
    if stored_kind != kind or item_size not in _DTYPES or bits > MAX_DIRECTORY_BITS:
        raise CorruptStoreError(
            f"a run value's header is damaged (kind {stored_kind}, item size {item_size})"
        )
    if HEADER.size + count * item_size > view.nbytes:
        raise CorruptStoreError(f"a run value claims {count} items but holds {view.nbytes} bytes")
    payload = np.frombuffer(view, dtype=_DTYPES[item_size], count=count, offset=HEADER.size)
    if verify and zlib.crc32(view[HEADER.size : HEADER.size + count * item_size]) != crc:
        raise CorruptStoreError("a run value fails its CRC")
    return payload, int(bits)


def decode_directory(value: Any, entries: int, *, verify: bool = False) -> Directory:
    """A directory value, checked against its column's ``entries``."""
    positions, bits = decode(value, DIRECTORY, verify=verify)
    if len(positions) != (1 << bits) + 1 or int(positions[-1]) != entries or int(positions[0]) != 0:
        raise CorruptStoreError(f"a run's directory does not describe its {entries} keys")
    return Directory(bits, positions)
