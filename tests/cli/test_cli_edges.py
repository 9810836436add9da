"""Command-line edges found by dataset users: skipped rows in annotated output, and
warnings printed as the command line's one-liners."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from simstore.cli import main
from simstore.fingerprinting.fingerprinter import ShortTextWarning

ROWS = [
    {"id": 1, "text": "one two three four five six seven"},
    {"id": 2, "text": "one two three four five six seven"},
    {"id": 3, "text": "!!! ??? ..."},  # no words: skipped
    {"id": 4, "text": "alpha beta gamma delta epsilon zeta"},
]


def test_annotate_leaves_out_rows_the_first_pass_skipped(tmp_path: Path) -> None:
    source = tmp_path / "a.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    out = tmp_path / "ann.jsonl"
    assert main(["dedup", str(source), "--on-error", "skip", "--annotate", "-o", str(out), "-q"]) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in written] == [1, 2, 4]
    assert written[1]["duplicate_of"] == 1


def test_warnings_are_one_line_and_quiet_drops_short_text_notes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def verb(args: object) -> int:
        warnings.warn("a note about short texts", ShortTextWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
        return 0

    import simstore.cli as cli

    source = tmp_path / "a.jsonl"
    source.write_text(json.dumps(ROWS[0]) + "\n")
    monkeypatch.setattr(cli, "run_dedup", verb)
    for quiet, expected in ((False, 2), (True, 1)):
        parser = cli.build_parser()
        monkeypatch.setattr(cli, "build_parser", lambda parser=parser: parser)
        for action in parser._subparsers._group_actions[0].choices.values():  # type: ignore[union-attr]
            if action.prog.endswith("dedup"):
                action.set_defaults(run=verb)
        assert main(["dedup", str(source), "-o", str(tmp_path / "o.jsonl"), *(["-q"] if quiet else [])]) == 0
        err = capsys.readouterr().err.splitlines()
        assert len(err) == expected, err
        assert all(line.startswith("simstore: warning: ") for line in err)


def test_a_summary_with_nothing_to_judge_prints_a_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "b.jsonl"
    source.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(ROWS[3]) + "\n")
    assert main(["dedup", str(source), "-o", str(tmp_path / "o.jsonl"), "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = {line[:16].strip(): line[16:].strip() for line in out}
    assert lines["worst similarity"] == "-"
    assert "None" not in lines.values()
