"""A hook of ``mkdocs build``: the room map of the package, read from the
package and module docstrings, in place of a ``<!-- room map -->`` line, so
that the page says what the code says.

Each package is a heading with its docstring's first paragraph; each module
a row with its docstring's first sentence.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[2] / "simstore"
MARKER = "<!-- room map -->"


def _first_paragraph(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(docstring.split("\n\n")[0].split())


def _first_sentence(path: Path) -> str:
    paragraph = _first_paragraph(path)
    found = re.match(r"(.+?\.)(\s|$)", paragraph)
    return found.group(1) if found else paragraph


def room_map() -> str:
    lines = ["| module | what it holds |", "|---|---|"]
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name != "__init__.py":
            lines.append(f"| `simstore/{path.name}` | {_first_sentence(path)} |")
    sections = ["\n".join(lines)]
    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        rows = ["| module | what it holds |", "|---|---|"]
        for path in sorted(folder.glob("*.py")):
            if path.name != "__init__.py":
                rows.append(f"| `{path.name}` | {_first_sentence(path)} |")
        head = f"### `simstore/{folder.name}/`\n\n{_first_paragraph(folder / '__init__.py')}"
        sections.append(head + ("\n\n" + "\n".join(rows) if len(rows) > 2 else ""))
    return "\n\n".join(sections)


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, room_map())
