"""The layout planner: layouts, exactness, estimates, ranking and refusals."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.engine import occupancy
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.index import costs
from simstore.index.cover import covers, find_escape
from simstore.index.permute import MAX_TABLES, Table, one_level_tables
from simstore.layout.planner import (
    MAX_PLAN_K,
    Layout,
    best_layout,
    candidate_layouts,
    filter_pass_rate,
    format_plan,
    from_spec,
    one_level,
    plan,
    two_level,
)

U64 = np.uint64
ALL_K = range(MAX_PLAN_K + 1)


def random_fingerprints(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, np.iinfo(np.uint64).max, size=count, dtype=np.uint64, endpoint=True)


def prefix_mask(table: Table) -> int:
    return sum(1 << bit for bit in table.bit_order[: table.prefix_bits])


# ------------------------------------------------------------------ builders


@pytest.mark.parametrize(("k", "blocks"), [(0, 1), (0, 2), (1, 2), (3, 5), (3, 8), (6, 9), (8, 12), (12, 15)])
def test_one_level_is_the_stores_existing_layout(k: int, blocks: int) -> None:
    layout = one_level(k, blocks)
    assert list(layout.tables) == one_level_tables(k, blocks)
    assert layout.spec == {"kind": "one-level", "blocks": blocks}
    assert layout.k == k
    assert layout.name == f"1-level {blocks} blocks"


def test_the_papers_sixteen_table_layout() -> None:
    layout = two_level(3, 4, 3, 4)
    assert layout.name == "2-level 4x16 + 4x12"
    assert layout.table_count == 16
    assert layout.prefix_bits == (28,) * 16
    assert layout.spec == {
        "kind": "two-level",
        "outer_blocks": 4,
        "outer_k": 3,
        "inner_blocks": 4,
        "inner_k": 3,
    }
    # The first table leads with outer block 0 (bits 63..48), then the first
    # 12 of the 48 leftover bits (47..36).
    assert layout.tables[0].bit_order[:28] == tuple(range(63, 35, -1))
    assert covers(layout.tables, 3)
    assert not covers(layout.tables, 4)


def test_two_level_inner_level_must_allow_k_errors() -> None:
    # outer_k = 3 leaves 3 outer blocks that may hold all 3 differences; an
    # inner level built for only 2 of them (two_level(2, ...)) misses some.
    short_inner = two_level(2, 4, 3, 4)
    assert covers(short_inner.tables, 2)
    assert not covers(short_inner.tables, 3)
    assert covers(two_level(3, 4, 3, 4).tables, 3)


def test_two_level_drops_tables_with_the_same_prefix_bits() -> None:
    # outer_k = k + 1: choosing outer blocks {A, B} then inner block C gives
    # the same prefix bits as {A, C} then B.
    layout = two_level(1, 4, 2, 2)
    prefixes = {frozenset(table.bit_order[: table.prefix_bits]) for table in layout.tables}
    assert len(prefixes) == layout.table_count == 4
    assert covers(layout.tables, 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((3, 4, 2, 4), "outer_k must be in 3..63"),
        ((3, 3, 3, 4), "outer_blocks must be in 4..64"),
        ((3, 4, 3, 3), "inner_blocks must be in 4..48"),
        ((3, 4, 3, 49), "inner_blocks must be in 4..48"),
        ((3, 10, 3, 8), "at most 512"),
        ((13, 14, 13, 14), "k up to 12"),
    ],
)
def test_two_level_refuses_impossible_parameters(args: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        two_level(*args)


def test_two_level_refuses_non_ints() -> None:
    with pytest.raises(InvalidTypeError):
        two_level(3, 4.0, 3, 4)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        two_level(3, 4, True, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize("k", ALL_K)
def test_specs_are_msgpackable_and_rebuild_the_same_tables(k: int) -> None:
    for layout in candidate_layouts(k, max_tables=64):
        packed = msgpack.packb(layout.spec, use_bin_type=True)
        rebuilt = from_spec(k, msgpack.unpackb(packed, raw=False))
        assert rebuilt.tables == layout.tables
        assert rebuilt.name == layout.name


def test_from_spec_refuses_bad_specs() -> None:
    with pytest.raises(InvalidValueError, match="unknown layout kind"):
        from_spec(3, {"kind": "three-level"})
    with pytest.raises(InvalidValueError, match="lacks"):
        from_spec(3, {"kind": "one-level"})
    with pytest.raises(InvalidValueError, match="inner_k"):
        from_spec(3, {"kind": "two-level", "outer_blocks": 4, "outer_k": 3, "inner_blocks": 4, "inner_k": 2})
    with pytest.raises(InvalidTypeError):
        from_spec(3, [("kind", "one-level")])  # type: ignore[arg-type]


def test_layouts_are_hashable_and_compare_by_value() -> None:
    assert one_level(3, 5) == one_level(3, 5)
    assert len({one_level(3, 5), one_level(3, 5), two_level(3, 4, 3, 4)}) == 2


# ------------------------------------------------------------------ exactness


@pytest.mark.parametrize("k", ALL_K)
def test_every_candidate_layout_is_exact_and_tight(k: int) -> None:
    layouts = candidate_layouts(k)
    assert layouts
    kinds = {layout.spec["kind"] for layout in layouts}
    assert kinds == ({"one-level"} if k == 0 else {"one-level", "two-level"})
    for layout in layouts:
        assert layout.k == k
        assert 1 <= layout.table_count <= MAX_TABLES
        assert covers(layout.tables, k), layout.name
        # One more bit always escapes: the escape flips bits in every prefix.
        escape = find_escape(layout.tables, k + 1)
        assert escape is not None, layout.name
        assert len(escape) <= k + 1
        escape_mask = sum(1 << bit for bit in escape)
        assert all(prefix_mask(table) & escape_mask for table in layout.tables)


def exhaustive_covers(tables: list[Table], k: int) -> bool:
    """Every set of at most ``k`` flipped bits, against every prefix (numpy)."""
    masks = np.array([prefix_mask(table) for table in tables], dtype=np.uint64)
    if not tables:
        return False
    for size in range(1, k + 1):  # the empty set meets no prefix
        combos = np.array(list(itertools.combinations(range(64), size)), dtype=np.uint64)
        flipped = np.bitwise_or.reduce(U64(1) << combos, axis=1)
        # An error set escapes when it meets every table's prefix.
        escapes = np.all((flipped[:, None] & masks[None, :]) != 0, axis=1)
        if escapes.any():
            return False
    return True


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    table_count=st.integers(1, 8),
    k=st.integers(0, 3),
    max_prefix=st.integers(1, 24),
)
def test_covers_agrees_with_exhaustive_enumeration(
    seed: int, table_count: int, k: int, max_prefix: int
) -> None:
    rng = np.random.default_rng(seed)
    tables = [
        Table(tuple(int(bit) for bit in rng.permutation(64)), int(rng.integers(1, max_prefix + 1)))
        for _ in range(table_count)
    ]
    expected = exhaustive_covers(tables, k)
    assert covers(tables, k) == expected
    escape = find_escape(tables, k)
    if not expected:
        assert escape is not None
        assert len(escape) <= k
        assert all(prefix_mask(table) & sum(1 << bit for bit in escape) for table in tables)


def test_covers_edge_cases() -> None:
    assert not covers([], 0)
    assert find_escape([], 3) == ()
    identity = Table(tuple(range(63, -1, -1)), 64)
    assert covers([identity], 0)
    assert not covers([identity], 1)
    assert find_escape([identity], 1) is not None
    # A layout for k=3 used for k=4 escapes with 4 bits, one per leading block.
    assert not covers(one_level(3, 5).tables, 4)


def simulated_queries(tables: tuple[Table, ...], fps: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """What one prefix scan per table returns after the popcount filter (numpy):
    a boolean (queries x fingerprints) matrix."""
    in_some_range = np.zeros((queries.size, fps.size), dtype=bool)
    for table in tables:
        shift = U64(table.suffix_bits)
        stored = table.permute_array(fps) >> shift
        asked = table.permute_array(queries) >> shift
        in_some_range |= asked[:, None] == stored[None, :]
    close = np.bitwise_count(fps[None, :] ^ queries[:, None]) <= k
    return in_some_range & close


def planted_set(k: int, seed: int, background: int = 300, planted: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Random fingerprints plus, for each query, stored neighbours 0..k bits away."""
    rng = np.random.default_rng(seed)
    queries = random_fingerprints(planted, seed + 1)
    neighbours = []
    for index, query in enumerate(queries.tolist()):
        for distance in {index % (k + 1), k}:
            flipped = query
            for bit in rng.choice(64, size=distance, replace=False).tolist():
                flipped ^= 1 << bit
            neighbours.append(flipped)
    fps = np.concatenate([random_fingerprints(background, seed), np.array(neighbours, dtype=np.uint64)])
    return fps, queries


