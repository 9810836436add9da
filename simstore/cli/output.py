"""Where the command line writes: ``-o OUT``, checked before any input is read
and opened without harming what is at the path.

- A regular file, or a path where nothing exists yet, is written to a
  temporary file beside it and renamed over it at the end, so a failed
  command leaves the old file (or none), never half a file.
- A symlink is never replaced: the rename happens at the file it points to,
  and the link stays.
- Anything that is not a regular file is written straight through: ``-``
  (stdout), character devices (``/dev/null``) and FIFOs (``-o >(gzip >
  x.gz)``). ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and
  ``/proc/self/fd/N`` name a descriptor this process already holds, so they
  are written through that descriptor, with the offset and append mode the
  shell gave it.
- A writable file in a directory where no file can be created is written in
  place (there is no room for a temporary file beside it).
- A new file gets the mode ``open()`` would give it, 0666 less the umask
  (0644 by default), as ``cp`` and ``sort -o`` do; a replaced file keeps its
  mode.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from simstore.cli.cleanup import remove_file, signals_held
from simstore.cli.common import CommandError
from simstore.io.inputs import STDIN

#: Paths that name a descriptor of this process (``/dev/stdout`` links to
#: ``/proc/self/fd/1``, whose target is not a path one can rename over).
_DESCRIPTOR_PATHS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTOR_PATTERN = re.compile(r"/(?:dev/fd|proc/self/fd|proc/thread-self/fd)/(\d+)")


@dataclass(frozen=True)
class Output:
    """An output as checked by :func:`resolve_output`.

    ``given`` is the path as on the command line (for messages); ``path`` is
    where a regular file is renamed to (a symlink's resolved target);
    ``descriptor`` is set for ``-`` and ``/dev/stdout``-like paths; ``direct``
    means write straight into ``path`` (a device or a FIFO).
    """

    given: str
    path: str
    descriptor: int | None = None
    direct: bool = False

    @property
    def is_stdout(self) -> bool:
        """Whether the data goes to this process's stdout (so a summary must not)."""
        if self.descriptor is not None:
            return self.descriptor == 1
        try:
            return os.path.samestat(os.stat(self.path), os.fstat(1))
        except (OSError, ValueError):
            return False


def resolve_output(given: str) -> Output:
    """Check ``-o OUT`` and decide how to write it; call it before reading input.

    Raises:
        CommandError: naming ``given``, when ``OUT`` is a directory, its
            directory does not exist, or a descriptor it names is not open.
    """
    if given == STDIN:
        return Output(given, given, descriptor=1)
    descriptor = _descriptor_of(given)
    if descriptor is not None:
        try:
            os.fstat(descriptor)
        except OSError:
            raise CommandError(f"cannot write {given}: descriptor {descriptor} is not open") from None
        return Output(given, given, descriptor=descriptor)
    try:
        status = os.stat(given)  # follows symlinks
    except FileNotFoundError:
        status = None
    except OSError as exc:
        raise CommandError(f"cannot write {given}: {exc.strerror or exc}") from None
    if status is not None:
        if stat.S_ISDIR(status.st_mode):
            raise CommandError(f"cannot write {given}: it is a directory")
        if not stat.S_ISREG(status.st_mode):
            return Output(given, given, direct=True)
    # A regular file, or nothing yet: rename at the end of the symlink chain.
    target = os.path.realpath(given)
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        if os.path.islink(given):
            raise CommandError(
                f"cannot write {given}: it links to {target}, whose directory {folder} does not exist"
            )
        shown = os.path.dirname(given) or "."
        raise CommandError(f"cannot write {given}: the directory {shown} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        # No temporary file can go beside it; a file we may write is written in place.
        if status is not None and os.access(target, os.W_OK):
            return Output(given, target, direct=True)
        raise CommandError(f"cannot write {given}: no permission to create files in {folder}")
    return Output(given, target)


def refuse_clobbers(outputs: Sequence[tuple[str, Output]], sources: Sequence[tuple[str, str]]) -> None:
    """Refuse outputs that would overwrite what the command reads, or each other.

    Call it before reading any input. An output that is a regular file (or
    a path where nothing exists yet) must not be the same file as a source
    (compared by resolved path, and by device and inode where both exist,
    so hard links and symlinks count), nor lie inside a source directory
    (it would be read back), nor be another output. Two outputs to this
    process's stdout are refused too: their lines would be mixed. Devices
    and FIFOs are written straight through, so they clobber no file.

    Args:
        outputs: each output with the option that named it (``"-o"``).
        sources: what the command reads, each with what it is (``"the
            input"``, ``"the store (--store)"``) and its path; ``-`` is
            skipped.

    Raises:
        CommandError: naming both paths; nothing was read or written.
    """
    for index, (option, output) in enumerate(outputs):
        for other_option, other in outputs[:index]:
            if _same_output(output, other):
                raise CommandError(
                    f"{other_option} {other.given} and {option} {output.given} are the same "
                    f"{'stream' if output.descriptor is not None else 'file'}; give each output "
                    "its own (nothing was read or written)"
                )
        if not _writes_a_file(output):
            continue
        for what, source in sources:
            if source == STDIN:
                continue
            if _same_file(output.path, source):
                raise CommandError(
                    f"{option} {output.given} is the same file as {what} {source}; refusing to "
                    "overwrite it (nothing was read or written)"
                )
            folder = os.path.realpath(source)
            if os.path.isdir(folder) and os.path.commonpath([folder, output.path]) == folder:
                raise CommandError(
                    f"{option} {output.given} is inside {what} {source}, a directory this command "
                    "reads; write it elsewhere (nothing was read or written)"
                )


def _writes_a_file(output: Output) -> bool:
    """Whether ``output`` replaces or creates a regular file (not a stream, device or FIFO)."""
    if output.descriptor is not None:
        return False
    try:
        return stat.S_ISREG(os.stat(output.path).st_mode)
    except FileNotFoundError:
        return True


def _same_output(output: Output, other: Output) -> bool:
    if output.descriptor is not None or other.descriptor is not None:
        return output.is_stdout and other.is_stdout
    return _writes_a_file(output) and _same_file(output.path, other.path)


def _same_file(path: str, other: str) -> bool:
    """Whether two paths name one file: the same resolved path, or (both
    existing) the same device and inode."""
    if os.path.realpath(path) == os.path.realpath(other):
        return True
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def _descriptor_of(path: str) -> int | None:
    absolute = os.path.normpath(os.path.abspath(path))
    if absolute in _DESCRIPTOR_PATHS:
        return _DESCRIPTOR_PATHS[absolute]
    found = _DESCRIPTOR_PATTERN.fullmatch(absolute)
    return int(found.group(1)) if found else None


@contextlib.contextmanager
def output_stream(output: Output | str, *, binary: bool = False) -> Iterator[Any]:
    """``output`` opened for writing text (or bytes, if ``binary``), as the
    module docstring says."""
    if isinstance(output, str):
        output = resolve_output(output)
    mode, encoding, newline = ("wb", None, None) if binary else ("w", "utf-8", "")
    if output.descriptor == 1:
        sys.stdout.flush()
        yield sys.stdout.buffer if binary else sys.stdout
        sys.stdout.flush()
        return
    if output.descriptor is not None:
        with os.fdopen(os.dup(output.descriptor), mode, encoding=encoding, newline=newline) as stream:
            yield stream
        return
    if output.direct:
        with open(output.path, mode, encoding=encoding, newline=newline) as stream:
            yield stream
        return
    folder = os.path.dirname(output.path)
    temporary = None
    try:
        # Made and named with interrupts held, inside the try: Ctrl-C cannot
        # fall between the file's making and its removal on the way out.
        with signals_held():
            handle, temporary = tempfile.mkstemp(prefix=".simstore-", dir=folder)
        os.fchmod(handle, _mode_for(output.path))
        with os.fdopen(handle, mode, encoding=encoding, newline=newline) as stream:
            yield stream
        os.replace(temporary, output.path)
    except BaseException:
        if temporary is not None:
            try:
                remove_file(temporary)
            except KeyboardInterrupt:  # (cut short: done again in full)
                remove_file(temporary)
                raise
        raise


def _mode_for(path: str) -> int:
    """The permission bits of the file at ``path``, or a new file's (0666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process's umask, read without changing it where Linux allows."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/self/status", encoding="ascii") as status:
            line = next(line for line in status if line.startswith("Umask:"))
        return int(line.split()[1], 8)
    # Elsewhere, set and restore it (the command line runs one thread).
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
