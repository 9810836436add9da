"""Tests of text and vector fingerprints (simstore.fingerprint)."""

# The test texts hold Chinese punctuation and full-width letters on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import itertools
import math
import os
import pickle
import random
import subprocess
import sys
import warnings
from collections import Counter

import msgpack
import numpy as np
import pytest
import xxhash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.algorithms import (
    ALGORITHM,
    ALGORITHM_1,
    ALGORITHM_2,
    FEATURE_HASH,
    FEATURE_HASH_1,
)
from simstore.fingerprinting.features import count_features, features
from simstore.fingerprinting.fingerprinter import (
    SHORT_TEXT_FEATURES,
    Fingerprinter,
    ShortTextWarning,
    fingerprint,
)
from simstore.fingerprinting.hashing import feature_hashes, token_hash
from simstore.fingerprinting.text import normalise, tokenise
from simstore.fingerprinting.vectors import fingerprint_vector, hyperplanes
from simstore.fingerprinting.vote import top_features, vote, weigh

MASK = (1 << 64) - 1


def _distance(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def _quiet(text: str, **options: object) -> int:
    """fingerprint() with ShortTextWarning silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShortTextWarning)
        return fingerprint(text, **options)  # type: ignore[arg-type]


def _vocabulary() -> list[str]:
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)})


VOCABULARY = _vocabulary()


def _document(seed: int, words: int) -> list[str]:
    """A reproducible document with a Zipf-like word distribution."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(VOCABULARY))]
    return rng.choices(VOCABULARY, weights=weights, k=words)


# -- golden fingerprints (computed once with each algorithm's default settings, then frozen) --------

LONG_ENGLISH = " ".join(_document(2024, 20_000))
LONG_CHINESE = "床前明月光，疑是地上霜。举头望明月，低头思故乡。" * 400 + "白日依山尽，黄河入海流。"

# Version 1 (xxh3_64 per feature string); version 2's are GOLDEN_2.
GOLDEN: dict[str, tuple[str, int]] = {
    "english": ("The quick brown fox jumps over the lazy dog near the river bank.", 0x821E86221C73BF67),
    "english_paragraph": (
        "It was the best of times, it was the worst of times, it was the age of wisdom, "
        "it was the age of foolishness, it was the epoch of belief, it was the epoch of "
        "incredulity, it was the season of Light, it was the season of Darkness.",
        0x871291E33EE3C270,
    ),
    "chinese": ("我爱北京天安门，天安门上太阳升。伟大领袖毛主席，指引我们向前进。", 0x4961311CFFFDDB46),
    "chinese_paragraph": (
        "结巴中文分词支持三种分词模式：精确模式，试图将句子最精确地切开，适合文本分析；"
        "全模式，把句子中所有的可以成词的词语都扫描出来，速度非常快，但是不能解决歧义；"
        "搜索引擎模式，在精确模式的基础上，对长词再次切分，提高召回率，适合用于搜索引擎分词。",
        0x65ED9FEACF7398EE,
    ),
    "mixed": (
        "我们在 Debian 上用 apt-get install python3-numpy 安装 NumPy 2.0 版本，速度很快。",
        0x1B6067AEBF394411,
    ),
    "emoji_only": ("😀🎉🚀", 0x0E6AF450418CC8CE),
    "emoji_and_text": ("Happy birthday 🎂🎉 to you, 生日快乐 🥳 my friend!", 0x7906BE0A56AA83D1),
    "hindi": ("हिन्दी भारत की राजभाषा है और यह देवनागरी लिपि में लिखी जाती है", 0x013F2387987B488C),
    "full_width": (
        "Ｆｕｌｌ　ｗｉｄｔｈ　ＴＥＸＴ　ｉｓ　ｎｏｒｍａｌｉｓｅｄ　ｔｏｏ　１２３",
        0x804C9FF9892DCED6,
    ),
    "controls": ("tabs\tand\nnew lines\x00 and zero\u200bwidth spaces\r\nvanish here", 0xC13D11EAA6FA3DF4),
    "long_english": (LONG_ENGLISH, 0xCE641DF8A2763ADD),
    "long_chinese": (LONG_CHINESE, 0x02F0629FC410E789),
}


GOLDEN_2: dict[str, int] = {
    "chinese": 0x7324D4F286D9ACD1,
    "chinese_paragraph": 0x382B8EEC673A554B,
    "controls": 0x795EAE7CA8F5846F,
    "emoji_and_text": 0x403DAD60266432B1,
    "emoji_only": 0x3C271525D326FEF1,
    "english": 0x4DC65AE32967ADAD,
    "english_paragraph": 0xDBF5DB4623D3420F,
    "full_width": 0x59DC089C9A304A6B,
    "hindi": 0x8481EF2E1AABAC71,
    "long_chinese": 0xCFC123B7339090C7,
    "long_english": 0x6BA44F7F47EEE8C2,
    "mixed": 0x74782713097E1C10,
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_fingerprints_version_1(name: str) -> None:
    text, expected = GOLDEN[name]
    assert _quiet(text, algorithm=ALGORITHM_1) == expected


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_fingerprints_version_2(name: str) -> None:
    assert ALGORITHM == ALGORITHM_2  # the default
    assert _quiet(GOLDEN[name][0]) == GOLDEN_2[name]


def test_golden_non_default_settings() -> None:
    text = GOLDEN["mixed"][0] + " " + GOLDEN["english_paragraph"][0]
    v1 = ALGORITHM_1
    assert _quiet(text, ngrams=(3,), weighting="binary", algorithm=v1) == 0x4FDAACFE6F36AD91
    assert _quiet(text, ngrams=(1,), weighting="tfidf", top_n=10, algorithm=v1) == 0xCB1285633EE3C578
    assert _quiet(text, weighting="tf", seed=12345, hmm=False, algorithm=v1) == 0x727C227B5468279C
    assert _quiet(text, ngrams=(3,), weighting="binary") == 0x34B2D908489DF556
    assert _quiet(text, weighting="tf", seed=12345, hmm=False) == 0x119A2DF5B6E8E801
    assert _quiet(text, ngrams=(2, 4)) == 0xD9FC334735AE4639


def test_golden_vector_fingerprint() -> None:
    vector = np.sin(np.arange(1, 33, dtype=np.float64))
    assert fingerprint_vector(vector) == 0x8D22A4AE8427F1E8
    assert fingerprint_vector(vector, seed=99) == 0x6EB21761446B443C


# -- the documented algorithm, re-implemented in plain Python ---------------------------


def _reference(text: str) -> int:
    """The default algorithm exactly as the module docstring states it."""
    tokens = tokenise(normalise(text))
    feats = [*tokens, *(f"{a} {b}" for a, b in itertools.pairwise(tokens))]
    counts = Counter(xxhash.xxh3_64_intdigest(f.encode("utf-8"), 0) for f in feats)
    tally = [0] * 64
    for value, count in counts.items():
        weight = round(1000 * (1 + math.log(count)))
        for bit in range(64):
            tally[bit] += weight if value >> bit & 1 else -weight
    return sum(1 << bit for bit in range(64) if tally[bit] > 0)


@pytest.mark.parametrize("name", ["english_paragraph", "chinese_paragraph", "mixed", "controls"])
def test_matches_plain_python_reference(name: str) -> None:
    text = GOLDEN[name][0]
    assert _quiet(text, algorithm=ALGORITHM_1) == _reference(text)


def test_feature_hash_is_xxh3_64_of_utf8() -> None:
    assert feature_hashes(["abc", "中文"]).tolist() == [
        xxhash.xxh3_64_intdigest(b"abc"),
        xxhash.xxh3_64_intdigest("中文".encode()),
    ]
    assert feature_hashes(["abc"], seed=5).tolist() == [xxhash.xxh3_64_intdigest(b"abc", 5)]
    assert feature_hashes([]).dtype == np.uint64


# -- pipeline steps -------------------------------------------------------------------------


def test_features_words_and_shingles() -> None:
    assert features(["a", "b", "c"], (1, 2)) == ["a", "b", "c", "a b", "b c"]
    assert features(["a", "b", "c"], (3,)) == ["a b c"]
    assert features(["a", "b"], (3,)) == ["a b"]  # too short: all tokens as one
    assert features(["a"], (1, 2)) == ["a"]
    assert features([], (1, 2)) == []


def test_count_features_keeps_first_occurrence_order() -> None:
    distinct, counts = count_features(["b", "a", "b", "c", "b"])
    assert distinct == ["b", "a", "c"]
    assert counts.tolist() == [3, 1, 1]


def test_weigh_modes() -> None:
    distinct, counts = ["x", "y"], np.array([3, 1], dtype=np.int64)
    assert weigh(distinct, counts, "binary").tolist() == [1, 1]
    assert weigh(distinct, counts, "tf").tolist() == [3, 1]
    assert weigh(distinct, counts, "log").tolist() == [round(1000 * (1 + math.log(3))), 1000]


def test_top_features_keeps_heaviest_and_breaks_ties_by_hash() -> None:
    hashes = np.array([50, 10, 40, 30], dtype=np.uint64)
    weights = np.array([5, 3, 3, 1], dtype=np.int64)
    kept_hashes, kept_weights = top_features(hashes, weights, 2)
    assert kept_hashes.tolist() == [50, 10]
    assert kept_weights.tolist() == [5, 3]
    assert top_features(hashes, weights, None)[0] is hashes


def test_tfidf_prefers_rare_words() -> None:
    # A stop word and a rare word, once each.
    weights = weigh(["的", "量子"], np.array([1, 1], dtype=np.int64), "tfidf")
    assert weights[1] > weights[0] > 0


def test_vote_single_feature_is_its_hash() -> None:
    h = 0xDEADBEEF12345678
    assert vote(np.array([h], dtype=np.uint64), np.array([7], dtype=np.int64)) == h


def test_vote_bit_zero_is_least_significant() -> None:
    assert vote(np.array([1], dtype=np.uint64), np.array([1], dtype=np.int64)) == 1
    assert vote(np.array([1 << 63], dtype=np.uint64), np.array([1], dtype=np.int64)) == 1 << 63


@given(st.lists(st.integers(0, MASK), min_size=2, max_size=2))
def test_vote_tie_gives_zero(values: list[int]) -> None:
    a, b = values
    assert vote(np.array(values, dtype=np.uint64), np.ones(2, dtype=np.int64)) == a & b


@given(st.lists(st.integers(0, MASK), min_size=3, max_size=3))
def test_vote_majority(values: list[int]) -> None:
    a, b, c = values
    assert vote(np.array(values, dtype=np.uint64), np.ones(3, dtype=np.int64)) == (a & b) | (a & c) | (b & c)


@given(
    st.lists(
        st.tuples(
            st.integers(0, MASK),
            st.one_of(st.integers(0, 5000), st.integers(2**20, 2**22), st.integers(2**50, 2**51)),
        ),
        min_size=1,
        max_size=40,
    )
)
# A weight one past each bound: rounded, it would lose the vote its exact value wins.
@example([(MASK, 2**24 + 1), (0, 2**24)])
@example([(MASK, 2**53 + 1), (0, 2**53)])
def test_vote_equals_a_tally_in_python_at_every_weight_scale(pairs: list[tuple[int, int]]) -> None:
    """Sums under 2**24 take single precision, under 2**53 double, beyond
    them integers: each exact, each the same vote."""
    hashes = np.array([value for value, _ in pairs], dtype=np.uint64)
    weights = np.array([weight for _, weight in pairs], dtype=np.int64)
    total = sum(weight for _, weight in pairs)
    expected = sum(
        1 << bit
        for bit in range(64)
        if 2 * sum(weight for value, weight in pairs if value >> bit & 1) > total
    )
    assert vote(hashes, weights) == expected


def test_vote_weight_decides() -> None:
    hashes = np.array([MASK, 0], dtype=np.uint64)
    assert vote(hashes, np.array([2, 1], dtype=np.int64)) == MASK
    assert vote(hashes, np.array([1, 2], dtype=np.int64)) == 0


# -- properties --------------------------------------------------------------------------------

_TEXT_CHARS = st.sampled_from([*"abcdefgxyzABCXYZ0123456789 ,.!?-", "中", "文", "北京", "天气", "😀"])


@given(st.lists(_TEXT_CHARS, min_size=1, max_size=60).map("".join))
def test_case_and_width_change_moves_no_bit(text: str) -> None:
    full = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)
    variants = [text, text.upper(), text.lower(), full, " \t" + text.swapcase() + "\n"]
    results = set()
    for variant in variants:
        try:
            results.add(_quiet(variant))
        except InvalidValueError:
            results.add(-1)
    assert len(results) == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(300, 1500), st.data())
