"""Dataframe columns in the Python API and simstore.dedup_table (issue 22)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
pc = pytest.importorskip("pyarrow.compute")

import simstore  # noqa: E402
from simstore.cli import main  # noqa: E402
from simstore.errors import InvalidTypeError, InvalidValueError  # noqa: E402

CORPUS = Path(__file__).parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"
ROWS = [json.loads(line) for line in CORPUS.read_text().splitlines()]

pytestmark = pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")


def _contents(store: simstore.Store) -> list[tuple[object, int, bytes | None]]:
    return [(key, fp, store.sketch_of(key)) for key, fp in store.items()]


def test_add_many_takes_arrow_pandas_and_numpy_columns(tmp_path: Path) -> None:
    keys = [row["id"] for row in ROWS[:40]]
    texts = [row["text"] for row in ROWS[:40]]
    with simstore.open(tmp_path / "plain.simstore", "c") as plain:
        plain.add_many(keys, texts=texts)
        expected = _contents(plain)
        fingerprints = plain.fingerprints()
    with simstore.open(tmp_path / "arrow.simstore", "c") as store:
        store.add_many(pa.array(keys), texts=pa.chunked_array([texts[:10], texts[10:]]))
        assert _contents(store) == expected
    with simstore.open(tmp_path / "pandas.simstore", "c") as store:
        store.add_many(pd.Series(keys), texts=pd.Series(texts))
        assert _contents(store) == expected
    with simstore.open(tmp_path / "ints.simstore", "c") as store:
        store.add_many(pa.array(np.arange(40)), pa.array(fingerprints))
        store.add_many(pd.Series(np.arange(40, 80)), pd.Series(fingerprints))
        assert store.fingerprints().tolist() == fingerprints.tolist() * 2
        assert list(store) == list(range(80))
        answers = store.query_many(pa.array(fingerprints[:3]))
        assert [answer[0].distance for answer in answers] == [0, 0, 0]
    with simstore.open(tmp_path / "bad.simstore", "c") as store, pytest.raises(InvalidTypeError):
        store.add_many(pa.array([1.5, 2.5]), pa.array(fingerprints[:2]))


def test_dedup_table_equals_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = pa.Table.from_pylist(ROWS)
    kept, provenance = simstore.dedup_table(table, "text", "id")
    assert kept.schema == table.schema
    output = tmp_path / "kept.jsonl"
    assert main(["dedup", str(CORPUS), "-o", str(output)]) == 0
    capsys.readouterr()
    cli_kept = [json.loads(line)["id"] for line in output.read_text().splitlines()]
    assert kept.column("id").to_pylist() == cli_kept
    assert provenance.num_rows == table.num_rows
    assert provenance.column("id").to_pylist() == table.column("id").to_pylist()
    assert provenance.column("kept").to_pylist() == [row["id"] in set(cli_kept) for row in ROWS]
    for row in provenance.to_pylist():
        if row["duplicate_of"] is not None:
            assert not row["kept"]
            assert row["distance"] >= 0  # within k, or sharing a band past it
            assert row["similarity"] >= 0.8
            assert row["duplicate_of"] in set(cli_kept)
    # cluster_size: the size of the row's cluster (as --clusters gives it), 1 for a row in none.
    assert provenance.column_names == [
        "id",
        "cluster_id",
        "duplicate_of",
        "distance",
        "similarity",
        "cluster_size",
        "kept",
    ]
    assert provenance.schema.field("cluster_size").type == pa.int64()
    assert provenance.column("cluster_size").null_count == 0
    clusters = tmp_path / "clusters.jsonl"
    assert main(["dedup", str(CORPUS), "--clusters", "-o", str(clusters)]) == 0
    capsys.readouterr()
    size_of = {}
    for line in clusters.read_text().splitlines():
        cluster = json.loads(line)
        size_of.update(dict.fromkeys(cluster["members"], cluster["size"]))
    assert max(size_of.values()) > 2
    sizes = provenance.column("cluster_size").to_pylist()
    assert sizes == [size_of.get(row["id"], 1) for row in ROWS]
    assert sizes.count(1) == provenance.column("cluster_id").null_count > 0


def test_dedup_table_from_pandas_with_keep_none_and_positions(tmp_path: Path) -> None:
    frame = pd.DataFrame(ROWS)
    kept, provenance = simstore.dedup_table(frame, keep="none")
    clustered = provenance[provenance["cluster_id"].notna()]
    assert len(clustered) > 0
    assert not clustered["kept"].any()
    assert len(kept) == len(ROWS) - len(clustered)
    assert provenance["id"].tolist() == list(range(len(ROWS)))  # no id column: positions
    assert (clustered["cluster_size"] >= 2).all()
    assert (provenance.loc[provenance["cluster_id"].isna(), "cluster_size"] == 1).all()


def test_dedup_table_gives_pandas_back_for_pandas() -> None:
    """dedup_table(pandas_frame) returned pyarrow Tables (issue 34): a pandas
    frame comes back as pandas frames, its index, dtypes and columns kept."""
    frame = pd.DataFrame(ROWS, index=[f"row{number}" for number in range(len(ROWS))])
    frame["number"] = np.arange(len(ROWS), dtype=np.int64) * 10
    frame["score"] = np.arange(len(ROWS), dtype=np.int16)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    expected, expected_provenance = simstore.dedup_table(table, "text", "number")
    kept, provenance = simstore.dedup_table(frame, "text", "number")
    assert isinstance(kept, pd.DataFrame)
    assert isinstance(provenance, pd.DataFrame)
    pd.testing.assert_frame_equal(kept, frame.loc[provenance["kept"].to_numpy()])
    assert kept["number"].tolist() == expected.column("number").to_pylist()
    assert list(provenance.index) == list(frame.index)
    assert list(provenance.columns) == expected_provenance.column_names
    # Integer columns with missing values stay integers (nullable), not floats.
    assert str(provenance["cluster_id"].dtype) == "Int64"
    assert str(provenance["duplicate_of"].dtype) == "Int64"
    assert provenance["duplicate_of"].notna().sum() > 0
    assert str(provenance["cluster_size"].dtype) == "Int64"
    for name in ("id", "cluster_id", "duplicate_of", "distance", "cluster_size", "kept"):
        values = [None if pd.isna(value) else value for value in provenance[name].tolist()]
        assert values == expected_provenance.column(name).to_pylist(), name


def test_dedup_table_gives_polars_back_for_polars() -> None:
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame(ROWS)
    expected, expected_provenance = simstore.dedup_table(pa.Table.from_pylist(ROWS), "text", "id")
    kept, provenance = simstore.dedup_table(frame, "text", "id")
    assert isinstance(kept, pl.DataFrame)
    assert isinstance(provenance, pl.DataFrame)
    assert kept.columns == frame.columns
    assert kept["id"].to_list() == expected.column("id").to_pylist()
    assert provenance.to_arrow().to_pylist() == expected_provenance.to_pylist()


def test_dedup_table_gives_arrow_tables_for_arrow_and_other_inputs() -> None:
    table = pa.Table.from_pylist(ROWS[:40])
    for given in (table, table.to_batches()[0], table.to_pydict()):
        kept, provenance = simstore.dedup_table(given, "text", "id")
        assert isinstance(kept, pa.Table)
        assert isinstance(provenance, pa.Table)
        assert kept.schema == table.schema


def test_dedup_table_refuses_bad_tables() -> None:
    with pytest.raises(InvalidValueError, match="no column"):
        simstore.dedup_table(pa.table({"body": ["a b c"]}))
    with pytest.raises(InvalidValueError, match="repeats an id"):
        simstore.dedup_table(
            pa.table({"id": ["a", "a"], "text": ["one two three", "four five six"]}), id_column="id"
        )
    with pytest.raises(InvalidTypeError, match="strings"):
        simstore.dedup_table(pa.table({"text": ["one two three", None]}))
    with pytest.raises(InvalidValueError, match="keep"):
        simstore.dedup_table(pa.table({"text": ["one two three"]}), keep="last")
    with pytest.raises(InvalidTypeError, match="list of row dicts"):
        simstore.dedup_table("one two three")


def test_dedup_table_takes_rows_as_dicts() -> None:
    rows = [{"id": 1, "text": "one two three four"}, {"id": 2, "text": "one two three four"}]
    kept, provenance = simstore.dedup_table(rows, "text", "id")
    assert kept == rows[:1]  # rows in, rows out: the input's own dicts
    assert kept[0] is rows[0]
    assert [row["duplicate_of"] for row in provenance] == [None, 1]
    assert [row["cluster_size"] for row in provenance] == [2, 2]


def test_dedup_table_keeps_a_store_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "kept.simstore"
    simstore.dedup_table(pa.Table.from_pylist(ROWS[:50]), id_column="id", store_path=path)
    with simstore.open(path, "r") as store:
        assert len(store) == 50
