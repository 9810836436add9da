"""A command that adds documents (``add``, ``dedup --store``) and fails leaves
no new store behind: its inputs are checked (they exist, can be read, are in
the format they are read as) before the store is created, and a new store is
created only when the first documents are committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import simstore
from simstore.cli import main

GOOD = {"id": "a", "text": "a few words of a perfectly good document"}


def _no_store(path: Path) -> bool:
    return not path.exists() and not Path(f"{path}-lock").exists()


def _jsonl(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("verb", ["add", "dedup"])
def test_a_missing_input_creates_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """`simstore add n.simstore typo.jsonl -k 3` failed "no such file", yet
    n.simstore existed afterwards with k=3, and `add n.simstore s.jsonl -k 4` was refused."""
    store = tmp_path / "n.simstore"
    typo = tmp_path / "typo.jsonl"
    good = _jsonl(tmp_path / "good.jsonl", json.dumps(GOOD))
    if verb == "add":
        command = ["add", str(store), str(good), str(typo), "-k", "3"]
    else:
        command = [
            "dedup",
            str(good),
            str(typo),
            "--store",
            str(store),
            "-k",
            "3",
            "-o",
            str(tmp_path / "o.jsonl"),
        ]
    assert main(command) == 1
    assert capsys.readouterr().err == f"simstore: error: {typo}: no such file\n"
    assert _no_store(store)
    assert main(["add", str(store), str(good), "-k", "4", "-q"]) == 0
    with simstore.open(store, "r") as opened:
        assert opened.k == 4


@pytest.mark.parametrize("verb", ["add", "dedup"])
@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("data.jsonl", b"PAR1\x00\x01\x02\x03" * 4, "is a Parquet file"),
        ("data.csv", b"id,body\n1,some words\n", "no 'text' column (columns: id, body)"),
        ("data.jsonl", json.dumps(GOOD).encode() + b"\n{not json\n", "not valid JSON"),
        ("data.jsonl", json.dumps(GOOD).encode() + b'\n{"id": "b", "text": ""}\n', "'text' is empty"),
    ],
)
def test_an_input_that_fails_creates_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str, name: str, content: bytes, message: str
) -> None:
    """A binary file or a CSV without the text column is refused before the
    store is made; a bad line later in the input fails before anything is committed."""
    store = tmp_path / "n.simstore"
    source = tmp_path / name
    source.write_bytes(content)
    if verb == "add":
        command = ["add", str(store), str(source)]
    else:
        command = ["dedup", str(source), "--store", str(store), "-o", str(tmp_path / "o.jsonl")]
    assert main(command) == 1
    assert message in capsys.readouterr().err
    assert _no_store(store)


def test_an_unwritable_place_is_refused_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _jsonl(tmp_path / "good.jsonl", json.dumps(GOOD))
    missing = tmp_path / "no" / "such" / "dir" / "n.simstore"
    assert main(["add", str(missing), str(good)]) == 1
    assert (
        capsys.readouterr().err
        == f"simstore: error: cannot create {missing}: there is no directory {missing.parent}\n"
    )


def test_an_empty_input_creates_no_store_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simstore add new.simstore empty.jsonl` made an empty store (issue 34):
    now it is an error that says so and creates nothing; --allow-empty asks
    for the empty store."""
    store = tmp_path / "n.simstore"
    empty = _jsonl(tmp_path / "empty.jsonl")
    assert main(["add", str(store), str(empty), "-k", "3"]) == 1
    assert capsys.readouterr().err == (
        f"simstore: error: no documents to add (the input holds none), so {store} was not created "
        "(--allow-empty creates it empty)\n"
    )
    assert _no_store(store)
    only_bad = _jsonl(tmp_path / "bad.jsonl", "{not json", '{"id": 1, "text": ""}')
    assert main(["add", str(store), str(only_bad), "--on-error", "skip", "-q"]) == 1
    assert "the input holds none, 2 bad lines skipped" in capsys.readouterr().err
    assert _no_store(store)
    assert main(["add", str(store), str(empty), "-k", "3", "-q", "--allow-empty"]) == 0
    with simstore.open(store, "r") as opened:
        assert (len(opened), opened.k) == (0, 3)
    # A store that exists takes an empty input as adding nothing.
    assert main(["add", str(store), str(empty)]) == 0
    assert capsys.readouterr().out.startswith("added 0 documents; the store holds 0")


def test_dedup_of_nothing_into_a_new_store_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "n.simstore"
    empty = _jsonl(tmp_path / "empty.jsonl")
    for outputs in ([], ["--pairs"], ["--clusters"]):
        output = tmp_path / "out.jsonl"
        assert main(["dedup", str(empty), "--store", str(store), "-o", str(output), *outputs]) == 0
        assert f"no documents, so {store} was not created" in capsys.readouterr().err
        assert output.read_text() == ""
        assert _no_store(store)


def test_batches_committed_before_a_bad_line_stay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --batch-size, a batch committed before the failure is kept (as documented)."""
    store = tmp_path / "n.simstore"
    source = _jsonl(tmp_path / "data.jsonl", json.dumps(GOOD), "{not json")
    assert main(["add", str(store), str(source), "--batch-size", "1"]) == 1
    assert "1 document of earlier batches was committed" in capsys.readouterr().err
    with simstore.open(store, "r") as opened:
        assert list(opened.keys()) == ["a"]


def test_an_existing_store_with_another_k_is_refused_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.simstore"
    good = _jsonl(tmp_path / "good.jsonl", json.dumps(GOOD))
    assert main(["add", str(store), str(good), "-k", "3", "-q"]) == 0
    assert main(["add", str(store), str(tmp_path / "missing.jsonl"), "-k", "4"]) == 1
    # The inputs are checked first; the store's k is then checked on open, before any reading.
    assert "missing.jsonl: no such file" in capsys.readouterr().err
    assert main(["add", str(store), str(good), "-k", "4"]) == 1
    assert "has k=3, not 4" in capsys.readouterr().err