def test_single_word_edit_moves_few_bits(seed: int, length: int, data: st.DataObject) -> None:
    words = _document(seed, length)
    where = data.draw(st.integers(0, length - 1))
    replacement = data.draw(st.sampled_from(VOCABULARY))
    edited = [*words[:where], replacement, *words[where + 1 :]]
    assert _distance(fingerprint(" ".join(words)), fingerprint(" ".join(edited))) <= 12


def test_unrelated_documents_are_far_apart() -> None:
    prints = [fingerprint(" ".join(_document(seed, 800))) for seed in range(20)]
    near = [_distance(a, b) for i, a in enumerate(prints) for b in prints[i + 1 :]]
    # Same vocabulary and word frequencies, different text: not duplicates.
    assert min(near) > 6


_BATCH_TEXT = (
    st.lists(_TEXT_CHARS, min_size=1, max_size=40).map("".join).filter(lambda t: tokenise(normalise(t)))
)


@given(st.lists(_BATCH_TEXT, max_size=12))
def test_fingerprint_many_equals_scalar_path(texts: list[str]) -> None:
    fp = Fingerprinter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShortTextWarning)
        many = fp.fingerprint_many(texts, processes=1)
        assert many.dtype == np.uint64
        assert many.tolist() == [fp.fingerprint(t) for t in texts]


