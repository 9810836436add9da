"""A fingerprinting worker process (see :mod:`simstore.fingerprinting.pool`).

Started as ``python -c ... <package root> <parent pid>``; reads
``[fingerprint settings, with sketches]``, answers ``["ready"]``, then
answers each request ``[start, texts]`` with ``["ok", <u8 bytes>, short
count, sketch bytes or nil]``, ``["invalid", message]`` (an unusable text) or
``["error", message]``, until stdin ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
import traceback

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PARENT_POLL_SECONDS = 1.0


def die_with_parent(parent_pid: int) -> None:
    """Make this process end when ``parent_pid`` does, even in the middle of
    a chunk: the kernel's parent-death signal on Linux, a watcher thread
    polling the parent pid elsewhere (an orphan is re-parented)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl (an unusual libc): the watcher below still works
    # The parent may have died before prctl took effect, and the signal is
    # Linux-only: watch the parent pid as well (cheap: one call a second).
    if os.getppid() != parent_pid:
        os._exit(1)
    if sys.platform != "win32":  # Windows never re-parents; stdin's end stops the worker there

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(_PARENT_POLL_SECONDS)
            os._exit(1)

        threading.Thread(target=watch, name="simstore-parent-watch", daemon=True).start()


def main(parent_pid: int) -> int:
    die_with_parent(parent_pid)
    # The protocol owns the real stdout; anything printed (a library's chatter)
    # goes to stderr instead of corrupting it.
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr
    protocol_in = sys.stdin.buffer

    import numpy as np

    from simstore.errors import InvalidValueError
    from simstore.fingerprinting.fingerprinter import Fingerprinter
    from simstore.fingerprinting.pool import read_frame, write_frame

    first = read_frame(protocol_in)
    if first is None:
        return 0
    try:
        settings, sketches = first
        fingerprinter = Fingerprinter.from_settings(settings)
    except Exception as exc:
        write_frame(protocol_out, ["error", f"{type(exc).__name__}: {exc}"])
        return 1
    write_frame(protocol_out, ["ready"])
    while (request := read_frame(protocol_in)) is not None:
        start, texts = request
        try:
            values, short, rows = fingerprinter._fingerprint_chunk(texts, start, sketches=sketches)
            sketch_bytes = None if rows is None else np.ascontiguousarray(rows, dtype=np.uint8).tobytes()
            reply: list[object] = ["ok", np.asarray(values, dtype="<u8").tobytes(), short, sketch_bytes]
        except InvalidValueError as exc:
            reply = ["invalid", str(exc)]
        except Exception:
            reply = ["error", traceback.format_exc()]
        write_frame(protocol_out, reply)
    return 0
