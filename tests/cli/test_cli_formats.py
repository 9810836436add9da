"""Which format ``dedup`` reads and writes: an input by its name (or, where
its name says none, by its content, or ``--format``), unless
``--input-format`` says otherwise; the output in ``--format``, else the
format ``OUT``'s name says, else the inputs'."""

from __future__ import annotations

import datetime
import io
import json
import sys
from pathlib import Path

import pytest

import simstore
from simstore.cli import main

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"


def _rows() -> list[dict[str, object]]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


def _kept_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[object]:
    kept = tmp_path / "reference.jsonl"
    assert main(["dedup", str(CORPUS), "-o", str(kept), "-q"]) == 0
    capsys.readouterr()
    return [json.loads(line)["id"] for line in kept.read_text(encoding="utf-8").splitlines()]


def test_parquet_input_jsonl_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dedup corpus.parquet -o x.jsonl --format jsonl` read the Parquet file as JSON lines and
    failed ("is a Parquet file: ... pass --format parquet")."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    moment = datetime.datetime(2020, 1, 2, 3, 4, 5)
    rows = [{**row, "when": moment, "blob": b"\x00\x01"} for row in _rows()]
    source = tmp_path / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist(rows), source)
    output = tmp_path / "x.jsonl"
    assert main(["dedup", str(source), "-o", str(output), "--format", "jsonl", "-q"]) == 0
    kept = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [record["id"] for record in kept] == _kept_ids(tmp_path, capsys)
    assert kept[0]["when"] == "2020-01-02T03:04:05"
    assert kept[0]["blob"] == {"$bytes": "AAE="}
    # Without --format, OUT's name says JSONL too.
    by_name = tmp_path / "by-name.jsonl"
    assert main(["dedup", str(source), "-o", str(by_name), "-q"]) == 0
    assert by_name.read_text(encoding="utf-8") == output.read_text(encoding="utf-8")


def test_output_format_from_the_output_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """JSONL in, `-o kept.csv`: CSV out (it was JSON lines in a file named .csv)."""
    output = tmp_path / "kept.csv"
    assert main(["dedup", str(CORPUS), "-o", str(output), "-q"]) == 0
    lines = output.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id,text,variant_of,edit"
    assert lines[1].split(",")[0] == _kept_ids(tmp_path, capsys)[0]


def test_format_beats_the_output_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "kept.csv"
    assert main(["dedup", str(CORPUS), "-o", str(output), "--format", "tsv", "-q"]) == 0
    assert output.read_text(encoding="utf-8").splitlines()[0] == "id\ttext\tvariant_of\tedit"


def test_text_lines_to_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Text lines written as CSV get the columns id (FILE:LINE) and text."""
    source = tmp_path / "notes.txt"
    source.write_text("first line of some words\nsecond line of other words\n", encoding="utf-8")
    output = tmp_path / "kept.csv"
    assert main(["dedup", str(source), "-o", str(output), "-q"]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == [
        "id,text",
        f"{source}:1,first line of some words",
        f"{source}:2,second line of other words",
    ]


def test_input_format_overrides_the_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "data.txt"
    source.write_text('{"id": "a", "text": "some words here"}\n', encoding="utf-8")
    output = tmp_path / "kept.jsonl"
    assert main(["dedup", str(source), "-o", str(output), "--input-format", "jsonl", "-q"]) == 0
    assert json.loads(output.read_text(encoding="utf-8")) == {"id": "a", "text": "some words here"}


def test_format_still_reads_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An input whose name says nothing (stdin) is still read in --format, as before."""
    data = 'id,text\n1,"some words here"\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert main(["dedup", "-", "--format", "csv", "-o", "-", "-q"]) == 0
    assert capsys.readouterr().out == "id,text\n1,some words here\n"


def test_input_format_beats_format_on_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = 'id,text\n1,"some words here"\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert main(["dedup", "-", "--input-format", "csv", "--format", "jsonl", "-o", "-", "-q"]) == 0
    assert json.loads(capsys.readouterr().out) == {"id": "1", "text": "some words here"}


def test_columnar_output_needs_columnar_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "kept.parquet"
    assert main(["dedup", str(CORPUS), "-o", str(output)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"simstore: error: -o {output} (a parquet name): parquet output keeps the columns")
    assert not output.exists()


def test_text_output_cannot_be_annotated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dedup", str(CORPUS), "-o", str(tmp_path / "k"), "--format", "text", "--annotate"]) == 1
    assert "plain text lines cannot carry the fields of --annotate" in capsys.readouterr().err


def test_format_with_pairs_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_status:
        main(["dedup", str(CORPUS), "--pairs", "--format", "csv", "-o", str(tmp_path / "p.csv")])
    assert exit_status.value.code == 2
    assert "--pairs and --clusters write JSONL" in capsys.readouterr().err


def test_add_format_is_still_the_input_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "data.txt"
    source.write_text('{"id": "a", "text": "some words here"}\n', encoding="utf-8")
    store = tmp_path / "s.simstore"
    for option in ("--format", "--input-format"):
        assert main(["add", str(store), str(source), option, "jsonl", "-q"]) == 0
        with simstore.open(store, "r") as opened:
            assert list(opened.keys()) == ["a"]  # read as JSON: the key is its id


def test_misnamed_parquet_names_input_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "data.bin"
    source.write_bytes(b"PAR1\x00\x01" * 10)
    assert main(["dedup", str(source), "-o", str(tmp_path / "o.jsonl")]) == 1
    assert "pass --input-format parquet" in capsys.readouterr().err


def test_csv_output_has_every_field_of_the_rows_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JSONL whose first record had only `text` became a CSV of one column:
    the second record's id and url were dropped (the header was the first row's)."""
    source = tmp_path / "m.jsonl"
    records = [
        {"text": "the first record carries no id field at all"},
        {"id": "b", "url": "http://b", "text": "something else entirely, different words here"},
    ]
    source.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    output = tmp_path / "m.csv"
    assert main(["dedup", str(source), "-o", str(output), "-q"]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == [
        "text,id,url",
        "the first record carries no id field at all,,",
        '"something else entirely, different words here",b,http://b',
    ]
    # Annotated, the provenance columns stay last, after fields a later row brings.
    annotated = tmp_path / "annotated.tsv"
    assert main(["dedup", str(source), "-o", str(annotated), "--annotate", "-q"]) == 0
    assert annotated.read_text(encoding="utf-8").splitlines()[0].split("\t") == [
        "text",
        "id",
        "url",
        "cluster_id",
        "duplicate_of",
        "distance",
        "similarity",
        "cluster_size",
    ]


def test_csv_inputs_with_other_headers_keep_every_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second CSV's extra column was dropped: the header was the first input's."""
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text("id,text\na,some words about apples\n", encoding="utf-8")
    second.write_text("id,lang,text\nb,en,other words about pears and plums\n", encoding="utf-8")
    output = tmp_path / "kept.csv"
    assert main(["dedup", str(first), str(second), "-o", str(output), "-q"]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == [
        "id,text,lang",
        "a,some words about apples,",
        "b,other words about pears and plums,en",
    ]


@pytest.mark.parametrize("option", ["--input-format", "--format"])
def test_dedup_reads_parquet_on_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """`dedup - --input-format parquet < f.parquet` said "is a Parquet file: name it
    *.parquet or pass --input-format parquet", the option given: stdin was
    sniffed as text although dedup copies it to a file it can read as Parquet."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = _rows()
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(buffer.getvalue())))
    output = tmp_path / "kept.parquet"
    assert main(["dedup", "-", option, "parquet", "-o", str(output), "-q"]) == 0
    assert pq.read_table(output).column("id").to_pylist() == _kept_ids(tmp_path, capsys)


def test_add_refuses_parquet_on_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`add` streams its input and does not copy stdin: Parquet must be a file."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(_rows()[:3]), buffer)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(buffer.getvalue())))
    assert main(["add", str(tmp_path / "s.simstore"), "-", "--input-format", "parquet"]) == 1
    assert capsys.readouterr().err == "simstore: error: <stdin>: parquet input must be a file, not stdin\n"