def test_deterministic_across_processes_and_hash_seeds() -> None:
    names = ["english_paragraph", "chinese_paragraph", "mixed", "emoji_and_text"]
    code = (
        "import warnings, json, sys\n"
        "warnings.simplefilter('ignore')\n"
        "from simstore.fingerprinting.fingerprinter import fingerprint\n"
        "print(json.dumps([fingerprint(t) for t in json.loads(sys.stdin.read())]))\n"
    )
    import json

    texts = [GOLDEN[n][0] for n in names]
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        assert json.loads(out.stdout) == [_quiet(t) for t in texts]


# -- short, empty and bad input ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\t\n\x00\u200b", "!!! ... ，。", "— · ¿?"])
def test_empty_or_featureless_text_is_refused(text: str) -> None:
    with pytest.raises(InvalidValueError, match=r"empty|no features"):
        fingerprint(text)


def test_short_text_warns_but_fingerprints() -> None:
    with pytest.warns(ShortTextWarning, match="distinct feature"):
        value = fingerprint("hello")
    assert value == token_hash(b"hello")  # one feature: its hash
    with pytest.warns(ShortTextWarning):
        assert fingerprint("hello", algorithm=ALGORITHM_1) == xxhash.xxh3_64_intdigest(b"hello")


def test_long_enough_text_does_not_warn() -> None:
    text = "one two three four five six seven"
    assert len(set(features(tokenise(text), (1, 2)))) >= SHORT_TEXT_FEATURES
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fingerprint(text)


