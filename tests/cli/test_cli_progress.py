"""Progress bars everywhere (issue 34): drawn on a terminal that reports no
width (a pty of size 0, as under `script`), absent where stderr is not a
terminal, and a line per refresh there when `--progress` asks for them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simstore.cli import main

pty = pytest.importorskip("pty")
fcntl = pytest.importorskip("fcntl")
termios = pytest.importorskip("termios")


def _corpus(tmp_path: Path) -> Path:
    source = tmp_path / "docs.jsonl"
    with source.open("w", encoding="utf-8") as handle:
        for number in range(300):
            words = " ".join(f"w{number}x{index}" for index in range(12))
            handle.write(json.dumps({"id": number, "text": words}) + "\n")
    return source


def _on_a_pty(arguments: list[str], columns: int, environment: dict[str, str]) -> str:
    """What the command writes to a terminal of ``columns`` columns (0: none reported)."""
    import struct

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("hhhh", 0 if not columns else 24, columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "simstore.cli", *arguments],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=environment,
    )
    os.close(slave)
    written = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        written += chunk
    os.close(master)
    assert process.wait(timeout=120) == 0
    return written.decode("utf-8", "replace")


def _drawn_lines(written: str) -> list[str]:
    """Each state a bar was drawn in (a terminal's redraws start with a carriage return)."""
    return [line.rstrip() for line in written.replace("\n", "\r").split("\r") if line.strip()]


def _environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}


def test_a_terminal_without_a_width_still_gets_its_bars(tmp_path: Path) -> None:
    """tqdm drew nothing at all on a 0-column terminal (`script` with no outer terminal)."""
    arguments = ["add", str(tmp_path / "s.simstore"), str(_corpus(tmp_path))]
    written = _on_a_pty(arguments, 0, _environment())
    drawn = _drawn_lines(written)
    assert any(line.startswith("reading: 100%") for line in drawn), written
    assert all(len(line) <= 80 for line in drawn)  # the fallback width
    narrow = _on_a_pty(
        ["add", str(tmp_path / "t.simstore"), str(_corpus(tmp_path))], 0, {**_environment(), "COLUMNS": "50"}
    )
    assert any(line.startswith("reading: 100%") for line in _drawn_lines(narrow)), narrow
    assert all(len(line) <= 50 for line in _drawn_lines(narrow))


def test_a_terminal_with_a_width_gets_bars_that_wide(tmp_path: Path) -> None:
    written = _on_a_pty(["add", str(tmp_path / "s.simstore"), str(_corpus(tmp_path))], 60, _environment())
    assert any(line.startswith("reading: 100%") for line in _drawn_lines(written)), written
    assert all(len(line) <= 60 for line in _drawn_lines(written))


def test_no_bars_off_a_terminal_unless_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _corpus(tmp_path)
    assert main(["add", str(tmp_path / "s.simstore"), str(source)]) == 0
    assert capsys.readouterr().err == ""
    assert main(["add", str(tmp_path / "t.simstore"), str(source), "--progress"]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "\r" not in err  # a line per refresh, for a log
    assert any(line.startswith("reading: 100%") for line in lines), err
    assert all(len(line) <= 80 for line in lines)


def test_quiet_and_progress_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["add", str(tmp_path / "s.simstore"), str(_corpus(tmp_path)), "-q", "--progress"])
    assert stopped.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
