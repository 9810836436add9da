"""Raw py-lmdb: can an LMDB file written without flushes after a checkpoint be
rolled back to that checkpoint after a power loss? A check of the write-ahead
log design in ``results/writers_notes.md``, not of simstore.

    python benchmarks/experiments/lmdb_power_loss.py --trials 40 --dir /work/bench-tmp

Each trial writes a file through a writable map, flushes it (the checkpoint) and
keeps its bytes and meta pages, then commits ``--commits`` more transactions
with ``MDB_NOSYNC``, keeping what each put and deleted (the log). The disk a
power loss leaves is made from the checkpoint's bytes with a random share
(``--keep``) of the pages written since, meta pages included: the kernel writes
dirty pages back in any order. The checkpoint's meta pages are written back, the
file is opened, and it must hold exactly the checkpoint's data; the log replayed
on it must give exactly the data at the end. A trial run with a read transaction
open on the checkpoint meanwhile (*pinned*: LMDB then reuses none of its pages)
and one without are counted apart. A failure can abort the process (LMDB
asserts on a damaged page), so each trial runs in a child.

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import tempfile
from typing import Any

import lmdb

PAGE = 4096
NAMES = (b"docs", b"delta")
Data = dict[bytes, dict[bytes, bytes]]
Log = list[list[tuple[bytes, bytes, bytes | None]]]


def _open(path: str) -> tuple[Any, dict[bytes, Any]]:
    env = lmdb.open(
        path,
        subdir=False,
        map_size=1 << 28,
        max_dbs=4,
        writemap=True,
        sync=False,
        metasync=False,
        max_spare_txns=0,
    )
    return env, {name: env.open_db(name) for name in NAMES}


def _data(env: Any, dbs: dict[bytes, Any]) -> Data:
    with env.begin() as txn:
        return {name: dict(txn.cursor(db=db).iternext()) for name, db in dbs.items()}


def _commit_some(env: Any, dbs: dict[bytes, Any], rng: random.Random, changes: int) -> list[Any]:
    done: list[tuple[bytes, bytes, bytes | None]] = []
    with env.begin(write=True) as txn:
        for _ in range(changes):
            name = rng.choice(NAMES)
            key = rng.randrange(5000).to_bytes(8, "big")
            if rng.random() < 0.3:
                txn.delete(key, db=dbs[name])
                done.append((name, key, None))
            else:
                value = rng.randbytes(rng.choice((16, 100, 700)))
                txn.put(key, value, db=dbs[name])
                done.append((name, key, value))
    return done


def trial(folder: str, seed: int, pinned: bool, commits: int, keep: float) -> str:
    rng = random.Random(seed)
    path = os.path.join(folder, "trial.mdb")
    env, dbs = _open(path)
    for _ in range(50):
        _commit_some(env, dbs, rng, 40)
    env.sync(True)
    at_checkpoint = _data(env, dbs)
    with open(path, "rb") as file:
        checkpoint = file.read()
    pin = env.begin() if pinned else None
    log: Log = [_commit_some(env, dbs, rng, rng.choice((1, 3, 10))) for _ in range(commits)]
    at_end = _data(env, dbs)
    with open(path, "rb") as file:
        written = file.read()
    if pin is not None:
        pin.abort()
    env.close()
    disk = bytearray(checkpoint.ljust(len(written), b"\0"))
    for start in range(0, len(written), PAGE):
        if written[start : start + PAGE] != disk[start : start + PAGE] and rng.random() < keep:
            disk[start : start + PAGE] = written[start : start + PAGE]
    disk[: 2 * PAGE] = checkpoint[: 2 * PAGE]  # the recovery: the checkpoint's meta pages back
    with open(path, "wb") as file:
        file.write(disk)
    os.unlink(path + "-lock")
    env, dbs = _open(path)
    if _data(env, dbs) != at_checkpoint:
        return "wrong data at the checkpoint"
    with env.begin(write=True) as txn:
        for changes in log:
            for name, key, value in changes:
                if value is None:
                    txn.delete(key, db=dbs[name])
                else:
                    txn.put(key, value, db=dbs[name])
    replayed = _data(env, dbs)
    env.close()
    return "recovered" if replayed == at_end else "wrong data after the replay"


def _child(folder: str, seed: int, pinned: bool, commits: int, keep: float, out: Any) -> None:
    try:
        out.put(trial(folder, seed, pinned, commits, keep))
    except Exception as exc:  # a damaged file LMDB noticed
        out.put(f"error: {type(exc).__name__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument(
        "--keep", type=float, default=0.5, help="share of the pages written since that reach the disk"
    )
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    context = multiprocessing.get_context("fork")
    print("| checkpoint | " + " | ".join(("recovered", "wrong data", "error or abort")) + " |")
    print("|---|---|---|---|")
    for pinned in (True, False):
        counts = {"recovered": 0, "wrong data": 0, "error or abort": 0}
        for seed in range(args.trials):
            with tempfile.TemporaryDirectory(dir=args.dir) as folder:
                out = context.Queue()
                child = context.Process(
                    target=_child, args=(folder, seed, pinned, args.commits, args.keep, out)
                )
                child.start()
                child.join()
                outcome = out.get() if child.exitcode == 0 else "aborted"
                shutil.rmtree(folder, ignore_errors=True)
            if outcome == "recovered":
                counts["recovered"] += 1
            elif outcome.startswith("wrong data"):
                counts["wrong data"] += 1
            else:
                counts["error or abort"] += 1
        label = "pinned by a read transaction" if pinned else "not pinned"
        print(f"| {label} | " + " | ".join(str(count) for count in counts.values()) + " |", flush=True)


if __name__ == "__main__":
    main()
