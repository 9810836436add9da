"""simstore: a persistent, embedded near-duplicate index over 64-bit simhash
fingerprints, stored in one LMDB file.

>>> import simstore, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "demo.simstore")
>>> with simstore.open(path, k=3) as store:
...     _ = store.add("a", fingerprint=0b1011)
...     store.query(fingerprint=0b0011)
[Match(key='a', distance=1, fingerprint=11, meta=None, similarity=None)]
"""

from simstore.commit.batch import Batch, Pending
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
from simstore.fingerprinting.fingerprinter import Fingerprinter, ShortTextWarning, fingerprint
from simstore.fingerprinting.pool import Workers
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard
from simstore.fingerprinting.vectors import fingerprint_vector
from simstore.index.permute import Table, hamming
from simstore.index.sharding import shard_of
from simstore.io.tables import dedup_table
from simstore.layout.planner import Layout, best_layout, plan
from simstore.options import Options
from simstore.results import (
    MaintenanceWarning,
    Match,
    Record,
    SegmenterChangedWarning,
    Shrunk,
    Stats,
    StoreFullWarning,
)
from simstore.store.dedup import Cluster, Pair
from simstore.store.facade import Store
from simstore.store.migrate import migrate
from simstore.store.opening import open
from simstore.store.sharded import ShardedStore
from simstore.store.shrink import shrink
from simstore.version import __version__

__all__ = [
    "AccessDeniedError",
    "Batch",
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
    "Pending",
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
    "Workers",
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
    "shard_of",
    "shrink",
]
