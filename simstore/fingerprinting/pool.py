"""Fingerprinting on several cores: worker processes that die with their
parent, speak msgpack over pipes, and never import the caller's script.

Workers are started only when a caller asks for more than one process
(``processes=``), and only once the input holds more than one chunk; with
``processes=None`` (:class:`Workers` ``automatic``, the command line's
default) only where they pay for themselves: once this process has
fingerprinted :data:`AUTO_MIN_CHARS` characters on its own and more are
coming, and one worker for each core the load average leaves idle. A
:class:`Workers` pool keeps its processes across batches (the command line
fingerprints its input in chunks of up to 16M characters), so each starts
once a run, not once a chunk. Each is
``python -m simstore.fingerprinting._worker``, a fresh interpreter reading requests on
stdin, not a ``multiprocessing`` child, because:

- ``multiprocessing``'s spawn re-imports the caller's ``__main__`` in every
  child: a script without ``if __name__ == "__main__":`` re-ran its top level
  there (its ``simstore.open(path, "n")`` too) and ended in
  ``BrokenProcessPool`` and a hang at exit (issue 18, part 3). A worker that
  only imports simstore needs no main guard at all;
- its pool pickles results back to the parent, and simstore never unpickles:
  requests and replies here are msgpack, fingerprints raw ``<u8`` bytes;
- a worker notices its parent's death: at once on Linux (the kernel's
  parent-death signal), within a second elsewhere (the parent pid changes),
  and between chunks everywhere (stdin reaches end of file).

The calling process fingerprints chunks too, taking the next one from the
same stream as the workers, so it is never idle while they start (1-2 s of
importing numpy and loading jieba's dictionary each).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import msgpack
import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError, MainGuardError, WorkerError
from simstore.fingerprinting.text import as_text

__all__ = [
    "AUTO_MIN_CHARS",
    "CHUNK_CHARS",
    "CHUNK_TEXTS",
    "Chunk",
    "Workers",
    "available_cores",
    "chunks",
    "fingerprint_in_processes",
    "read_frame",
    "write_frame",
]

#: A chunk (one request to a worker) ends after this many characters or texts:
#: small enough to balance two processes on a few MB, large enough that a
#: round trip (about 1 ms) is noise.
CHUNK_CHARS = 1_000_000
CHUNK_TEXTS = 20_000

#: Characters an automatic pool fingerprints in this process before it starts
#: workers. A worker costs 0.6-0.8 s of CPU to start (an interpreter, numpy,
#: simstore) and 2.2 s more to load jieba's dictionary at its first Han text;
#: fingerprinting runs at 4-6M characters a CPU second, so a worker pays for
#: its start only after several million characters, and a run shorter than
#: this one's fingerprinting never waits for one (see benchmarks/suite/bench_workers.py).
AUTO_MIN_CHARS = 16_000_000

_LENGTH_BYTES = 8

#: ``(start index in the batch, validated texts)``
Chunk = tuple[int, list[str]]
#: A chunk's result: ``(fingerprints, how many texts were short, sketches)``,
#: the sketches (one row of bytes a text) only when they were asked for.
ChunkResult = tuple[npt.NDArray[np.uint64], int, npt.NDArray[np.uint8] | None]
#: Fingerprints one chunk in this process (a pure function of its input).
ChunkFunction = Callable[[list[str], int], ChunkResult]


def chunks(texts: Iterable[object]) -> Iterator[Chunk]:
    """Validated texts (see :func:`simstore.fingerprinting.text.as_text`) in chunks of
    about :data:`CHUNK_CHARS` characters, read lazily so that memory stays
    flat in the input's size. A bad text raises naming its index."""
    if isinstance(texts, (str, bytes)):
        raise InvalidTypeError("texts must be an iterable of texts, not a single text")
    batch: list[str] = []
    start = size = 0
    for index, text in enumerate(texts):
        try:
            checked = as_text(text)
        except (InvalidTypeError, InvalidValueError) as exc:
            raise type(exc)(f"text at index {index}: {exc}") from None
        batch.append(checked)
        size += len(checked)
        if size >= CHUNK_CHARS or len(batch) >= CHUNK_TEXTS:
            yield start, batch
            start, batch, size = index + 1, [], 0
    if batch:
        yield start, batch


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def idle_cores() -> int:
    """Cores beside this process's own that the 1-minute load average leaves
    idle: a worker on a core that other work keeps busy only slows both."""
    cores = available_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - no load average (Windows)
        return cores - 1
    return max(0, min(cores - 1, round(cores - 1 - load)))


