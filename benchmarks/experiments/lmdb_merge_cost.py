"""What a delta merge costs LMDB itself, without simstore: sorted inserts of M
entries into each of T dupsort tables of N entries, in raw py-lmdb.

Run (from the repository root; needs about 3 GB of free disk in --dir)::

    python benchmarks/experiments/lmdb_merge_cost.py --tables 10 --n 10_000_000 --m 1_250_000
    python benchmarks/experiments/lmdb_merge_cost.py --tables 10 --n 10_000_000 --m 1_250_000 --fallocate

simstore's merge at 10M inserts ~1.25M sorted entries into each of its ten
tables in one write transaction; a profile of one (23.3 s) put 19.7 s in
``putmulti``, 1.58 µs per entry. This reproduces that shape: T tables
(``dupsort``, ``dupfixed``, 8-byte keys and values, as simstore's) loaded with
N random keys each in append mode, then the same M sorted random keys per
table inserted, in passes that alternate:

- **one txn**: every table in one write transaction, as simstore's merge does;
- **txn per table**: a write transaction per table (first with ``--per-table-first``).

Every pass commits (sync off), so the tables grow by M entries a pass (the
keys shifted by the pass number, so that no entry repeats); the first pass is
the first to touch the tables' pages in this process. ``--fallocate``
first extends the file by 4 GiB with ``posix_fallocate``; ``--writemap`` opens
with ``MDB_WRITEMAP`` (measured: the one-transaction passes cost the same,
2.05 and 1.24 µs per entry; the per-table ones 0.69 and 0.47). Prints µs per
inserted entry spent in ``putmulti`` and in the whole pass (commits included),
and each pass's wall time.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import lmdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import command_line, load_average, machine, markdown_table

from simstore.engine.records import big_endian_bytes  # only the 8-byte conversion; the writes are raw py-lmdb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    count = lambda text: int(float(text.replace("_", "")))  # noqa: E731
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--n", type=count, default=10_000_000)
    parser.add_argument("--m", type=count, default=1_250_000)
    parser.add_argument("--passes", type=int, default=4)
    parser.add_argument("--fallocate", action="store_true")
    parser.add_argument("--per-table-first", action="store_true", help="start with a txn-per-table pass")
    parser.add_argument("--writemap", action="store_true", help="open with MDB_WRITEMAP")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    print(f"Command: `{command_line()}`\n")
    print(markdown_table(["machine", ""], machine(args.dir or tempfile.gettempdir()).items()) + "\n")

    rng = np.random.default_rng(3)
    work = tempfile.mkdtemp(prefix="lmdb_merge_cost_", dir=args.dir)
    try:
        # Virtual only (no writemap): generous, so that no pass stops part-way.
        map_size = max(1 << 30, 200 * (args.n + args.m) * args.tables)
        env = lmdb.open(work, map_size=map_size, max_dbs=args.tables, sync=False, writemap=args.writemap)
        dbs = [env.open_db(b"t%d" % index, dupsort=True, dupfixed=True) for index in range(args.tables)]
        ids = big_endian_bytes(np.arange(args.n, dtype=np.uint64))
        started = time.perf_counter()
        for db in dbs:
            loaded_keys = big_endian_bytes(np.sort(rng.integers(0, 2**64, args.n, dtype=np.uint64)))
            with env.begin(write=True) as load_txn:
                load_txn.cursor(db).putmulti(zip(loaded_keys, ids, strict=True), append=True)
        print(f"loaded {args.tables} x {args.n:,} entries in {time.perf_counter() - started:.0f} s")
        if args.fallocate:
            descriptor = os.open(os.path.join(work, "data.mdb"), os.O_RDWR)
            try:
                os.posix_fallocate(descriptor, os.fstat(descriptor).st_size, 4 << 30)
            finally:
                os.close(descriptor)
            print("extended the file by 4 GiB (posix_fallocate)")
        added = [np.sort(rng.integers(0, 2**64, args.m, dtype=np.uint64)) for _ in dbs]
        added_ids = big_endian_bytes(np.arange(args.n, args.n + args.m, dtype=np.uint64))
        rows = []
        for pass_number in range(args.passes):
            mode = "one txn" if (pass_number + args.per_table_first) % 2 == 0 else "txn per table"
            in_putmulti = 0.0
            started = time.perf_counter()
            txn = env.begin(write=True) if mode == "one txn" else None
            for db, added_keys in zip(dbs, added, strict=True):
                table_txn = txn if txn is not None else env.begin(write=True)
                shifted = added_keys + np.uint64(pass_number)
                entries = zip(big_endian_bytes(shifted), added_ids, strict=True)
                put_started = time.perf_counter()
                table_txn.cursor(db).putmulti(entries)
                in_putmulti += time.perf_counter() - put_started
                if txn is None:
                    table_txn.commit()
            if txn is not None:
                txn.commit()
            seconds = time.perf_counter() - started
            per_entry = [f"{value / (args.tables * args.m) * 1e6:.2f}" for value in (in_putmulti, seconds)]
            rows.append([pass_number + 1, mode, *per_entry, f"{seconds:.1f}", load_average()])
            print(f"  pass {pass_number + 1}: {mode}, {per_entry[1]} us/entry in all", flush=True)
        env.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{args.tables} tables of {args.n:,} entries, {args.m:,} sorted entries into each per pass.\n")
    headers = ["pass", "transactions", "putmulti µs/entry", "µs/entry with commits", "pass s", "load"]
    print(markdown_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