def test_fingerprint_many_counts_short_texts_in_one_warning() -> None:
    with pytest.warns(ShortTextWarning, match="2 of 3 texts") as record:
        Fingerprinter().fingerprint_many(["hi", "one two three four five six seven", "yo"])
    assert len(record) == 1


@pytest.mark.parametrize("bad", [None, 3, ["text"], 1.0])
def test_non_text_is_a_type_error(bad: object) -> None:
    with pytest.raises(InvalidTypeError):
        fingerprint(bad)  # type: ignore[arg-type]


def test_bytes_are_decoded_as_utf8() -> None:
    text = GOLDEN["mixed"][0]
    assert fingerprint(text.encode()) == fingerprint(text)  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="UTF-8"):
        fingerprint(b"\xc3\x28 broken")  # type: ignore[arg-type]


def test_lone_surrogate_is_refused() -> None:
    with pytest.raises(InvalidValueError, match="surrogate"):
        fingerprint("text \udc80 here")


def test_fingerprint_many_names_the_bad_index() -> None:
    fp = Fingerprinter()
    with pytest.raises(InvalidValueError, match="index 1"):
        fp.fingerprint_many(["one two three four five six seven", "   "])
    with pytest.raises(InvalidTypeError, match="index 2"):
        fp.fingerprint_many(["a b c d e f g h", "a b c d e f g h", 5])  # type: ignore[list-item]
    with pytest.raises(InvalidTypeError, match="not a single text"):
        fp.fingerprint_many("a single string")
    with pytest.raises(InvalidValueError, match="processes"):
        fp.fingerprint_many(["x"], processes=0)
    assert fp.fingerprint_many([]).tolist() == []


