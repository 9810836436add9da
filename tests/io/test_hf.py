"""Hugging Face datasets (issue 22, part 2): a Dataset deduplicated within
itself and against a store, in memory and memory-mapped from disk, equal to
what the command line keeps. Every dataset is built here; nothing is
downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

import simstore  # noqa: E402
from simstore.cli import main  # noqa: E402
from simstore.errors import InvalidValueError  # noqa: E402
from simstore.hf import against_dataset, dedup_dataset  # noqa: E402

CORPUS = Path(__file__).parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"
ROWS = [json.loads(line) for line in CORPUS.read_text().splitlines()]

pytestmark = pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")


def _cli_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str], *arguments: str) -> list[str]:
    output = tmp_path / "cli.jsonl"
    assert main(["dedup", *arguments, "-o", str(output)]) == 0
    capsys.readouterr()
    return [json.loads(line)["id"] for line in output.read_text().splitlines()]


@pytest.mark.parametrize("on_disk", [False, True])
def test_dedup_dataset_keeps_what_the_command_line_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], on_disk: bool
) -> None:
    dataset = datasets.Dataset.from_list(ROWS)
    if on_disk:  # Arrow on disk, memory-mapped: the way a corpus larger than memory is held
        dataset.save_to_disk(str(tmp_path / "saved"))
        dataset = datasets.load_from_disk(str(tmp_path / "saved"))
    kept = dedup_dataset(dataset, "text", "id", batch_size=50)
    assert kept.column_names == dataset.column_names
    assert kept["id"] == _cli_kept(tmp_path, capsys, str(CORPUS))
    annotated = dedup_dataset(dataset, "text", "id", annotate=True, batch_size=64)
    assert len(annotated) == len(ROWS)
    assert annotated.column_names == [
        *dataset.column_names,
        "cluster_id",
        "duplicate_of",
        "distance",
        "similarity",
        "cluster_size",
    ]
    # cluster_size: the rows sharing the row's cluster_id; 1 for a row in no cluster.
    cluster_ids = annotated["cluster_id"]
    sizes = {cluster: cluster_ids.count(cluster) for cluster in set(cluster_ids) if cluster is not None}
    assert max(sizes.values()) > 2
    assert annotated["cluster_size"] == [1 if c is None else sizes[c] for c in cluster_ids]
    kept_ids = set(kept["id"])
    for row in annotated:
        if row["duplicate_of"] is None:
            assert row["id"] in kept_ids or row["cluster_id"] is None
        else:
            assert row["id"] not in kept_ids
            assert row["duplicate_of"] in kept_ids
            assert row["similarity"] >= 0.8


def test_against_dataset_keeps_the_new_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stored, batch = tmp_path / "stored.jsonl", tmp_path / "batch.jsonl"
    lines = CORPUS.read_text().splitlines()
    stored.write_text("\n".join(lines[:200]) + "\n")
    batch.write_text("\n".join(lines[200:]) + "\n")
    path = tmp_path / "old.simstore"
    assert main(["add", str(path), str(stored)]) == 0
    expected = _cli_kept(tmp_path, capsys, str(batch), "--against", str(path))
    dataset = datasets.Dataset.from_list(ROWS[200:])
    with simstore.open(path, "r") as store:
        new = against_dataset(dataset, store, batch_size=40)
        annotated = against_dataset(dataset, store, annotate=True)
    assert new["id"] == expected
    matched = [row for row in annotated if row["duplicate_of"] is not None]
    assert len(matched) == len(ROWS) - 200 - len(expected)
    # Within k = 5, or sharing a band of the store's band table (and at the threshold).
    assert all(row["cluster_id"] is None for row in matched)
    assert all(row["distance"] <= 5 or row["similarity"] >= 0.8 for row in matched)
    # A matched row was not clustered: no cluster size; the others are clusters of their own.
    assert all(row["cluster_size"] is None for row in matched)
    assert {row["cluster_size"] for row in annotated if row["duplicate_of"] is None} == {1}


def test_bad_arguments(tmp_path: Path) -> None:
    dataset = datasets.Dataset.from_list([{"body": "some words here"}])
    with pytest.raises(InvalidValueError, match="no column 'text'"):
        dedup_dataset(dataset)
    with pytest.raises(InvalidValueError, match="keep"):
        dedup_dataset(dataset, "body", keep="last")
    with pytest.raises(InvalidValueError, match="batch_size"):
        dedup_dataset(dataset, "body", batch_size=0)
