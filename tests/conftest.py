"""Shared fixtures: store paths in a temporary folder, stores that close."""

from __future__ import annotations

import os
import signal
import warnings
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


#: The test that ran last in this process (for the SIGINT check below).
_LAST_TEST: list[str | None] = [None]


@pytest.fixture(autouse=True)
def _sigint_as_at_a_terminal(request: pytest.FixtureRequest) -> None:
    """Python's SIGINT handler, unblocked, at every test's start: the command
    line's tests send SIGINT to their own process and expect a terminal's
    handling of it. A test run started as a background job of a shell
    without job control (``cmd &`` in a script) inherits SIGINT ignored, and
    Python leaves it so: set back silently at a process's first test. A
    test that leaves it ignored or blocked for the next is named in a
    warning."""
    handler = signal.getsignal(signal.SIGINT)
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if handler is not signal.default_int_handler or blocked:
        if _LAST_TEST[0] is not None:
            warnings.warn(
                f"SIGINT was {handler!r}{' and blocked' if blocked else ''} after {_LAST_TEST[0]} "
                "(set back to Python's handler)",
                stacklevel=1,
            )
        # Ignored first: a SIGINT left pending while blocked is dropped, not
        # raised here when it is unblocked.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _LAST_TEST[0] = request.node.nodeid


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
