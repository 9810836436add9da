"""A store on read-only media: ``simstore.open(path, "r", lock=False)``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import simstore


def _make_store(folder: Path) -> str:
    path = str(folder / "s.simstore")
    with simstore.open(path, "c", k=3) as store:
        store.add("a", fingerprint=1)
        store.add("b", fingerprint=3)
    for leftover in (path + "-lock", path + "-log", path + "-writers"):
        if os.path.exists(leftover):
            os.remove(leftover)
    return path


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder with a store in it, mounted read-only (a bind mount), or skip."""
    source, mounted = tmp_path / "source", tmp_path / "read-only"
    source.mkdir()
    mounted.mkdir()
    _make_store(source)
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    bind = subprocess.run(["mount", "--bind", str(source), str(mounted)], capture_output=True, check=False)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bind.stderr.decode(errors='replace').strip()}")
    try:
        remount = ["mount", "-o", "remount,ro,bind", str(mounted)]
        if subprocess.run(remount, capture_output=True, check=False).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield mounted
    finally:
        subprocess.run(["umount", str(mounted)], capture_output=True, check=False)


def test_a_store_on_a_read_only_file_system_opens_and_leaves_it_as_it_was(read_only_folder: Path) -> None:
    """LMDB reads a read-only file system without a lock file of its own accord."""
    path = str(read_only_folder / "s.simstore")
    for options in ({}, {"lock": False}):
        with simstore.open(path, "r", **options) as store:
            assert len(store) == 2
            assert [match.key for match in store.query(fingerprint=1, k=1)] == ["a", "b"]
            assert store.check() == []
    assert sorted(os.listdir(read_only_folder)) == ["s.simstore"]


def test_lock_false_takes_no_lock_file_and_is_for_reading_only(tmp_path: Path) -> None:
    path = _make_store(tmp_path)
    with simstore.open(path, "r", lock=False) as store:
        assert store.get("a") is not None
    assert not os.path.exists(path + "-lock")
    for mode in ("w", "c", "n"):
        with pytest.raises(simstore.InvalidValueError, match="lock=False"):
            simstore.open(path, mode, lock=False)
    with pytest.raises(simstore.InvalidTypeError, match="lock"):
        simstore.open(path, "r", lock="no")


CHILD = """
import sys
import simstore
path = sys.argv[1]
try:
    simstore.open(path, "r")
    print("opened without lock=False")
except simstore.AccessDeniedError as exc:
    assert "lock=False" in str(exc), exc
with simstore.open(path, "r", lock=False) as store:
    print(len(store))
"""


def test_a_folder_this_user_cannot_write(tmp_path: Path) -> None:
    """A reader that may not make the lock file in the store's folder is told of
    lock=False, which opens it. (Run as an unprivileged user: root may write anywhere.)"""
    folder = Path(tempfile.mkdtemp(prefix="simstore-ro-", dir="/tmp"))
    try:
        os.chmod(folder, 0o755)
        path = _make_store(folder)
        os.chmod(path, 0o644)
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("running as root, and no setpriv to drop privileges")
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
        else:
            os.chmod(folder, 0o555)
            command = [sys.executable]
        if os.geteuid() == 0:
            # The unprivileged user must be able to run this interpreter and read its
            # packages (a virtual environment in a private temporary folder is not).
            imports = "import lmdb, msgpack, numpy, simstore"
            probe = subprocess.run([*command, "-c", imports], capture_output=True, check=False)
            if probe.returncode != 0:
                pytest.skip("the unprivileged user cannot run this interpreter or read its packages")
        found = subprocess.run([*command, "-c", CHILD, path], capture_output=True, text=True, check=False)
        assert found.returncode == 0, found.stderr[-2000:]
        assert found.stdout.split() == ["2"]
        assert sorted(os.listdir(folder)) == ["s.simstore"]
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)
