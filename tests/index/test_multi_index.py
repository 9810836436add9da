"""Multi-index schemes: exact by pigeonhole at every k, probes that are what
they claim, and a chooser that only returns exact schemes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simstore.errors import InvalidValueError
from simstore.index.multi_index import (
    MAX_SEGMENTS,
    MultiIndex,
    balanced_widths,
    choose,
    exact_schemes,
    rotate_left,
)

ALL_K = range(13)


def _segment_distances(scheme: MultiIndex, differ: int) -> list[int]:
    distances = []
    for width, start in zip(scheme.widths, scheme.starts, strict=True):
        segment = (differ >> (64 - start - width)) & ((1 << width) - 1)
        distances.append(segment.bit_count())
    return distances


@pytest.mark.parametrize("k", ALL_K)
def test_every_scheme_offered_is_exact_for_its_k(k: int) -> None:
    schemes = list(exact_schemes(k))
    assert schemes, f"no scheme for k={k}"
    for scheme in schemes:
        assert scheme.k == k
        assert sum(scheme.widths) == 64
        assert list(scheme.radii) == sorted(scheme.radii)


@pytest.mark.parametrize("k", ALL_K)
@given(data=st.data())
def test_a_difference_of_at_most_k_bits_is_within_some_tables_radius(k: int, data: st.DataObject) -> None:
    schemes = list(exact_schemes(k))
    scheme = data.draw(st.sampled_from(schemes))
    bits = data.draw(st.lists(st.integers(0, 63), max_size=k, unique=True))
    differ = sum(1 << bit for bit in bits)
    distances = _segment_distances(scheme, differ)
    assert any(distance <= radius for distance, radius in zip(distances, scheme.radii, strict=True))


@pytest.mark.parametrize("k", range(1, 13))
def test_one_bit_more_than_k_can_escape_every_table(k: int) -> None:
    # The scheme is exact for k and no more: k + 1 bits spread radius + 1 per
    # segment escape every probe (the bound is tight, so no scheme wastes radius).
    for scheme in exact_schemes(k):
        differ = 0
        for _width, start, radius in zip(scheme.widths, scheme.starts, scheme.radii, strict=True):
            for offset in range(radius + 1):
                differ |= 1 << (63 - start - offset)
        assert differ.bit_count() == k + 1
        distances = _segment_distances(scheme, differ)
        assert all(distance > radius for distance, radius in zip(distances, scheme.radii, strict=True))


@given(st.sampled_from([scheme for k in ALL_K for scheme in exact_schemes(k)]), st.data())
def test_probe_keys_are_the_queries_segment_with_at_most_radius_bits_flipped(
    scheme: MultiIndex, data: st.DataObject
) -> None:
    query = data.draw(st.integers(0, 2**64 - 1))
    table = data.draw(st.integers(0, scheme.tables - 1))
    width, radius = scheme.widths[table], scheme.radii[table]
    if math.comb(width, radius) > 5000:
        return
    keys = scheme.probe_keys(np.array([query], dtype=np.uint64), table)[0]
    assert len(keys) == scheme.probe_counts[table] == len(set(keys.tolist()))
    own = int(scheme.rotate(np.array([query], dtype=np.uint64), table)[0]) >> (64 - width)
    for key in keys.tolist():
        assert key & ((1 << (64 - width)) - 1) == 0  # only the segment is fixed
        assert ((key >> (64 - width)) ^ own).bit_count() <= radius


@given(st.lists(st.integers(0, 2**64 - 1), max_size=20), st.integers(0, 200))
def test_rotation_round_trips(values: list[int], shift: int) -> None:
    array = np.array(values, dtype=np.uint64)
    back = rotate_left(rotate_left(array, shift), 64 - shift % 64)
    assert back.tolist() == values
    for value, rotated in zip(values, rotate_left(array, shift).tolist(), strict=True):
        shift_mod = shift % 64
        assert rotated == ((value << shift_mod) | (value >> (64 - shift_mod))) & (2**64 - 1)


def test_probe_counts_and_candidate_rate() -> None:
    scheme = MultiIndex((21, 21, 22), (1, 1, 1))
    assert scheme.k == 5
    assert scheme.probe_counts == (22, 22, 23)
    assert scheme.probes == 67
    assert scheme.candidate_rate() == pytest.approx(22 / 2**21 * 2 + 23 / 2**22)
    assert scheme.label() == "21/21/22 r1/1/1"


@pytest.mark.parametrize(
    ("widths", "radii"),
    [
        ((32, 31), (0, 0)),  # does not sum to 64
        ((64,), (0, 0)),  # one radius per segment
        ((60, 4), (0, 0)),  # a segment narrower than MIN_WIDTH
        ((32, 32), (4, 0)),  # past MAX_RADIUS
        ((32, 32), (-1, 0)),
        ((8,) * 8 + (0,), (0,) * 9),  # too many segments
        ((), ()),
    ],
)
def test_a_bad_scheme_is_refused(widths: tuple[int, ...], radii: tuple[int, ...]) -> None:
    with pytest.raises(InvalidValueError):
        MultiIndex(widths, radii)


@pytest.mark.parametrize("segments", range(1, MAX_SEGMENTS + 1))
def test_balanced_widths(segments: int) -> None:
    widths = balanced_widths(segments)
    assert sum(widths) == 64
    assert len(widths) == segments
    assert max(widths) - min(widths) <= 1
    assert list(widths) == sorted(widths)


@pytest.mark.parametrize("k", ALL_K)
@pytest.mark.parametrize("docs", [0, 1_000, 1_000_000, 100_000_000])
def test_choose_returns_an_exact_scheme_for_k(k: int, docs: int) -> None:
    assert choose(k, docs).k == k


def test_choose_refuses_what_no_scheme_answers() -> None:
    with pytest.raises(InvalidValueError):
        choose(32, 1_000)
    with pytest.raises(InvalidValueError):
        choose(3, -1)
    with pytest.raises(InvalidValueError):
        choose(3, float("nan"))