@pytest.mark.parametrize("k", range(7))
def test_every_candidate_layout_equals_brute_force_on_planted_neighbours(k: int) -> None:
    fps, queries = planted_set(k, seed=1000 + k)
    layouts = candidate_layouts(k, max_tables=200)
    assert any(layout.spec["kind"] == "two-level" for layout in layouts) or k == 0
    expected = np.bitwise_count(fps[None, :] ^ queries[:, None]) <= k
    assert expected.sum() >= len(queries)  # every query has planted neighbours
    for layout in layouts:
        assert np.array_equal(simulated_queries(layout.tables, fps, queries, k), expected), layout.name


def test_the_simulated_query_misses_an_escaping_neighbour() -> None:
    # The oracle test above has teeth: k + 1 flips at an escape set are missed.
    layout = two_level(3, 4, 3, 4)
    escape = find_escape(layout.tables, 4)
    assert escape is not None
    query = 0x0123456789ABCDEF
    neighbour = query ^ sum(1 << bit for bit in escape)
    fps = np.array([neighbour], dtype=np.uint64)
    assert not simulated_queries(layout.tables, fps, np.array([query], dtype=np.uint64), 4).any()


@pytest.mark.parametrize("layout", [two_level(3, 4, 3, 4), two_level(2, 3, 2, 4), one_level(3, 4)], ids=str)
def test_a_store_with_a_planned_layout_equals_brute_force(tmp_path: Path, layout: Layout) -> None:
    k = layout.k
    fps, queries = planted_set(k, seed=77, background=2000, planted=60)
    path = str(tmp_path / "layout.simstore")
    with simstore.open(path, "n", layout=layout) as store:
        store.add_many(range(len(fps)), fps)
        assert store.stats().tables == layout.table_count
    with simstore.open(path, "r") as store:
        assert store.tables == layout.tables
        for query in queries.tolist():
            got = sorted(int(match.key) for match in store.query(fingerprint=query))
            expected = np.flatnonzero(np.bitwise_count(fps ^ U64(query)) <= k).tolist()
            assert got == expected


