"""``export`` then ``import`` keeps the store's settings: the export's first
line names k, the fingerprinter (its sketch included) and min_similarity;
``import`` makes a new store with them (``-k`` may change k, which the
fingerprints do not depend on), and refuses an existing store whose
settings differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import simstore
from simstore.cli import main
from simstore.layout.presets import verification_threshold

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"


def _texts() -> dict[str, str]:
    with CORPUS.open(encoding="utf-8") as source:
        return {record["id"]: record["text"] for record in map(json.loads, source)}


@pytest.fixture
def exported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """An export of a k=3 store with 1-3-gram fingerprints, 64-byte sketches and min_similarity 0.5."""
    fingerprinter = simstore.Fingerprinter(ngrams=(1, 3), sketch=simstore.Sketch(bins=128, bits=4))
    with simstore.open(
        tmp_path / "fx.simstore", k=3, fingerprinter=fingerprinter, min_similarity=0.5
    ) as store:
        texts = _texts()
        store.add_many(list(texts), texts=list(texts.values()))
    output = tmp_path / "fx.jsonl"
    assert main(["export", str(tmp_path / "fx.simstore"), "-o", str(output), "-q"]) == 0
    capsys.readouterr()
    return output


def test_round_trip_keeps_the_settings(
    tmp_path: Path, exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The imported store was k=5 with the default fingerprinter: text queries missed."""
    copy = tmp_path / "fy.simstore"
    assert main(["import", str(copy), str(exported)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith("imported 348 documents")
    with simstore.open(tmp_path / "fx.simstore", "r") as original, simstore.open(copy, "r") as imported:
        assert imported.k == 3
        assert imported.fingerprinter == original.fingerprinter
        assert imported.sketch == simstore.Sketch(bins=128, bits=4)
        # The threshold as stored (not lowered again as a new store asked for it would be).
        assert original.min_similarity == verification_threshold(0.5, 128)
        assert imported.min_similarity == original.min_similarity
        assert list(imported.items()) == list(original.items())
        for key, text in list(_texts().items())[:20]:
            assert imported.query(text=text) == original.query(text=text)
            assert key in {match.key for match in imported.query(text=text)}


def test_k_overrides_the_exported_k(
    tmp_path: Path, exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "k4.simstore"
    assert main(["import", str(copy), str(exported), "-k", "4", "-q"]) == 0
    with simstore.open(copy, "r") as imported:
        assert imported.k == 4
        assert imported.fingerprinter.ngrams == (1, 3)


def test_existing_store_with_other_settings_is_refused(
    tmp_path: Path, exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "default.simstore"
    with simstore.open(other, k=3) as store:
        store.add("x", fingerprint=1)
    assert main(["import", str(other), str(exported)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"simstore: error: {other} has other settings than the export {exported} (")
    assert "fingerprinter.ngrams: [1, 2] in the store, [1, 3] in the export" in err
    assert err.rstrip().endswith("import into a new store")
    with simstore.open(other, "r") as store:
        assert list(store.keys()) == ["x"]


def test_existing_store_with_another_k(
    tmp_path: Path, exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only k differs: refused unless -k names the store's k (fingerprints do not depend on k)."""
    target = tmp_path / "k5.simstore"
    assert main(["import", str(target), str(exported), "-k", "5", "-q"]) == 0
    capsys.readouterr()
    assert main(["import", str(target), str(exported)]) == 1
    err = capsys.readouterr().err
    assert "k: 5 in the store, 3 in the export" in err
    assert "or pass -k 5 to add the fingerprints to this k=5 store" in err
    assert main(["import", str(target), str(exported), "-k", "5", "-q"]) == 0


def test_existing_store_with_the_same_settings(
    tmp_path: Path, exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(tmp_path / "fx.simstore"), str(exported), "-q"]) == 0
    assert "the store holds 348" in capsys.readouterr().out


def test_export_without_settings_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An export of an older simstore (no settings line) makes a default store, and says so."""
    old = tmp_path / "old.jsonl"
    old.write_text('{"key": "a", "fingerprint": "ff"}\n', encoding="utf-8")
    assert main(["import", str(tmp_path / "new.simstore"), str(old), "-q"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"simstore: warning: {old} has no settings line")
    assert "gets k=5 and the default fingerprinter" in err


def test_export_without_settings_and_other_sketches(
    tmp_path: Path, exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sketches a new default store cannot keep: refused before the store is made (it was
    refused after, leaving an empty store behind)."""
    old = tmp_path / "old.jsonl"
    old.write_text(
        "".join(exported.read_text(encoding="utf-8").splitlines(keepends=True)[1:]), encoding="utf-8"
    )
    target = tmp_path / "new.simstore"
    assert main(["import", str(target), str(old), "-q"]) == 1
    err = capsys.readouterr().err
    assert "simstore: error: the lines carry sketches of geometry 128x4, but a new store made from" in err
    assert not target.exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"simstore_export": 2, "k": 3}', "written by a newer simstore"),
        ('{"simstore_export": 1, "k": "3", "fingerprinter": {}}', "bad settings line: k must be an integer"),
        (
            '{"simstore_export": 1, "k": 3, "fingerprinter": {"ngrams": [1]}}',
            "bad settings line: fingerprint",
        ),
    ],
)
def test_bad_settings_line_fails_even_when_skipping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    source = tmp_path / "e.jsonl"
    source.write_text(line + '\n{"key": "a", "fingerprint": "ff"}\n', encoding="utf-8")
    target = tmp_path / "s.simstore"
    assert main(["import", str(target), str(source), "--on-error", "skip"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"simstore: error: {source}:1: ")
    assert message in err
    assert not target.exists()


def test_settings_line_after_documents(
    tmp_path: Path, exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = exported.read_text(encoding="utf-8").splitlines(keepends=True)
    moved = tmp_path / "moved.jsonl"
    moved.write_text("".join([lines[1], lines[0], *lines[2:]]), encoding="utf-8")
    assert main(["import", str(tmp_path / "m.simstore"), str(moved)]) == 1
    assert f"{moved}:2: a settings line belongs on the first line" in capsys.readouterr().err


@pytest.mark.parametrize("bands", [False, 3])
def test_import_keeps_the_exported_band_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bands: bool | int
) -> None:
    """A new store made by import keeps the exported store's band table (or
    none), as `add --no-bands` makes a store without one."""
    texts = list(_texts().items())[:40]
    source = tmp_path / "source.simstore"
    with simstore.open(source, bands=bands) as store:
        store.add_many([key for key, _ in texts], texts=[text for _, text in texts])
    exported = tmp_path / "source.jsonl"
    assert main(["export", str(source), "-o", str(exported), "-q"]) == 0
    assert main(["import", str(tmp_path / "copy.simstore"), str(exported)]) == 0
    with simstore.open(tmp_path / "copy.simstore", "r") as copy:
        assert copy.bands == (None if bands is False else bands)
    lines = tmp_path / "lines.jsonl"
    lines.write_text("".join(json.dumps({"id": key, "text": text}) + "\n" for key, text in texts))
    assert main(["add", str(tmp_path / "added.simstore"), str(lines), "--no-bands"]) == 0
    assert main(["add", str(tmp_path / "default.simstore"), str(lines)]) == 0
    capsys.readouterr()
    with simstore.open(tmp_path / "added.simstore", "r") as added:
        assert added.bands is None
    with simstore.open(tmp_path / "default.simstore", "r") as default:
        assert default.bands == 8
