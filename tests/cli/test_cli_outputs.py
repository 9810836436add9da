"""Where `-o OUT` writes (issue 18.2): a regular file by write-then-rename, a symlink
followed and kept, devices and FIFOs written straight through, the umask honoured, and a
missing directory reported before any input is read."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import BASE, OTHER

from simstore.cli import main

KEPT = [{"id": "a", "text": BASE}, {"id": "b", "text": OTHER}]


@pytest.fixture
def corpus(tmp_path: Path) -> str:
    """Three documents, one a near-copy of another: two are kept."""
    path = tmp_path / "in.jsonl"
    records = [*KEPT, {"id": "a2", "text": BASE.upper()}]
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def kept_ids(text: str) -> list[str]:
    return [json.loads(line)["id"] for line in text.splitlines()]


def test_a_symlink_is_followed_and_kept(corpus: str, tmp_path: Path) -> None:
    """`-o LINK` writes the file the link points to; the link stays a link
    (`-o /dev/stdout` replaced the system's symlink with a regular file)."""
    target = tmp_path / "real.jsonl"
    target.write_text("old\n", encoding="utf-8")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert main(["dedup", corpus, "-o", str(link), "-q"]) == 0
    assert link.is_symlink()
    assert os.readlink(link) == str(target)
    assert kept_ids(target.read_text(encoding="utf-8")) == ["a", "b"]
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".simstore-")]


def test_a_dangling_symlink_creates_its_target(corpus: str, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "new.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert main(["dedup", corpus, "-o", str(link), "-q"]) == 0
    assert link.is_symlink()
    assert kept_ids(target.read_text(encoding="utf-8")) == ["a", "b"]


def test_a_symlink_to_a_missing_directory_names_both(
    corpus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "link.jsonl"
    target = tmp_path / "gone" / "new.jsonl"
    link.symlink_to(target)
    assert main(["dedup", corpus, "-o", str(link)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"simstore: error: cannot write {link}: it links to {target}, whose directory")
    assert link.is_symlink()


def test_a_fifo_is_written_straight_through(corpus: str, tmp_path: Path) -> None:
    """`-o FIFO` (as `-o >(gzip > x.gz)` gives) writes into the FIFO, which stays a FIFO."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as stream:
            received.append(stream.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert main(["dedup", corpus, "-o", str(fifo), "-q"]) == 0
    finally:
        if reader.is_alive() and stat.S_ISFIFO(os.stat(fifo).st_mode):
            # Unblock a reader still waiting for a writer.
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert kept_ids(received[0].decode("utf-8")) == ["a", "b"]


def test_a_character_device_is_written_straight_through(corpus: str, tmp_path: Path) -> None:
    """`-o /dev/null`: the node is written, never replaced (as root the old code
    replaced it). A copy of /dev/null made in tmp_path stands in for it."""
    from simstore.cli.output import resolve_output

    assert resolve_output("/dev/null").direct
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.close(os.open(node, os.O_WRONLY))
    except OSError as exc:  # not root, or a file system mounted nodev
        pytest.skip(f"cannot make a usable character device here: {exc}")
    assert main(["dedup", corpus, "-o", str(node), "-q"]) == 0
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_descriptor_paths_write_through_the_descriptor(corpus: str) -> None:
    """`-o /dev/stdout` (here `/dev/fd/1`, which the old code could not harm) writes the
    kept documents to stdout and the summary to stderr."""
    from simstore.cli.output import resolve_output

    assert resolve_output("/dev/stdout").descriptor == 1
    assert resolve_output("/proc/self/fd/2").descriptor == 2
    completed = subprocess.run(
        [sys.executable, "-m", "simstore.cli", "dedup", corpus, "-o", "/dev/fd/1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert kept_ids(completed.stdout) == ["a", "b"]
    assert "kept             2" in completed.stderr


@pytest.mark.usefixtures("umask_022")
def test_a_new_output_honours_the_umask(corpus: str, tmp_path: Path) -> None:
    """A new file is 0644 under umask 022 (it was 0600, the temporary file's mode)."""
    out = tmp_path / "kept.jsonl"
    assert main(["dedup", corpus, "-o", str(out), "-q"]) == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
    exported = tmp_path / "export.jsonl"
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), corpus, "-q"]) == 0
    assert main(["export", str(store), "-o", str(exported), "-q"]) == 0
    assert stat.S_IMODE(os.stat(exported).st_mode) == 0o644
    os.umask(0o077)
    private = tmp_path / "private.jsonl"
    assert main(["dedup", corpus, "-o", str(private), "-q"]) == 0
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600


@pytest.mark.usefixtures("umask_022")
def test_a_replaced_file_keeps_its_mode(corpus: str, tmp_path: Path) -> None:
    out = tmp_path / "kept.jsonl"
    out.write_text("old\n", encoding="utf-8")
    os.chmod(out, 0o640)
    assert main(["dedup", corpus, "-o", str(out), "-q"]) == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
    assert kept_ids(out.read_text(encoding="utf-8")) == ["a", "b"]


class _UnreadableStdin(io.TextIOWrapper):
    """A stdin that fails the test if anything reads it."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO())
        self.touched = False

    @property
    def buffer(self) -> io.BufferedReader:  # type: ignore[override]
        self.touched = True
        raise AssertionError("stdin was read before -o was checked")


def test_a_missing_output_directory_is_reported_first(
    corpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The message names the path given, not a temporary file's, and comes before any
    input is read (stdin is not touched; a missing input is not reached)."""
    stdin = _UnreadableStdin()
    monkeypatch.setattr(sys, "stdin", stdin)
    out = os.path.join(str(tmp_path), "nodir", "kept.jsonl")
    assert main(["dedup", "-", "-o", out]) == 1
    err = capsys.readouterr().err
    assert err == f"simstore: error: cannot write {out}: the directory {tmp_path}/nodir does not exist\n"
    assert not stdin.touched
    missing_input = os.path.join(str(tmp_path), "missing.jsonl")
    assert main(["dedup", missing_input, "-o", out]) == 1
    assert "the directory" in capsys.readouterr().err
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), corpus, "-q"]) == 0
    assert main(["export", str(store), "-o", out]) == 1
    err = capsys.readouterr().err
    assert err == f"simstore: error: cannot write {out}: the directory {tmp_path}/nodir does not exist\n"


def test_a_directory_is_no_output(corpus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dedup", corpus, "-o", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"simstore: error: cannot write {tmp_path}: it is a directory\n"


def test_a_read_only_directory(
    corpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In a directory where no file can be created, a writable OUT is written in place and a
    new one is refused naming the directory (it failed naming a temporary file). os.access
    is faked: the tests may run as root."""
    from simstore.cli import output

    folder = tmp_path / "ro"
    folder.mkdir()
    real_access = os.access

    def access(path: object, mode: int, **kwargs: object) -> bool:
        if os.fspath(path) == str(folder):  # type: ignore[arg-type]
            return False
        return real_access(path, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(output.os, "access", access)
    new = folder / "new.jsonl"
    assert main(["dedup", corpus, "-o", str(new)]) == 1
    assert capsys.readouterr().err == (
        f"simstore: error: cannot write {new}: no permission to create files in {folder}\n"
    )
    existing = folder / "kept.jsonl"
    existing.write_text("old\n", encoding="utf-8")
    assert output.resolve_output(str(existing)).direct
    assert main(["dedup", corpus, "-o", str(existing), "-q"]) == 0
    assert kept_ids(existing.read_text(encoding="utf-8")) == ["a", "b"]