class Workers:
    """Worker processes that fingerprint several batches (calls of
    :func:`fingerprint_in_processes`) and are stopped by :meth:`close`.

    ``processes`` counts this process too. An ``automatic`` pool starts its
    workers only once this process has fingerprinted :data:`AUTO_MIN_CHARS`
    characters alone, and only as many as :func:`idle_cores` finds (none on
    a busy machine); other pools start ``processes - 1`` workers at their
    first batch with a second chunk. Workers of a batch that fails or is
    abandoned are stopped; later batches start others.
    """

    def __init__(self, processes: int, *, automatic: bool = False) -> None:
        self.processes = processes
        self.automatic = automatic
        #: Characters this process fingerprinted before any worker could start.
        self.chars_alone = 0
        self._wanted: int | None = None if automatic else processes - 1
        self._workers: list[_Worker] = []
        self._settings: list[Any] | None = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker (an idle one exits at the end of its stdin)."""
        workers, self._workers = self._workers, []
        for worker in workers:
            if not worker.ready:
                worker.kill()  # still starting: its thread's read ends
            if worker.thread is not None:
                worker.thread.join()
            worker.close()

    def started(self) -> int:
        """How many worker processes are running."""
        return sum(worker.ready for worker in self._workers)

    def run(
        self, settings: list[Any], source: Iterator[Chunk], local: ChunkFunction
    ) -> Iterator[ChunkResult]:
        """Results of every chunk of ``source`` in order (see :func:`fingerprint_in_processes`)."""
        if self.processes > 1:
            _refuse_in_bootstrap()
        while self._wanted is None:  # an automatic pool that has not decided yet
            taken = next(source, None)
            if taken is None:
                return
            yield local(taken[1], taken[0])
            self.chars_alone += sum(map(len, taken[1]))
            if self.chars_alone >= AUTO_MIN_CHARS:
                self._wanted = min(self.processes - 1, idle_cores())
        first = next(source, None)
        if first is None:
            return
        second = next(source, None) if self._wanted else None
        if second is None:
            yield local(first[1], first[0])
            yield from (local(texts, start) for start, texts in source)
            return
        scheduler = _Scheduler(settings, itertools.chain([first, second], source), local, self._for(settings))
        yield from scheduler.run()

    def _for(self, settings: list[Any]) -> list[_Worker]:
        """This batch's workers: those started for the same settings and
        still usable, and new ones for the rest."""
        if settings != self._settings:
            self.close()
            self._settings = settings
        self._workers = [worker for worker in self._workers if worker.usable]
        assert self._wanted is not None
        self._workers += [_Worker() for _ in range(self._wanted - len(self._workers))]
        return list(self._workers)


def fingerprint_in_processes(
    settings: dict[str, Any],
    source: Iterator[Chunk],
    local: ChunkFunction,
    processes: int | None,
    *,
    sketches: bool = False,
    workers: Workers | None = None,
) -> Iterator[ChunkResult]:
    """Results of every chunk of ``source`` in order, computed by this
    process (with ``local``) and the worker processes of ``workers`` (or of
    a pool of ``processes`` made for this call and stopped before it
    returns or raises; ``None``: an automatic pool of one per core), built
    from ``settings`` (:meth:`Fingerprinter.settings`), which also give each
    text's verification sketch if ``sketches``. Workers start only if
    ``source`` has a second chunk. An unusable text raises the error of the
    first one in the batch.
    """
    if workers is not None:
        yield from workers.run([settings, sketches], source, local)
        return
    automatic = processes is None
    with Workers(available_cores() if processes is None else processes, automatic=automatic) as own:
        yield from own.run([settings, sketches], source, local)


def _refuse_in_bootstrap() -> None:
    """Raise :class:`MainGuardError` in a child that ``multiprocessing`` is
    starting: its ``__main__`` is being re-imported, so this call is the
    caller's top level running again in every child."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise MainGuardError(
            "fingerprinting with processes > 1 was called while multiprocessing was starting a "
            "child process, which re-runs the main script's top level: put the script's work "
            'under `if __name__ == "__main__":` (simstore\'s own workers need no such guard)'
        )


