"""The ``simstore`` command line; ``main(argv) -> int``.

Verbs: ``add``, ``query``, ``dedup``, ``stats``, ``plan``, ``relayout``,
``check``, ``merge``, ``compact``, ``migrate``, ``remove``, ``export``, ``import``. Each verb is a
``configure`` function (its arguments) and a ``run`` function (``args -> exit
status``), listed once in :data:`VERBS`; a new verb is two functions and one
line there. The verbs live in :mod:`simstore.cli.store_verbs`,
:mod:`simstore.cli.dedup` and :mod:`simstore.cli.maintain`, what they share in :mod:`simstore.cli.common`.

Exit status: 0 success, 1 a simstore error or bad input (one line on stderr,
``simstore: error: ...``, no traceback), 2 a usage error (argparse's usage
message), 130 interrupted by Ctrl-C (one line saying what was committed), 143 by SIGTERM,
141 (quietly) when the reader of stdout went away (``simstore export STORE | head``).
Progress bars go to stderr when it is a terminal and ``-q`` is not given,
or when ``--progress`` asks for them (a line each, in a log). Read verbs take ``--json``.

Writes are all or nothing by default: ``add`` and ``import`` read, check and
fingerprint the whole input first and write it in one transaction, so with
``--on-error fail`` a bad line leaves the store exactly as it was, and an
interrupted run commits nothing. ``--batch-size N`` commits every ``N``
documents instead (bounded memory); each batch is all or nothing, and a
failure reports how many documents the earlier batches committed. Re-running
the same input is safe either way: adding an existing key replaces it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

from simstore.cli.common import PROG
from simstore.cli.dedup import configure_dedup, run_dedup
from simstore.cli.maintain import configure_compact, configure_migrate, run_compact, run_migrate
from simstore.cli.plan import configure_plan, run_plan
from simstore.cli.progress import LOG_LINE_SECONDS
from simstore.cli.store_verbs import (
    configure_add,
    configure_export,
    configure_import,
    configure_query,
    configure_relayout,
    configure_remove,
    configure_stats,
    configure_store_only,
    run_add,
    run_check,
    run_export,
    run_import,
    run_merge,
    run_query,
    run_relayout,
    run_remove,
    run_stats,
)
from simstore.errors import SimstoreError
from simstore.fingerprinting.fingerprinter import ShortTextWarning
from simstore.version import __version__

#: The exit status when the reader of stdout went away: 128 + SIGPIPE, what a
#: shell reports for a tool that SIGPIPE stopped.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

# ---------------------------------------------------------------- the parser


@dataclass(frozen=True)
class Verb:
    """One verb: its help line, its arguments, what it runs, and whether it
    only reads (read verbs take ``--json``)."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    reads: bool = False
    json_option: bool = False


VERBS: dict[str, Verb] = {
    "add": Verb("add documents from files to a store", configure_add, run_add, json_option=True),
    "query": Verb("find stored documents near a text or fingerprint", configure_query, run_query, reads=True),
    "dedup": Verb(
        "deduplicate files: keep one document per cluster, or list pairs or clusters",
        configure_dedup,
        run_dedup,
        reads=True,
    ),
    "stats": Verb("print a store's size and layout", configure_stats, run_stats, reads=True),
    "plan": Verb("rank the table layouts for k and a corpus size", configure_plan, run_plan, reads=True),
    "relayout": Verb("rebuild a store's tables in another layout", configure_relayout, run_relayout),
    "check": Verb("verify a store's invariants", configure_store_only, run_check, reads=True),
    "merge": Verb("fold a store's delta into its tables", configure_store_only, run_merge),
    "compact": Verb(
        "join a store's table runs into one (and optionally shrink its file, or write a compacted copy)",
        configure_compact,
        run_compact,
        json_option=True,
    ),
    "migrate": Verb(
        "convert a simstore 0.1 (format 1) store into a new store",
        configure_migrate,
        run_migrate,
        json_option=True,
    ),
    "remove": Verb("remove documents by key", configure_remove, run_remove),
    "export": Verb(
        "write a store's settings, keys, fingerprints and metadata as JSONL", configure_export, run_export
    ),
    "import": Verb("add documents from `simstore export` JSONL", configure_import, run_import),
}


