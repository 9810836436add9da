"""Tests of text normalisation and tokenisation (simstore.fingerprinting.text)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.segmenter import jieba_idf, segmenter_info
from simstore.fingerprinting.text import (
    _control_table,
    _controls_stripped,
    _cut_by_token_pattern,
    _token_pattern,
    as_text,
    normalise,
    segment_han,
    token_text,
    tokenise,
)


def _full_width(text: str) -> str:
    """Map printable ASCII to its full-width form (U+FF01..U+FF5E)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


# -- normalise ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Hello World", "hello world"),
        (_full_width("HELLO") + "\u3000" + _full_width("world123!"), "hello world123!"),
        ("Straße", "strasse"),  # case folding, not lower()
        ("ﬁne", "fine"),  # NFKC ligature
        ("  a \t\n b\r\n\x0bc  ", "a b c"),  # white space collapses
        ("a\u200bb\u00adc\ufeffd\x00e", "abcde"),  # Cf/Cc removed
        ("\u00e9", "\u00e9"),
        ("e\u0301", "\u00e9"),  # composed
        ("中文　文本", "中文 文本"),
        ("", ""),
        (" \t\x00\u200b ", ""),
    ],
)
def test_normalise_examples(raw: str, expected: str) -> None:
    assert normalise(raw) == expected


@given(st.text())
def test_normalise_is_idempotent(text: str) -> None:
    once = normalise(text)
    assert normalise(once) == once


@given(st.text())
def test_normalise_output_has_no_controls_or_extra_space(text: str) -> None:
    out = normalise(text)
    assert out == out.strip()
    assert "  " not in out
    assert all(unicodedata.category(c) not in ("Cc", "Cf") for c in out)


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)))
def test_normalise_ignores_case_and_width(text: str) -> None:
    expected = normalise(text)
    assert normalise(text.upper()) == expected
    assert normalise(_full_width(text)) == expected


# -- tokenise -----------------------------------------------------------------


def test_tokenise_english_drops_punctuation() -> None:
    assert tokenise("hello, world! it's 2024_x.") == ["hello", "world", "it", "s", "2024_x"]


def test_tokenise_chinese_uses_jieba() -> None:
    assert tokenise("我爱北京天安门") == ["我", "爱", "北京", "天安门"]


def test_tokenise_mixed_keeps_document_order() -> None:
    tokens = tokenise(normalise("我爱北京天安门, Hello World 再见。GDP增长"))
    assert tokens == ["我", "爱", "北京", "天安门", "hello", "world", "再见", "gdp", "增长"]


def test_tokenise_emoji_are_tokens_and_modifiers_dropped() -> None:
    assert tokenise("ok 😀😀 👍🏽 ©") == ["ok", "😀", "😀", "👍", "©"]


def test_tokenise_keeps_combining_marks_inside_words() -> None:
    # Python's \w alone would cut this Devanagari word at each vowel sign.
    assert tokenise("हिन्दी भाषा") == ["हिन्दी", "भाषा"]


def test_tokenise_rare_han_outside_jieba_range() -> None:
    # Extension B characters are Han for us; jieba yields them one by one.
    assert tokenise("\U00020000\U00020001") == ["\U00020000", "\U00020001"]


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_ascii_fast_path_cuts_like_the_general_pattern(text: str) -> None:
    normalised = normalise(text)
    assert tokenise(normalised) == _token_pattern().findall(normalised)


# Characters of every kind the cut treats apart: words in several scripts,
# punctuation, So symbols (box drawing, emoji, the copyright sign), combining
# marks, Han, and the separators between them.
_MIXED_ALPHABET = st.sampled_from(
    list("ab Z_09 .,;-'")
    + list("éßøœ \u2019\u201c\u201d\u2014\u2026«» ΣσЖж ١٢")
    + list("─│┌©®°☺")
    + ["\U0001f600"]
    + ["\u0301", "\u0308", "\u093f"]
    + list("中文字")
) | st.characters(min_codepoint=0x80, max_codepoint=0x2FFF)


@given(st.text(alphabet=_MIXED_ALPHABET, max_size=60))
def test_non_ascii_fast_paths_cut_like_the_general_pattern(text: str) -> None:
    # Text without Han or marks is cut by a plain word pattern (with its So
    # symbols added): the same tokens as the whole token pattern.
    normalised = normalise(text)
    assert tokenise(normalised) == _cut_by_token_pattern(normalised, True)


_WORD_RUN = re.compile(rb"[0-9A-Za-z_\x80-\xff]+")


def _word_runs(text: str) -> list[str]:
    return [run.decode("utf-8") for run in _WORD_RUN.findall(text.encode("utf-8"))]