# -- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fp",
    [
        Fingerprinter(),
        Fingerprinter(ngrams=(3,), weighting="binary"),
        Fingerprinter(
            ngrams=(1, 2, 4), weighting="tfidf", top_n=64, hmm=False, seed=2**64 - 1, algorithm=ALGORITHM_1
        ),
        Fingerprinter(ngrams=(2, 4), weighting="tf", hmm=False, seed=2**64 - 1),
        Fingerprinter(algorithm=ALGORITHM_1),
    ],
)
def test_settings_round_trip_through_msgpack(fp: Fingerprinter) -> None:
    settings_dict = fp.settings()
    version_1 = fp.algorithm == ALGORITHM_1
    assert settings_dict["hash"] == (FEATURE_HASH_1 if version_1 else FEATURE_HASH)
    assert settings_dict["algorithm"] == fp.algorithm
    unpacked = msgpack.unpackb(msgpack.packb(settings_dict))
    assert Fingerprinter.from_settings(unpacked) == fp
    assert pickle.loads(pickle.dumps(fp)) == fp


def test_default_settings_are_recorded_in_full() -> None:
    assert Fingerprinter().settings() == {
        "algorithm": "simstore-text-simhash-2",
        "hash": "poly64-moremur",
        "seed": 0,
        "ngrams": [1, 2],
        "weighting": "log",
        "top_n": None,
        "hmm": True,
        "sketch": {"algorithm": "oph-shingle3-1", "bins": 256, "bits": 4},
    }


