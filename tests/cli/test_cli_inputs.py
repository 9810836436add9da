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
    assert (
        dropped.read_text(encoding="utf-8")
        == "id,text,cluster_id,duplicate_of,distance,similarity,cluster_size\n"
    )


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


BAD_BYTE_CSV = (
    b'id,text\n1,"normal row words here"\n2,"second row other words"\n3,"caf\xe9"\n4,"fourth row words"\n'
)


def test_csv_bad_byte_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A byte that is not UTF-8 in row 3 was reported at line 1, for the whole file."""
    source = tmp_path / "b.csv"
    source.write_bytes(BAD_BYTE_CSV)
    output = tmp_path / "o.csv"
    assert main(["dedup", str(source), "-o", str(output)]) == 1
    assert capsys.readouterr().err == f"simstore: error: {source}:4: not UTF-8 (byte 0xe9 in column 'text')\n"
    assert not output.exists()


@pytest.mark.parametrize("suffix", ["csv", "tsv"])
def test_csv_bad_byte_row_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    """With --on-error skip the bad row is reported and left out; the others are kept."""
    source = tmp_path / f"b.{suffix}"
    data = BAD_BYTE_CSV if suffix == "csv" else BAD_BYTE_CSV.replace(b",", b"\t")
    source.write_bytes(data)
    output = tmp_path / f"o.{suffix}"
    assert main(["dedup", str(source), "-o", str(output), "--on-error", "skip", "--json"]) == 0
    out, err = capsys.readouterr()
    assert f"skipped {source}:4: not UTF-8" in err
    assert json.loads(out)["skipped"] == 1
    rows = output.read_text(encoding="utf-8").splitlines()
    assert [row.split("," if suffix == "csv" else "\t")[0] for row in rows] == ["id", "1", "2", "4"]


def test_csv_bad_byte_in_a_quoted_multiline_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A row over several lines is reported at its first line, and the rows after it are read."""
    source = tmp_path / "m.csv"
    source.write_bytes(b'id,text\n1,"first line\nsecond \xff line"\n2,"another row of words"\n')
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(source), "--on-error", "skip"]) == 0
    out, err = capsys.readouterr()
    assert f"skipped {source}:2: not UTF-8 (byte 0xff in column 'text')" in err
    assert "added 1 document," in out


def test_csv_header_that_is_not_utf8_fails_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "h.csv"
    source.write_bytes(b"id,t\xe9xt\n1,words\n")
    assert main(["dedup", str(source), "-o", str(tmp_path / "o.csv"), "--on-error", "skip"]) == 1
    assert "h.csv:1: the header is not UTF-8 (byte 0xe9 in column 2)" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["dedup", "add"])
@pytest.mark.parametrize(
    ("column_type", "value", "shown"),
    [
        ("timestamp", "1970-01-01 00:00:00", "datetime 1970-01-01T00:00:00"),
        ("date", "2020-01-02", "date 2020-01-02"),
        ("decimal", "12.50", "Decimal 12.50"),
    ],
)
def test_an_id_of_a_type_json_has_none_for_is_a_bad_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str, column_type: str, value: str, shown: str
) -> None:
    """--id-field naming a timestamp column: `TypeError: Object of type datetime
    is not JSON serializable` (the bad-row message was built with json.dumps)."""
    import datetime
    import decimal

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    if column_type == "timestamp":
        column = pa.array([datetime.datetime.fromisoformat(value)], pa.timestamp("ms"))
    elif column_type == "date":
        column = pa.array([datetime.date.fromisoformat(value)], pa.date32())
    else:
        column = pa.array([decimal.Decimal(value)], pa.decimal128(5, 2))
    source = tmp_path / "ts.parquet"
    pq.write_table(pa.table({"when": column, "text": ["some words here"]}), source)
    target = str(tmp_path / ("x.parquet" if verb == "dedup" else "t.simstore"))
    command = ["dedup", str(source), "-o", target] if verb == "dedup" else ["add", target, str(source)]
    assert main([*command, "--id-field", "when"]) == 1
    assert capsys.readouterr().err == (
        f"simstore: error: {source}:1: 'when' must be a string or an integer, got {shown}\n"
    )


