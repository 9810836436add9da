"""End-to-end example: build a store from bundled fingerprints, query it,
close it, reopen it in a new process-like way and get the same answers.

Run:  python examples/quickstart.py [STORE_PATH]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import simstore

EXAMPLE = Path(__file__).with_name("fingerprints.txt")


def load_example() -> tuple[list[str], np.ndarray]:
    """Keys and fingerprints from the bundled example (``key<TAB>hex`` lines)."""
    keys, fingerprints = [], []
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            key, hex_fingerprint = line.split("\t")
            keys.append(key)
            fingerprints.append(int(hex_fingerprint, 16))
    return keys, np.array(fingerprints, dtype=np.uint64)


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "example.simstore")
    keys, fingerprints = load_example()
    started = time.perf_counter()
    with simstore.open(path, "n", k=3) as store:
        store.add_many(keys, fingerprints)
        first_answers = [store.query(fingerprint=int(fp)) for fp in fingerprints[:5]]
    print(f"stored {len(keys)} fingerprints in {path} ({time.perf_counter() - started:.3f} s)")
    with simstore.open(path, "r") as store:
        print(store.stats())
        for fingerprint, before in zip(fingerprints[:5].tolist(), first_answers, strict=True):
            after = store.query(fingerprint=fingerprint)
            assert after == before, "a reopened store must give the same answers"
            near = ", ".join(f"{m.key} ({m.distance} bits)" for m in after)
            print(f"{fingerprint:016x}: {near}")
        problems = store.check()
    print("check:", problems if problems else "ok")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
