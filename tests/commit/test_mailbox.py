"""Commits shared across processes through the writers' mailbox (simstore.commit.mailbox).

Writer processes with ``sync=True`` post their single writes; whichever holds the
lead commits them with its own, flushes, and answers. The deterministic tests hold
the lead from this process (a mailbox handle of its own, which the kernel treats as
another holder) until every child has posted, so the group they form is known.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import simstore
from simstore.commit import mailbox, wire
from simstore.engine.format import WRITERS_KEY

pytestmark = pytest.mark.skipif(not mailbox._OFD, reason="no open-file-description locks here")

# A child: open the store (sync=True), record commits, flushes and answers given
# through the mailbox, run one call, and print what happened as JSON.
_CHILD = r"""
import json, sys
import simstore
import simstore.commit.group
from simstore.commit import mailbox; from simstore.engine import _lmdb, writelog

path, call, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if len(sys.argv) > 4:  # how long a poster waits for the processes the last group held
    simstore.commit.group.GATHER_PROCESSES_SECONDS = float(sys.argv[4])
events = []
real_write, real_flush = _lmdb.Environment.write, _lmdb.Environment.flush
real_respond = mailbox.Mailbox.respond
real_log_flush = writelog.WriteLog.flush

def write(self, body, record=None):
    result = real_write(self, body, record)
    events.append("commit")
    return result

def flush(self):
    real_flush(self)
    events.append("flush")

def log_flush(self):  # a record of the write-ahead log, flushed before its commit
    real_log_flush(self)
    events.append("logged")

def respond(self, slot, response, group, *, state):
    events.append("done" if state == mailbox.DONE else "taken")
    return real_respond(self, slot, response, group, state=state)

_lmdb.Environment.write, _lmdb.Environment.flush, mailbox.Mailbox.respond = write, flush, respond
writelog.WriteLog.flush = log_flush
report = {}
with simstore.open(path, "w", sync=True) as store:
    print("open", flush=True)
    try:
        result = getattr(store, call)(*args[0], **args[1])
        report["result"] = [list(match)[:3] for match in result] if isinstance(result, list) else result
    except simstore.SimstoreError as exc:
        report["error"] = [type(exc).__name__, str(exc)]
    report["others"] = store._engine.commit.others_committed
    report["logged"] = store._engine.env.log_writer is not None
