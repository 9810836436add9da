"""One store file: its format, the permutation tables' runs and catalog, the delta, the
write-ahead log and the LMDB boundary. The only package that imports :mod:`lmdb` (with
:mod:`simstore.store.migrate`). No public names: the facade (:mod:`simstore.store`) is
how callers reach it.

Modules:

- ``_lmdb``: The LMDB boundary: the environment, its sub-databases, transactions, map
  growth and error translation.
- ``builder``: The entries a bulk write puts into the permutation tables, sorted as the
  tables keep them, one table ahead of the writes.
- ``catalog``: The run catalog: which runs make up the permutation tables now.
- ``closest``: Queries limited to their closest matches, which stop as soon as they have
  them.
- ``core``: An open store's lifecycle: the file, its layout, the delta, and the
  transactions every operation runs in.
- ``delta``: The delta: documents added since the last merge, in memory and in a log.
- ``format``: The on-disk format: its version, the meta record, and compatibility
  checks.
- ``occupancy``: Per-table occupancy bitmaps: which leading prefixes a table holds at
  all.
- ``packed``: A bulk write's user keys, packed once and held compactly.
- ``query``: Query helpers that do no I/O: permuting a batch of queries for every table.
- ``reads``: Reading an open store: near-duplicate queries, and the documents by key.
- ``records``: Encoding of user keys, document records and per-document metadata.
- ``runs``: The table format: a permutation table's entries packed in buckets.
- ``tableset``: The permutation tables of one layout, at the LMDB boundary: writing
  runs, taking documents out, compaction steps, and the probes of a query.
- ``wal``: Durable commits through the write-ahead log: records, checkpoints, pins and
  the roll-back after a restart.
- ``writelog``: The write-ahead log beside a store: ``<store>-log``.
"""