# Everything token_text replaces or keeps: controls of both kinds (ASCII and
# not), separators and white space past ASCII, So symbols next to words and
# to each other, word characters, and the Han and marks that send a text to
# the token pattern; and any character at all.
_TOKEN_TEXT_ALPHABET = (
    _MIXED_ALPHABET
    | st.sampled_from(["\x00", "\x01", "\x7f", "\x1c", "\x85", "\u200b", "\u200d", "\u00ad", "\ufeff"])
    | st.sampled_from(["\u00a0", "\u2028", "\u3000", "\uff21", "\ufb01", "\u2160", "\u00b2", "_", "\u2e80"])
    | st.sampled_from(["\u3007", "\u3400", "\u3006", "\uf900", "\U00020000"])
    | st.characters(categories=["Cc", "Cf", "Zs", "Zl", "So", "Sm", "Po", "Pd", "Nd", "No", "Lo", "Lm", "Mn"])
    | st.characters()
)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=_TOKEN_TEXT_ALPHABET, max_size=80))
def test_token_text_word_runs_are_the_tokens(text: str) -> None:
    # What the token hashing reads: the word runs of token_text's UTF-8, for
    # text cut by the replacement path and by the token pattern alike.
    assert _word_runs(token_text(text)) == tokenise(normalise(text))


def test_token_text_replaces_only_what_is_neither_ascii_nor_a_word() -> None:
    # Plain text is not cut: separators become spaces, controls go (joining
    # the words around them), a symbol stands apart, word characters stay.
    plain = "\u201cCaf\u00e9\u201d \u2014 na\u00adive\u00a9x"
    assert token_text(plain) == " café    naive © x"
    assert _word_runs(token_text(plain)) == ["café", "naive", "©", "x"]
    # Han runs are replaced by their words, spaced apart from what touches them.
    assert _word_runs(token_text("Caf\u00e9\u3002\u6211\u4eec\u5728\u5317\u4eacabc")) == [
        "café", "我们", "在", "北京", "abc"
    ]  # fmt: skip
    # Han from the first of its ranges on, in a text with nothing later.
    for edge in ("a\u3007b\u3400c\u2019", "x\uf900y", "\u3006\u3007z"):
        assert _word_runs(token_text(edge)) == tokenise(normalise(edge))
    # A combining mark sends the text to the token pattern: tokens joined by spaces.
    assert (
        token_text("\u0939\u093f\u0928\u094d\u0926\u0940 Text!")
        == "\u0939\u093f\u0928\u094d\u0926\u0940 text"
    )


def test_han_past_the_first_look_still_goes_to_the_segmenter() -> None:
    # The first 256 characters are searched for Han; a text whose Han comes
    # later is still seen to have it (by its distinct characters) and its
    # Han run is cut into words, not kept whole as a plain word would be.
    for head in ("word " * 100, "naïve ─ text" + " x" * 200):
        text = head + "我们是中国人"
        tokens = tokenise(text)
        assert tokens == _cut_by_token_pattern(text, True)
        assert "我们是中国人" not in tokens
        assert "中国" in tokens


def test_tokenise_nothing() -> None:
    assert tokenise("") == []
    assert tokenise("... !!! ,,,") == []


def test_segment_han_one_list_per_run() -> None:
    assert segment_han(["我爱北京", "天安门"]) == [["我", "爱", "北京"], ["天安门"]]


def test_hmm_switch_changes_unknown_word_handling() -> None:
    # "杭研" is not in jieba's dictionary; the HMM joins it, plain DAG does not.
    text = "他来到了网易杭研大厦"
    assert "杭研" in tokenise(text, hmm=True)
    assert "杭研" not in tokenise(text, hmm=False)


@given(
    st.lists(
        st.sampled_from(["我们", "北京", "天气", "hello", "World", "123", "😀", "\uff0c", "!"]),
        max_size=30,
    )
)
def test_tokenise_separated_runs_equal_joined_segmentation(parts: list[str]) -> None:
    text = " ".join(parts)
    tokens = tokenise(normalise(text))
    # Tokenising each space-separated part alone gives the same tokens.
    assert tokens == [t for p in parts for t in tokenise(normalise(p))]


# -- as_text ------------------------------------------------------------------


def test_as_text_accepts_str_and_utf8_bytes() -> None:
    assert as_text("abc") == "abc"
    assert as_text("中文".encode()) == "中文"
    assert as_text(bytearray(b"x")) == "x"


@pytest.mark.parametrize("bad", [None, 1, 1.5, ["a"], object()])
def test_as_text_rejects_non_text(bad: object) -> None:
    with pytest.raises(InvalidTypeError, match="text must be str"):
        as_text(bad)


