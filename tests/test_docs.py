"""The docs test: every command-line verb is documented in the README with an
example, and the README's first command runs on the shipped corpus.
"""

from __future__ import annotations

import re
from pathlib import Path

from simstore.cli import VERBS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def example_commands(markdown: str) -> list[str]:
    """Every line of a fenced code block that runs ``simstore VERB``, in order."""
    commands = []
    in_block = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            found = re.search(r"(?:^|[|&;]\s*)simstore\s+(\S.*)$", line.strip())
            if found:
                commands.append(found.group(1))
    return commands


def undocumented(markdown: str) -> list[str]:
    """Verbs with no ``simstore VERB`` example in a code block."""
    examples = example_commands(markdown)
    return [verb for verb in VERBS if not any(command.split()[0] == verb for command in examples)]


def test_every_verb_has_an_example() -> None:
    """A verb added to simstore.cli.VERBS without an example in the README fails here."""
    missing = undocumented(README.read_text(encoding="utf-8"))
    assert not missing, f"README.md has no `simstore VERB` example for: {', '.join(missing)}"


def test_readme_starts_with_the_corpus_dedup() -> None:
    """The newcomer's first command dedups the shipped corpus, which exists."""
    text = README.read_text(encoding="utf-8")
    first = example_commands(text)[0]
    assert first.startswith("dedup examples/corpus/"), first
    corpus = first.split()[1]
    assert (ROOT / corpus).is_file()


def test_undocumented_finds_a_missing_verb() -> None:
    text = "```sh\nsimstore add s f\nsimstore stats s\n```\n"
    assert "add" not in undocumented(text)
    assert "query" in undocumented(text)