# ------------------------------------------------------------------ estimates


def measured_candidates(layout: Layout, fps: np.ndarray, queries: np.ndarray) -> int:
    total = 0
    for table in layout.tables:
        shift = U64(table.suffix_bits)
        prefixes = np.sort(table.permute_array(fps)) >> shift
        wanted = table.permute_array(queries) >> shift
        total += int(
            (np.searchsorted(prefixes, wanted, side="right") - np.searchsorted(prefixes, wanted)).sum()
        )
    return total


def test_expected_candidates_match_random_fingerprints_within_20_percent() -> None:
    docs = 200_000
    fps = random_fingerprints(docs, 5)
    queries = random_fingerprints(400, 6)
    checked = 0
    for k in (1, 2, 3, 4, 6, 8):
        for layout in candidate_layouts(k, max_tables=130):
            estimated = layout.with_estimates(docs)
            assert estimated.expected_candidates is not None
            expected_total = estimated.expected_candidates * len(queries)
            if expected_total < 1000:  # too few to measure a rate
                continue
            measured = measured_candidates(layout, fps, queries)
            assert measured == pytest.approx(expected_total, rel=0.2), layout.name
            checked += 1
    assert checked >= 8


def test_estimates_follow_the_cost_model() -> None:
    layout = one_level(3, 5)
    assert layout.expected_docs is None
    assert layout.query_us is None
    estimated = layout.with_estimates(1e6)
    rate = sum(2.0**-bits for bits in layout.prefix_bits)
    assert estimated.expected_docs == 1_000_000
    assert estimated.expected_candidates == pytest.approx(1e6 * rate)
    # The occupancy bitmaps (23 bits at 1M) rule out all but ~11% of a random query's descents.
    descents = sum(-math.expm1(-1e6 / 2**23) for _ in layout.prefix_bits)
    assert descents == pytest.approx(1.12, abs=0.01)
    reads = sum(1e6 * 2.0**-bits * filter_pass_rate(3, 1e6, bits) for bits in layout.prefix_bits)
    assert estimated.query_us == pytest.approx(
        costs.PER_QUERY_US
        + 10 * costs.PER_TABLE_US
        + descents * costs.PER_PROBE_US
        + 1e6 * rate * costs.PER_CANDIDATE_US
        + reads * costs.CANDIDATE_READ_US
    )
    assert estimated.insert_us == pytest.approx(costs.PER_DOC_INSERT_US + 10 * costs.PER_KEY_WRITE_US)
    assert estimated.bytes_per_doc == pytest.approx(costs.PER_DOC_BYTES + 10 * costs.PER_ENTRY_BYTES)
    assert estimated.tables == layout.tables


