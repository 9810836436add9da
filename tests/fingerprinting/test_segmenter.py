"""Tests of the choice of Chinese segmenter (simstore.fingerprinting.segmenter):
rjieba cuts only when asked, gives jieba's words, and a store records it."""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.errors import InvalidValueError
from simstore.fingerprinting import segmenter, text

CORPORA = Path(__file__).resolve().parents[2] / "benchmarks" / "corpora"
HAS_RJIEBA = importlib.util.find_spec("rjieba") is not None
needs_rjieba = pytest.mark.skipif(
    not HAS_RJIEBA or importlib.metadata.version("rjieba") not in segmenter.RJIEBA_CHECKED,
    reason="rjieba (the fast-chinese extra) at a checked release is not installed",
)


@pytest.fixture
def fresh_choice() -> Iterator[None]:
    """The segmenter chosen again from the environment, and forgotten after."""

    def forget() -> None:
        segmenter.segmenter_in_use.cache_clear()
        segmenter.cut_function.cache_clear()
        text._segment_cache(True).clear()
        text._segment_cache(False).clear()

    forget()
    yield
    forget()


def test_unknown_segmenter_is_refused(monkeypatch: pytest.MonkeyPatch, fresh_choice: None) -> None:
    monkeypatch.setenv("SIMSTORE_SEGMENTER", "rjieba-please")
    with pytest.raises(InvalidValueError, match="SIMSTORE_SEGMENTER must be one of jieba, rjieba"):
        segmenter.segmenter_in_use()


def test_jieba_by_default(monkeypatch: pytest.MonkeyPatch, fresh_choice: None) -> None:
    monkeypatch.delenv("SIMSTORE_SEGMENTER", raising=False)
    assert segmenter.segmenter_in_use() == f"jieba {importlib.metadata.version('jieba')}"
    assert "segmenter" not in segmenter.segmenter_info()  # as stores made before rjieba recorded


@needs_rjieba
def test_rjieba_when_asked_and_recorded(monkeypatch: pytest.MonkeyPatch, fresh_choice: None) -> None:
    monkeypatch.setenv("SIMSTORE_SEGMENTER", "rjieba")
    in_use = f"rjieba {importlib.metadata.version('rjieba')}"
    assert segmenter.segmenter_in_use() == in_use
    assert segmenter.segmenter_info()["segmenter"] == in_use


@needs_rjieba
def test_an_unchecked_rjieba_release_is_refused(monkeypatch: pytest.MonkeyPatch, fresh_choice: None) -> None:
    monkeypatch.setenv("SIMSTORE_SEGMENTER", "rjieba")
    monkeypatch.setattr(segmenter, "RJIEBA_CHECKED", frozenset({"0.0.1"}))
    with pytest.raises(InvalidValueError, match="was not checked against jieba's words"):
        segmenter.segmenter_in_use()


@needs_rjieba
def test_rjieba_is_refused_beside_another_jieba_dictionary(
    monkeypatch: pytest.MonkeyPatch, fresh_choice: None
) -> None:
    # Its words were checked against jieba 0.42.1's dictionary; another
    # jieba's words may differ, and the store records that dictionary.
    monkeypatch.setenv("SIMSTORE_SEGMENTER", "rjieba")
    monkeypatch.setattr(segmenter, "JIEBA_DICT_SHA256", "0" * 64)
    with pytest.raises(InvalidValueError, match=r"dictionary is not jieba 0\.42\.1's"):
        segmenter.segmenter_in_use()


def test_rjieba_asked_for_but_missing_is_refused(monkeypatch: pytest.MonkeyPatch, fresh_choice: None) -> None:
    monkeypatch.setenv("SIMSTORE_SEGMENTER", "rjieba")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(InvalidValueError, match=r"pip install 'simstore\[fast-chinese\]'"):
        segmenter.segmenter_in_use()