report["events"] = events
print(json.dumps(report), flush=True)
"""


def _durable_at(report: dict[str, Any]) -> int:
    """Where in a child's events its first commit was durable: at the commit,
    if its record in the write-ahead log was flushed before it; else at the
    flush after it."""
    events = report["events"]
    commit = events.index("commit")
    if report["logged"]:
        assert events[commit - 1] == "logged"
        return commit
    return int(events.index("flush", commit))


def _start(
    path: Path, call: str, *args: Any, gather: float | None = None, **kwargs: Any
) -> subprocess.Popen[str]:
    extra = [] if gather is None else [str(gather)]
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), call, json.dumps([list(args), kwargs]), *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "open\n"
    return child


def _report(child: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    return dict(json.loads(out.splitlines()[-1]))


def _wait_posted(box: mailbox.Mailbox, count: int) -> None:
    deadline = time.monotonic() + 30
    while box.states().count(mailbox.POSTED) < count:
        assert time.monotonic() < deadline, box.states()
        time.sleep(0.002)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "s.simstore"
    with simstore.open(path, "c", k=3) as store:
        store.add_many(["near", "gone"], [0b1111, 1 << 40])
    return path


def _holding_the_lead(path: Path) -> mailbox.Mailbox:
    box = mailbox.Mailbox.open(str(path))
    assert box is not None
    assert box.try_lead()
    return box


def test_one_commit_takes_every_posted_write_and_a_failing_one_fails_alone(store_path: Path) -> None:
    box = _holding_the_lead(store_path)
    try:
        children = [
            _start(store_path, "add", "a", fingerprint=1 << 50),
            _start(store_path, "remove", "missing"),
            _start(store_path, "add_if_new", "b", fingerprint=0b0111),  # 1 bit from "near"
            _start(store_path, "add_if_new", "c", fingerprint=0xF0F0F0F0F0F0F0F0),
            _start(store_path, "remove", "gone"),
        ]
        _wait_posted(box, len(children))
    finally:
        box.release_lead()
        box.close()
    add, missing, duplicate, new, removed = map(_report, children)
    assert add["result"] == 1 << 50  # add returns the fingerprint
    assert "error" not in add
    assert missing["error"] == ["KeyNotFoundError", "no document with key 'missing'"]
    assert duplicate["result"] == [["near", 1, 0b1111]]
    assert new["result"] == []
    assert removed["result"] is None
    # One child led: it committed the four others' writes with its own.
    reports = [add, missing, duplicate, new, removed]
    assert sorted(report["others"] for report in reports) == [0, 0, 0, 0, 4]
    leader = next(report for report in reports if report["others"])
    events = leader["events"]
    # The answers came after the commit that held them was durable.
    assert events.index("done") > _durable_at(leader)
    with simstore.open(store_path, "r") as store:
        assert dict(store.items()) == {"near": 0b1111, "a": 1 << 50, "c": 0xF0F0F0F0F0F0F0F0}
        assert store.check() == []


@pytest.mark.parametrize("committed", [True, False])
def test_a_leader_that_died_before_answering(store_path: Path, committed: bool) -> None:
    """A leader took a request and died before it said done. The next leader asks the
    store whether that group committed: if so the request is answered as it was
    (not run twice), else it is run again."""
    box = _holding_the_lead(store_path)
    try:
        child = _start(store_path, "add", "k", fingerprint=111)
        _wait_posted(box, 1)
        slot = box.states().index(mailbox.POSTED)
        group = 0x5EED
        # What the dead leader did: write the document (another fingerprint, to tell
        # the two apart) and, in the same commit, its group's number.
        with simstore.open(store_path, "w", sync=False) as store:
            store.add("k", fingerprint=222)
            if committed:
                engine = store._engine
                engine.env.write(
                    lambda txn: txn.put(WRITERS_KEY, group.to_bytes(8, "big"), db=engine.handles.meta)
                )
        box.respond(slot, wire.pack_outcomes([wire.outcome_of(None, None)]), group, state=mailbox.TAKEN)
    finally:
        box.release_lead()
        box.close()
    report = _report(child)
    assert report["result"] == 111
    assert "error" not in report
    with simstore.open(store_path, "r") as store:
        assert store.get("k").fingerprint == (222 if committed else 111)
        assert store.check() == []


def test_processes_adding_at_once_lose_nothing(store_path: Path) -> None:
    script = r"""
import sys
import simstore
path, tag = sys.argv[1], sys.argv[2]
with simstore.open(path, "w", sync=True) as store:
    for number in range(150):
        store.add(f"{tag}-{number}", fingerprint=(ord(tag) << 40) + number * 7919)
        if number % 10 == 9:
            store.remove(f"{tag}-{number - 5}")
    print(store._engine.commit.others_committed)