class _Scheduler:
    """Hands chunks to this process and to worker threads (one per worker
    process) in input order, and gives results back in the same order."""

    def __init__(
        self, settings: list[Any], source: Iterator[Chunk], local: ChunkFunction, workers: list[_Worker]
    ) -> None:
        self._settings = settings
        self._source = enumerate(source)
        self._local = local
        self._workers = workers
        self._done = threading.Condition()
        self._results: dict[int, ChunkResult] = {}
        self._pending: set[int] = set()  # chunk numbers taken and not finished
        self._errors: list[tuple[int, BaseException]] = []  # (start index, error)
        self._stopped = False

    def _take(self) -> tuple[int, Chunk] | None:
        """The next chunk to work on; None when there is none left or an error stopped the batch."""
        with self._done:
            if self._stopped:
                return None
            try:
                number, chunk = next(self._source)
            except StopIteration:
                self._stopped = True
                return None
            except Exception as exc:  # a bad text: it comes after every chunk handed out
                self._errors.append((sys.maxsize, exc))
                self._stopped = True
                return None
            self._pending.add(number)
            return number, chunk

    def _work(self, taken: tuple[int, Chunk], fingerprint: Callable[[int, list[str]], ChunkResult]) -> None:
        """Fingerprint one taken chunk (``fingerprint(start, texts)``) and
        record its result, or the exception it raised, for the batch."""
        number, (start, texts) = taken
        try:
            outcome: ChunkResult | BaseException = fingerprint(start, texts)
        except Exception as exc:
            outcome = exc
        self._finish(number, start, outcome)

    def _finish(self, number: int, start: int, outcome: ChunkResult | BaseException) -> None:
        with self._done:
            self._pending.discard(number)
            if isinstance(outcome, BaseException):
                self._errors.append((start, outcome))
                self._stopped = True
            else:
                self._results[number] = outcome
            self._done.notify_all()

    def _serve(self, worker: _Worker, previous: threading.Thread | None) -> None:
        """A worker thread: start the worker (unless an earlier batch did),
        then feed it chunks until none are left. The worker is left running
        for the pool's next batch."""
        if previous is not None:
            previous.join()  # an earlier batch's thread, still waiting for it to start
        if not worker.ready:
            try:
                if worker.startup_error is not None:  # (from spawn, in run())
                    raise worker.startup_error
                worker.wait_ready()
            except Exception as exc:
                # The other processes still finish the batch without this worker;
                # run() warns, unless it stopped the worker itself (the batch was done).
                if not worker.killed:
                    worker.startup_error = exc
                worker.close()
                return
        try:
            while (taken := self._take()) is not None:
                self._work(taken, worker.fingerprint)
        except BaseException:
            worker.kill()
            raise

    def run(self) -> Iterator[ChunkResult]:
        threads = []
        for worker in self._workers:
            thread = threading.Thread(target=self._serve, args=(worker, worker.thread), daemon=True)
            worker.thread = thread
            threads.append(thread)
        finished = False
        for worker in self._workers:
            if worker.process is None and worker.usable:
                try:
                    worker.spawn(self._settings)
                except Exception as exc:
                    worker.startup_error = exc
        try:
            for thread in threads:
                thread.start()
            next_number = 0
            while True:
                taken = self._take()
                if taken is not None:
                    self._work(taken, lambda start, texts: self._local(texts, start))
                ready: list[ChunkResult] = []
                with self._done:
                    if taken is None:
                        # Nothing left to take: wait for the chunk due next if a worker has it.
                        while next_number not in self._results and next_number in self._pending:
                            self._done.wait()
                    while next_number in self._results:
                        ready.append(self._results.pop(next_number))
                        next_number += 1
                if taken is None and not ready:
                    finished = not self._errors
                    break
                yield from ready  # in order, so that the caller streams too
        finally:
            with self._done:
                self._stopped = True
            starting = []
            for worker in self._workers:
                if finished and not worker.ready and worker.usable:
                    # Still starting after a batch that went well: its thread
                    # goes on waiting, and the pool's next batch joins it.
                    starting.append(worker.thread)
                elif not (finished and worker.ready):
                    # Busy after an error, Ctrl-C or a caller that stopped
                    # reading: the pool starts another later.
                    worker.kill()
            for thread in threads:
                if thread not in starting:
                    thread.join()
        for worker in self._workers:
            if worker.startup_error is not None:
                warnings.warn(
                    f"a fingerprinting worker did not start ({worker.startup_error}); "
                    "the other processes did its share",
                    RuntimeWarning,
                    stacklevel=3,
                )
        if self._errors:
            # Chunks are handed out in input order, and every chunk before a
            # failed one has finished, so the smallest start is the batch's
            # first bad text, whichever process met it.
            raise min(self._errors, key=lambda item: item[0])[1]


