"""Resumable ``dedup --store`` runs (issue 22, part 4): a run killed part-way
resumes with ``--resume`` where it stopped, and its output and summary are an
uninterrupted run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from simstore.cli import main
from simstore.cli.resume import log_path

CORPUS = Path(__file__).parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"
LINES = CORPUS.read_text().splitlines()
PARTS = [LINES[:120], LINES[120:240], LINES[240:]]


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n")


def _run(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main([*arguments, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def dying(commit: int, chunk_docs: int | None = None) -> str:
    """A child running the command line that dies by SIGKILL as its
    ``commit``-th commit (``add_many``) begins, with the command line's
    fingerprint chunks of ``chunk_docs`` documents if given."""
    chunks = "" if chunk_docs is None else f"simstore.cli.documents.FINGERPRINT_CHUNK_DOCS = {chunk_docs}\n"
    return f"""
import os, signal, sys
import simstore.cli.documents
import simstore.store.facade

{chunks}real = simstore.store.facade.Store.add_many
calls = []

def dying(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == {commit}:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, *args, **kwargs)

simstore.store.facade.Store.add_many = dying
from simstore.cli import main
sys.exit(main(sys.argv[1:]))
"""


# The child dies as its second commit begins: the first input is committed
# (and logged), the second is not.
DYING = dying(2)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_killed_run_resumes_to_the_uninterrupted_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [tmp_path / name for name in ("a.jsonl", "b.jsonl", "c.jsonl")]
    for path, lines in zip(files, PARTS, strict=True):
        _write(path, lines)
    store = tmp_path / "corpus.simstore"
    output = tmp_path / "kept.jsonl"
    arguments = ["dedup", *map(str, files), "--store", str(store), "-o", str(output)]
    # SIGKILL leaves the command's scratch folder behind: in tmp_path, not /tmp.
    environment = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.run(
        [sys.executable, "-c", DYING, *arguments], capture_output=True, check=False, env=environment
    )
    assert killed.returncode == -signal.SIGKILL
    log = json.loads(Path(log_path(str(store))).read_text())
    assert [entry[1] for entry in log["inputs"]] == [len(PARTS[0])]
    assert not output.exists()
    resumed = _run([*arguments, "--resume"], capsys)
    assert not os.path.exists(log_path(str(store)))  # done: nothing left to resume
    fresh_output = tmp_path / "fresh.jsonl"
    fresh_store = tmp_path / "fresh.simstore"
    fresh = _run(["dedup", *map(str, files), "--store", str(fresh_store), "-o", str(fresh_output)], capsys)
    assert {**resumed, "output": None} == {**fresh, "output": None}
    assert output.read_text() == fresh_output.read_text()


def test_resume_skips_what_was_committed_and_redoes_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    _write(files[0], PARTS[0])
    _write(files[1], PARTS[1])
    store = tmp_path / "s.simstore"
    arguments = ["dedup", *map(str, files), "--store", str(store), "-o", str(tmp_path / "out.jsonl")]
    # A log as a killed run leaves it: all of a.jsonl and 50 documents of b.jsonl.
    first = _run(arguments, capsys)
    from simstore.cli.resume import ProgressLog
    from simstore.io.readers import Input

    log = ProgressLog(str(store), resume=False)
    log.record(Input(str(files[0])), len(PARTS[0]))
    log.record(Input(str(files[1])), 50)
    fingerprinted: list[int] = []
    import simstore.cli.documents as cli_documents

    real = cli_documents.fingerprint_documents

    def counting(*args: object, **kwargs: object) -> object:
        for chunk, values, sketches in real(*args, **kwargs):  # type: ignore[arg-type]
            fingerprinted.append(len(chunk))
            yield chunk, values, sketches

    monkeypatch.setattr("simstore.cli.dedup.fingerprint_documents", counting)
    assert _run([*arguments, "--resume"], capsys) == first
    assert sum(fingerprinted) == len(PARTS[1]) - 50  # only what the log did not hold
    # A changed input is read in full again, whatever the log says.
    log = ProgressLog(str(store), resume=False)
    log.record(Input(str(files[0])), len(PARTS[0]))
    _write(files[0], PARTS[0][:-1])
    fingerprinted.clear()
    changed = _run([*arguments, "--resume"], capsys)
    assert sum(fingerprinted) == len(PARTS[0]) - 1 + len(PARTS[1])
    assert changed["documents"] == len(PARTS[0]) - 1 + len(PARTS[1])


def test_a_foreign_file_where_the_log_goes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.simstore"
    Path(log_path(str(store))).write_text("my own notes")
    assert main(["dedup", str(CORPUS), "--store", str(store), "-o", str(tmp_path / "out.jsonl")]) != 0
    assert "not a simstore progress log" in capsys.readouterr().err
    assert Path(log_path(str(store))).read_text() == "my own notes"


# As DYING, with small chunks: a directory's documents take several commits,
# and the run dies as the third begins.
DYING_IN_A_DIRECTORY = dying(3, chunk_docs=40)


def _text_files(folder: Path) -> Path:
    """A directory of text files, each a document, in two subfolders."""
    for index, line in enumerate(LINES[:150]):
        part = folder / ("a" if index % 3 else "b") / f"doc{index:03}.txt"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.loads(line)["text"], encoding="utf-8")
    return folder


def _parquet_parts(folder: Path) -> Path:
    """A directory of a dataset's Parquet parts."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder.mkdir()
    rows = [json.loads(line) for line in LINES]
    for number, start in enumerate(range(0, len(rows), 60)):
        pq.write_table(pa.Table.from_pylist(rows[start : start + 60]), folder / f"part-{number:05}.parquet")
    (folder / "_SUCCESS").write_text("")
    return folder


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("make", [_text_files, _parquet_parts], ids=["text-files", "parquet-parts"])
def test_a_killed_run_over_a_directory_resumes_to_the_uninterrupted_output(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[Path], Path],
) -> None:
    """A directory was never resumable, yet an interrupted run said to use
    --resume (issue 34). Now a directory is known by its files, read in name
    order, and --resume skips the documents committed."""
    folder = make(tmp_path / "corpus")
    store = tmp_path / "corpus.simstore"
    output = tmp_path / "kept.jsonl"
    arguments = ["dedup", str(folder), "--store", str(store), "-o", str(output)]
    environment = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.run(
        [sys.executable, "-c", DYING_IN_A_DIRECTORY, *arguments],
        capture_output=True,
        check=False,
        env=environment,
    )
    assert killed.returncode == -signal.SIGKILL
    log = json.loads(Path(log_path(str(store))).read_text())
    assert [(entry[0][0], entry[1]) for entry in log["inputs"]] == [(str(folder), 80)]
    fingerprinted = _counting_fingerprints(monkeypatch)
    resumed = _run([*arguments, "--resume"], capsys)
    assert not os.path.exists(log_path(str(store)))
    documents = resumed["documents"]
    assert isinstance(documents, int)
    assert sum(fingerprinted) == documents - 80  # the committed ones were only read again
    fresh_output = tmp_path / "fresh.jsonl"
    fresh = _run(
        ["dedup", str(folder), "--store", str(tmp_path / "fresh.simstore"), "-o", str(fresh_output)], capsys
    )
    assert {**resumed, "output": None} == {**fresh, "output": None}
    assert output.read_text() == fresh_output.read_text()


