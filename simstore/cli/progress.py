"""Progress bars and notes on standard error: a bar on a terminal of any reported size, a
line every LOG_LINE_SECONDS off one when --progress asks, nothing with -q."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from simstore.cli.common import PROG
from simstore.io.readers import (
    Input,
    ReadProgress,
)

#: The width of a bar where the terminal gives none (a pty of size 0, as
#: under `script` or a CI runner's) and ``COLUMNS`` names none either.
FALLBACK_COLUMNS = 80


FALLBACK_ROWS = 24


#: Seconds between the lines of ``--progress`` bars on a stderr that is not a terminal.
LOG_LINE_SECONDS = 10.0


def progress(args: argparse.Namespace, **options: Any) -> Any:
    """A tqdm bar on stderr. None with ``-q``, nor when stderr is not a
    terminal unless ``--progress`` asks for one; then (a CI log, a file)
    each refresh is a line of its own, one every :data:`LOG_LINE_SECONDS`.
    On a terminal that reports no width the bar is ``COLUMNS`` (else 80)
    wide, where tqdm drew nothing at all."""
    from tqdm import tqdm  # lazily: `simstore stats` should start fast

    quiet = bool(getattr(args, "quiet", False))
    asked = bool(getattr(args, "progress", False))
    terminal = sys.stderr.isatty()
    if quiet or not (terminal or asked):
        return tqdm(file=sys.stderr, disable=True, **options)
    if not terminal:
        return tqdm(
            file=_LineStream(sys.stderr),
            ncols=_columns_from_environment(),
            mininterval=LOG_LINE_SECONDS,
            ascii=True,
            **options,
        )
    if _terminal_columns(sys.stderr) > 0:
        return tqdm(file=sys.stderr, dynamic_ncols=True, **options)
    # tqdm takes a terminal's size of 0 x 0 for -1 rows and draws no line;
    # the rows matter only to bars stacked in several positions.
    return tqdm(file=sys.stderr, ncols=_columns_from_environment(), nrows=FALLBACK_ROWS, **options)


def _terminal_columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` is, 0 if it reports none."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def _columns_from_environment() -> int:
    """``COLUMNS`` if it holds a width, else :data:`FALLBACK_COLUMNS`."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return FALLBACK_COLUMNS
    return columns if columns > 0 else FALLBACK_COLUMNS


class _LineStream:
    """A stream for tqdm that writes each refresh of a bar as a line of its
    own: tqdm redraws in place with a carriage return, which a log file or a
    CI log shows as one ever longer line."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.encoding = getattr(stream, "encoding", "utf-8")

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip()
        if line:
            self._stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


class ReadingBar:
    """The "reading" bar: the bytes of the inputs where their size is known
    (so tqdm shows a total and an ETA), with the documents read as a
    postfix; the documents alone otherwise (stdin from a pipe)."""

    def __init__(self, args: argparse.Namespace, inputs: Sequence[Input]) -> None:
        self.tracker = ReadProgress.of(inputs)
        self.documents = 0
        if self.tracker.total is None:
            self.bar = progress(args, desc="reading", unit="doc")
        else:
            self.bar = progress(
                args, desc="reading", total=self.tracker.total, unit="B", unit_scale=True, unit_divisor=1024
            )

    def __enter__(self) -> ReadingBar:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.bar.__exit__(*exc_info)

    def update(self, documents: int) -> None:
        """``documents`` more were read."""
        self.documents += documents
        if self.tracker.total is None:
            self.bar.update(documents)
            return
        self.bar.set_postfix_str(f"{self.documents} docs", refresh=False)
        self.bar.update(self.tracker.position() - self.bar.n)


def table_progress(args: argparse.Namespace, description: str) -> tuple[Any, Callable[[int, int], None]]:
    bar = progress(args, desc=description, unit="table")

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    return bar, update


def note(args: argparse.Namespace, message: str) -> None:
    """A line on stderr unless ``-q``."""
    if not getattr(args, "quiet", False):
        print(f"{PROG}: {message}", file=sys.stderr)
