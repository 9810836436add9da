"""``dedup --store STORE`` into a store that already holds documents: the
summary counts the input's documents only, and ``-k`` is the store's k as
for ``add``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simstore.cli import main

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"


def _renamed_copy(path: Path, prefix: str) -> Path:
    """The corpus with every id prefixed: the same texts under other keys."""
    with CORPUS.open(encoding="utf-8") as source, path.open("w", encoding="utf-8") as copy:
        for line in source:
            record = json.loads(line)
            record["id"] = f"{prefix}{record['id']}"
            copy.write(json.dumps(record) + "\n")
    return path


def _summary(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    assert main([*argv, "--json", "-q"]) == 0
    summary: dict[str, int] = json.loads(capsys.readouterr().out)
    return summary


def test_summary_counts_the_input_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Into a store holding a copy of every text, every input document is a
    duplicate: 348 documents, 348 duplicates, 0 kept (it said 454 duplicates)."""
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(_renamed_copy(tmp_path / "old.jsonl", "old-")), "-q"]) == 0
    capsys.readouterr()
    documents = sum(1 for _ in CORPUS.open(encoding="utf-8"))
    output = tmp_path / "kept.jsonl"
    summary = _summary(["dedup", str(CORPUS), "--store", str(store), "-o", str(output)], capsys)
    assert summary["documents"] == documents
    assert summary["duplicates"] == documents
    assert summary["kept"] == 0
    assert summary["kept"] + summary["duplicates"] + summary["skipped"] == summary["documents"]
    assert output.read_text(encoding="utf-8") == ""
    # Every input document is in a cluster with its stored copy.
    alone = _summary(["dedup", str(CORPUS), "-o", str(tmp_path / "alone.jsonl")], capsys)
    assert summary["clusters"] == alone["kept"]


def test_summary_of_a_fresh_store_is_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Into a new store, the figures are a temporary store's."""
    alone = _summary(["dedup", str(CORPUS), "-o", str(tmp_path / "a.jsonl")], capsys)
    kept = _summary(
        ["dedup", str(CORPUS), "--store", str(tmp_path / "s.simstore"), "-o", str(tmp_path / "b.jsonl")],
        capsys,
    )
    assert {**kept, "output": None} == {**alone, "output": None}


def test_skipped_lines_are_documents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"id": "a", "text": "some words to keep here"}\n'
        "not json\n"
        '{"id": "b", "text": "some words to keep here"}\n',
        encoding="utf-8",
    )
    summary = _summary(["dedup", str(source), "-o", str(tmp_path / "o.jsonl"), "--on-error", "skip"], capsys)
    assert (summary["documents"], summary["skipped"], summary["duplicates"], summary["kept"]) == (3, 1, 1, 1)


def test_k_must_equal_an_existing_stores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`add -k 3` into a k=5 store is refused; so is `dedup --store -k 3` now (it was accepted)."""
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(CORPUS), "-q"]) == 0
    capsys.readouterr()
    output = tmp_path / "o.jsonl"
    assert main(["add", str(store), str(CORPUS), "-k", "3", "-q"]) == 1
    add_error = capsys.readouterr().err
    assert main(["dedup", str(CORPUS), "--store", str(store), "-k", "3", "-o", str(output)]) == 1
    assert capsys.readouterr().err == add_error
    assert add_error.startswith(f"simstore: error: {store} has k=5, not 3: leave out -k")
    assert not output.exists()
    assert main(["dedup", str(CORPUS), "--store", str(store), "-k", "5", "-o", str(output), "-q"]) == 0


def test_k_of_a_new_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.simstore"
    assert (
        main(["dedup", str(CORPUS), "--store", str(store), "-k", "3", "-o", str(tmp_path / "o.jsonl"), "-q"])
        == 0
    )
    capsys.readouterr()
    assert main(["stats", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["k"] == 3
