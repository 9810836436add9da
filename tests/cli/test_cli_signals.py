"""SIGTERM stops the command line as Ctrl-C does: the unfinished transaction is
dropped, temporary stores are deleted, one line says so, and the exit status is 143."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import simstore
from simstore.cli import main
from simstore.cli.cleanup import SCRATCH_LOCK


def _dedup_waiting_on_stdin(tmp_path: Path) -> subprocess.Popen[str]:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "simstore.cli", "dedup", "-", "-o", str(tmp_path / "kept.jsonl"), "-q"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )


def test_dedup_terminated_deletes_its_temporary_store(tmp_path: Path) -> None:
    process = _dedup_waiting_on_stdin(tmp_path)
    assert process.stdin is not None
    process.stdin.write('{"id": 1, "text": "one two three four five six"}\n')
    process.stdin.flush()
    scratch = tmp_path / "tmp"
    # Wait until the run has made its scratch folder, then terminate it mid-read.
    for _ in range(600):
        if any(scratch.iterdir()):
            break
        try:
            process.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"dedup ended early: {process.stderr.read() if process.stderr else ''}")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert err.startswith("simstore: interrupted"), err
    assert "Traceback" not in err
    assert list(scratch.iterdir()) == []


def test_a_reader_that_stops_reading_ends_the_run_quietly(tmp_path: Path) -> None:
    """`dedup ... -o - | head` exited 1 with nothing on stderr, where docs/cli.md says
    status 1 always prints a line; it now exits 141 (128 + SIGPIPE), as `cat` does."""
    source = tmp_path / "many.jsonl"
    with source.open("w", encoding="utf-8") as handle:
        for number in range(4000):  # far more than a pipe's buffer holds
            handle.write(
                f'{{"id": {number}, "text": "document {number} says {" ".join(str(number) * 40)}"}}\n'
            )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simstore.cli",
            "dedup",
            str(source),
            "-o",
            "-",
            "-q",
            "--min-similarity",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b'{"id": 0')
    process.stdout.close()  # as `head -1` does
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141, err
    assert err == b""


# -------------------------------------------------- Ctrl-C at many moments
#
# Issue 34: Ctrl-C at an unlucky moment (1 run in 10) left an empty store
# behind, and a killed run an empty scratch folder. Here the interrupt is sent
# from inside the run, at the N-th call of a simstore function, for many N
# (spread over the whole run, and dense around where the store is made and
# first written), and what is left is checked each time.

# The calls counted: simstore's, and those of the modules that make and
# remove its temporary files (tempfile, shutil), where a window may hide.
_COUNTED = (os.path.dirname(simstore.__file__) + os.sep, tempfile.__file__, shutil.__file__)
# Calls of these mark where a store is made or written, and a scratch folder made.
_MARKED = ("_create_beside", "add_many", "mkdtemp", "rmtree", "mkstemp", "merge")


def _interrupted_at(target: int, arguments: list[str]) -> tuple[int, int, dict[str, int]]:
    """Run the command line in this process and send it SIGINT when it
    makes its ``target``-th call of a simstore function (0: never); returns
    its status, the calls made, and the first call of each marked function."""
    calls = 0
    marks: dict[str, int] = {}

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        code = frame.f_code  # type: ignore[attr-defined]
        if event != "call" or not code.co_filename.startswith(_COUNTED):
            return
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            return  # not yet inside the command line's own handling of Ctrl-C
        calls += 1
        marks.setdefault(code.co_name, calls)
        if calls == target:
            os.kill(os.getpid(), signal.SIGINT)

    sys.setprofile(count)
    try:
        status = main(arguments)
    finally:
        sys.setprofile(None)
    return status, calls, {name: marks[name] for name in _MARKED if name in marks}


def _targets(calls: int, marks: dict[str, int], spread: int) -> list[int]:
    """``spread`` moments over the run, and a dense few after each mark."""
    chosen = {1 + (calls - 1) * index // max(spread - 1, 1) for index in range(spread)}
    for first in marks.values():
        chosen.update(range(first, first + 12, 2))
    return sorted(target for target in chosen if 1 <= target <= calls)


def _input(tmp_path: Path) -> Path:
    source = tmp_path / "in.jsonl"
    with source.open("w", encoding="utf-8") as handle:
        for number in range(120):
            words = " ".join(f"w{number % 40}x{index}" for index in range(15))
            handle.write(json.dumps({"id": number, "text": words}) + "\n")
    return source


def _store_files(folder: Path, name: str) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir() if name in entry.name)


# The harness raises from inside a profile hook: one that falls while a
# generator is being closed is ignored (and reported) by Python, as a real
# Ctrl-C would be at that instant.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(
    "command",
    [
        ["add", "{store}", "{input}"],
        ["add", "{store}", "{input}", "--batch-size", "50"],
        ["dedup", "{input}", "--store", "{store}", "-o", "{output}"],
        ["dedup", "{folder}", "--store", "{store}", "-o", "{output}"],
        ["dedup", "{input}", "-o", "{output}"],
        ["import", "{store}", "{export}"],
    ],
    ids=["add", "add-batches", "dedup-store", "dedup-folder-store", "dedup", "import"],
)
def test_an_interrupt_at_any_moment_leaves_no_empty_store_and_no_scratch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    # Chunks of 30 documents: a dedup --store run commits several times.
    monkeypatch.setattr("simstore.cli.documents.FINGERPRINT_CHUNK_DOCS", 30)
    source = _input(tmp_path)
    folder = tmp_path / "folder"
    folder.mkdir()
    for number, line in enumerate(source.read_text().splitlines()):
        (folder / f"{number:03}.txt").write_text(json.loads(line)["text"], encoding="utf-8")

    exported = tmp_path / "exported.simstore"
    assert main(["add", str(exported), str(source), "-q"]) == 0
    assert main(["export", str(exported), "-o", str(tmp_path / "export.jsonl")]) == 0

    def arguments(run: Path) -> list[str]:
        names = {
            "store": str(run / "s.simstore"),
            "input": str(source),
            "folder": str(folder),
            "output": str(run / "out.jsonl"),
            "export": str(tmp_path / "export.jsonl"),
        }
        return [part.format(**names) for part in command] + ["-q"]

    calibration = tmp_path / "calibration"
    calibration.mkdir()
    status, calls, marks = _interrupted_at(0, arguments(calibration))
    assert status == 0, capsys.readouterr().err
    capsys.readouterr()
    for target in _targets(calls, marks, spread=24):
        run = tmp_path / f"at-{target}"
        run.mkdir()
        status, _, _ = _interrupted_at(target, arguments(run))
        err = capsys.readouterr().err
        assert status in (0, 130), (target, err)
        if status == 130:
            assert err.startswith("simstore: interrupted"), (target, err)
        assert list(scratch_root.iterdir()) == [], (target, err)  # no scratch folder
        assert not [entry.name for entry in run.iterdir() if entry.name.startswith(".")], (target, err)
        if (run / "s.simstore").exists():
            with simstore.open(run / "s.simstore", "r") as store:
                assert len(store) > 0, (target, err)  # a store it made holds what it committed
        else:
            assert _store_files(run, "s.simstore") == [], (target, err)
        if status == 130 and "--store" in command:
            # Resumed (or run again, where nothing was kept): an uninterrupted run's output.
            assert main([*arguments(run), "--resume"]) == 0, (target, capsys.readouterr().err)
            assert (run / "out.jsonl").read_text() == (calibration / "out.jsonl").read_text(), target
            capsys.readouterr()


def test_leftovers_of_killed_runs_are_removed_by_the_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL leaves dedup's scratch folder (and a store's creation its
    .NAME.PID.HEX.creating file): the next run removes what belongs to no
    live process, and leaves a live run's alone."""
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    environment = {**os.environ, "TMPDIR": str(scratch_root)}
    source = _input(tmp_path)
    live = _dedup_reading_stdin(tmp_path / "live", environment)
    killed = _dedup_reading_stdin(tmp_path / "killed", environment)
    folders = _wait_for_scratch(scratch_root, 2)
    killed.kill()
    killed.wait(timeout=60)
    gone = sys.executable  # a pid of a process that ended
    ended = subprocess.run(
        [gone, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    creating = tmp_path / f".s.simstore.{int(ended.stdout)}.0a1b2c3d.creating"
    creating.write_bytes(b"")
    Path(f"{creating}-lock").write_bytes(b"")
    assert main(["add", str(tmp_path / "s.simstore"), str(source), "-q"]) == 0
    assert not creating.exists()
    assert not Path(f"{creating}-lock").exists()
    assert main(["dedup", str(source), "-o", str(tmp_path / "out.jsonl"), "-q"]) == 0
    capsys.readouterr()
    left = sorted(scratch_root.iterdir())
    assert len(left) == 1  # the live run's
    assert left[0] in folders
    assert live.stdin is not None
    live.stdin.close()
    assert live.wait(timeout=120) == 0
    assert list(scratch_root.iterdir()) == []


def _dedup_reading_stdin(folder: Path, environment: dict[str, str]) -> subprocess.Popen[str]:
    folder.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "simstore.cli", "dedup", "-", "-o", str(folder / "kept.jsonl"), "-q"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env=environment,
    )
    assert process.stdin is not None
    process.stdin.write('{"id": 1, "text": "one two three four five six seven eight"}\n')
    process.stdin.flush()
    return process


def _wait_for_scratch(root: Path, count: int) -> list[Path]:
    """The scratch folders of ``count`` runs, once each has taken its lock."""
    found: list[Path] = []
    for _ in range(1200):
        found = [folder for folder in root.iterdir() if (folder / SCRATCH_LOCK).exists()]
        if len(found) == count:
            return found
        time.sleep(0.05)  # no event to wait on: files another process makes
    raise AssertionError(f"found {found}")


def test_an_interrupt_falling_as_the_scratch_folder_is_removed_still_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C that lands on the very call of the scratch folder's removal (as
    the run ends) is raised before any ``try`` inside the called function:
    the ``finally`` must catch it itself and remove the folder again. (It
    was lost inside a helper's first instruction; found in CI as one of the
    moments above.) Each call the clean-up makes in its module is tried."""
    from simstore.cli import _interrupts, cleanup
    from simstore.cli.cleanup import scratch_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cleanup_file = cleanup.__file__

    class Interrupter:
        """A profile function: SIGINT at the ``target``-th call into the
        clean-up's module once ``armed`` (0: never)."""

        def __init__(self, target: int) -> None:
            self.target, self.calls, self.armed = target, 0, False

        def __call__(self, frame: object, event: str, arg: object) -> None:
            code = frame.f_code  # type: ignore[attr-defined]
            if self.armed and event == "call" and code.co_filename == cleanup_file:
                self.calls += 1
                if self.calls == self.target:
                    os.kill(os.getpid(), signal.SIGINT)

    def run(interrupter: Interrupter) -> None:
        try:
            with scratch_folder() as folder:
                assert os.path.isdir(folder)
                sys.setprofile(interrupter)
                interrupter.armed = True
        finally:
            sys.setprofile(None)

    calibration = Interrupter(0)
    with _interrupts():
        run(calibration)
    assert calibration.calls >= 2  # the folder's generator resumed, its removal called
    for target in range(1, calibration.calls + 1):
        with _interrupts(), pytest.raises(KeyboardInterrupt):
            run(Interrupter(target))
        assert list(tmp_path.iterdir()) == [], target
