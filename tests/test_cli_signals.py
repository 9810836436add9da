"""SIGTERM stops the command line as Ctrl-C does: the unfinished transaction is
dropped, temporary stores are deleted, one line says so, and the exit status is 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


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
