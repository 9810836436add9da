"""Data in and out: whole tables (pyarrow, pandas, polars), Arrow batches, Hugging Face
datasets, Parquet and Arrow IPC files, JSON lines, CSV and text. Optional dependencies are
imported when used.

Modules:

- ``arrow_batches``: Pure functions of one Arrow batch: what a dataframe engine (Ray Data,
  Spark, Daft, Dask) calls per block to fingerprint rows, query a store or add to one.
- ``columnar``: Parquet and Arrow IPC files in and out of the command line, with pyarrow
  (the optional extra ``simstore[parquet]``; the core install stays lean).
- ``hf``: Hugging Face ``datasets``: deduplicate a ``Dataset`` within itself, or against
  an existing store, without holding it in memory (issue 22).
- ``readers``: Input documents for the command line: JSON lines, CSV, TSV, plain text
  (one document per line), a directory of text files, or standard input; and writers
  that give the kept documents back in the format they came in.
- ``tables``: Whole tables deduplicated in one call (issue 22): pyarrow, pandas and
  polars tables, or lists of row dicts, in; the kept rows and each row's provenance out,
  in the kind of table that came in.
"""
