"""Worker processes for fingerprinting (issue 18, part 3): none unless asked
for, the same answers as this process, no ``__main__`` guard needed, and
none outliving its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simstore
from simstore import Fingerprinter, InvalidValueError, MainGuardError, ShortTextWarning
from simstore.fingerprint import pool

POSIX = pytest.mark.skipif(os.name != "posix", reason="counts process starts through _posixsubprocess")
LINUX_PROC = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")

# More characters than the old automatic threshold (8 M), fingerprinted fast:
# a long word adds only two features however long it is.
_LONG_TEXTS = ["x" * 100_000 + " a b c d e f g h"] * 90


@pytest.fixture
def process_starts(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every process started from now on, recorded: subprocess and
    multiprocessing's spawn both call ``_posixsubprocess.fork_exec``, the
    former through a name of its own."""
    import _posixsubprocess

    started: list[object] = []
    real: Callable[..., Any] = _posixsubprocess.fork_exec

    def recording(*args: Any, **kwargs: Any) -> Any:
        started.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(_posixsubprocess, "fork_exec", recording)
    monkeypatch.setattr(subprocess, "_fork_exec", recording, raising=False)
    return started


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of a few texts, so that small batches still reach the workers."""
    monkeypatch.setattr(pool, "CHUNK_TEXTS", 4)


@POSIX
def test_fingerprint_many_starts_no_process_unless_asked(process_starts: list[object]) -> None:
    values = Fingerprinter().fingerprint_many(_LONG_TEXTS)
    assert len(values) == len(_LONG_TEXTS)
    assert process_starts == []


@POSIX
def test_add_many_texts_starts_no_process_unless_asked(
    process_starts: list[object], store: simstore.Store
) -> None:
    store.add_many(range(len(_LONG_TEXTS)), texts=_LONG_TEXTS)
    assert len(store) == len(_LONG_TEXTS)
    assert process_starts == []


@POSIX
@pytest.mark.slow  # starts a worker (about 1 s to import simstore and numpy)
def test_add_many_with_processes_uses_a_worker_and_matches(
    process_starts: list[object], small_chunks: None, store: simstore.Store
) -> None:
    texts = [f"document {i} says something about the number {i * 7} and more" for i in range(80)]
    expected = Fingerprinter().fingerprint_many(texts)
    # This process would do every chunk alone if it were faster than the
    # worker's start-up; slow each of its chunks down so the worker gets some.
    real = Fingerprinter._fingerprint_chunk

    def slow(self: Fingerprinter, chunk: list[str], start: int, **options: bool) -> tuple[Any, ...]:
        time.sleep(0.2)
        return real(self, chunk, start, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Fingerprinter, "_fingerprint_chunk", slow)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a worker that failed to start warns
            stored = store.add_many(range(len(texts)), texts=iter(texts), processes=2)
    assert stored.tolist() == expected.tolist()
    assert [store.get(i).fingerprint for i in range(len(texts))] == expected.tolist()
    assert len(process_starts) == 1


@pytest.mark.slow  # starts a worker that loads jieba
def test_workers_give_the_scalar_fingerprints(small_chunks: None) -> None:
    texts = [
        "The quick brown fox jumps over the lazy dog again and again",
        "我们在北京的天安门广场上看到了很多人和一些外国游客",
        "mixed 中文 and English with emoji 🎉🎉 and full-width \uff21\uff22\uff23",
        "Straße und Ärger, naïve café, हिन्दी भाषा",
    ] * 10
    fingerprinter = Fingerprinter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShortTextWarning)
        expected = [fingerprinter.fingerprint(text) for text in texts]
        assert fingerprinter.fingerprint_many(texts, processes=3).tolist() == expected


@pytest.mark.slow  # starts a worker
def test_first_bad_text_is_named_whichever_process_meets_it(small_chunks: None) -> None:
    # The chunk with index 57 may finish (in this process) before the worker
    # reports index 5: the error must still name the first bad text.
    texts = [f"text number {i} has enough words to be quiet here" for i in range(60)]
    texts[5] = texts[57] = "  "
    with pytest.raises(InvalidValueError, match="index 5:"):
        Fingerprinter().fingerprint_many(texts, processes=2)


def test_a_bad_text_while_reading_is_named_by_index(small_chunks: None) -> None:
    def texts() -> Iterator[object]:
        yield from ["some words here"] * 9
        yield 42

    with pytest.raises(TypeError, match="index 9"):
        Fingerprinter().fingerprint_many(texts(), processes=2)


def test_processes_must_be_positive() -> None:
    with pytest.raises(InvalidValueError, match="processes"):
        Fingerprinter().fingerprint_many(["some words"], processes=0)


def test_asking_for_workers_while_multiprocessing_starts_a_child_raises(
    monkeypatch: pytest.MonkeyPatch, small_chunks: None
) -> None:
    # What a child of multiprocessing's spawn sees while it re-imports a main
    # script whose top level fingerprints with processes > 1.
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    texts = ["some words in a text"] * 10
    with pytest.raises(MainGuardError, match="__main__"):
        Fingerprinter().fingerprint_many(texts, processes=2)
    assert len(Fingerprinter().fingerprint_many(texts)) == 10  # one process needs no guard


@pytest.mark.slow  # runs a script that starts a worker
def test_script_without_main_guard_runs_once_and_exits(tmp_path: Path) -> None:
    # Issue 18.3: with multiprocessing's spawn, each worker re-ran this
    # script's top level (its open(..., "n") too), then BrokenProcessPool,
    # then a hang at exit.
    script = tmp_path / "no_guard.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import simstore
            from simstore.fingerprint import pool

            pool.CHUNK_TEXTS = 5
            with open({str(tmp_path / "runs.txt")!r}, "a") as runs:
                runs.write("ran\\n")
            texts = [f"document {{i}} has a few words and the number {{i * 13}}" for i in range(200)]
            with simstore.open({str(tmp_path / "s.simstore")!r}, "n", k=3) as store:
                store.add_many(range(200), texts=texts, processes=2)
                print(len(store))
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "200"
    assert (tmp_path / "runs.txt").read_text() == "ran\n"


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # The command name (field 2) may hold spaces: split after its ')'.
            state, parent = stat.rsplit(")", 1)[1].split()[:2]
            if int(parent) == pid and state != "Z":
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@LINUX_PROC
@pytest.mark.slow  # runs a script that starts a worker, then kills the script
def test_workers_die_with_their_parent(tmp_path: Path) -> None:
    # Issue 18.3: a kill -9 of the caller left its workers running, busy.
    script = tmp_path / "busy.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            from simstore import Fingerprinter

            print(os.getpid(), flush=True)
            text = " ".join(f"word{i}" for i in range(200_000))
            Fingerprinter().fingerprint_many([text] * 5000, processes=2)
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        parent_pid = int(parent.stdout.readline())
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while not workers and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = _children(parent_pid)
        assert workers, "no worker started"
        time.sleep(2)  # let the worker start on a chunk
        assert all(map(_alive, workers))
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in workers if _alive(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)  # leave nothing behind, even when failing
    assert survivors == []


def test_frames_round_trip_and_end_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "frames"
    with open(path, "wb") as out:
        pool.write_frame(out, ["ok", np.arange(3, dtype="<u8").tobytes(), 2])
        pool.write_frame(out, [0, ["中文", "🎉"]])
    with open(path, "rb") as stream:
        assert pool.read_frame(stream) == ["ok", np.arange(3, dtype="<u8").tobytes(), 2]
        assert pool.read_frame(stream) == [0, ["中文", "🎉"]]
        assert pool.read_frame(stream) is None
    with open(path, "r+b") as truncated:
        truncated.truncate(12)
    with open(path, "rb") as stream:
        assert pool.read_frame(stream) is None  # a worker that died mid-reply


@pytest.mark.slow  # starts interpreters
def test_a_worker_that_cannot_start_leaves_the_work_to_this_process(
    monkeypatch: pytest.MonkeyPatch, small_chunks: None
) -> None:
    monkeypatch.setattr(pool, "_WORKER_CODE", "import sys; sys.exit(3)")
    texts = [f"words of text number {i} and a few more" for i in range(40)]
    expected = Fingerprinter().fingerprint_many(texts).tolist()
    real = Fingerprinter._fingerprint_chunk

    def slow(self: Fingerprinter, chunk: list[str], start: int, **options: bool) -> tuple[Any, ...]:
        time.sleep(0.2)  # so that the worker fails before this process is done
        return real(self, chunk, start, **options)

    monkeypatch.setattr(Fingerprinter, "_fingerprint_chunk", slow)
    with pytest.warns(RuntimeWarning, match="did not start"):
        values = Fingerprinter().fingerprint_many(texts, processes=2)
    assert values.tolist() == expected


@pytest.mark.slow  # starts interpreters
def test_a_worker_that_dies_mid_batch_raises_worker_error(
    monkeypatch: pytest.MonkeyPatch, small_chunks: None
) -> None:
    # Answers "ready", then exits on its first chunk, as a worker killed by the OOM killer would.
    dying = (
        "import sys; sys.path[0:1] = [] if sys.argv[1] in sys.path else [sys.argv[1]]; "
        "from simstore.fingerprint.pool import read_frame, write_frame; "
        "read_frame(sys.stdin.buffer); write_frame(sys.stdout.buffer, ['ready']); "
        "read_frame(sys.stdin.buffer); sys.exit(9)"
    )
    monkeypatch.setattr(pool, "_WORKER_CODE", dying)
    real = Fingerprinter._fingerprint_chunk

    def slow(self: Fingerprinter, chunk: list[str], start: int, **options: bool) -> tuple[Any, ...]:
        time.sleep(0.3)  # leave chunks for the worker
        return real(self, chunk, start, **options)

    monkeypatch.setattr(Fingerprinter, "_fingerprint_chunk", slow)
    texts = [f"words of text number {i} and a few more" for i in range(200)]
    with pytest.raises(simstore.WorkerError, match="exit status 9"):
        Fingerprinter().fingerprint_many(texts, processes=2)


# ------------------------------------------------- workers that pay for themselves

_ENGLISH = [f"line {i} of an english text about rivers, hills and the weather in spring" for i in range(400)]


def _slowly(patch: pytest.MonkeyPatch) -> None:
    """Slow this process's chunks down, so that a worker gets some of them."""
    real = Fingerprinter._fingerprint_chunk

    def slow(self: Fingerprinter, chunk: list[str], start: int, **options: bool) -> tuple[Any, ...]:
        time.sleep(0.05)
        return real(self, chunk, start, **options)

    patch.setattr(Fingerprinter, "_fingerprint_chunk", slow)


