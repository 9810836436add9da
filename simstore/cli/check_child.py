"""Checking a store in a child process, for ``simstore check``.

LMDB keeps no page checksums, and its B-tree code asserts rather than
returns an error when a page it reads is not what the tree says it is: on a
damaged file, ``Store.check()`` can end the whole process with SIGABRT while
it walks a table. A checking tool must not die of the damage it is looking
for, so the command line runs the check in a spawned child and reports the
child's death as damage.
"""

from __future__ import annotations

import multiprocessing
import signal
from multiprocessing.connection import Connection

from simstore.errors import CorruptStoreError, SimstoreError


def check_in_child(path: str) -> list[str]:
    """``Store.check()`` of the store at ``path``, opened read-only in a
    spawned child process.

    Returns the problems found; a child killed by the damage (LMDB's abort)
    is one more problem, described. Raises ``CorruptStoreError`` with the
    child's message if the check itself raised.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_check, args=(path, sender), name="simstore-check")
    child.start()
    sender.close()
    try:
        outcome: tuple[str, object] | None = receiver.recv()
    except EOFError:
        outcome = None
    finally:
        receiver.close()
        child.join()
    if outcome is None:
        return [_death_message(child.exitcode)]
    kind, payload = outcome
    if kind == "error":
        raise CorruptStoreError(str(payload))
    return [str(problem) for problem in payload]  # type: ignore[attr-defined]


def _check(path: str, sender: Connection) -> None:
    """In the child: open, check, send ``("problems", [...])`` or ``("error", message)``."""
    from simstore.store.opening import open as open_store

    try:
        with open_store(path, "r") as store:
            sender.send(("problems", store.check()))
    except SimstoreError as exc:
        sender.send(("error", str(exc)))
    finally:
        sender.close()


def _death_message(exit_code: int | None) -> str:
    if exit_code is not None and exit_code < 0:
        try:
            cause = signal.Signals(-exit_code).name
        except ValueError:
            cause = f"signal {-exit_code}"
    else:
        cause = f"exit status {exit_code}"
    return (
        f"reading the file stopped the checking process ({cause}): its B-tree pages are damaged "
        "(LMDB keeps no page checksums and aborts on a page it cannot make sense of)"
    )
