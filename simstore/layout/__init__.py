"""Choosing a store's permutation tables: the layout planner's cost model
over the table format (bytes, probes, descents), and turning what a caller
asked for (``k``, ``blocks``, a layout, ``min_similarity``, a corpus size)
into the tables of a new store or a re-layout. No file is read or written.

Modules:

- ``planner``: Choosing permutation tables from ``k`` and the expected corpus size.
- ``choose``: Turning what a caller asked for into the tables of a new store or a
  re-layout.
"""
