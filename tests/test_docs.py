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


def python_section_example(heading: str = "Using it from Python") -> str:
    """The first ```python block of the README's section ``heading``."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(f"## {heading}") :]
    section = section[: section.index("\n## ", 1)]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def checked_program(example: str) -> tuple[str, dict[int, str]]:
    """The example with every line followed by a ``# -> SHOWN`` comment turned into
    ``_seen.append((n, value))``; returns it and SHOWN by n."""
    lines = example.splitlines()
    shown: dict[int, str] = {}
    for number, line in enumerate(lines):
        if line.strip().startswith("# -> "):
            statement = lines[number - 1]
            expression = statement.split("  #", 1)[0].strip()
            indent = statement[: len(statement) - len(statement.lstrip())]
            lines[number - 1] = f"{indent}_seen.append(({number}, {expression}))"
            shown[number] = line.strip().removeprefix("# -> ")
    return "\n".join(lines) + "\n", shown


def run_checked(example: str) -> tuple[dict[int, object], dict[int, str]]:
    """Run a README example (in the current directory); what each line followed by
    a ``# -> `` comment returned, and what the comment shows, by line number."""
    program, shown = checked_program(example)
    namespace: dict[str, object] = {"_seen": []}
    exec(compile(program, "README.md", "exec"), namespace)
    seen = dict(namespace["_seen"])  # type: ignore[call-overload]
    assert set(seen) == set(shown)
    return seen, shown


def test_python_example_runs_and_shows_what_it_returns(tmp_path: Path, monkeypatch: object) -> None:
    """The Python section's example runs, and each `# -> ` line matches the repr of what
    the line above returns (`...` is any text): the query results were listed in the wrong
    order."""
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.chdir(tmp_path)
    example = python_section_example()
    for name in ("add_if_new", "near_duplicate_pairs", "clusters"):
        assert f"store.{name}(" in example
    seen, shown = run_checked(example)
    assert len(shown) >= 5, "the example shows what query, add_if_new, pairs and clusters return"
    for number, pattern in shown.items():
        regex = ".*?".join(re.escape(part) for part in pattern.split("..."))
        assert re.fullmatch(regex, repr(seen[number])), f"README shows {pattern}, got {seen[number]!r}"


def test_newcomer_commands_use_their_own_venvs() -> None:
    """The quick start's two commands (install and run; run the tests) shared one .venv."""
    text = README.read_text(encoding="utf-8")
    quick_start = text[text.index("## Quick start") : text.index("\n## ", text.index("## Quick start") + 1)]
    venvs = re.findall(r"python3 -m venv (\S+) && \. (\S+)/bin/activate", quick_start)
    assert len(venvs) == 2, venvs
    assert all(created == activated for created, activated in venvs)
    assert len({created for created, _ in venvs}) == 2, venvs


def test_extras_are_installed_from_the_clone() -> None:
    """simstore is installed from its clone, so an extra is `pip install '.[dask]'`;
    `pip install 'simstore[dask]'` would look for a package that is not published."""
    text = README.read_text(encoding="utf-8")
    assert "install 'simstore[" not in text
    assert "pip install '.[dask]'" in text


def test_every_public_name_and_verb_is_in_the_docs() -> None:
    """The documentation site names every public name of simstore and every verb."""
    import simstore

    docs = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "docs").glob("*.md"))
    missing = [name for name in simstore.__all__ if not re.search(rf"\b{re.escape(name)}\b", docs)]
    assert not missing, f"docs/ never names: {', '.join(missing)}"
    verbs = [verb for verb in VERBS if f"simstore {verb}" not in docs]
    assert not verbs, f"docs/ has no `simstore VERB` for: {', '.join(verbs)}"


def test_the_quick_start_prints_what_the_readme_shows(
    tmp_path: Path, capsys: object, monkeypatch: object
) -> None:
    """The README's first command runs, and prints the summary the README shows."""
    import pytest

    from simstore.cli import main

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    text = README.read_text(encoding="utf-8")
    command = example_commands(text)[0].split()
    output = command.index("--output")
    command[output + 1] = str(tmp_path / "kept.jsonl")
    monkeypatch.chdir(ROOT)
    assert main(command) == 0
    printed = capsys.readouterr().out.splitlines()  # type: ignore[attr-defined]
    shown = text[text.index("```text\n", text.index("## Quick start")) + len("```text\n") :]
    shown_lines = shown[: shown.index("```")].splitlines()
    assert [line for line in printed if not line.startswith("output")] == [
        line for line in shown_lines if not line.startswith("output")
    ]


def test_crawler_example_runs_and_shows_what_it_returns(tmp_path: Path, monkeypatch: object) -> None:
    """The crawler section's example (threads sharing commits, a batch) runs, and its
    `# -> ` lines match what the lines above return."""
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.chdir(tmp_path)
    example = python_section_example("A crawler's durable writes")
    assert "ThreadPoolExecutor" in example
    assert "store.batch()" in example
    seen, shown = run_checked(example)
    for number, pattern in shown.items():
        assert repr(seen[number]) == pattern, f"README shows {pattern}, got {seen[number]!r}"
