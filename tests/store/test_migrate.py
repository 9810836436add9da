"""Old files and the maintenance verbs: a format-1 store (made by simstore at
8c74d1a and shipped in tests/data) is refused with a way forward, migrates
into a store that answers exactly as the old one's documents say, and
``compact`` joins runs and writes a compacted copy without replacing
anything."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simstore
from simstore.cli import main

DATA = Path(__file__).parents[1] / "data"


def expected_documents() -> dict[Any, tuple[int, dict[str, Any] | None]]:
    documents = {}
    for line in (DATA / "format1.expected.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        key = row["key"]
        if isinstance(key, dict):
            key = bytes.fromhex(key["bytes"])
        documents[key] = (row["fingerprint"], row["meta"])
    return documents


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """A copy of the shipped format-1 store (opening it makes a lock file)."""
    path = tmp_path / "old.simstore"
    shutil.copyfile(DATA / "format1.simstore", path)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def brute_force(documents: dict[Any, tuple[int, Any]], query: int, k: int) -> list[tuple[Any, int]]:
    return sorted(
        (
            (key, (fingerprint ^ query).bit_count())
            for key, (fingerprint, _) in documents.items()
            if (fingerprint ^ query).bit_count() <= k
        ),
        key=lambda pair: (pair[1], type(pair[0]).__name__, pair[0]),
    )


def test_a_format_1_store_is_refused_with_the_way_forward_and_left_as_it_was(old_store: Path) -> None:
    before = digest(old_store)
    for mode in ("r", "w", "c"):
        with pytest.raises(simstore.FormatVersionError, match="simstore migrate"):
            simstore.open(old_store, mode)
    assert digest(old_store) == before


def test_migrate_copies_every_document_and_answers_as_the_old_documents_say(
    old_store: Path, tmp_path: Path
) -> None:
    documents = expected_documents()
    before = digest(old_store)
    new = tmp_path / "new.simstore"
    seen: list[tuple[int, int]] = []
    assert simstore.migrate(old_store, new, progress=lambda done, total: seen.append((done, total))) == len(
        documents
    )
    assert seen[-1] == (len(documents), len(documents))
    assert digest(old_store) == before
    with simstore.open(new, "r") as store:
        stats = store.stats()
        assert stats.format_version == 2
        assert stats.k == 3
        assert stats.delta_docs == 0
        assert len(store) == len(documents)
        assert store.check() == []
        for key, (fingerprint, meta) in documents.items():
            record = store.get(key)
            assert record is not None
            assert (record.fingerprint, record.meta) == (fingerprint, meta)
        rng = np.random.default_rng(3)
        stored = [fingerprint for fingerprint, _ in documents.values()]
        for index in range(200):
            query = (
                stored[index % len(stored)] ^ (1 << int(rng.integers(64)))
                if index % 2
                else int(rng.integers(0, 2**63))
            )
            for k in range(4):
                got = [(match.key, match.distance) for match in store.query(query, k=k)]
                assert sorted(got, key=lambda p: (p[1], type(p[0]).__name__, p[0])) == brute_force(
                    documents, query, k
                )
        # The fingerprinter's settings came along: the same text finds its document.
        found = store.query(text="the quick brown fox jumps over the lazy dog " * 3, k=0)
        assert [match.key for match in found] == ["text-0"]


def test_migrate_replaces_nothing_and_refuses_what_is_not_format_1(old_store: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("mine")
    with pytest.raises(simstore.InvalidValueError, match="exists already"):
        simstore.migrate(old_store, taken)
    assert taken.read_text() == "mine"

    current = tmp_path / "current.simstore"
    with simstore.open(current, "n") as store:
        store.add("a", fingerprint=1)
    with pytest.raises(simstore.FormatVersionError, match="needs no migration"):
        simstore.migrate(current, tmp_path / "out.simstore")
    assert not (tmp_path / "out.simstore").exists()

    not_a_store = tmp_path / "notes.txt"
    not_a_store.write_text("hello" * 1000)
    with pytest.raises(simstore.NotAStoreError):
        simstore.migrate(not_a_store, tmp_path / "out2.simstore")
    assert not (tmp_path / "out2.simstore").exists()
    with pytest.raises(simstore.StoreNotFoundError):
        simstore.migrate(tmp_path / "missing.simstore", tmp_path / "out3.simstore")


def test_the_migrate_verb(old_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = tmp_path / "new.simstore"
    assert main(["migrate", str(old_store), str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == len(expected_documents())
    assert main(["migrate", str(old_store), str(new)]) == 1
    assert "exists already" in capsys.readouterr().err


def test_compact_joins_runs_and_its_copy_holds_only_pages_in_use(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    rng = np.random.default_rng(11)
    fingerprints = rng.integers(0, 2**64 - 1, size=20_000, dtype=np.uint64)
    with simstore.open(path, "n", merge_threshold=1_000) as store:
        for first in range(0, 20_000, 2_000):
            store.add_many(range(first, first + 2_000), fingerprints[first : first + 2_000])
        store.remove_many(range(0, 20_000, 2))
        queries = [int(fingerprints[i]) ^ 1 for i in range(0, 400)]
        before = [store.query(query) for query in queries]
        store.compact(copy_to=tmp_path / "copy.simstore")
        assert len(store._engine.tableset.catalog.runs) == 1
        assert [store.query(query) for query in queries] == before
        used = store.stats().bytes_used
    copy = tmp_path / "copy.simstore"
    assert copy.stat().st_size <= used
    assert copy.stat().st_size < path.stat().st_size
    with simstore.open(copy, "r") as copied:
        assert copied.check() == []
        assert len(copied) == 10_000
        assert [copied.query(query) for query in queries] == before


def test_compact_refuses_to_replace_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.simstore"
    with simstore.open(path, "n") as store:
        store.add("a", fingerprint=5)
    taken = tmp_path / "taken"
    taken.write_text("mine")
    with simstore.open(path, "w") as store, pytest.raises(simstore.InvalidValueError):
        store.compact(copy_to=taken)
    assert main(["compact", str(path), "--copy-to", str(taken)]) == 1
    assert "exists already" in capsys.readouterr().err
    assert taken.read_text() == "mine"
    assert main(["compact", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries_moved"] >= 0


def test_the_maintenance_verbs_name_a_missing_store_in_the_command_line_s_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.simstore"
    assert main(["compact", str(missing)]) == 1
    error = capsys.readouterr().err
    assert "no simstore store at" in error
    assert "mode" not in error
    assert main(["migrate", str(missing), str(tmp_path / "new.simstore")]) == 1
    assert "no store at" in capsys.readouterr().err
    assert not missing.exists()
