"""A ShortTextWarning names the caller's line, not a line inside simstore
(issue 34): every public path that fingerprints text warns at the line that
called it, however deep inside simstore the short text is found."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import simstore

SHORT = "tiny text"


def _warned_at(call: Callable[[], Any]) -> list[tuple[str, int]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    found = [
        (Path(w.filename).name, w.lineno) for w in caught if issubclass(w.category, simstore.ShortTextWarning)
    ]
    assert found, "no ShortTextWarning"
    return found


def _here() -> tuple[str, int]:
    """This file and the line of the caller of _warned_at (the lambda's line)."""
    import inspect

    frame = inspect.currentframe()
    assert frame is not None
    assert frame.f_back is not None
    return Path(__file__).name, frame.f_back.f_lineno


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with simstore.open(tmp_path / "s.simstore", "c") as opened:
        yield opened


def test_the_fingerprinter_warns_at_the_callers_line() -> None:
    fingerprinter = simstore.Fingerprinter()
    texts = [SHORT, "another short one"]
    assert _warned_at(lambda: fingerprinter.fingerprint(SHORT)) == [_here()]
    assert _warned_at(lambda: fingerprinter.fingerprint_many(texts)) == [_here()]
    assert _warned_at(lambda: fingerprinter.fingerprints_and_sketches(texts)) == [_here()]
    assert _warned_at(lambda: fingerprinter.fingerprint_and_sketch(SHORT)) == [_here()]
    assert _warned_at(lambda: simstore.fingerprint(SHORT)) == [_here()]


def test_a_store_warns_at_the_callers_line(store: Any) -> None:
    assert _warned_at(lambda: store.add("a", SHORT)) == [_here()]
    assert _warned_at(lambda: store.add_many(["b", "c"], texts=[SHORT, "short too"])) == [_here()]
    assert _warned_at(lambda: store.query(text=SHORT)) == [_here()]
    assert _warned_at(lambda: store.add_if_new("d", SHORT)) == [_here()]
    assert _warned_at(lambda: store.query_many(texts=[SHORT])) == [_here()]


def test_dedup_table_warns_at_the_callers_line() -> None:
    pytest.importorskip("pyarrow")
    rows = [{"id": 1, "text": SHORT}, {"id": 2, "text": "a b"}]
    assert _warned_at(lambda: simstore.dedup_table(rows, id_column="id")) == [_here()]