"""
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(store_path), tag], stdout=subprocess.PIPE, text=True
        )
        for tag in "xyz"
    ]
    outputs = [writer.communicate(timeout=120)[0] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0, 0]
    expected = {"near": 0b1111, "gone": 1 << 40}
    for tag in "xyz":
        for number in range(150):
            if number % 10 != 4:
                expected[f"{tag}-{number}"] = (ord(tag) << 40) + number * 7919
    with simstore.open(store_path, "r") as store:
        assert dict(store.items()) == expected
        assert store.check() == []
    assert all(output.strip().isdigit() for output in outputs)


def test_a_group_reads_its_answers_at_once_without_the_lead(store_path: Path) -> None:
    """Posters wait for the leader answering them, then read their answers
    together while the lead is still held (here by this process, answering
    in a leader's place)."""
    box = _holding_the_lead(store_path)
    try:
        with box.answering():
            children = [_start(store_path, "add", f"a{n}", fingerprint=(n + 1) << 50) for n in range(3)]
            _wait_posted(box, 3)
            time.sleep(0.3)  # each poster now waits for the answers
            slots = [slot for slot, state in enumerate(box.states()) if state == mailbox.POSTED]
            for slot in slots:
                # An error tells the answers apart (an add's outcome is None).
                error = simstore.InvalidValueError(f"answer {slot}")
                answer = wire.pack_outcomes([wire.outcome_of(None, error)])
                box.respond(slot, answer, 7, state=mailbox.DONE)
        reports = [_report(child) for child in children]  # while the lead is held here
        assert sorted(report["error"] for report in reports) == sorted(
            ["InvalidValueError", f"answer {slot}"] for slot in slots
        )
        assert all("commit" not in report["events"] for report in reports)
        assert box.states() == [mailbox.FREE] * mailbox.SLOTS  # each freed its own slot
    finally:
        box.release_lead()
        box.close()


def test_a_write_left_to_its_poster_is_committed_there(store_path: Path) -> None:
    """A leader that cannot answer a write (its outcome does not fit the slot,
    or the poster knows a newer layout) leaves it to its process, which then
    takes the lead and commits it itself."""
    box = _holding_the_lead(store_path)
    try:
        with box.answering():
            child = _start(store_path, "add", "left", fingerprint=1 << 55)
            _wait_posted(box, 1)
            slot = box.states().index(mailbox.POSTED)
            left = wire.pack_outcomes([wire.outcome_of(None, wire.LeftToPosterError())])
            box.respond(slot, left, 9, state=mailbox.DONE)
        time.sleep(0.3)
        assert child.poll() is None  # it waits for the lead to commit the write itself
    finally:
        box.release_lead()
        box.close()
    report = _report(child)
    assert report["result"] == 1 << 55
    assert report["events"][:2] == (["logged", "commit"] if report["logged"] else ["commit", "flush"])
    with simstore.open(store_path, "r") as store:
        assert store.get("left").fingerprint == 1 << 55


def _set_last_group(path: Path, processes: int) -> None:
    box = _holding_the_lead(path)
    try:
        box.set_last_group(processes)
    finally:
        box.release_lead()
        box.close()


def test_posters_wait_for_as_many_processes_as_the_last_group_held(store_path: Path) -> None:
    _set_last_group(store_path, 3)
    box = mailbox.Mailbox.open(str(store_path))
    assert box is not None
    try:
        children = []
        for number in range(3):
            fingerprint = (number + 1) << 44
            children.append(_start(store_path, "add", f"p{number}", fingerprint=fingerprint, gather=60))
            if number < 2:
                _wait_posted(box, number + 1)
                time.sleep(0.3)
                # Still waiting for the third: nothing committed.
                assert all(child.poll() is None for child in children)
                with simstore.open(store_path, "r") as store:
                    assert len(store) == 2
        reports = [_report(child) for child in children]
        assert box.last_group() == 3
    finally:
        box.close()
    # One commit took all three: its leader committed the other two.
    assert sorted(report["others"] for report in reports) == [0, 0, 2]
    assert [report["result"] for report in reports] == [(number + 1) << 44 for number in range(3)]


def test_a_poster_stops_waiting_when_no_process_comes(store_path: Path) -> None:
    _set_last_group(store_path, 4)
    started = time.monotonic()
    assert _report(_start(store_path, "add", "one", fingerprint=1 << 45, gather=0.2))["result"] == 1 << 45
    # The group held one process: the next writer does not wait at all.
    assert _report(_start(store_path, "add", "two", fingerprint=1 << 46, gather=60))["result"] == 1 << 46
    assert time.monotonic() - started < 30
    with simstore.open(store_path, "r") as store:
        assert store.get("one").fingerprint == 1 << 45
        assert store.get("two").fingerprint == 1 << 46


def test_a_foreign_file_in_the_mailboxs_place_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.simstore"
    foreign = Path(mailbox.mailbox_path(str(path)))
    foreign.write_bytes(b"not ours")
    with simstore.open(path, "c", k=3) as store:
        store.add("a", fingerprint=1)  # commits on its own
        assert store.get("a").fingerprint == 1
    assert foreign.read_bytes() == b"not ours"
