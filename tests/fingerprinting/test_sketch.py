"""The verification sketch: batch equals the plain-Python specification, and
its estimate tracks the exact Jaccard similarity of the shingle sets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstore import Fingerprinter
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.reference import shingles_reference, sketch_reference
from simstore.fingerprinting.sketch import (
    FEW_SHINGLES,
    Sketch,
    batch_shingles,
    estimate_jaccard,
    estimate_jaccard_one,
    sketches_of_shingles,
)

WORDS = [f"w{i}" for i in range(400)]
GEOMETRIES = [Sketch(), Sketch(bins=128, bits=8), Sketch(bins=512, bits=2), Sketch(bins=64, bits=8)]

words = st.lists(st.sampled_from(WORDS[:40]), min_size=1, max_size=60)
texts = st.one_of(
    words.map(" ".join),
    st.text(min_size=1, max_size=80).filter(lambda text: any(ch.isalnum() for ch in text)),
)


def _sketches(shingle_sets: list[list[int]], sketch: Sketch) -> np.ndarray:
    starts = np.zeros(len(shingle_sets) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in shingle_sets], out=starts[1:])
    flat = np.array([value for shingles in shingle_sets for value in shingles], dtype=np.uint64)
    return sketches_of_shingles(flat, starts, sketch)


@pytest.mark.parametrize("sketch", GEOMETRIES, ids=lambda s: f"{s.bins}x{s.bits}")
@settings(max_examples=40, deadline=None)
@given(
    sets=st.lists(st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=300), min_size=1, max_size=5)
)
def test_batch_sketches_equal_the_reference(sketch: Sketch, sets: list[list[int]]) -> None:
    rows = _sketches(sets, sketch)
    assert rows.shape == (len(sets), sketch.nbytes)
    for row, shingles in zip(rows, sets, strict=True):
        assert row.tobytes() == sketch_reference(shingles, sketch)


@pytest.mark.parametrize("sketch", GEOMETRIES, ids=lambda s: f"{s.bins}x{s.bits}")
@settings(max_examples=40, deadline=None)
@given(
    shingles=st.lists(
        st.integers(0, (1 << 64) - 1) | st.integers(0, 40), min_size=1, max_size=2 * FEW_SHINGLES
    )
)
def test_one_text_sketches_equal_the_reference(sketch: Sketch, shingles: list[int]) -> None:
    # One text takes the plain-Python path up to FEW_SHINGLES shingles (repeats
    # included), the batch path beyond: both are the reference's sketch.
    rows = _sketches([shingles], sketch)
    assert rows.shape == (1, sketch.nbytes)
    assert rows.flags.writeable
    assert rows[0].tobytes() == sketch_reference(shingles, sketch)


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
@settings(max_examples=60, deadline=None)
@given(batch=st.lists(texts, min_size=1, max_size=6))
def test_text_sketches_batch_equal_one_at_a_time(batch: list[str]) -> None:
    fingerprinter = Fingerprinter()
    try:
        fingerprints, rows = fingerprinter.fingerprints_and_sketches(batch)
    except InvalidValueError:
        return  # a text without features; fingerprint_many refuses it the same way
    assert fingerprints.tolist() == fingerprinter.fingerprint_many(batch).tolist()
    for text, fingerprint, row in zip(batch, fingerprints.tolist(), rows, strict=True):
        single_fingerprint, single_sketch = fingerprinter.fingerprint_and_sketch(text)
        assert single_fingerprint == fingerprint
        assert single_sketch == row.tobytes()


def test_shingles_of_the_batch_path_equal_the_reference() -> None:
    batch = ["one two", "one two three four five", "一个 中文 文本 的 例子 和 更多 的 词"]
    shingles, starts = batch_shingles(batch, shingle=3)
    for index, text in enumerate(batch):
        got = shingles[starts[index] : starts[index + 1]].tolist()
        assert got == shingles_reference(text, shingle=3)


def _jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b)


@pytest.mark.parametrize("sketch", GEOMETRIES, ids=lambda s: f"{s.bins}x{s.bits}")
def test_estimate_tracks_exact_jaccard_on_random_sets(sketch: Sketch) -> None:
    rng = np.random.default_rng(7)
    errors = []
    for _ in range(300):
        size = int(rng.integers(50, 2000))
        shared = int(rng.integers(0, size + 1))
        base = rng.integers(0, 1 << 63, size, dtype=np.uint64)
        other = np.concatenate([base[:shared], rng.integers(0, 1 << 63, size - shared, dtype=np.uint64)])
        first, second = set(base.tolist()), set(other.tolist())
        rows = _sketches([sorted(first), sorted(second)], sketch)
        errors.append(float(estimate_jaccard(rows[0], rows[1], sketch)[0]) - _jaccard(first, second))
    errors_array = np.abs(np.array(errors))
    # One-permutation MinHash over m bins: standard error about sqrt(J(1-J)/m) <= 0.5/sqrt(m).
    bound = 0.5 / np.sqrt(sketch.bins)
    assert errors_array.mean() < bound
    assert np.quantile(errors_array, 0.99) < 3.5 * bound
    assert abs(float(np.mean(errors))) < bound / 2  # no visible bias


def test_identical_and_disjoint_sets() -> None:
    sketch = Sketch()
    same = _sketches([list(range(1000)), list(range(1000))], sketch)
    assert estimate_jaccard(same[0], same[1])[0] == 1.0
    apart = _sketches([list(range(1000)), list(range(5000, 6000))], sketch)
    assert estimate_jaccard(apart[0], apart[1])[0] < 0.05


def test_short_sets_are_estimated_nearly_exactly() -> None:
    # Fewer shingles than bins: nearly every shingle has a bin of its own.
    sketch = Sketch()
    rows = _sketches([list(range(10)), [*range(8), 100, 101]], sketch)
    assert estimate_jaccard(rows[0], rows[1])[0] == pytest.approx(8 / 12, abs=0.09)


def test_broadcast_one_row_against_many() -> None:
    sketch = Sketch()
    rows = _sketches([list(range(100)), list(range(100)), list(range(50, 150))], sketch)
    estimates = estimate_jaccard(rows[0], rows)
    assert estimates.shape == (3,)
    assert estimates[0] == estimates[1] == 1.0


def test_wrong_width_is_refused() -> None:
    with pytest.raises(InvalidValueError, match="128 bytes"):
        estimate_jaccard(np.zeros(64, np.uint8), np.zeros(64, np.uint8))


@pytest.mark.parametrize(
    ("bins", "bits", "error"),
    [
        (256, 3, InvalidValueError),
        (100, 4, InvalidValueError),
        (4, 8, InvalidValueError),
        ("256", 4, InvalidTypeError),
    ],
)
def test_bad_geometry_is_refused(bins: object, bits: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        Sketch(bins=bins, bits=bits)  # type: ignore[arg-type]


def test_settings_round_trip_and_old_settings_have_no_sketch() -> None:
    fingerprinter = Fingerprinter(sketch=Sketch(bins=512, bits=2))
    assert Fingerprinter.from_settings(fingerprinter.settings()) == fingerprinter
    old = dict(Fingerprinter().settings())
    del old["sketch"]
    assert Fingerprinter.from_settings(old).sketch is None
    bad = {**Fingerprinter().settings(), "sketch": {"algorithm": "other", "bins": 256, "bits": 4}}
    with pytest.raises(InvalidValueError, match="other"):
        Fingerprinter.from_settings(bad)


def test_no_sketch_fingerprinter_refuses_sketches() -> None:
    with pytest.raises(InvalidValueError, match="no sketches"):
        Fingerprinter(sketch=None).fingerprints_and_sketches(["some text here"])


def test_algorithm_1_makes_the_same_sketches() -> None:
    batch = ["a text of several words for the sketch", "another text with several other words"]
    _, version2 = Fingerprinter().fingerprints_and_sketches(batch)
    _, version1 = Fingerprinter(algorithm="simstore-text-simhash-1").fingerprints_and_sketches(batch)
    assert version1.tolist() == version2.tolist()


def test_worker_processes_give_the_same_sketches() -> None:
    batch = [" ".join(WORDS[i : i + 200]) for i in range(200)] * 30  # more than one chunk
    fingerprinter = Fingerprinter()
    local = fingerprinter.fingerprints_and_sketches(batch)
    pooled = fingerprinter.fingerprints_and_sketches(batch, processes=2)
    assert local[0].tolist() == pooled[0].tolist()
    assert np.array_equal(local[1], pooled[1])


def _estimate_from_codes(first: bytes, second: bytes, sketch: Sketch) -> float:
    """The estimate's definition, code by code: codes that agree and are
    filled, less the chance agreements of two filled codes, over the bins
    either fills."""
    mask = (1 << sketch.bits) - 1

    def codes(raw: bytes) -> list[int]:
        return [(byte >> shift) & mask for byte in raw for shift in range(0, 8, sketch.bits)]

    a, b = codes(first), codes(second)
    union = sum(1 for x, y in zip(a, b, strict=True) if x or y)
    matched = sum(1 for x, y in zip(a, b, strict=True) if x and x == y)
    both_filled = sum(1 for x, y in zip(a, b, strict=True) if x and y)
    collide = mask
    estimate = (collide * matched - both_filled) / ((collide - 1) * max(union, 1))
    return min(max(estimate, 0.0), 1.0)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([Sketch(bins, bits) for bins in (8, 16, 256, 1024) for bits in (2, 4, 8)]),
    st.integers(0, 2**32 - 1),
    st.floats(0.0, 1.0),
)
def test_estimates_count_codes_as_defined(sketch: Sketch, seed: int, empty: float) -> None:
    """The numpy estimate (popcounts over machine words) and the one-pair
    estimate (Python integers) both equal the definition taken code by code,
    for every geometry, with a row broadcast against many."""
    rng = np.random.default_rng(seed)
    first = rng.integers(0, 256, size=(6, sketch.nbytes), dtype=np.uint8)
    second = first.copy()
    changed = rng.random(second.shape) < rng.random()
    second[changed] = rng.integers(0, 256, size=int(changed.sum()), dtype=np.uint8)
    first[rng.random(first.shape) < empty] = 0  # whole bytes of empty bins
    expected = [
        _estimate_from_codes(x.tobytes(), y.tobytes(), sketch) for x, y in zip(first, second, strict=True)
    ]
    assert estimate_jaccard(first, second, sketch).tolist() == pytest.approx(expected, abs=1e-12)
    assert [
        estimate_jaccard_one(x.tobytes(), y.tobytes(), sketch) for x, y in zip(first, second, strict=True)
    ] == (pytest.approx(expected, abs=1e-12))
    broadcast = [_estimate_from_codes(first[0].tobytes(), y.tobytes(), sketch) for y in second]
    assert estimate_jaccard(first[0].tobytes(), second, sketch).tolist() == pytest.approx(
        broadcast, abs=1e-12
    )
