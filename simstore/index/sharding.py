"""Which shard a key belongs to: one stable function shared by the Dask
builder, which writes the shards, and :class:`simstore.ShardedStore`, which
routes adds and removals to them.

The shard of a key is ``xxh3_64(msgpack(key)) % shards``, with seed 0: the
key's msgpack encoding is the one the store itself keeps, so ``"1"``, ``b"1"``
and ``1`` are three keys with three (independent) shards, and the result is
the same in every process, on every machine and Python version (never
Python's salted ``hash()``).

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import xxhash

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.keys import pack_key


def check_shards(shards: object) -> int:
    """``shards`` as a positive int, or a clear error."""
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise InvalidTypeError(f"shards must be an int, got {type(shards).__name__}")
    if shards < 1:
        raise InvalidValueError(f"shards must be at least 1, got {shards}")
    return shards


def shard_of(key: object, shards: int) -> int:
    """The shard (``0 .. shards - 1``) that holds ``key``.

    >>> shard_of("https://example.com/", 1)
    0
    >>> shard_of("a", 16) == shard_of("a", 16)
    True
    """
    return xxhash.xxh3_64_intdigest(pack_key(key)) % check_shards(shards)


def shards_of_packed(packed_keys: Iterable[bytes], shards: int) -> npt.NDArray[np.int64]:
    """:func:`shard_of` of keys already in their msgpack encoding."""
    count = check_shards(shards)
    digests = np.fromiter(map(xxhash.xxh3_64_intdigest, packed_keys), dtype=np.uint64)
    return (digests % np.uint64(count)).astype(np.int64)
