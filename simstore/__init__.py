"""simstore: a persistent, embedded near-duplicate index over 64-bit simhash
fingerprints, stored in one LMDB file.

>>> import simstore, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "demo.simstore")
>>> with simstore.open(path, k=3) as store:
...     _ = store.add("a", fingerprint=0b1011)
...     store.query(fingerprint=0b0011)
[Match(key='a', distance=1, fingerprint=11)]
"""

from simstore.errors import (
    CorruptStoreError,
    FormatVersionError,
    InvalidTypeError,
    InvalidValueError,
    KeyNotFoundError,
    NotAStoreError,
    ParameterMismatchError,
    ReadOnlyError,
    SimstoreError,
    StoreClosedError,
    StoreFullError,
    StoreLockedError,
    StoreNotFoundError,
)
from simstore.params import Options
from simstore.permute import Table, hamming
from simstore.store import Match, Record, Stats, Store, __version__, open  # noqa: A004

__all__ = [
    "CorruptStoreError",
    "FormatVersionError",
    "InvalidTypeError",
    "InvalidValueError",
    "KeyNotFoundError",
    "Match",
    "NotAStoreError",
    "Options",
    "ParameterMismatchError",
    "ReadOnlyError",
    "Record",
    "SimstoreError",
    "Stats",
    "Store",
    "StoreClosedError",
    "StoreFullError",
    "StoreLockedError",
    "StoreNotFoundError",
    "Table",
    "__version__",
    "hamming",
    "open",
]