class _VerbParser(argparse.ArgumentParser):
    """A verb's parser, which takes its options and positionals in any order.

    argparse's own order rules fail on an optional positional after an
    option: ``simstore query STORE -k 2 TEXT`` gave ``unrecognized arguments:
    TEXT``, as ``STORE`` alone had already filled both positionals.
    """

    _parsing = False

    def parse_known_args(  # type: ignore[override]  # typeshed overloads on the namespace type
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._parsing:  # parse_known_intermixed_args calls back here
            return super().parse_known_args(args, namespace)
        self._parsing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A persistent near-duplicate index: add documents, query them, deduplicate files.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=_VerbParser)
    for name, verb in VERBS.items():
        sub = verbs.add_parser(name, help=verb.help, description=verb.help[:1].upper() + verb.help[1:] + ".")
        verb.configure(sub)
        chatter = sub.add_mutually_exclusive_group()
        chatter.add_argument("-q", "--quiet", action="store_true", help="no progress bars or notes")
        chatter.add_argument(
            "--progress",
            action="store_true",
            help="progress bars even when stderr is not a terminal (a CI log): a line every "
            f"{LOG_LINE_SECONDS:g} seconds",
        )
        if verb.reads or verb.json_option:
            sub.add_argument("--json", action="store_true", help="print the result as JSON")
        sub.set_defaults(run=verb.run, parser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (usage errors exit 2 via
    argparse's ``SystemExit``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _interrupts(), warnings.catch_warnings():
            return _run(args)
    except KeyboardInterrupt:
        # Ctrl-C just as the run ended, after what it did was reported (or
        # while its handling of Ctrl-C was set up or put away): no traceback.
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 143 if _terminated.is_set() else 130


def _run(args: argparse.Namespace) -> int:
    """Run the verb ``args`` names; errors and Ctrl-C as one line on stderr and an exit status."""
    # simstore's warnings as the command line's one-liners (not Python's
    # file:line and source), and the notes -q asks to leave out.
    warnings.showwarning = _show_warning
    if getattr(args, "quiet", False):
        warnings.simplefilter("ignore", ShortTextWarning)
    try:
        status: int = args.run(args)
        return status
    except (SimstoreError, OSError) as exc:
        if isinstance(exc, BrokenPipeError) or getattr(exc, "errno", None) == errno.EPIPE:
            # The reader went away (`simstore export STORE | head`): that is
            # how such a pipeline ends, not an error. Stop quietly with the
            # status a tool killed by SIGPIPE gives (128 + 13), as `cat` does.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_BROKEN_PIPE
        print(f"{PROG}: error: {_message(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        # A verb that committed part of its work says how much (add --batch-size).
        message = str(exc) or "interrupted; nothing of the unfinished transaction was written"
        print(f"{PROG}: {message}", file=sys.stderr)
        return 143 if _terminated.is_set() else 130


# Set when SIGTERM (not Ctrl-C) stopped the run: it exits 143, not 130.
_terminated = threading.Event()


@contextlib.contextmanager
def _interrupts() -> Iterator[None]:
    """The first Ctrl-C or SIGTERM unwinds (transactions abort, temporary
    files and stores go); a second one, while that runs, exits at once
    instead of printing a traceback from the middle of the clean-up. Exiting
    at once is safe: LMDB keeps every committed transaction and drops the
    unfinished one. (Python's own SIGTERM would stop the process without
    the clean-up, leaving ``dedup``'s temporary store behind.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _terminated.clear()

    def exit_at_once(signum: int, frame: FrameType | None) -> None:
        os.write(2, f"{PROG}: interrupted again; exiting at once\n".encode())
        os._exit(143 if signum == signal.SIGTERM else 130)

    def first(signum: int, frame: FrameType | None) -> None:
        for handled in previous:
            signal.signal(handled, exit_at_once)
        if signum == signal.SIGTERM:
            _terminated.set()
        raise KeyboardInterrupt

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        # One ignored on purpose by whoever started us (a background job) stays so.
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, first)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: installed from C, which Python cannot restore
                signal.signal(signum, handler)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    *args: object,
    **kwargs: object,
) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _message(exc: BaseException) -> str:
    """One line without Python's wording: an ``OSError`` (simstore's too) as
    ``FILE: what`` rather than ``[Errno 2] ...``."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