# ------------------------------------------------------------------ plan()


@pytest.mark.parametrize("k", ALL_K)
@pytest.mark.parametrize("docs", [1_000, 1_000_000, 1e9])
def test_plan_ranks_exact_undominated_layouts(k: int, docs: float) -> None:
    layouts = plan(k, docs)
    assert layouts
    assert [layout.query_us for layout in layouts] == sorted(layout.query_us or 0 for layout in layouts)
    shapes = [tuple(sorted(layout.prefix_bits)) for layout in layouts]
    assert len(shapes) == len(set(shapes))
    everything = [layout.with_estimates(docs) for layout in candidate_layouts(k)]
    for layout in layouts:
        assert layout.expected_docs == int(docs)
        assert layout.table_count <= MAX_TABLES
        assert covers(layout.tables, k)
        for other in everything:
            no_worse = (
                other.table_count <= layout.table_count
                and other.candidate_rate <= layout.candidate_rate * (1 + 1e-9)
            )
            better = (
                other.table_count < layout.table_count
                or other.candidate_rate < layout.candidate_rate * (1 - 1e-9)
            )
            assert not (no_worse and better), f"{layout.name} is dominated by {other.name}"
    # Every candidate is represented: either listed (same shape) or beaten on
    # both tables and candidates by a listed one.
    for other in everything:
        assert any(
            layout.table_count <= other.table_count and layout.candidate_rate <= other.candidate_rate
            for layout in layouts
        ), other.name
    assert best_layout(k, docs) == layouts[0]


def test_plan_for_k3_at_a_billion_lists_the_papers_layout() -> None:
    names = [layout.name for layout in plan(3, 1e9)]
    assert "2-level 4x16 + 4x12" in names
    assert "1-level 5 blocks" in names


def test_plan_prefers_few_tables_for_small_corpora_and_long_prefixes_for_large() -> None:
    small, large = best_layout(3, 1_000), best_layout(3, 10**10)
    assert small.table_count < large.table_count
    assert min(small.prefix_bits) < min(large.prefix_bits)


def test_plan_respects_max_tables_and_bytes_budget() -> None:
    assert all(layout.table_count <= 10 for layout in plan(3, 1e9, max_tables=10))
    docs = 10**8
    budget = 400 * docs
    fitting = plan(3, docs, bytes_budget=budget)
    assert fitting
    assert all((layout.bytes_per_doc or 0) * docs <= budget for layout in fitting)
    assert len(fitting) < len(plan(3, docs))


