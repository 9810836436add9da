"""Version 2 of the text fingerprint (simstore.fingerprinting.algorithms): the numpy batch path
equals the plain-Python specification for any text, alone or in any batch;
the feature hash is well spread; stores keep the version they were made with."""

# The pieces hold full-width and look-alike characters on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import simstore
from simstore.errors import InvalidValueError
from simstore.fingerprinting.algorithms import ALGORITHM, ALGORITHM_1, batch_fingerprints
from simstore.fingerprinting.fingerprinter import Fingerprinter, ShortTextWarning
from simstore.fingerprinting.hashing import mix64, mix64_array, token_hash
from simstore.fingerprinting.reference import fingerprint_reference

# Characters chosen to reach every branch of normalisation and tokenising:
# ASCII words, punctuation and controls (removed ones join words), Han (jieba),
# full-width forms, combining marks, case folding that grows (ß, ǅ, ﬁ),
# emoji with modifiers and joiners, zero-width and other Cf characters, Thai,
# Devanagari, Han outside jieba's range, and white space of several kinds.
_PIECES = [
    *"abcxyzABCXYZ0189_ ,.!?-'\t\n\r",
    "\x00",
    "\x01",
    "\x1f",
    "\x7f",
    "中",
    "文",
    "北京",
    "天气很好",
    "我们",
    "。",
    "，",
    "\u3000",
    "\uff21\uff42\uff43",  # full-width letters
    "\uff11\uff12",  # full-width digits
    "e\u0301",  # combining acute
    "\u0301",
    "ß",
    "ǅ",
    "ﬁ",
    "İ",
    "😀",
    "👍🏽",
    "👩\u200d💻",
    "\u200b",
    "\u00ad",
    "\ufeff",
    "ไทย",
    "हिन्दी",
    "\u3400",
    "\U00020000",
    "©",
    "€",
    "ℌ",
]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join) | st.text(max_size=30)


def _reference_or_error(text: str, **options: object) -> tuple[int, int] | str:
    try:
        return fingerprint_reference(text, **options)  # type: ignore[arg-type]
    except InvalidValueError as exc:
        return str(exc)


def _batch_one(text: str, **options: object) -> tuple[int, int] | str:
    try:
        values, counts = batch_fingerprints([text], **options)  # type: ignore[arg-type]
    except InvalidValueError as exc:
        return str(exc).removeprefix("text at index 0: ")
    return int(values[0]), int(counts[0])


@settings(max_examples=300, deadline=None)
@given(_TEXT)
@example("")
@example("   \t\n ")
@example("\u200b\u00ad")
@example("!!! ，。")
@example("a\x01b")
@example("😀")
@example("Ａｂｃ ＡＢＣ abc")
def test_batch_of_one_equals_the_specification(text: str) -> None:
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return  # lone surrogates are refused before either path (see the next test)
    assert _batch_one(text) == _reference_or_error(text)


def test_lone_surrogates_are_refused_by_the_fingerprinter() -> None:
    fingerprinter = Fingerprinter()
    with pytest.raises(InvalidValueError, match="surrogate"):
        fingerprinter.fingerprint("a \ud800 b")
    with pytest.raises(InvalidValueError, match=r"index 1: .*surrogate"):
        fingerprinter.fingerprint_many(["fine words", "a \udfff b"])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_TEXT.filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)), max_size=12),
    st.sampled_from([(1, 2), (1,), (2,), (2, 3), (1, 3, 5)]),
    st.sampled_from(["log", "tf", "binary"]),
    st.sampled_from([0, 1, 2**64 - 1]),
    st.booleans(),
)
def test_batch_equals_each_text_alone(
    texts: list[str], ngrams: tuple[int, ...], weighting: str, seed: int, hmm: bool
) -> None:
    """A text's fingerprint does not depend on the batch around it."""
    options = {"ngrams": ngrams, "weighting": weighting, "seed": seed, "hmm": hmm}
    expected = [_reference_or_error(text, **options) for text in texts]
    usable = [text for text, result in zip(texts, expected, strict=True) if not isinstance(result, str)]
    values, counts = batch_fingerprints(usable, **options)  # type: ignore[arg-type]
    assert list(zip(values.tolist(), counts.tolist(), strict=True)) == [
        result for result in expected if not isinstance(result, str)
    ]
    bad = [index for index, result in enumerate(expected) if isinstance(result, str)]
    if bad:
        with pytest.raises(InvalidValueError, match=f"text at index {bad[0] + 7}: "):
            batch_fingerprints(texts, start=7, **options)  # type: ignore[arg-type]


