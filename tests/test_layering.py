"""The house's rules, read from the source: no module imports, through any
chain, a module that imports it back (function-local and ``TYPE_CHECKING``
imports counted); nothing below the facade imports it; the facade holds
no state of its own. The layers between packages are checked by
import-linter (``lint-imports``, the contracts in pyproject.toml)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import simstore

PACKAGE = Path(simstore.__file__).parent
FACADE = {"simstore.store.facade", "simstore.store.opening", "simstore.Store", "simstore.open"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The simstore modules ``name`` imports anywhere in its source: at the
    top, inside functions, under ``TYPE_CHECKING``. ``from package import
    module`` counts as the module; ``from module import name`` as the module."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {imported for imported in found if imported in MODULES and imported != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def circles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return iter(found)


def test_circles_finds_a_circle_through_a_local_import() -> None:
    """The check itself: a circle closed by one import is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert list(circles(graph)) == [["a", "b", "c"]]
    graph["c"] = set()
    assert list(circles(graph)) == []


def test_no_module_imports_itself_back_through_any_chain() -> None:
    assert list(circles(GRAPH)) == []


def test_the_graph_sees_local_and_type_checking_imports() -> None:
    """Known edges of each kind are in the graph (or the check above would
    pass for the wrong reason)."""
    assert "simstore.engine.core" in GRAPH["simstore.engine.reads"]  # under TYPE_CHECKING
    assert "simstore.store.opening" in GRAPH["simstore.io.tables"]  # inside a function


def test_nothing_below_the_facade_imports_it() -> None:
    below = [name for name in MODULES if name.split(".")[1:2] and name.split(".")[1] in BELOW_THE_FACADE]
    assert below
    for name in below:
        assert not GRAPH[name] & FACADE, name


BELOW_THE_FACADE = {
    "engine",
    "commit",
    "layout",
    "index",
    "fingerprinting",
    "keys",
    "results",
    "errors",
    "options",
}


def test_the_facade_holds_no_engine_state_of_its_own() -> None:
    """Store keeps its engine and its path, nothing else: what it does is
    checking arguments and handing them to the rooms."""
    tree = ast.parse(MODULES["simstore.store.facade"].read_text(encoding="utf-8"))
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
    classes = [
        node.name
        for path in MODULES.values()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    ]
    assert not [name for name in classes if name.endswith("Mixin")]


def test_no_public_name_hides_a_subpackage() -> None:
    """``simstore.fingerprint`` (the function) once hid a subpackage of that
    name: ``import simstore.fingerprinting.text as t`` then failed. Every
    subpackage is reachable as an attribute of the package."""
    import importlib

    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        module = importlib.import_module(f"simstore.{folder.name}")
        assert getattr(simstore, folder.name) is module, folder.name