def test_plan_names_the_cheapest_option_when_nothing_fits() -> None:
    with pytest.raises(InvalidValueError, match=r"smallest \(1-level 4 blocks\) needs 4 tables"):
        plan(3, 1e6, max_tables=3)
    with pytest.raises(InvalidValueError, match="needs 4 tables and about"):
        plan(3, 1e6, bytes_budget=1000)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"k": 13, "expected_docs": 10}, InvalidValueError),
        ({"k": -1, "expected_docs": 10}, InvalidValueError),
        ({"k": "3", "expected_docs": 10}, InvalidTypeError),
        ({"k": True, "expected_docs": 10}, InvalidTypeError),
        ({"k": 3, "expected_docs": 0}, InvalidValueError),
        ({"k": 3, "expected_docs": 1.5}, InvalidValueError),
        ({"k": 3, "expected_docs": float("nan")}, InvalidValueError),
        ({"k": 3, "expected_docs": "1e9"}, InvalidTypeError),
        ({"k": 3, "expected_docs": 10, "max_tables": 0}, InvalidValueError),
        ({"k": 3, "expected_docs": 10, "max_tables": 2.0}, InvalidTypeError),
        ({"k": 3, "expected_docs": 10, "bytes_budget": -1}, InvalidValueError),
        ({"k": 3, "expected_docs": 10, "bytes_budget": "1G"}, InvalidTypeError),
    ],
)
def test_plan_validates_arguments(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        plan(**kwargs)  # type: ignore[arg-type]


def test_format_plan_prints_a_ranked_table() -> None:
    layouts = plan(3, 1e9)
    text = format_plan(layouts)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["#", "layout", "tables"]
    assert layouts[0].name in lines[2]
    assert lines[2].lstrip().startswith("1 ")
    assert "1G documents" in text
    assert "lower bounds" in text  # 1e9 is far past the calibrated size
    assert len(format_plan(layouts, limit=3).splitlines()) < len(lines)
    assert "more layouts not shown" in format_plan(layouts, limit=3)
    assert format_plan([]) == "no layouts"


def test_format_plan_says_when_large_k_is_costly() -> None:
    assert "Costly" in format_plan(plan(10, 1e9))
    assert "Costly" not in format_plan(plan(3, 1e6))


def test_probe_cost_grows_with_the_store_size() -> None:
    """Bigger stores cost more per table probed (measured in bench_layouts),
    so the same layout's estimate per probe rises with N, up to a ceiling."""
    small = one_level(3, 5).with_estimates(1e5)
    large = one_level(3, 5).with_estimates(1e7)
    assert small.query_us is not None
    assert large.query_us is not None

    def per_probe(layout: Layout, docs: float) -> float:
        assert layout.query_us is not None
        descents = sum(
            occupancy.expected_descents(docs, bits, layout.table_count) for bits in layout.prefix_bits
        )
        rest = costs.PER_QUERY_US + 10 * costs.PER_TABLE_US
        rest += (layout.expected_candidates or 0) * costs.PER_CANDIDATE_US
        rest += costs.CANDIDATE_READ_US * sum(
            docs * 2.0**-bits * filter_pass_rate(3, docs, bits) for bits in layout.prefix_bits
        )
        return (layout.query_us - rest) / descents

    per_probe_small = per_probe(small, 1e5)
    per_probe_large = per_probe(large, 1e7)
    assert per_probe_small == pytest.approx(costs.PER_PROBE_US)
    assert costs.PER_PROBE_US < per_probe_large < costs.MAX_PROBE_US
    sizes = [10.0**power for power in range(6, 14)]
    probes = [costs.probe_us(size) for size in sizes]
    assert probes == sorted(probes)
    assert probes[-1] == costs.MAX_PROBE_US


def test_crowded_layouts_follow_the_crowded_cost_model() -> None:
    """Where 4 or more entries share a query's prefix in a table, a query reads
    every bucket and searches them in numpy: a cost per bucket and per entry."""
    layout = one_level(5, 6).with_estimates(1e6)  # 6 tables of 10-11-bit prefixes
    candidates = layout.expected_candidates
    assert candidates is not None
    assert candidates >= layout.table_count * costs.CROWDED_PREFIX
    reads = sum(1e6 * 2.0**-bits * filter_pass_rate(5, 1e6, bits) for bits in layout.prefix_bits)
    assert layout.query_us == pytest.approx(
        costs.CROWDED_QUERY_US
        + 6 * costs.CROWDED_BUCKET_US
        + candidates * costs.CROWDED_ENTRY_US
        + reads * costs.CANDIDATE_READ_US
    )


def test_the_filter_pass_rate_is_the_binomial_share_within_k() -> None:
    # k = 3, a 1M run of 16-bit prefixes: 14 bucket bits, 1-byte tags, 6 filter bits.
    assert filter_pass_rate(3, 1e6, 16) == pytest.approx(42 / 64)
    # k >= 4 records 2k + 8 filter bits or more: few entries pass.
    assert filter_pass_rate(5, 1e6, 18) < 0.01
