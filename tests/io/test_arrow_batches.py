"""simstore.io.arrow_batches: per-batch functions equal the store's own answers."""

from __future__ import annotations

import os

import numpy as np
import pytest

import simstore
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.io.arrow_batches import MATCH_COLUMNS, add_batch, fingerprint_batch, query_batch, sketch_array

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

LONG = (
    "the quick brown fox jumps over the lazy dog near the river bank while the farmer watches from "
    "his porch and the children play in the tall grass by the old mill under a warm summer sky"
)
TEXTS = [
    LONG,
    LONG.replace("summer", "autumn"),
    "an entirely different sentence about databases and their indexes",
    LONG,
]

pytestmark = pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")


def plain(column) -> list:
    return column.to_pylist() if hasattr(column, "to_pylist") else list(column)


def as_kind(kind: str, columns: dict):
    table = pa.table(columns)
    if kind == "batch":
        return table.to_batches()[0]
    if kind == "pandas":
        return table.to_pandas()
    return table


@pytest.mark.parametrize("kind", ["table", "batch", "pandas"])
def test_fingerprints_and_sketches_are_the_fingerprinters(kind: str) -> None:
    fingerprinter = simstore.Fingerprinter()
    want, want_sketches = fingerprinter.fingerprints_and_sketches(TEXTS, processes=1)
    out = fingerprint_batch(as_kind(kind, {"text": TEXTS}), sketches=True)
    assert type(out) is type(as_kind(kind, {"text": TEXTS}))
    assert np.asarray(out["fingerprint"]).astype(np.uint64).tolist() == want.tolist()
    sketches = out["sketch"] if kind != "pandas" else out["sketch"].tolist()
    assert sketch_array(sketches).tolist() == np.asarray(want_sketches).tolist()
    plain = fingerprint_batch(as_kind(kind, {"text": TEXTS}))
    assert list(plain.columns if kind == "pandas" else plain.column_names) == ["text", "fingerprint"]


def test_fingerprint_batch_refuses_bad_input() -> None:
    with pytest.raises(InvalidValueError, match="no column 'body'"):
        fingerprint_batch(pa.table({"text": TEXTS}), "body")
    with pytest.raises(InvalidTypeError, match="strings"):
        fingerprint_batch(pa.table({"text": ["a", None]}))
    with pytest.raises(InvalidValueError, match="already has"):
        fingerprint_batch(pa.table({"text": TEXTS, "fingerprint": [1, 2, 3, 4]}))
    with pytest.raises(InvalidValueError, match="sketch"):
        fingerprint_batch(
            pa.table({"text": TEXTS}), fingerprinter=simstore.Fingerprinter(sketch=None), sketches=True
        )
    with pytest.raises(InvalidTypeError):
        fingerprint_batch({"text": TEXTS})


@pytest.mark.parametrize("kind", ["table", "batch", "pandas"])
def test_add_then_query_equals_the_store(tmp_path, kind: str) -> None:
    path = os.fspath(tmp_path / "shard.simstore")
    stored = fingerprint_batch(as_kind(kind, {"key": ["a", "b", "c"], "text": TEXTS[:3]}), sketches=True)
    summary = add_batch(stored, path, sketch_column="sketch")
    assert (plain(summary["documents"])[0], plain(summary["added"])[0]) == (3, 3)
    queries = fingerprint_batch(
        as_kind(kind, {"text": [TEXTS[3], "nothing like any stored text at all here"]}), sketches=True
    )
    answered = query_batch(queries, path, sketch_column="sketch")
    with simstore.open(path, "r") as store:
        want = store.query_many(texts=[TEXTS[3], "nothing like any stored text at all here"], limit=1)
    got = [answered[name] for name in MATCH_COLUMNS]
    got = [plain(column) for column in got]
    assert got[0][0] == want[0][0].key
    assert got[1][0] == want[0][0].distance
    assert got[2][0] == pytest.approx(want[0][0].similarity)
    assert not want[1]
    assert pd.isna(got[0][1])
    assert pd.isna(got[1][1])


def test_add_batch_from_texts_with_meta_and_query_over_shards(tmp_path) -> None:
    paths = [os.fspath(tmp_path / f"s{n}.simstore") for n in range(2)]
    add_batch(
        pa.table({"key": [1], "text": [TEXTS[0]], "lang": ["en"]}),
        paths[0],
        fingerprint_column=None,
        text_column="text",
        meta_columns=["lang"],
    )
    add_batch(
        pa.table({"key": [2], "text": [TEXTS[2]], "lang": ["en"]}),
        paths[1],
        fingerprint_column=None,
        text_column="text",
    )
    with simstore.open(paths[0], "r") as store:
        assert store[1].meta == {"lang": "en"}
    queries = fingerprint_batch(pa.table({"text": [TEXTS[1], TEXTS[2]]}))
    answered = query_batch(queries, paths)
    assert answered["match_key"].to_pylist() == [1, 2]


def test_add_batch_refuses_an_ambiguous_source_and_read_only_mode(tmp_path) -> None:
    path = os.fspath(tmp_path / "s.simstore")
    with pytest.raises(InvalidValueError, match="exactly one"):
        add_batch(pa.table({"key": [1], "fingerprint": [1]}), path, text_column="text")
    with pytest.raises(InvalidValueError, match="mode"):
        add_batch(pa.table({"key": [1], "fingerprint": [1]}), path, mode="r")
    assert not os.path.exists(path)
