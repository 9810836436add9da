"""simstore.shrink and `simstore compact --shrink`: the file is rewritten with only
the pages in use, keeps every document, and is refused (unchanged) while any
process has the store open; an opener that waits through the swap reads the new
file correctly (the lock file is rebuilt for it)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from _lmdb_files import last_transaction

import simstore
from simstore.cli import main

DOCS = 20_000


def filled(path: Path, removed_share: int = 2) -> dict[object, int]:
    """A store of ``DOCS`` documents (a few with metadata, text and sketches), all but
    one in ``removed_share`` removed again; the model ``{key: fingerprint}`` of what is left."""
    fingerprints = np.random.default_rng(7).integers(0, 2**64, DOCS, dtype=np.uint64)
    with simstore.open(path, "n", k=3, sync=False) as store:
        store.add_many(range(DOCS), fingerprints)
        store.add("text", "A page about rain in the north, with snow on the hills.", meta={"lang": "en"})
        for key in range(DOCS):
            if key % removed_share:
                store.remove(key)
        store.add("late", fingerprint=12345)  # still in the delta
        model: dict[object, int] = dict(store.items())
    return model


def assert_holds(path: Path, model: dict[object, int]) -> None:
    with simstore.open(path, "r") as store:
        assert store.check() == []
        assert dict(store.items()) == model
        assert store.get("text").meta == {"lang": "en"}
        assert store.sketch_of("text") is not None
        some = list(model.items())[::997]
        for key, fingerprint in some:
            assert key in {match.key for match in store.query(fingerprint=fingerprint ^ 0b101, k=2)}


def test_shrink_gives_back_what_removals_freed(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    model = filled(path)
    os.chmod(path, 0o640)
    size = path.stat().st_size
    shrunk = simstore.shrink(path)
    assert shrunk == simstore.Shrunk(size, path.stat().st_size)
    assert shrunk.bytes_after < 0.7 * shrunk.bytes_before
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(name for name in os.listdir(tmp_path)) == [
        "s.simstore",
        "s.simstore-lock",
        "s.simstore-log",
    ]
    assert_holds(path, model)
    with simstore.open(path, "w", sync=False) as store:  # and it takes writes again
        store.add("after", fingerprint=99)
        model["after"] = 99
    assert_holds(path, model)


def test_shrink_deletes_the_copies_of_killed_shrinks_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    model = filled(path)
    orphans = [
        tmp_path / ".s.simstore.4242.0badcafe.shrinking",
        tmp_path / ".s.simstore.7.00000000.shrinking",
    ]
    others = [
        tmp_path / ".s.simstore.4242.0badcafe.shrinking.bak",  # not a name shrink makes
        tmp_path / ".t.simstore.4242.0badcafe.shrinking",  # another store's
        tmp_path / "s.simstore.4242.0badcafe.shrinking",  # not hidden
    ]
    for leftover in orphans + others:
        leftover.write_bytes(b"partial copy")
    directory = tmp_path / ".s.simstore.9.0badcafe.shrinking"
    directory.mkdir()  # the name, but a directory: left alone too
    simstore.shrink(path)
    assert not any(orphan.exists() for orphan in orphans)
    assert all(other.read_bytes() == b"partial copy" for other in others)
    assert directory.is_dir()
    assert_holds(path, model)


def test_shrink_by_a_symlink_shrinks_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    model = filled(path)
    link = tmp_path / "link.simstore"
    link.symlink_to(path)
    shrunk = simstore.shrink(link)
    assert link.is_symlink()
    assert link.resolve() == path
    assert shrunk.bytes_after == path.stat().st_size < shrunk.bytes_before
    assert sorted(os.listdir(tmp_path)) == [
        "link.simstore",
        "s.simstore",
        "s.simstore-lock",
        "s.simstore-log",
    ]
    assert_holds(path, model)


def test_shrink_is_refused_while_the_store_is_open(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    model = filled(path)
    with simstore.open(path, "w", sync=False) as store:  # a second run: compact() has work to do
        store.add("run-2", fingerprint=77)
        store.merge()
        assert store.stats().runs == 2
    model["run-2"] = 77
    with simstore.open(path, "r"), pytest.raises(simstore.StoreLockedError, match="this process"):
        simstore.shrink(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, simstore; s = simstore.open(sys.argv[1], 'r'); "
         "print('open', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        before = path.read_bytes()
        with pytest.raises(simstore.StoreLockedError, match="another process"):
            simstore.shrink(path)
        assert path.read_bytes() == before  # not even compacted
        assert main(["compact", str(path), "--shrink"]) == 1
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert sorted(os.listdir(tmp_path)) == ["s.simstore", "s.simstore-lock"]
    assert_holds(path, model)


def test_shrink_refuses_what_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(simstore.StoreNotFoundError):
        simstore.shrink(tmp_path / "missing.simstore")
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a store\n" * 1000)
    with pytest.raises(simstore.NotAStoreError):
        simstore.shrink(foreign)
    assert foreign.read_text() == "not a store\n" * 1000
    with pytest.raises(simstore.InvalidTypeError):
        simstore.shrink(3.5)  # type: ignore[arg-type]


def test_a_failed_copy_leaves_the_store_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No room for the copy: StoreFullError, the store untouched, the partial copy gone."""
    path = tmp_path / "s.simstore"
    model = filled(path)
    real_copy = simstore.engine._lmdb.copy_compacted_unlocked

    def full_disk(source: str, target: str) -> None:
        real_copy(source, target)
        raise simstore.StoreFullError(28, f"{target}: no space left")

    monkeypatch.setattr(simstore.engine._lmdb, "copy_compacted_unlocked", full_disk)
    with pytest.raises(simstore.StoreFullError):
        simstore.shrink(path)
    assert sorted(os.listdir(tmp_path)) == ["s.simstore", "s.simstore-lock", "s.simstore-log"]
    assert_holds(path, model)


