"""The layout verbs of the command line (plan, relayout) and stats --skew."""

from __future__ import annotations

import json

import numpy as np
import pytest

import simstore
from simstore.cli import main
from simstore.index import multi_index


def test_plan_prints_the_ranked_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-k", "3", "--docs", "1e9", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    layouts = [entry for entry in entries if entry["format"] == 2]
    assert layouts == entries[: len(layouts)]  # Manku's layouts first, then the schemes
    assert layouts == sorted(layouts, key=lambda layout: layout["query_us"])
    assert {"1-level 5 blocks", "2-level 4x16 + 4x12"} <= {layout["name"] for layout in layouts}
    assert main(["plan", "-k", "3", "--docs", "1e6", "--limit", "2"]) == 0
    assert "1-level 5 blocks" in capsys.readouterr().out


def test_plan_refuses_an_impossible_k(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-k", "40", "--docs", "1e6"]) == 1
    assert "simstore: error:" in capsys.readouterr().err


def test_relayout_changes_the_layout_and_keeps_the_documents(
    store_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fingerprints = np.random.default_rng(5).integers(0, 2**64, 300, dtype=np.uint64)
    with simstore.open(store_path, k=3) as store:
        store.add_many([f"d{i}" for i in range(300)], fingerprints)
    assert main(["relayout", store_path, "--blocks", "6"]) == 0
    with simstore.open(store_path, "r") as store:
        assert (store.blocks, len(store.tables), len(store)) == (6, 20, 300)
        assert store.check() == []
    assert main(["relayout", store_path, "--docs", "1e6", "-q"]) == 0
    assert main(["stats", store_path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"] == "multi-index [32, 32] r[1, 1]"


def test_stats_skew_reports_hot_prefixes_and_degenerate_fingerprints(
    store_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with simstore.open(store_path, k=3) as store:
        store.add_many([f"z{i}" for i in range(20)], np.zeros(20, dtype=np.uint64))
        store.add_many([f"r{i}" for i in range(50)], np.arange(1, 51, dtype=np.uint64) << np.uint64(40))
        stats = store.stats(skew=True)
    assert stats.degenerate is not None
    assert stats.skew is not None
    assert stats.degenerate.zeros == 20
    assert stats.degenerate.shared[0] == (0, 20)
    assert max(table.largest_range for table in stats.skew) >= 20
    assert main(["stats", store_path, "--skew", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["zero_fingerprints"] == 20
    assert len(summary["hot_prefixes"]) == stats.tables


def test_k_is_spelled_either_way(capsys: pytest.CaptureFixture[str]) -> None:
    """`simstore plan --k 3 --docs 1e9` (the issue's spelling) and `-k 3` are the same."""
    assert main(["plan", "--k", "3", "--docs", "1e9", "--limit", "1"]) == 0
    long_form = capsys.readouterr().out
    assert main(["plan", "-k", "3", "--docs", "1e9", "--limit", "1"]) == 0
    assert capsys.readouterr().out == long_form


def test_plan_lists_the_multi_index_schemes_and_marks_the_one_a_store_gets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A new store is laid out as a multi-index scheme at every k: plan shows
    which one, says it is a new store's layout and that Manku's are opt-in;
    --json lists the schemes after Manku's layouts, with the same keys."""
    assert main(["plan", "-k", "8", "--docs", "1e7", "--limit", "3"]) == 0
    out = capsys.readouterr().out
    chosen = multi_index.choose(8, 1e7).label()
    assert f"{chosen} " in out
    assert "<- chosen" in out.split(chosen, 1)[1].splitlines()[0]
    assert "a new store's layout" in out
    assert main(["plan", "-k", "3", "--docs", "1e6", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "a new store's layout" in out
    assert "format 2: opt-in" in out
    for k, chosen_somewhere in ((5, True), (3, True)):
        assert main(["plan", "-k", str(k), "--docs", "1e7", "--json"]) == 0
        entries = json.loads(capsys.readouterr().out)
        schemes = [entry for entry in entries if entry["format"] == 3]
        assert schemes
        assert {key for entry in entries for key in entry if entry["format"] == 2} <= set(schemes[0])
        assert any(entry["chosen"] for entry in schemes) == chosen_somewhere
        label = multi_index.choose(k, 1e7).label()
        assert [entry["name"] for entry in schemes if entry["chosen"]] == (
            [f"multi-index {label}"] if chosen_somewhere else []
        )
