"""Parquet and Arrow IPC files through the command line (issue 22, part 1):
read a record batch at a time, written back with the input's schema, plus
the provenance columns when annotating."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
feather = pytest.importorskip("pyarrow.feather")

import simstore  # noqa: E402
from simstore.cli import main  # noqa: E402

CORPUS = Path(__file__).parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"


@pytest.fixture(scope="module")
def rows() -> list[dict[str, object]]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines()]


def _kept_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> set[str]:
    kept = tmp_path / "kept.jsonl"
    assert main(["dedup", str(CORPUS), "-o", str(kept)]) == 0
    capsys.readouterr()
    return {json.loads(line)["id"] for line in kept.read_text().splitlines()}


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_dedup_keeps_the_schema_and_the_rows_of_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, object]], suffix: str
) -> None:
    table = pa.Table.from_pylist(rows)
    source = tmp_path / f"corpus{suffix}"
    if suffix == ".parquet":
        pq.write_table(table, source, row_group_size=50)  # several row groups to stream
    else:
        feather.write_feather(table, source)
    output = tmp_path / f"kept{suffix}"
    assert main(["dedup", str(source), "-o", str(output)]) == 0
    capsys.readouterr()
    kept = pq.read_table(output) if suffix == ".parquet" else feather.read_table(output)
    assert kept.schema == table.schema
    assert set(kept.column("id").to_pylist()) == _kept_ids(tmp_path, capsys)
    by_id = {row["id"]: row for row in rows}
    assert all(row == by_id[row["id"]] for row in kept.to_pylist())


def test_annotate_and_dropped_add_typed_provenance_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, object]]
) -> None:
    # Integer ids: duplicate_of takes their type.
    numbered = [{**row, "id": index} for index, row in enumerate(rows)]
    source = tmp_path / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist(numbered), source)
    annotated, dropped = tmp_path / "all.parquet", tmp_path / "dropped.parquet"
    code = main(
        ["dedup", str(source), "--annotate", "-o", str(annotated), "--dropped", str(dropped), "--json"]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    table = pq.read_table(annotated)
    assert table.num_rows == len(rows)
    assert [(field.name, str(field.type)) for field in table.schema][-5:] == [
        ("cluster_id", "int64"),
        ("duplicate_of", "int64"),
        ("distance", "int64"),
        ("similarity", "double"),
        ("cluster_size", "int64"),
    ]
    # cluster_size: the rows sharing the row's cluster_id; 1 (never null) for a row in no cluster.
    cluster_ids = table.column("cluster_id").to_pylist()
    sizes = {cluster: cluster_ids.count(cluster) for cluster in set(cluster_ids) if cluster is not None}
    assert table.column("cluster_size").to_pylist() == [1 if c is None else sizes[c] for c in cluster_ids]
    assert max(sizes.values()) > 2
    dropped_table = pq.read_table(dropped)
    assert dropped_table.schema.field("cluster_size").type == pa.int64()
    dropped_rows = dropped_table.to_pylist()
    assert all(row["cluster_size"] == sizes[row["cluster_id"]] for row in dropped_rows)
    assert len(dropped_rows) == summary["duplicates"]
    kept_ids = {row["id"] for row in table.to_pylist() if row["duplicate_of"] is None}
    assert all(row["duplicate_of"] in kept_ids and row["similarity"] >= 0.8 for row in dropped_rows)


def test_an_arrow_stream_file_and_add_then_query(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, object]]
) -> None:
    table = pa.Table.from_pylist(rows)
    source = tmp_path / "corpus.arrow"
    with pa.OSFile(str(source), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=64)
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(source)]) == 0
    capsys.readouterr()
    with simstore.open(store, "r") as opened:
        assert len(opened) == len(rows)
        assert rows[0]["id"] in [match.key for match in opened.query(text=str(rows[0]["text"]))]


def test_columnar_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "no_text.parquet"
    pq.write_table(pa.table({"id": ["a"], "body": ["some words here"]}), source)
    assert main(["dedup", str(source), "-o", str(tmp_path / "out.parquet")]) != 0
    assert "no 'text' column" in capsys.readouterr().err
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    assert main(["dedup", str(broken), "-o", str(tmp_path / "out.parquet")]) != 0
    assert "not a readable parquet file" in capsys.readouterr().err
    assert not (tmp_path / "out.parquet").exists()


def test_without_pyarrow_the_error_says_what_to_install(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    rows: list[dict[str, object]],
) -> None:
    source = tmp_path / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist(rows[:5]), source)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    assert main(["dedup", str(source), "-o", str(tmp_path / "out.parquet")]) != 0
    assert "need pyarrow" in capsys.readouterr().err


def test_a_directory_of_parquet_parts_reads_as_one_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, object]]
) -> None:
    table = pa.Table.from_pylist(rows)
    parts = tmp_path / "corpus"
    parts.mkdir()
    for number, start in enumerate(range(0, len(rows), 100)):
        pq.write_table(table.slice(start, 100), parts / f"part-{number:05d}.parquet")
    (parts / "_SUCCESS").write_text("")  # a marker Spark and friends leave beside the parts
    output = tmp_path / "kept.parquet"
    assert main(["dedup", str(parts), "-o", str(output)]) == 0
    capsys.readouterr()
    kept = pq.read_table(output)
    assert kept.schema == table.schema
    assert set(kept.column("id").to_pylist()) == _kept_ids(tmp_path, capsys)


def _write_parts(tmp_path: Path, *tables: object) -> list[str]:
    paths = []
    for number, table in enumerate(tables, start=1):
        path = tmp_path / f"p{number}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


GPL_LIKE = " ".join(f"clause {number} of a long licence text with many words" for number in range(60))


def test_parts_with_other_columns_are_unified_not_cast_or_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """p1 had score int32, p2 score 2.5 and a url column: the output (under
    p1's schema) said score 2 and had no url, silently."""
    paths = _write_parts(
        tmp_path,
        pa.table({"id": ["a"], "text": [GPL_LIKE], "score": pa.array([1], pa.int32())}),
        pa.table({"id": ["b"], "text": ["an unrelated second text"], "score": [2.5], "url": ["http://b"]}),
    )
    output = tmp_path / "out.parquet"
    assert main(["dedup", *paths, "-o", str(output), "-q"]) == 0
    table = pq.read_table(output)
    assert str(table.schema.field("score").type) == "double"
    assert table.to_pylist() == [
        {"id": "a", "text": GPL_LIKE, "score": 1.0, "url": None},
        {"id": "b", "text": "an unrelated second text", "score": 2.5, "url": "http://b"},
    ]


@pytest.mark.parametrize(
    ("first", "second", "unified"),
    [
        (pa.int32(), pa.float64(), pa.float64()),
        (pa.int32(), pa.int64(), pa.int64()),
        (pa.uint32(), pa.int64(), pa.int64()),
        (pa.string(), pa.large_string(), pa.large_string()),
        (pa.null(), pa.string(), pa.string()),
        (pa.dictionary(pa.int32(), pa.string()), pa.string(), pa.string()),
        (pa.timestamp("ms"), pa.timestamp("us"), pa.timestamp("us")),
        (pa.list_(pa.int32()), pa.list_(pa.int64()), pa.list_(pa.int64())),
        # No type holds both without changing a value: refused.
        (pa.int64(), pa.float64(), None),  # doubles hold integers up to 2**53 only
        (pa.int64(), pa.uint64(), None),
        (pa.float64(), pa.float32(), pa.float64()),
        (pa.int32(), pa.string(), None),
        (pa.timestamp("us"), pa.timestamp("ns"), None),  # ns holds years 1677 to 2262 only
        (pa.timestamp("ms", tz="UTC"), pa.timestamp("ms"), None),
    ],
)
def test_unified_schema_widens_only_where_no_value_changes(
    first: object, second: object, unified: object
) -> None:
    from simstore.io.columnar import SchemaConflictError, unified_schema

    schemas = [
        ("one.parquet", pa.schema([("column", first)])),
        ("two.parquet", pa.schema([("column", second)])),
    ]
    if unified is None:
        with pytest.raises(
            SchemaConflictError, match=r"'column' is .* in one\.parquet but .* in two\.parquet"
        ):
            unified_schema(schemas)
    else:
        assert unified_schema(schemas).field("column").type == unified


def test_a_column_no_type_holds_is_refused_before_any_row_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """score int32 in p1 and 'high' in p2: an ArrowInvalid traceback after the whole run."""
    paths = _write_parts(
        tmp_path,
        pa.table({"id": ["a"], "text": [GPL_LIKE], "score": pa.array([1], pa.int32())}),
        pa.table({"id": ["c"], "text": ["a third text"], "score": ["high"]}),
    )

    def no_rows(path: str, fmt: str) -> object:
        raise AssertionError(f"{path} was read before the schemas were checked")

    monkeypatch.setattr("simstore.io.readers.read_rows", no_rows)
    output = tmp_path / "out.parquet"
    assert main(["dedup", *paths, "-o", str(output), "--store", str(tmp_path / "s.simstore")]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"simstore: error: column 'score' is int32 in {paths[0]} but string in {paths[1]}, and no type "
        "holds both without changing values; cast one of them to the other's type (no row was read)\n"
    )
    assert not output.exists()


def test_a_row_pyarrow_cannot_write_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any pyarrow error at write time (here forced by a schema that cannot
    hold the text) is a `simstore: error:` line, not a traceback, and leaves no output."""
    import simstore.cli.dedup

    [path] = _write_parts(tmp_path, pa.table({"id": ["a"], "text": [GPL_LIKE]}))
    monkeypatch.setattr(
        simstore.cli.dedup,
        "output_schema",
        lambda inputs, options: pa.schema([("id", pa.string()), ("text", pa.int64())]),
    )
    output = tmp_path / "out.parquet"
    assert main(["dedup", path, "-o", str(output)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"simstore: error: {output}: cannot write the parquet output: ")
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert len(err) < 500  # pyarrow quotes the whole text it could not convert: cut short
    assert err.endswith("tried to convert to int64\n")
    assert not output.exists()


def _annotated(tmp_path: Path, table: object, *options: str) -> object:
    source = tmp_path / "ids.parquet"
    pq.write_table(table, source)
    annotated, dropped = tmp_path / "annotated.parquet", tmp_path / "dropped.parquet"
    command = ["dedup", str(source), "--annotate", "-o", str(annotated), "--dropped", str(dropped), "-q"]
    assert main([*command, *options]) == 0
    assert pq.read_table(dropped).column("duplicate_of").to_pylist() == [
        key for key in pq.read_table(annotated).column("duplicate_of").to_pylist() if key is not None
    ]
    return pq.read_table(annotated)


def test_a_null_integer_id_makes_duplicate_of_a_string_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An int64 id column with a null: that row's key is FILE:LINE, and
    writing it into an int64 duplicate_of was an ArrowInvalid traceback."""
    table = _annotated(
        tmp_path, pa.table({"id": pa.array([None, 2], pa.int64()), "text": [GPL_LIKE, GPL_LIKE + " extra"]})
    )
    assert str(table.schema.field("duplicate_of").type) == "string"
    assert table.column("duplicate_of").to_pylist() == [None, f"{tmp_path / 'ids.parquet'}:1"]


def test_uint64_ids_past_int64_keep_their_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """uint64 ids of 2**63 or more: an OverflowError traceback into int64."""
    ids = pa.array([2**64 - 1, 2**64 - 2], pa.uint64())
    table = _annotated(tmp_path, pa.table({"id": ids, "text": [GPL_LIKE, GPL_LIKE + " extra"]}))
    assert str(table.schema.field("duplicate_of").type) == "uint64"
    assert table.column("duplicate_of").to_pylist() == [None, 2**64 - 1]


def test_integer_ids_against_a_store_of_string_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--against (or --store) a store holding string keys, integer ids: a traceback after the run."""
    store = tmp_path / "s.simstore"
    stored = tmp_path / "s.jsonl"
    stored.write_text(json.dumps({"id": "gpl", "text": GPL_LIKE}) + "\n", encoding="utf-8")
    assert main(["add", str(store), str(stored), "-q"]) == 0
    table = _annotated(
        tmp_path,
        pa.table({"id": pa.array([7, 8], pa.int64()), "text": [GPL_LIKE + " extra", "unrelated words here"]}),
        "--against",
        str(store),
    )
    assert str(table.schema.field("duplicate_of").type) == "string"
    assert table.column("duplicate_of").to_pylist() == ["gpl", None]


@pytest.mark.parametrize(
    ("id_type", "keys", "expected"),
    [
        (pa.int64(), [1, 2], pa.int64()),
        (pa.int32(), [1, 2], pa.int32()),
        (pa.int32(), [2**40], pa.int64()),
        (pa.int64(), [2**63], pa.uint64()),
        (pa.int64(), [-1, 2**63], pa.string()),
        (pa.int64(), [1, "a:1"], pa.string()),
        (pa.string(), [1, 2], pa.string()),
        (None, [1], pa.string()),
        (pa.uint8(), [], pa.uint8()),
    ],
)
def test_key_column_type_holds_every_key(id_type: object, keys: list[object], expected: object) -> None:
    from simstore.io.columnar import key_column_type

    key_type, as_text = key_column_type(id_type, keys)
    assert key_type == expected
    assert as_text == (expected == pa.string())
