"""The command line: `stats`, `check` and `merge` through simstore.cli.main(argv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import simstore
from simstore.cli import main


@pytest.fixture
def good_store(store_path: str) -> str:
    """A closed k=3 store with 3 documents, 2 of them still in the delta."""
    with simstore.open(store_path, k=3, merge_on_close=False) as store:
        store.add("a", fingerprint=1)
        store.merge()
        store.add_many(["b", "c"], [2, 3])
    return store_path


def test_stats_prints_the_summary(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`stats` exits 0 and prints docs, delta, k, blocks and tables, one per line."""
    assert main(["stats", good_store]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["docs"] == "3"
    assert lines["delta_docs"] == "2"
    assert lines["k"] == "3"
    assert lines["blocks"] == "5"
    assert lines["tables"] == "10"
    assert lines["path"] == good_store


def test_stats_json(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`stats --json` prints one JSON object with the same numbers."""
    assert main(["stats", "--json", good_store]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["docs"] == 3
    assert summary["delta_docs"] == 2
    assert summary["tables"] == 10
    assert len(summary["prefix_bits"]) == 10


def test_stats_and_check_do_not_modify_the_store(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The read-only verbs leave the delta where it was."""
    assert main(["stats", good_store]) == 0
    assert main(["check", good_store]) == 0
    capsys.readouterr()
    with simstore.open(good_store, "r") as store:
        assert store.stats().delta_docs == 2


def test_check_ok(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` on a sound store exits 0 and prints ok."""
    assert main(["check", good_store]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "ok"
    assert err == ""


def test_merge_folds_the_delta(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`merge` exits 0, says how many documents it merged, and empties the delta."""
    assert main(["merge", good_store]) == 0
    out, _ = capsys.readouterr()
    assert "merged 2" in out
    with simstore.open(good_store, "r") as store:
        assert store.stats().delta_docs == 0
        assert len(store) == 3
        assert store.check() == []
    assert main(["merge", good_store]) == 0
    assert "merged 0" in capsys.readouterr().out


@pytest.mark.parametrize("verb", ["stats", "check", "merge"])
def test_missing_store_exits_1_with_a_message(
    store_path: str, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing store: exit 1, a one-line message on stderr, no traceback, nothing created."""
    assert main([verb, store_path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "simstore: error:" in err
    assert store_path in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not os.path.exists(store_path)


@pytest.mark.parametrize("verb", ["stats", "check", "merge"])
def test_foreign_file_exits_1(store_path: str, verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that is not a store: exit 1 with a message, file untouched."""
    with open(store_path, "wb") as handle:
        handle.write(b"hello" * 2000)
    assert main([verb, store_path]) == 1
    _, err = capsys.readouterr()
    assert "simstore: error:" in err
    assert "Traceback" not in err
    with open(store_path, "rb") as handle:
        assert handle.read() == b"hello" * 2000


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate", "x"],
        ["stats"],
        ["check"],
        ["merge"],
        ["stats", "a", "b"],
        ["check", "--json", "x"],
        ["stats", "--nope", "x"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Bad command lines are usage errors: SystemExit(2) with usage on stderr."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    _, err = capsys.readouterr()
    assert "usage:" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the package version and exits 0."""
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert simstore.__version__ in capsys.readouterr().out


def test_module_entry_point(good_store: str) -> None:
    """`python -m simstore.cli check` runs main and exits with its status."""
    completed = subprocess.run(
        [sys.executable, "-m", "simstore.cli", "check", good_store],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"
    missing = subprocess.run(
        [sys.executable, "-m", "simstore.cli", "stats", good_store + ".missing"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1
    assert "Traceback" not in missing.stderr


def test_check_reports_problems_and_exits_1(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` on a damaged store (a table entry deleted behind simstore's back) prints the
    problem and exits 1."""
    import lmdb

    with simstore.open(good_store) as store:
        store.merge()
    env = lmdb.open(good_store, subdir=False, max_dbs=600)
    table = env.open_db(b"table:000", dupsort=True, dupfixed=True, create=False)
    with env.begin(write=True) as txn:
        cursor = txn.cursor(table)
        assert cursor.first()
        cursor.delete()
    env.close()
    assert main(["check", good_store]) == 1
    out, err = capsys.readouterr()
    assert "table 0" in out
    assert "problem" in err
    assert "Traceback" not in err
