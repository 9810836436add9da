"""Shared fixtures: store paths in a temporary folder, stores that close."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _counts
import pytest

import simstore


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Cases marked ``soak`` (more seeds of what the default run covers) run
    only with ``SIMSTORE_SOAK=1`` or ``-m soak``: the default run keeps CI
    within its time budget."""
    if os.environ.get("SIMSTORE_SOAK") or "soak" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="more seeds: set SIMSTORE_SOAK=1 (or -m soak) to run them")
    for item in items:
        if item.get_closest_marker("soak"):
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand this process's reliability counts to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["reliability_counts"] = dict(_counts.COUNTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the xdist controller: a worker's counts, added to the run's."""
    _counts.COUNTS.update(getattr(node, "workeroutput", {}).get("reliability_counts", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _counts.COUNTS:
        listed = ", ".join(f"{name}={value}" for name, value in sorted(_counts.COUNTS.items()))
        terminalreporter.write_line(f"reliability counts: {listed}")


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    return str(tmp_path / "test.simstore")


@pytest.fixture
def store(store_path: str) -> Iterator[simstore.Store]:
    with simstore.open(store_path, k=3) as opened:
        yield opened
