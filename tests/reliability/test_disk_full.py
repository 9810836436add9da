"""Full disks and map limits: writes eventually fail, the store stays consistent, and
every write that returned is there.

Two ways to run out of room: a real, small filesystem (a 3 MB tmpfs, mounted by the test
when it runs as root with CAP_SYS_ADMIN, skipped otherwise), and ``max_map_size``, which
works everywhere.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import simstore

from . import _workload
from .conftest import COUNTS, assert_queries_match_oracle, contents_digest, run_python

# -- a small filesystem -----------------------------------------------------------------------


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A freshly mounted 3 MB tmpfs, or a skip when this process may not mount one."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    folder = Path(tempfile.mkdtemp(prefix="simstore-full-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(folder)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)
        folder.rmdir()


def fill(store: simstore.Store, seed: int, limit: int = 200_000) -> tuple[dict[Any, int], BaseException]:
    """Single adds and 100-document batches until a write fails; returns what was
    acknowledged and the error."""
    rng = random.Random(seed)
    acked: dict[Any, int] = {}
    for step in range(limit):
        try:
            if step % 10 == 0:
                keys = [f"batch-{step}-{n}" for n in range(100)]
                fps = [rng.getrandbits(64) for _ in keys]
                store.add_many(keys, fps)
                acked.update(zip(keys, fps, strict=True))
            else:
                fp = rng.getrandbits(64)
                store.add(f"single-{step}", fingerprint=fp, meta={"step": step} if step % 3 else None)
                acked[f"single-{step}"] = fp
        except Exception as exc:
            return acked, exc
    raise AssertionError("the store never filled up")


def test_full_filesystem_keeps_every_acknowledged_add(small_fs: Path) -> None:
    """On a full filesystem a write is refused (a SimstoreError), the open store stays
    consistent and usable for reads, every acknowledged add is there after a reopen, and
    once space is freed the store takes writes again."""
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\0" * 400_000)
    path = str(small_fs / "full.simstore")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", simstore.StoreFullWarning)
        store = simstore.open(path, k=3, sync=False, merge_threshold=200)
        acked, error = fill(store, seed=1)
        assert isinstance(error, simstore.SimstoreError), repr(error)
        assert len(acked) > 1000
        # still readable, exact and consistent in the same process
        assert store.check() == []
        assert dict(store.items()) == acked
        before = contents_digest(store)
        # more writes on the full disk fail again or succeed (freed pages), never damage
        for attempt in range(5):
            try:
                store.add(f"more-{attempt}", fingerprint=attempt)
                acked[f"more-{attempt}"] = attempt
                before = contents_digest(store)
            except simstore.SimstoreError:
                assert contents_digest(store) == before
        with contextlib.suppress(simstore.SimstoreError):
            store.close()  # its merge may not fit either
    assert store.closed
    with simstore.open(path, "r") as reopened:
        assert reopened.check() == []
        assert dict(reopened.items()) == acked
        assert_queries_match_oracle(reopened, 2)
    COUNTS["docs_checked_disk_full"] += len(acked)
    ballast.unlink()
    with simstore.open(path, "w", sync=False) as store:
        store.add_many([f"after-{n}" for n in range(200)], list(range(200)))
        store.merge()
        assert store.check() == []
        assert len(store) == len(acked) + 200


def test_full_filesystem_raises_store_full_error(small_fs: Path) -> None:
    """The documented error for a full disk is StoreFullError (an OSError, errno ENOSPC)."""
    path = str(small_fs / "full.simstore")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", simstore.StoreFullWarning)
        store = simstore.open(path, k=3, sync=False, merge_threshold=200)
        try:
            _, error = fill(store, seed=2)
        finally:
            with contextlib.suppress(simstore.SimstoreError):
                store.close()
    assert isinstance(error, simstore.StoreFullError), repr(error)


def test_full_filesystem_when_creating_a_store(small_fs: Path) -> None:
    """Creating a store on a filesystem with no room left fails with an error (in a child
    process, so that a crash fails this test and not the run) and leaves no half-made store
    that a later open would take for one."""
    completed = run_python(
        """
        import contextlib, os, sys
        import simstore
        folder = sys.argv[1]
        with contextlib.suppress(OSError), open(os.path.join(folder, "ballast"), "wb") as handle:
            while True:
                handle.write(b"\\0" * 4096)
                handle.flush()
        path = os.path.join(folder, "new.simstore")
        try:
            simstore.open(path, k=3).close()
            print("opened")
        except (simstore.SimstoreError, OSError) as exc:
            print("refused:", type(exc).__name__, exc)
        """,
        str(small_fs),
    )
    assert completed.returncode == 0, f"exit {completed.returncode}: {completed.stderr[-500:]}"
    assert completed.stdout.startswith(("refused:", "opened"))
    os.remove(small_fs / "ballast")
    path = str(small_fs / "new.simstore")
    if completed.stdout.startswith("refused:"):
        with pytest.raises((simstore.StoreNotFoundError, simstore.NotAStoreError)):
            simstore.open(path, "r")


# -- max_map_size ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::simstore.StoreFullWarning")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_map_limit_with_mixed_operations(tmp_path: Path, seed: int) -> None:
    """Random adds, batches, replacements, removals, add_if_new and merges against a
    ``max_map_size`` ceiling, checked against a dict model: every refused write raises
    StoreFullError (an OSError) and changes nothing observable; every acknowledged one is
    there, before and after a reopen; and a reopen with a higher ceiling carries on."""
    path = str(tmp_path / "limited.simstore")
    limit = 6 * 65536
    model: _workload.Model = {}
    stream = _workload.operations(seed, "mixed", [], 0, with_relayout=False)
    refused = 0
    with simstore.open(
        path, k=3, sync=False, map_size=65536, max_map_size=limit, merge_threshold=150, merge_on_close=False
    ) as store:
        for number in range(4000):
            op = next(stream)
            before = contents_digest(store) if refused or number % 50 == 0 else None
            try:
                _workload.run_op(store, op)
            except simstore.StoreFullError as exc:
                assert isinstance(exc, OSError)  # noqa: PT017 - one try block, several outcomes to tell apart
                if before is None:
                    before = contents_digest(store)  # nothing changed, or the next check fails
                assert contents_digest(store) == before
                refused += 1
                # the model does not change; the generator still thinks a refused add
                # is live, so put the store in step by skipping removals of it below
                stream = _skip_refused(stream, op)
                if refused >= 60:
                    break
                continue
            _workload.apply(model, op, 3)
        assert refused >= 1, "max_map_size was never reached"
        assert store.stats().map_size <= limit
        assert store.check() == []
        assert dict(store.items()) == {key: fp for key, (fp, _) in model.items()}
        assert_queries_match_oracle(store, seed)
    with simstore.open(path, "r") as reopened:
        assert dict(reopened.items()) == {key: fp for key, (fp, _) in model.items()}
        assert reopened.check() == []
    with simstore.open(path, "w", max_map_size=64 * limit, sync=False) as grown:
        grown.merge()
        grown.add_many([f"roomy-{n}" for n in range(2000)], list(range(2000)))
        assert grown.check() == []
        assert len(grown) == len(model) + 2000
    COUNTS["map_limit_refusals"] += refused
    COUNTS["docs_checked_disk_full"] += len(model)


def _skip_refused(stream: Iterator[_workload.Op], refused: _workload.Op) -> Iterator[_workload.Op]:
    """The stream, minus removals and replacements of keys a refused add never stored."""
    gone: set[Any] = set()
    if refused[0] == "add":
        gone.add(refused[1])
    elif refused[0] == "add_many":
        gone.update(refused[1])
    for op in stream:
        if op[0] == "remove" and op[1] in gone:
            continue
        if op[0] == "add" and op[1] in gone:
            gone.discard(op[1])  # a replacement of a never-stored key stores it: fine
        yield op
