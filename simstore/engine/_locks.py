"""Open-file-description locks (``F_OFD_SETLK``): byte-range locks owned by
an open file, not by the process, so that two opens in one process exclude
each other and closing another descriptor of the file releases nothing. The
write-ahead log (:mod:`simstore.engine.wal`) and the writers' mailbox
(:mod:`simstore.commit.mailbox`) lock their files with them."""

from __future__ import annotations

import os
import struct


def ofd_flock(kind: int, start: int) -> bytes:
    # struct flock on Linux (x86-64 and arm64): type, whence, start, len, pid
    # (0 for open-file-description locks), padded to 32 bytes.
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, start, 1, 0)