def test_as_text_rejects_invalid_utf8() -> None:
    with pytest.raises(InvalidValueError, match="not valid UTF-8"):
        as_text(b"\xff\xfe")


def test_as_text_rejects_lone_surrogate() -> None:
    with pytest.raises(InvalidValueError, match="surrogate at index 1"):
        as_text("a\ud800b")


# -- segmenter info and lazy jieba ----------------------------------------------


def test_segmenter_info_names_versions_and_checksums() -> None:
    info = segmenter_info()
    assert set(info) == {"jieba", "jieba_dict_sha256", "jieba_idf_sha256", "unicode"}
    assert info["unicode"] == unicodedata.unidata_version
    assert len(info["jieba_dict_sha256"]) == 64
    int(info["jieba_dict_sha256"], 16)


def test_import_and_segmenter_info_do_not_load_jieba() -> None:
    code = (
        "import sys\n"
        "from simstore.fingerprinting.segmenter import segmenter_info\n"
        "from simstore.fingerprinting.fingerprinter import fingerprint\n"
        "segmenter_info()\n"
        "fingerprint('plain english words only, no chinese at all here')\n"
        "print('jieba' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_jieba_is_silent_on_stderr() -> None:
    code = "from simstore.fingerprinting import text as t\nprint(t.tokenise('我爱北京天安门'))\n"
    environment = {**os.environ, "SIMSTORE_SEGMENTER": "jieba"}  # jieba's own start-up, not rjieba's
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment
    )
    assert "北京" in out.stdout
    assert out.stderr == ""


def test_jieba_idf_table() -> None:
    table, median = jieba_idf()
    assert len(table) > 100_000
    assert min(table.values()) <= median <= max(table.values())


_CONTROLS_AND_TEXT = st.text(
    st.sampled_from(["a", "中", "é", " ", "\t", "\n", "\x00", "\x85", "\u200b", "\u200d", "\u00ad", "\ufeff"])
    | st.sampled_from(["\x08", "\x0b", "\x1c", "\x1f", "\x7f", "\r", "\u2028"])
    | st.characters(categories=["Cc", "Cf", "Zs", "Lo", "Mn"]),
    max_size=40,
)


@given(_CONTROLS_AND_TEXT)
def test_control_stripping_equals_the_translate_table(text: str) -> None:
    # Steps 3 and 4 as the docstring states them (white-space controls to a
    # space, other controls out, then white space collapsed).
    assert _controls_stripped(text) == " ".join(text.translate(_control_table()).split())


def test_segment_han_remembers_runs_without_changing_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from simstore.fingerprinting import segmenter
    from simstore.fingerprinting import text as text_module

    runs = ["我们在北京", "天安门广场", "我们在北京", "看到了很多人", "结巴中文分词"]
    jieba_alone = [segmenter._jieba_tokenizer().lcut(run) for run in runs]
    monkeypatch.setattr(text_module, "_SEGMENT_CACHE_RUNS", 3)  # refills as it goes
    text_module._segment_cache(True).clear()
    first = segment_han(runs)
    assert first == jieba_alone
    first[0].append("changed")  # the caller's lists are its own
    assert segment_han(runs) == jieba_alone
    assert segment_han(runs[::-1]) == jieba_alone[::-1]
    assert len(text_module._segment_cache(True)) <= 5


def test_loading_jieba_is_quiet_but_shows_its_errors(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """simstore silenced jieba's logger for good (level 60: its errors too, and
    for every other jieba user in the process); now only the start-up chatter
    ("Building prefix dict ...") is left out, and the level is put back."""
    import logging

    import jieba

    from simstore.fingerprinting import segmenter

    logger = logging.getLogger("jieba")
    monkeypatch.setattr(logger, "level", logging.DEBUG)  # jieba's own default
    real = jieba.Tokenizer.initialize

    def initialize_failing_to_cache(self: object, *args: object) -> None:
        real(self, *args)
        jieba.default_logger.error("Dump cache file failed.")  # as jieba reports an unwritable cache

    monkeypatch.setattr(jieba.Tokenizer, "initialize", initialize_failing_to_cache)
    caplog.clear()
    segmenter._jieba_tokenizer.__wrapped__()
    # What jieba's logger let through (to its stderr handler, and up to pytest's).
    logged = " ".join(record.getMessage() for record in caplog.records if record.name == "jieba")
    assert "Building prefix dict" not in logged
    assert "Loading model" not in logged
    assert "Dump cache file failed." in logged
    assert logger.level == logging.DEBUG