def test_fingerprint_many_equals_fingerprint_for_long_and_many_texts() -> None:
    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "中文", "分词", "😀", "naïve", "x" * 300]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 3000))) for _ in range(300)]
    fingerprinter = Fingerprinter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShortTextWarning)
        assert fingerprinter.fingerprint_many(texts).tolist() == [fingerprinter.fingerprint(t) for t in texts]
    assert fingerprint_reference(texts[0])[0] == fingerprinter.fingerprint(texts[0])


def test_mix64_array_equals_scalar() -> None:
    values = [0, 1, 2**63, 2**64 - 1, 0x0123456789ABCDEF]
    assert mix64_array(np.array(values, dtype=np.uint64)).tolist() == [mix64(v) for v in values]


@pytest.mark.parametrize("delta", [1, 2, 255, 1 << 32])
def test_mix64_outputs_of_nearby_inputs_are_unrelated(delta: int) -> None:
    # Token polynomials of similar words differ by small amounts; their
    # mixed values must differ like independent random ones: Binomial(64,
    # 1/2) bits, mean 32 and SD 4. (MurmurHash3's fmix64 gave SD 3.93 at
    # delta 1, which showed as fingerprints of unrelated texts a few tenths
    # of a bit closer than version 1's.) Standard errors here: 0.013, 0.009.
    inputs = np.random.default_rng(5).integers(0, 2**63, 100_000, dtype=np.int64).astype(np.uint64)
    flipped = mix64_array(inputs) ^ mix64_array(inputs + np.uint64(delta))
    bits = np.unpackbits(flipped.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)
    assert abs(bits.mean() - 32) < 0.06
    assert abs(bits.std() - 4) < 0.04


def test_token_hashes_are_distinct_and_balanced() -> None:
    # 300,000 distinct tokens, many differing in one byte or only in length:
    # no two hashes are equal, and each bit is set about half of the time
    # (a binomial spread of 0.0009 makes 0.5 +- 0.01 a wide margin).
    tokens = [f"w{i}" for i in range(150_000)] + [f"{i:x}{'z' * (i % 7)}" for i in range(150_000)]
    text = " ".join(tokens)
    _, counts = batch_fingerprints([text], ngrams=(1,), weighting="binary")
    assert counts.tolist() == [len(set(tokens))]
    hashes = np.array([token_hash(t.encode()) for t in tokens[:2000]], dtype=np.uint64)
    assert len(set(hashes.tolist())) == 2000
    # Every token of the batch, hashed by the numpy path: recover them through
    # single-token texts, which are each one feature equal to the token's hash.
    single, _ = batch_fingerprints(tokens, ngrams=(1,), weighting="binary")
    assert single[:2000].tolist() == hashes.tolist()
    assert len(np.unique(single)) == len(tokens)
    bits = np.unpackbits(single.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.01)


def test_seed_changes_every_hash() -> None:
    assert token_hash(b"word", 0) != token_hash(b"word", 1)
    assert token_hash(b"ab") != token_hash(b"ba")
    assert token_hash(b"a") != token_hash(b"a\x00")


# -- versions in stores ----------------------------------------------------------------------


def test_new_stores_get_version_2_and_old_ones_keep_version_1(tmp_path: object) -> None:
    text = "It was the best of times, it was the worst of times, it was the age of wisdom"
    old_path, new_path = str(tmp_path) + "/old.simstore", str(tmp_path) + "/new.simstore"  # type: ignore[operator]
    version_1 = Fingerprinter(algorithm=ALGORITHM_1)
    assert version_1.fingerprint(text) != Fingerprinter().fingerprint(text)
    with simstore.open(old_path, "n", k=3, fingerprinter=version_1) as store:
        store.add("doc", text=text)
    with simstore.open(new_path, "n", k=3) as store:
        store.add("doc", text=text)
    with simstore.open(old_path, "w") as store:  # the file decides
        assert store.fingerprinter.algorithm == ALGORITHM_1
        assert store.query(text=text, k=0)[0].key == "doc"
        assert store.add_many(["again"], texts=[text]).tolist() == [version_1.fingerprint(text)]
    with simstore.open(new_path, "r") as store:
        assert store.fingerprinter.algorithm == ALGORITHM
        assert store["doc"].fingerprint == Fingerprinter().fingerprint(text)
    with pytest.raises(simstore.ParameterMismatchError, match="fingerprinter"):
        simstore.open(old_path, "w", fingerprinter=Fingerprinter())