def _counting_fingerprints(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the chunks dedup fingerprints from now on."""
    import simstore.cli.documents as cli_documents

    fingerprinted: list[int] = []
    real = cli_documents.fingerprint_documents

    def counting(*args: object, **kwargs: object) -> object:
        for chunk, values, sketches in real(*args, **kwargs):  # type: ignore[arg-type]
            fingerprinted.append(len(chunk))
            yield chunk, values, sketches

    monkeypatch.setattr("simstore.cli.dedup.fingerprint_documents", counting)
    return fingerprinted


def test_a_directory_that_changed_is_read_in_full_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from simstore.cli.resume import ProgressLog
    from simstore.io.readers import Input

    folder = _text_files(tmp_path / "corpus")
    store = tmp_path / "s.simstore"
    arguments = ["dedup", str(folder), "--store", str(store), "-o", str(tmp_path / "out.jsonl")]
    first = _run(arguments, capsys)
    ProgressLog(str(store), resume=False).record(Input(str(folder)), 100)
    fingerprinted = _counting_fingerprints(monkeypatch)
    assert _run([*arguments, "--resume"], capsys) == first
    assert sum(fingerprinted) == 50
    ProgressLog(str(store), resume=False).record(Input(str(folder)), 100)
    changed = folder / "a" / "doc001.txt"
    changed.write_text(changed.read_text(encoding="utf-8") + " and one more word", encoding="utf-8")
    fingerprinted.clear()
    assert _run([*arguments, "--resume"], capsys)["documents"] == 150
    assert sum(fingerprinted) == 150


@pytest.mark.parametrize("source", ["stdin", "file"])
def test_an_interrupted_run_promises_a_resume_only_where_there_is_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """Standard input is read from a copy each run makes: nothing to resume,
    and the message says to run it again instead."""
    import io

    import simstore.cli.documents as cli_documents
    import simstore.store.facade

    monkeypatch.setattr(cli_documents, "FINGERPRINT_CHUNK_DOCS", 40)
    real = simstore.store.facade.Store.add_many
    calls: list[int] = []

    def interrupted(self: simstore.store.facade.Store, *args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # as the second chunk is committed
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(simstore.store.facade.Store, "add_many", interrupted)
    corpus = tmp_path / "in.jsonl"
    _write(corpus, LINES)
    if source == "stdin":
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(corpus.read_bytes()), encoding="utf-8"))
    store = tmp_path / "s.simstore"
    given = "-" if source == "stdin" else str(corpus)
    assert main(["dedup", given, "--store", str(store), "-o", str(tmp_path / "o.jsonl"), "-q"]) == 130
    err = capsys.readouterr().err
    assert f"the documents committed so far are in {store}" in err
    if source == "stdin":
        assert "--resume" not in err
        assert "re-running the same input is safe" in err
    else:
        assert "run the same command with --resume to continue" in err