# A shrink that stops inside its exclusive hold until told to go on: after the copy
# (the store not yet replaced) or after the rename (the lock file not yet rebuilt).
_PAUSED_SHRINK = textwrap.dedent(
    """
    import os, sys, time
    import simstore, simstore.engine._lmdb as boundary, simstore.store.shrink as shrinking
    path, marker, go, pause_at = sys.argv[1:5]
    def pausing(real):
        def paused(*args):
            real(*args)
            open(marker, "w").close()
            while not os.path.exists(go):
                time.sleep(0.01)
        return paused
    if pause_at == "copy":
        boundary.copy_compacted_unlocked = pausing(boundary.copy_compacted_unlocked)
    else:
        shrinking.fsync_path = pausing(shrinking.fsync_path)
    print(simstore.shrink(path).bytes_after, flush=True)
    """
)

_OPENER = textwrap.dedent(
    """
    import sys, simstore
    with simstore.open(sys.argv[1], sys.argv[2]) as store:
        print(len(store), len(list(store.items())), store.check() == [], flush=True)
    """
)


@pytest.mark.parametrize("parity", [0, 1], ids=["even", "odd"])
@pytest.mark.parametrize("mode", ["r", "w"])
@pytest.mark.parametrize("pause_at", ["copy", "rename"])
def test_an_opener_waiting_through_the_swap_reads_the_new_file(
    tmp_path: Path, pause_at: str, mode: str, parity: int
) -> None:
    """A process that opens the store while shrink holds it waits, then reads the new
    file whole. A read-only open maps the file before it waits for the lock, so it holds
    the old file and must open again; any open trusts the lock file's record of the last
    transaction, set up for the old file unless shrink rebuilds it, and then reads the
    new file's other meta page (an empty store) for one parity of that id or the other."""
    path = tmp_path / "s.simstore"
    model = filled(path)
    with simstore.open(path, "w", sync=False) as store:
        store.compact()
    for _ in range(4):
        if last_transaction(path) % 2 == parity:
            break
        with simstore.open(path, "w", sync=False) as store:  # one commit, nothing left to compact
            removed = next(key for key in model if isinstance(key, int))
            store.remove(removed)
            del model[removed]
    assert last_transaction(path) % 2 == parity
    marker, go = tmp_path / "paused", tmp_path / "go"
    shrinker = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_SHRINK, str(path), str(marker), str(go), pause_at],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    opener = None
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert shrinker.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.01)
        opener = subprocess.Popen(
            [sys.executable, "-c", _OPENER, str(path), mode], stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.5)
        assert opener.poll() is None  # waiting for the shrink
        go.touch()
        assert shrinker.wait(timeout=60) == 0
        out, _ = opener.communicate(timeout=60)
        assert out.split() == [str(len(model)), str(len(model)), "True"]
    finally:
        go.touch()
        for process in (shrinker, opener):
            if process is not None and process.poll() is None:
                process.kill()
    assert_holds(path, model)


def test_the_command_line_shrinks_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.simstore"
    model = filled(path)
    assert main(["compact", str(path), "--shrink", "--json"]) == 0
    report = capsys.readouterr().out
    assert '"bytes_after"' in report
    assert main(["compact", str(path), "--shrink", "--copy-to", str(tmp_path / "x")]) == 1
    assert "leave out --copy-to" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert_holds(path, model)
