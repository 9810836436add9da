"""The engine's rooms sit below the Store facade: none of them imports it
(or :mod:`simstore.opening`, which makes it), and none is a mixin of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import simstore

PACKAGE = Path(simstore.__file__).parent
ROOMS = (
    "engine",
    "inputs",
    "writes",
    "commit",
    "grouping",
    "others",
    "write_batch",
    "mailbox",
    "handoff",
    "checkpoints",
    "writelog",
    "reads",
    "batch",
    "maintenance",
    "checking",
    "delta",
    "tables",
    "runs",
    "catalog",
    "occupancy",
)
# The facade, and the names by which a module could reach it.
ABOVE = {"simstore.store", "simstore.opening", "simstore.Store", "simstore.open"}


def imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
            if node.module == "simstore":
                names.update(f"simstore.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_imports_nothing_above_it(room: str) -> None:
    source = (PACKAGE / f"{room}.py").read_text(encoding="utf-8")
    assert not imported_modules(source) & ABOVE
    classes = [node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)]
    assert not [name for name in classes if name.endswith("Mixin")]


def test_the_facade_holds_no_engine_state_of_its_own() -> None:
    """Store keeps its engine and its path, nothing else: what it does is
    checking arguments and handing them to the rooms."""
    store_source = (PACKAGE / "store.py").read_text(encoding="utf-8")
    tree = ast.parse(store_source)
    [store_class] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Store"]
    assigned = {
        target.attr
        for node in ast.walk(store_class)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    }
    assert assigned == {"path", "_engine"}
    assert not store_class.bases
