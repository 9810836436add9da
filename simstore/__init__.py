"""simstore: a persistent, embedded near-duplicate index over 64-bit simhash
fingerprints, stored in one LMDB file.

>>> import simstore, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "demo.simstore")
>>> with simstore.open(path, k=3) as store:
...     _ = store.add("a", fingerprint=0b1011)
...     store.query(fingerprint=0b0011)
[Match(key='a', distance=1, fingerprint=11, meta=None, similarity=None)]
"""

from simstore.batch import Cluster, Pair
from simstore.errors import (
    AccessDeniedError,
    CommitInterruptedError,
    CorruptStoreError,
    FlushError,
    FormatVersionError,
    InvalidTypeError,
    InvalidValueError,
    KeyNotFoundError,
    MainGuardError,
    NotAStoreError,
    ParameterMismatchError,
    ReadOnlyError,
    ShardMismatchError,
    SimstoreError,
    StoreClosedError,
    StoreFullError,
    StoreLockedError,
    StoreNotFoundError,
    WorkerError,
)
from simstore.frames import dedup_table
from simstore.migrate import migrate
from simstore.opening import open
from simstore.params import Options
from simstore.permute import Table, hamming
from simstore.planner import Layout, best_layout, plan
from simstore.results import (
    MaintenanceWarning,
    Match,
    Record,
    SegmenterChangedWarning,
    Shrunk,
    Stats,
    StoreFullWarning,
)
from simstore.sharded import ShardedStore
from simstore.shrinking import shrink
from simstore.simhash import Fingerprinter, ShortTextWarning, fingerprint, fingerprint_vector
from simstore.sketch import Sketch, estimate_jaccard
from simstore.store import Store
from simstore.version import __version__

__all__ = [
    "AccessDeniedError",
    "Cluster",
    "CommitInterruptedError",
    "CorruptStoreError",
    "Fingerprinter",
    "FlushError",
    "FormatVersionError",
    "InvalidTypeError",
    "InvalidValueError",
    "KeyNotFoundError",
    "Layout",
    "MainGuardError",
    "MaintenanceWarning",
    "Match",
    "NotAStoreError",
    "Options",
    "Pair",
    "ParameterMismatchError",
    "ReadOnlyError",
    "Record",
    "SegmenterChangedWarning",
    "ShardMismatchError",
    "ShardedStore",
    "ShortTextWarning",
    "Shrunk",
    "SimstoreError",
    "Sketch",
    "Stats",
    "Store",
    "StoreClosedError",
    "StoreFullError",
    "StoreFullWarning",
    "StoreLockedError",
    "StoreNotFoundError",
    "Table",
    "WorkerError",
    "__version__",
    "best_layout",
    "dedup_table",
    "estimate_jaccard",
    "fingerprint",
    "fingerprint_vector",
    "hamming",
    "migrate",
    "open",
    "plan",
    "shrink",
]
