"""Reading a store file the way LMDB sees it, for tests that replace files under waiting openers."""

from __future__ import annotations

from pathlib import Path

import lmdb


def last_transaction(path: Path) -> int:
    """The id of the store file's last commit (what a rebuilt lock file records)."""
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False, max_dbs=2)
    try:
        return int(env.info()["last_txnid"])
    finally:
        env.close()