def test_from_settings_refuses_unknown_missing_or_foreign() -> None:
    good = Fingerprinter().settings()
    with pytest.raises(InvalidValueError, match="unknown keys \\['colour'\\]"):
        Fingerprinter.from_settings({**good, "colour": "red"})
    with pytest.raises(InvalidValueError, match="missing keys \\['seed'\\]"):
        Fingerprinter.from_settings({k: v for k, v in good.items() if k != "seed"})
    with pytest.raises(InvalidValueError, match="hash"):
        Fingerprinter.from_settings({**good, "hash": "md5"})
    with pytest.raises(InvalidValueError, match="algorithm"):
        Fingerprinter.from_settings({**good, "algorithm": "other-2"})
    with pytest.raises(InvalidValueError, match="hash"):  # version 2's name with version 1's hash
        Fingerprinter.from_settings({**good, "hash": FEATURE_HASH_1})
    with pytest.raises(InvalidTypeError, match="mapping"):
        Fingerprinter.from_settings([("seed", 0)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"ngrams": ()}, InvalidValueError),
        ({"ngrams": (2, 1)}, InvalidValueError),
        ({"ngrams": (1, 1)}, InvalidValueError),
        ({"ngrams": (0,)}, InvalidValueError),
        ({"ngrams": (9,)}, InvalidValueError),
        ({"ngrams": [1, 2]}, InvalidTypeError),
        ({"ngrams": (True,)}, InvalidTypeError),
        ({"weighting": "bm25"}, InvalidValueError),
        ({"weighting": 1}, InvalidTypeError),
        ({"top_n": 0}, InvalidValueError),
        ({"top_n": 2.5}, InvalidTypeError),
        ({"hmm": 1}, InvalidTypeError),
        ({"seed": -1}, InvalidValueError),
        ({"seed": 2**64}, InvalidValueError),
        ({"algorithm": "simstore-text-simhash-3"}, InvalidValueError),
        ({"weighting": "tfidf"}, InvalidValueError),  # version 2 has no feature strings to look up
        ({"top_n": 10}, InvalidValueError),
    ],
)
def test_bad_settings_are_refused(options: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        Fingerprinter(**options)  # type: ignore[arg-type]


def test_settings_change_fingerprints() -> None:
    text = GOLDEN["english_paragraph"][0]
    values = {
        _quiet(text),
        _quiet(text, seed=1),
        _quiet(text, ngrams=(3,)),
        _quiet(text, weighting="binary"),
    }
    assert len(values) == 4


# -- vectors -----------------------------------------------------------------------------------------


def test_vector_shapes_and_types() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((5, 16))
    many = fingerprint_vector(matrix)
    assert isinstance(many, np.ndarray)
    assert many.dtype == np.uint64
    assert many.shape == (5,)
    one = fingerprint_vector(matrix[2])
    assert isinstance(one, int)
    assert one == int(many[2])
    assert fingerprint_vector(matrix.tolist()).tolist() == many.tolist()
    assert fingerprint_vector(np.zeros((0, 16))).shape == (0,)


def test_vector_scale_invariance_and_negation() -> None:
    v = np.cos(np.arange(1, 65) * 0.7)
    assert fingerprint_vector(3.5 * v) == fingerprint_vector(v)
    assert fingerprint_vector(-v) == ~fingerprint_vector(v) & MASK
    assert fingerprint_vector(np.arange(1, 9, dtype=np.int32)) == fingerprint_vector(np.arange(1.0, 9.0))


def test_vector_distance_tracks_angle() -> None:
    rng = np.random.default_rng(11)
    base = rng.standard_normal(256)
    near = base + 0.05 * rng.standard_normal(256)
    far = rng.standard_normal(256)
    assert _distance(fingerprint_vector(base), fingerprint_vector(near)) <= 6
    assert _distance(fingerprint_vector(base), fingerprint_vector(far)) >= 16
    assert fingerprint_vector(base, seed=1) != fingerprint_vector(base, seed=2)


def test_hyperplanes_are_standard_gaussian_and_stable() -> None:
    planes = hyperplanes(512, 0)
    assert planes.shape == (64, 512)
    assert abs(planes.mean()) < 0.02
    assert abs(planes.std() - 1.0) < 0.02
    assert not planes.flags.writeable
    assert np.array_equal(hyperplanes(512, 0), planes)


@pytest.mark.parametrize(
    ("vectors", "error", "match"),
    [
        ([1.0, float("nan")], InvalidValueError, "vector 0 holds NaN"),
        ([[1.0, 2.0], [float("inf"), 0.0]], InvalidValueError, "vector 1 holds NaN or infinity"),
        ([0.0, 0.0, 0.0], InvalidValueError, "all zeros"),
        (np.zeros((2, 2, 2)), InvalidValueError, "1-D"),
        (np.zeros((3, 0)), InvalidValueError, "at least one dimension"),
        (["a", "b"], InvalidTypeError, "real numbers"),
        (np.array([1 + 2j]), InvalidTypeError, "real numbers"),
        (np.array([True, False]), InvalidTypeError, "real numbers"),
        ([[1.0, 2.0], [3.0]], InvalidTypeError, "numeric array"),
    ],
)
def test_bad_vectors_are_refused(vectors: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        fingerprint_vector(vectors)  # type: ignore[arg-type]


def test_bad_vector_seed_is_refused() -> None:
    with pytest.raises(InvalidValueError, match="seed"):
        fingerprint_vector([1.0, 2.0], seed=-1)


# -- settings stored with a store ------------------------------------------------------------------


def test_reopened_store_fingerprints_with_its_recorded_settings(store_path: str) -> None:
    """A store keeps fingerprinting text with the settings it was made with,
    whatever Fingerprinter() defaults to today, also in another process."""
    import simstore

    recorded = Fingerprinter(ngrams=(1,), weighting="binary", seed=7)
    text = GOLDEN["english_paragraph"][0]
    assert recorded.fingerprint(text) != Fingerprinter().fingerprint(text)
    with simstore.open(store_path, "n", k=3, fingerprinter=recorded) as store:
        store.add("doc", text=text)
    with simstore.open(store_path, "w") as store:  # no fingerprinter: the file decides
        assert store.fingerprinter == recorded
        assert store.query(text=text, k=0)[0].fingerprint == recorded.fingerprint(text)
        store.add("again", text=text)
        assert store["again"].fingerprint == recorded.fingerprint(text)
    with pytest.raises(simstore.ParameterMismatchError, match="fingerprinter"):
        simstore.open(store_path, "w", fingerprinter=Fingerprinter())
    code = (
        "import sys, simstore\n"
        "with simstore.open(sys.argv[1], 'r') as store:\n"
        "    match = store.query(text=sys.argv[2], k=0)[0]\n"
        "    print(store.fingerprinter.settings()['weighting'], match.distance)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, store_path, text], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["binary", "0"]


def test_unrecorded_settings_are_frozen_to_the_first_defaults() -> None:
    """A store whose meta records no fingerprinter settings fingerprints with the
    frozen format-1 settings: version 1's defaults, whatever today's are."""
    from simstore.fingerprinting.algorithms import UNRECORDED_SETTINGS
    from simstore.fingerprinting.fingerprinter import Fingerprinter

    assert Fingerprinter.from_settings(UNRECORDED_SETTINGS) == Fingerprinter(
        algorithm=ALGORITHM_1, sketch=None
    )