class _Worker:
    """One worker process and its pipes, driven by one thread."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_error: BaseException | None = None
        self._lock = threading.Lock()
        self.killed = False
        #: Started and answering: it may take the pool's next batch.
        self.ready = False
        #: The thread that serves it in the current (or last) batch.
        self.thread: threading.Thread | None = None

    @property
    def usable(self) -> bool:
        """Not stopped, failed or dead: a pool may give it another batch."""
        if self.killed or self.startup_error is not None:
            return False
        return self.process is None or self.process.poll() is None

    def spawn(self, settings: list[Any]) -> None:
        """Start the worker's process and send it ``settings``, its first
        message (the fingerprinter's settings and whether to make sketches);
        :meth:`wait_ready` waits for its answer. Called from the thread that
        runs the batch, not a thread that ends with it: the kernel's
        parent-death signal fires when the thread that started the process
        ends, and a pool's worker outlives the batch."""
        if not sys.executable:
            raise WorkerError("cannot start worker processes: sys.executable is unknown")
        # The worker must import this very simstore, whichever way it was found.
        package_root = str(Path(__file__).resolve().parent.parent)
        with self._lock:
            if self.killed:
                raise WorkerError("stopped before it started")
            self.process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, package_root, str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        assert self.process.stdin is not None
        write_frame(self.process.stdin, settings)

    def wait_ready(self) -> None:
        """Wait for the worker's answer to its settings (it imports simstore first)."""
        reply = self._reply()
        if reply != ["ready"]:
            raise WorkerError(f"a fingerprinting worker did not start: {reply!r}")
        self.ready = True

    def fingerprint(self, start: int, texts: list[str]) -> ChunkResult:
        assert self.process is not None
        assert self.process.stdin is not None
        try:
            write_frame(self.process.stdin, [start, texts])
        except OSError as exc:
            raise WorkerError(f"a fingerprinting worker stopped ({self._exit_status()})") from exc
        reply = self._reply()
        kind = reply[0] if isinstance(reply, list) and reply else None
        if kind == "ok" and len(reply) == 4:
            values = np.frombuffer(reply[1], dtype="<u8").astype(np.uint64)
            sketches = None
            if reply[3] is not None:
                sketches = np.frombuffer(reply[3], dtype=np.uint8).reshape(len(texts), -1)
            if len(values) == len(texts):
                return values, int(reply[2]), sketches
        if kind == "invalid":
            raise InvalidValueError(str(reply[1]))
        raise WorkerError(f"a fingerprinting worker failed: {reply[1] if kind == 'error' else reply!r}")

    def _reply(self) -> Any:
        assert self.process is not None
        assert self.process.stdout is not None
        reply = read_frame(self.process.stdout)
        if reply is None:
            raise WorkerError(f"a fingerprinting worker stopped ({self._exit_status()})")
        return reply

    def _exit_status(self) -> str:
        assert self.process is not None
        try:
            return f"exit status {self.process.wait(timeout=5)}"
        except subprocess.TimeoutExpired:
            return "no reply"

    def kill(self) -> None:
        """Kill the worker if it still runs (from any thread)."""
        with self._lock:
            self.killed = True
            self.ready = False
            if self.process is not None and self.process.poll() is None:
                self.process.kill()

    def close(self) -> None:
        """From the worker's thread, or the pool's once no batch runs: close
        stdin (an idle worker exits at end of file), wait for the process
        and close its pipes."""
        self.ready = False
        if self.process is None:
            return
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait()


# The worker's command line: ``python -c _WORKER_CODE <package root> <parent pid>``.
# ``-c`` puts the current directory first on sys.path; it gives way to the
# package's root, unless that is on the path already (an installed simstore:
# putting site-packages before the standard library could shadow it).
_WORKER_CODE = (
    "import sys; root = sys.argv[1]; sys.path[0:1] = [] if root in sys.path else [root]; "
    "from simstore.fingerprinting._worker import main; sys.exit(main(int(sys.argv[2])))"
)


# -- framing: an 8-byte little-endian length, then a msgpack message ---------


def write_frame(stream: IO[bytes], message: object) -> None:
    """Write one length-prefixed msgpack message and flush."""
    payload = msgpack.packb(message, use_bin_type=True)
    stream.write(len(payload).to_bytes(_LENGTH_BYTES, "little") + payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """Read one message; None at end of file (the other side is gone)."""
    header = _read_exactly(stream, _LENGTH_BYTES)
    if header is None:
        return None
    payload = _read_exactly(stream, int.from_bytes(header, "little"))
    if payload is None:
        return None
    return msgpack.unpackb(payload, raw=False)


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    parts: list[bytes] = []
    while size:
        part = stream.read(size)
        if not part:
            return None
        parts.append(part)
        size -= len(part)
    return b"".join(parts)
