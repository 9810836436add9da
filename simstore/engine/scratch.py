"""Room to build a large run value in before it is put: pages the kernel may
write back, not anonymous memory.

py-lmdb cannot reserve a value and let it be filled in place
(``MDB_RESERVE``), so a join builds each column it puts in a buffer of its
own: at 100M entries, 800 MB. Held in anonymous memory, that buffer is what
a process cannot give back under pressure (nothing swaps it on most servers).
A value at least :data:`SCRATCH_BYTES` long is built instead in an unnamed
temporary file beside the store (Linux's ``O_TMPFILE``: it has no name, and
vanishes when closed or when the process dies), mapped shared: its pages are
the page cache's, written back and dropped as the kernel needs, the way
LMDB's own map is. Filling it costs what anonymous memory costs
(``benchmarks/HISTORY.md``, "Joins build their columns in scratch files").

The file's blocks are allocated before the map is touched, so a full disk
is an ``OSError`` here and never a ``SIGBUS`` at a page fault; then, or if no
file can be made beside the store, the value is held in memory as before.
"""

from __future__ import annotations

import mmap
import os
import tempfile

from simstore.engine.columns import MakeValue, ValueBuffer

#: Values at least this long are built in a scratch file.
SCRATCH_BYTES = 32 << 20


def value_buffer(size: int, directory: str, threshold: int | None = None) -> ValueBuffer:
    """A zeroed buffer of ``size`` bytes: a ``bytearray`` below
    ``threshold`` (:data:`SCRATCH_BYTES` unless given), else a scratch file
    in ``directory`` mapped shared (or a ``bytearray`` when no such file can
    be had)."""
    if size < (SCRATCH_BYTES if threshold is None else threshold):
        return bytearray(size)
    try:
        with tempfile.TemporaryFile(dir=directory, prefix=".simstore-scratch-") as scratch:
            os.posix_fallocate(scratch.fileno(), 0, size)
            # The map keeps the file; closing it here leaves nothing to close later.
            return mmap.mmap(scratch.fileno(), size)
    except OSError:
        return bytearray(size)


def in_directory_of(path: str, threshold: int | None = None) -> MakeValue:
    """:func:`value_buffer` with its scratch files beside the file at ``path``."""
    directory = os.path.dirname(os.path.abspath(path))

    def make(size: int) -> ValueBuffer:
        return value_buffer(size, directory, threshold)

    return make