def test_a_null_id_field_is_reported_as_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--id-field maybe` on `{"maybe": null, ...}` said "no 'maybe' field"."""
    source = tmp_path / "n.jsonl"
    source.write_text(
        '{"maybe": "a", "text": "a few words here"}\n{"maybe": null, "text": "other words"}\n'
        '{"text": "and a third text"}\n',
        encoding="utf-8",
    )
    output = tmp_path / "o.jsonl"
    assert main(["dedup", str(source), "-o", str(output), "--id-field", "maybe", "--on-error", "skip"]) == 0
    err = capsys.readouterr().err
    assert f"simstore: skipped {source}:2: 'maybe' is null, not a string or an integer\n" in err
    assert f"simstore: skipped {source}:3: no 'maybe' field\n" in err


def test_one_document_is_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`simstore remove` said "removed 1 documents" (and `add` "added 1 documents")."""
    source = tmp_path / "one.jsonl"
    source.write_text('{"id": "a", "text": "a few words here"}\n{"id": "b"}\n', encoding="utf-8")
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(source), "--on-error", "skip", "-q"]) == 0
    assert capsys.readouterr().out == "added 1 document, skipped 1 bad line; the store holds 1\n"
    assert main(["remove", str(store), "a"]) == 0
    assert capsys.readouterr().out == "removed 1 document\n"


def _skipped_lines(err: str) -> list[int]:
    """The line numbers of the `simstore: skipped FILE:LINE: ...` reports, in the order printed."""
    return [int(line.split(":")[2]) for line in err.splitlines() if line.startswith("simstore: skipped ")]


def _with_bad_lines(
    path: Path, count: int, no_words: set[int], bad_json: set[int], repeats: set[int], repeated: int = 1
) -> Path:
    """``count`` JSON lines; those numbered in ``no_words`` hold a text with no
    features (found only when fingerprinted), ``bad_json`` are not JSON
    (found when read), ``repeats`` repeat the key of line ``repeated``."""
    with path.open("w", encoding="utf-8") as handle:
        for number in range(1, count + 1):
            if number in bad_json:
                handle.write("{not json\n")
                continue
            key = repeated if number in repeats else number
            text = "!!! ???" if number in no_words else " ".join(f"w{number}n{index}" for index in range(80))
            handle.write(json.dumps({"id": key, "text": text}) + "\n")
    return path


@pytest.mark.parametrize("verb", ["add", "dedup"])
def test_skipped_lines_are_reported_in_input_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """A text with no features was reported when its chunk was fingerprinted,
    after the bad lines read later in the chunk (2 after 4 and 6)."""
    source = _with_bad_lines(tmp_path / "in.jsonl", 8, no_words={2, 7}, bad_json={4}, repeats={6})
    if verb == "add":
        command = ["add", str(tmp_path / "s.simstore"), str(source), "--on-error", "skip"]
    else:
        command = ["dedup", str(source), "-o", str(tmp_path / "out.jsonl"), "--on-error", "skip"]
    assert main(command) == 0
    expected = [2, 4, 6, 7] if verb == "dedup" else [2, 4, 7]  # add takes a repeated key as a replacement
    assert _skipped_lines(capsys.readouterr().err) == expected


def test_skipped_lines_are_in_order_across_chunks_and_worker_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several chunks, each fingerprinted by more than one process (more
    than a million characters a chunk)."""
    import simstore.cli.documents as cli_documents

    monkeypatch.setattr(cli_documents, "FINGERPRINT_CHUNK_DOCS", 2_000)
    no_words = {3, 1_999, 2_000, 2_001, 3_500, 5_000}
    bad_json = {1, 2, 1_998, 2_002, 3_499, 4_999}
    source = _with_bad_lines(tmp_path / "in.jsonl", 5_000, no_words, bad_json, repeats={2_500}, repeated=10)
    command = [
        "dedup",
        str(source),
        "-o",
        str(tmp_path / "out.jsonl"),
        "--on-error",
        "skip",
        "--min-similarity",
        "0",
    ]
    assert main(command) == 0
    assert _skipped_lines(capsys.readouterr().err) == sorted(no_words | bad_json | {2_500})