@POSIX
def test_automatic_processes_start_no_worker_for_a_small_input(
    process_starts: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """processes=None on an idle machine: 9M characters (several chunks)
    stay in this process, below what a worker's start costs."""
    monkeypatch.setattr(pool, "idle_cores", lambda: 1)
    monkeypatch.setattr(pool, "available_cores", lambda: 2)
    values = Fingerprinter().fingerprint_many(_LONG_TEXTS, processes=None)
    assert len(values) == len(_LONG_TEXTS)
    assert process_starts == []


@POSIX
@pytest.mark.slow  # starts a worker
def test_automatic_processes_start_a_worker_past_the_threshold_if_a_core_is_idle(
    process_starts: list[object], small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = Fingerprinter().fingerprint_many(_ENGLISH).tolist()
    monkeypatch.setattr(pool, "AUTO_MIN_CHARS", 2000)
    monkeypatch.setattr(pool, "available_cores", lambda: 4)
    for idle, started in ((0, 0), (1, 1)):
        process_starts.clear()
        monkeypatch.setattr(pool, "idle_cores", lambda idle=idle: idle)
        with pytest.MonkeyPatch.context() as patch:
            _slowly(patch)
            assert Fingerprinter().fingerprint_many(_ENGLISH, processes=None).tolist() == expected
        assert len(process_starts) == started


@POSIX
@pytest.mark.slow  # starts a worker
def test_a_pool_starts_its_worker_once_for_many_batches(
    process_starts: list[object], small_chunks: None
) -> None:
    fingerprinter = Fingerprinter()
    expected = fingerprinter.fingerprints_and_sketches(_ENGLISH)
    with pytest.MonkeyPatch.context() as patch, pool.Workers(2) as workers:
        _slowly(patch)
        for _ in range(3):
            values, sketches = fingerprinter.fingerprints_and_sketches(_ENGLISH, workers=workers)
            assert values.tolist() == expected[0].tolist()
            assert np.array_equal(sketches, expected[1])
        assert workers.started() == 1
        # A batch that fails stops its worker; the next starts another.
        with pytest.raises(InvalidValueError, match="index 13"):
            fingerprinter.fingerprints_and_sketches([*_ENGLISH[:13], "", *_ENGLISH], workers=workers)
        assert workers.started() == 0
        assert fingerprinter.fingerprint_many(_ENGLISH, workers=workers).tolist() == expected[0].tolist()
    assert len(process_starts) == 2
    assert workers.started() == 0


@POSIX
@pytest.mark.slow  # starts a worker
def test_the_command_line_starts_workers_once_a_run(
    process_starts: list[object], small_chunks: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """dedup fingerprints its input in chunks; their worker is started once."""
    from simstore.cli import common, main

    monkeypatch.setattr(pool, "AUTO_MIN_CHARS", 2000)
    monkeypatch.setattr(pool, "available_cores", lambda: 2)
    monkeypatch.setattr(pool, "idle_cores", lambda: 1)
    monkeypatch.setattr(common, "FINGERPRINT_CHUNK_DOCS", 100)
    _slowly(monkeypatch)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"id": {i}, "text": "{text}"}}\n' for i, text in enumerate(_ENGLISH)))
    assert main(["dedup", str(rows), "-o", str(tmp_path / "kept.jsonl"), "--quiet"]) == 0
    assert len(process_starts) == 1