_LONG_TOKENS = st.lists(
    st.sampled_from([*_PIECES, "x" * 23, "abcdefghij" * 5, "\x01" * 9]), min_size=1, max_size=60
).map("".join)


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
@settings(max_examples=100, deadline=None)
@given(
    st.lists(_LONG_TOKENS, min_size=1, max_size=6),
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=1, max_value=9),
    st.sampled_from([(1, 2), (1,), (2, 3), (1, 3, 5)]),
)
def test_a_batch_hashed_in_segments_and_blocks_equals_the_specification(
    texts: list[str], segment_bytes: int, block_features: int, ngrams: tuple[int, ...]
) -> None:
    """Long texts are hashed SEGMENT_BYTES at a time (a token cut by a
    segment's end is joined to its rest), their features made, voted and
    sketched BLOCK_FEATURES at a time: tiny sizes here, so that tokens span
    many segments and equal features many blocks."""
    from simstore.fingerprinting import features, sketch, tokens, vote

    expected = [_reference_or_error(text, ngrams=ngrams) for text in texts]
    usable = [text for text, result in zip(texts, expected, strict=True) if not isinstance(result, str)]
    if not usable:
        return
    whole = Fingerprinter(ngrams=ngrams).fingerprints_and_sketches(usable)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tokens, "SEGMENT_BYTES", segment_bytes)
        patch.setattr(tokens, "SMALL_BATCH_BYTES", 0)  # the numpy path, which has segments
        patch.setattr(features, "BLOCK_FEATURES", block_features)
        patch.setattr(vote, "BLOCK_FEATURES", block_features)
        patch.setattr(sketch, "BLOCK_FEATURES", block_features)
        values, counts = batch_fingerprints(usable, ngrams=ngrams)
        pieces = Fingerprinter(ngrams=ngrams).fingerprints_and_sketches(usable)
    assert list(zip(values.tolist(), counts.tolist(), strict=True)) == [
        result for result in expected if not isinstance(result, str)
    ]
    assert pieces[0].tolist() == whole[0].tolist()
    assert np.array_equal(np.asarray(pieces[1]), np.asarray(whole[1]))


def test_a_huge_document_takes_memory_in_proportion_with_a_small_constant() -> None:
    """A 29 MB document took 1.05 GB (issue 34): per-byte arrays of 8 bytes an
    element, some 35 bytes a byte of text. Now the per-byte work is done a
    segment at a time, and what grows with the text is a few arrays of one
    or two 8-byte hashes a token (benchmarks/suite/bench_huge_document.py)."""
    import tracemalloc

    rng = random.Random(5)
    vocabulary = [f"w{number}" for number in range(50_000)]
    text = " ".join(rng.choice(vocabulary) for _ in range(8_000_000 // 6))
    fingerprinter = Fingerprinter()
    tracemalloc.start()
    try:
        fingerprinter.fingerprints_and_sketches([text])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(text), f"{peak / len(text):.1f} bytes a byte of text"


def test_a_piece_of_a_long_text_ends_where_normalisation_and_tokens_allow() -> None:
    """A long non-ASCII text is normalised and tokenised a piece at a time,
    each ending with a PIECE_ENDS character: one that is a starter and the
    first character of no canonical composition, so that what follows it
    normalises alike with it or without it."""
    import unicodedata

    from simstore.fingerprinting.tokens import PIECE_ENDS

    def normalised(text: str) -> str:
        return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())

    ends = {normalised(end) for end in PIECE_ENDS}
    assert all(len(end) == 1 and unicodedata.combining(end) == 0 for end in ends)
    second: set[str] = set()
    for code in range(0x110000):
        parts = unicodedata.decomposition(chr(code)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            assert chr(int(parts[0], 16)) not in ends
            second.add(chr(int(parts[1], 16)))
    marks = {chr(code) for code in range(0x110000) if unicodedata.combining(chr(code))}
    for end in PIECE_ENDS:
        for after in sorted(second | marks):
            assert normalised(end + after) == normalised(end) + normalised(after)


_WITH_PIECE_ENDS = st.lists(
    st.sampled_from([*_PIECES, " ", "\n", "。", "，", "、", "！", "\u0301", "\u3099", "ｶﾞ"]),
    min_size=1,
    max_size=80,
).map("".join)


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
@settings(max_examples=150, deadline=None)
@given(_WITH_PIECE_ENDS, st.integers(min_value=1, max_value=12))
def test_a_long_text_tokenised_in_pieces_equals_the_specification(text: str, piece_chars: int) -> None:
    from simstore.fingerprinting import tokens

    expected = _reference_or_error(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tokens, "PIECE_CHARS", piece_chars)
        assert _batch_one(text) == expected
