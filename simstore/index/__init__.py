"""Manku, Jain & Das Sarma's permutation scheme and multi-index hashing over uint64 arrays:
tables, whether they cover k, all pairs and clusters of an array, exact search of sorted
columns. No file, no LMDB.

Modules:

- ``clusters``: Clusters of a pair graph: connected components (union-find, vectorised
  with numpy) and stars (leader clustering).
- ``cover``: Whether permutation tables are exact for ``k``.
- ``column_search``: Exact Hamming search over a run's sorted columns, every probe at
  once (format 3's query path, not yet used by the store).
- ``costs``: Measured constants of the layout planner's cost model, in one place.
- ``multi_index``: Multi-index hashing: a few tables searched with many cheap probes.
- ``pairs``: All near-duplicate pairs of a set of fingerprints: Manku's batch mode,
  vectorised.
- ``permute``: Block layouts and permutation tables (Manku, Jain & Das Sarma, WWW 2007).
- ``prefix_shuffle``: The steps of a distributed pair search that moves fingerprints, not
  rows (what :mod:`simstore.ray` runs in its tasks).
- ``ranges``: Vectorised range expansion (every position of many ranges at once).
- ``scan_plan``: The order a query that wants only its closest matches visits the tables
  in, and how far each step of it has settled.
- ``sharding``: Which shard a key belongs to: one stable function shared by the Dask
  builder, which writes the shards, and :class:`simstore.ShardedStore`, which routes
  adds and removals to them.
- ``skew``: Skew statistics: how far a table's prefix ranges are from uniform.
"""