@needs_rjieba
def test_a_store_made_with_rjieba_warns_a_process_cutting_with_jieba(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_choice: None
) -> None:
    import simstore

    path = tmp_path / "rjieba.simstore"
    monkeypatch.setenv("SIMSTORE_SEGMENTER", "rjieba")
    with simstore.open(path, "c") as store:
        store.add("a", text="我们在北京天安门广场上看到了很多人")
    monkeypatch.setenv("SIMSTORE_SEGMENTER", "jieba")
    segmenter.segmenter_in_use.cache_clear()
    segmenter.cut_function.cache_clear()
    with simstore.open(path, "r") as store:
        with warnings.catch_warnings():
            # Nothing cut here: the stored sketches and their geometry only.
            warnings.simplefilter("error", simstore.SegmenterChangedWarning)
            store.stats()
            assert store.sketch is not None
            list(store.near_duplicate_pairs())
        with pytest.warns(simstore.SegmenterChangedWarning) as warned:
            store.query(text="我们在北京天安门广场上看到了很多人")
    message = str(warned[0].message)
    assert "segmenter: stored 'rjieba " in message
    assert "now 'jieba'" in message
    assert "SIMSTORE_SEGMENTER=rjieba cuts as it was made" in message


# Strings of dictionary words, of random ideographs (the HMM's work), of
# ideographs jieba does not segment (the extensions, the compatibility block,
# U+9FD6 on) and of spaces, as segment_han joins runs.
_WORDS = ["我们", "北京", "天安门", "广场", "结巴", "中文", "分词", "自然语言", "处理", "的", "了", "是"]
_IDEOGRAPHS = "".join(
    chr(code)
    for low, high in (
        (0x3400, 0x4DBF),
        (0x9FD0, 0x9FFF),
        (0xF900, 0xFAFF),
        (0x20000, 0x2A6DF),
        (0x3007, 0x3007),
    )
    for code in range(low, high + 1)
)
_IDEOGRAPH = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)
# A unit repeated: where jieba's HMM meets ties (子子子子子, 常大常大常大).
_REPEATED = st.tuples(st.text(_IDEOGRAPH, min_size=1, max_size=4), st.integers(2, 6)).map(
    lambda unit: unit[0] * unit[1]
)
_HAN_TEXT = st.lists(
    st.sampled_from(_WORDS) | _IDEOGRAPH | st.sampled_from(_IDEOGRAPHS) | _REPEATED | st.just(" "),
    min_size=1,
    max_size=40,
).map("".join)


@needs_rjieba
@settings(max_examples=500, deadline=None)
@given(_HAN_TEXT, st.booleans())
def test_rjieba_cuts_as_jieba(han: str, hmm: bool) -> None:
    assert segmenter._rjieba_cut(han, hmm) == segmenter._jieba_tokenizer().lcut(han, HMM=hmm)


@needs_rjieba
def test_rjieba_cuts_rare_ideographs_as_jieba() -> None:
    # rjieba alone segments these as one block; jieba yields them one by one.
    for han in ("\U00020000\U00020001", "\u3400\u3401我们", "北京\u9fd6\u9fd7天安门", "\uf900\uf901"):
        assert segmenter._rjieba_cut(han, True) == segmenter._jieba_tokenizer().lcut(han, HMM=True)


@needs_rjieba
def test_fingerprints_do_not_depend_on_the_segmenter() -> None:
    # The shipped Chinese corpora, fingerprinted and sketched in a process
    # that cuts with jieba and in one that cuts with rjieba: the same.
    texts = []
    for name in ("zh_long", "zh_short"):
        with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
            texts += [json.loads(line)["text"] for line in handle][:150]
    code = (
        "import json, sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from simstore import Fingerprinter\n"
        "from simstore.fingerprinting.segmenter import segmenter_in_use\n"
        "texts = json.load(sys.stdin)\n"
        "values, rows = Fingerprinter().fingerprints_and_sketches(texts)\n"
        "print(json.dumps([segmenter_in_use(), values.tolist(), rows.tobytes().hex()]))\n"
    )
    answers = {}
    for choice in ("jieba", "rjieba"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "SIMSTORE_SEGMENTER": choice},
        )
        answers[choice] = json.loads(out.stdout)
    assert answers["jieba"][0].startswith("jieba ")
    assert answers["rjieba"][0].startswith("rjieba ")
    assert answers["jieba"][1:] == answers["rjieba"][1:]
