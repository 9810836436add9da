"""Shared fixtures: store paths in a temporary folder, stores that close."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import simstore


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    return str(tmp_path / "test.simstore")


@pytest.fixture
def store(store_path: str) -> Iterator[simstore.Store]:
    with simstore.open(store_path, k=3) as opened:
        yield opened
