"""The :class:`~simstore.Store` facade, :func:`simstore.open`, and the operations the
facade hands work to (writes, maintenance, all-pairs dedup, stats and checks, sharded
stores, migration).

Modules:

- ``arguments``: What callers give a store, checked and turned into what it stores:
  fingerprints and sketches made from text with the stored fingerprinter, given
  sketches, ``k``, similarity thresholds, and ``add_many`` batches.
- ``dedup``: Batch operations over a whole store: all near-duplicate pairs and clusters.
- ``facade``: The Store facade.
- ``inspect``: What a store holds and whether it is sound: ``Store.stats`` and
  ``Store.check`` (and ``simstore stats`` / ``simstore check``).
- ``maintenance``: Keeping the tables in shape: merges, compaction, re-layouts, and the
  map room they need, as functions of an open engine (:mod:`simstore.engine.core`).
- ``migrate``: Convert a format-1 store (simstore 0.1) into a new store of today's
  format.
- ``opening``: Opening a store file: modes, creation, refusal of foreign files, and the
  checks of requested parameters against stored ones.
- ``sharded``: Several store files answering as one: :class:`ShardedStore`.
- ``shrink``: Give a store's free pages back to the file system: ``simstore.shrink``.
- ``writes``: Writing to an open store: single adds and removes (through the group
  commit), ``add_if_new``, and ``add_many`` batches.
"""
