"""Outputs that would overwrite what the command reads, or each other, are
refused before anything is read or written: ``-o`` the same file as an
input, the store (``--store``, ``--against``, ``export``'s), or ``--dropped``."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from simstore.cli import main

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    copy = tmp_path / "in.jsonl"
    shutil.copyfile(CORPUS, copy)
    return copy


@pytest.fixture
def stored(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(corpus), "-q"]) == 0
    capsys.readouterr()
    return store


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *untouched: Path) -> str:
    """Run ``argv``, check it fails with one error line and changes none of ``untouched``."""
    before = {path: _digest(path) for path in untouched}
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("simstore: error: "), err
    assert err.count("\n") == 1, err
    assert "nothing was read or written" in err
    assert {path: _digest(path) for path in untouched} == before
    return err


@pytest.mark.parametrize("option", ["--store", "--against"])
def test_dedup_output_is_the_store(
    stored: Path, corpus: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    err = _refused(["dedup", str(corpus), option, str(stored), "-o", str(stored)], capsys, stored, corpus)
    assert f"is the same file as the store ({option}) {stored}" in err


def test_dedup_output_is_a_new_store(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--store N -o N` with no N yet: refused, and N is not created."""
    new = tmp_path / "new.simstore"
    _refused(["dedup", str(corpus), "--store", str(new), "-o", str(new)], capsys, corpus)
    assert not new.exists()


def test_export_output_is_the_store(stored: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["export", str(stored), "-o", str(stored)], capsys, stored)
    assert f"-o {stored} is the same file as the store {stored}" in err


def test_output_and_dropped_are_one_file(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o.jsonl"
    out.write_text("old\n", encoding="utf-8")
    err = _refused(["dedup", str(corpus), "-o", str(out), "--dropped", str(out)], capsys, out, corpus)
    assert f"-o {out} and --dropped {out} are the same file" in err


def test_output_and_dropped_are_both_stdout(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["dedup", str(corpus), "-o", "-", "--dropped", "-"], capsys, corpus)
    assert "-o - and --dropped - are the same stream" in err


def test_output_is_the_input(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["dedup", str(corpus), "-o", str(corpus)], capsys, corpus)
    assert f"-o {corpus} is the same file as the input {corpus}" in err


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_output_links_to_the_input(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str], link: object
) -> None:
    """A symlink to the input, or a hard link of it, is the input."""
    linked = tmp_path / "linked.jsonl"
    link(corpus, linked)  # type: ignore[operator]
    _refused(["dedup", str(corpus), "-o", str(linked)], capsys, corpus)
    _refused(["dedup", str(linked), "-o", str(corpus)], capsys, corpus)


def test_output_is_the_second_input(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": "z", "text": "a few other words"}\n', encoding="utf-8")
    _refused(["dedup", str(corpus), str(other), "-o", str(other)], capsys, corpus, other)


def test_output_inside_an_input_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("some words in a file", encoding="utf-8")
    err = _refused(["dedup", str(folder), "-o", str(folder / "kept.jsonl")], capsys)
    assert "a directory this command reads" in err
    assert os.listdir(folder) == ["a.txt"]


def test_devices_are_not_clobbered(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/null twice writes no file: allowed."""
    assert main(["dedup", str(corpus), "-o", os.devnull, "--dropped", os.devnull, "-q"]) == 0


def test_distinct_outputs_still_work(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept, dropped = tmp_path / "kept.jsonl", tmp_path / "dropped.jsonl"
    assert main(["dedup", str(corpus), "-o", str(kept), "--dropped", str(dropped), "-q"]) == 0
    assert kept.stat().st_size > 0
    assert dropped.stat().st_size > 0
