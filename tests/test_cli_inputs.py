"""Reading the inputs of ``dedup`` and ``add``: bad rows of CSV files, null
texts, header-only CSV files, and which format an input is read in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simstore.cli import main


def test_header_only_csv_keeps_its_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CSV with a header and no rows gave an empty output; the header row is kept."""
    source = tmp_path / "h.csv"
    source.write_text("id,text\n", encoding="utf-8")
    output = tmp_path / "o.csv"
    assert main(["dedup", str(source), "-o", str(output), "-q"]) == 0
    assert output.read_text(encoding="utf-8") == "id,text\n"


def test_annotated_header_only_csv_names_the_provenance_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "h.csv"
    source.write_text("id,text\n", encoding="utf-8")
    output, dropped = tmp_path / "o.csv", tmp_path / "d.csv"
    assert main(["dedup", str(source), "-o", str(output), "--annotate", "-q"]) == 0
    assert main(["dedup", str(source), "-o", str(output), "--dropped", str(dropped), "-q"]) == 0
    assert output.read_text(encoding="utf-8") == "id,text\n"
    assert dropped.read_text(encoding="utf-8") == "id,text,cluster_id,duplicate_of,distance,similarity\n"


def test_null_text_is_reported_as_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`{"id": 2, "text": null}` was reported as having no 'text' field."""
    source = tmp_path / "n.jsonl"
    source.write_text('{"id": 1, "text": "a few words here"}\n{"id": 2, "text": null}\n', encoding="utf-8")
    assert main(["dedup", str(source), "-o", str(tmp_path / "o.jsonl")]) == 1
    err = capsys.readouterr().err
    assert err == f"simstore: error: {source}:2: 'text' is null, not a string\n"
    assert not (tmp_path / "o.jsonl").exists()


def test_missing_text_is_reported_as_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "m.jsonl"
    source.write_text('{"id": 2, "body": "words"}\n', encoding="utf-8")
    assert main(["dedup", str(source), "-o", str(tmp_path / "o.jsonl")]) == 1
    assert capsys.readouterr().err == f"simstore: error: {source}:1: no 'text' field\n"


def _read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
