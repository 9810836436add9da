"""The write-ahead log's file: checkpoint slots and the ring of records."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from simstore.engine import writelog
from simstore.engine.writelog import Checkpoint, WriteLog

RING = 4096
SALT = 12345


def _checkpoint(sequence: int, txn_id: int = 7, start: int = 0) -> Checkpoint:
    return Checkpoint(sequence, txn_id, start, (3, 4), bytes(range(16)), b"m" * 8192, SALT)


def test_a_checkpoint_reads_back_as_written(tmp_path: Path) -> None:
    log = WriteLog.make(str(tmp_path / "s-log"), ring=RING)
    assert log is not None
    assert log.checkpoint() is None  # a new log holds none
    log.write_checkpoint(_checkpoint(1))
    assert log.checkpoint() == _checkpoint(1)
    log.close()


def test_the_newer_slot_wins_and_a_torn_one_leaves_the_older(tmp_path: Path) -> None:
    path = str(tmp_path / "s-log")
    log = WriteLog.make(path, ring=RING)
    assert log is not None
    log.write_checkpoint(_checkpoint(1, txn_id=10))
    log.write_checkpoint(_checkpoint(2, txn_id=20))
    assert log.checkpoint() == _checkpoint(2, txn_id=20)
    with open(path, "r+b") as file:  # tear the newer one (slot 0: sequence 2)
        file.seek(100)
        file.write(b"\xff")
    assert log.checkpoint() == _checkpoint(1, txn_id=10)
    log.close()


def test_making_a_log_never_replaces_a_file(tmp_path: Path) -> None:
    path = tmp_path / "s-log"
    path.write_bytes(b"someone else's")
    assert WriteLog.make(str(path), ring=RING) is None
    assert path.read_bytes() == b"someone else's"
    assert [name.name for name in tmp_path.iterdir()] == ["s-log"]  # no temporary left


def test_a_record_that_would_cross_the_end_goes_to_the_next_lap() -> None:
    assert writelog.place(0, 64, RING) == 0
    assert writelog.place(RING - 64, 64, RING) == RING - 64
    assert writelog.place(RING - 56, 64, RING) == RING
    assert writelog.place(3 * RING - 8, 64, RING) == 3 * RING


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 900), min_size=1, max_size=60),
    checkpoint_every=st.integers(1, 10),
    torn=st.booleans(),
    data=st.data(),
)
def test_a_scan_gives_back_every_whole_record_after_the_checkpoint(
    tmp_path_factory: object, sizes: list[int], checkpoint_every: int, torn: bool, data: st.DataObject
) -> None:
    folder = tmp_path_factory.mktemp("log")  # type: ignore[attr-defined]
    path = os.path.join(folder, "s-log")
    log = WriteLog.make(path, ring=RING)
    assert log is not None
    checkpoint = _checkpoint(0, txn_id=99, start=0)
    log.write_checkpoint(checkpoint)
    written: list[tuple[int, bytes, int]] = []  # after the current checkpoint
    position = 0
    for number, size in enumerate(sizes):
        txn_id = 100 + number
        payload = bytes([number % 251]) * size
        needed = writelog.place(position, writelog.record_bytes(size), RING) + writelog.record_bytes(size)
        if number % checkpoint_every == 0 or log.room(checkpoint.start, needed) < 0:
            # A checkpoint at the last commit: the ring's earlier records are free again.
            checkpoint = _checkpoint(checkpoint.sequence + 1, txn_id=txn_id - 1, start=position)
            log.write_checkpoint(checkpoint)
            written = []
        position = log.append(position, txn_id, payload, SALT)
        written.append((txn_id, payload, position))
    assert list(log.records(log.checkpoint() or checkpoint)) == written
    if torn:
        # The last record half written (a power loss during its flush): the
        # scan gives back the ones before it, never a damaged one.
        txn_id, payload, end = written[-1]
        start = end - writelog.record_bytes(len(payload))
        # (Any byte of its header or payload; the padding after it is no part of it.)
        within = data.draw(st.integers(0, writelog.RECORD_HEADER_BYTES + len(payload) - 1))
        offset = writelog.RING_OFFSET + start % RING + within
        with open(path, "r+b") as file:
            file.seek(offset)
            old = file.read(1)
            file.seek(offset)
            file.write(bytes([old[0] ^ 0x5A]))
        assert list(log.records(checkpoint)) == written[:-1]
    log.close()


def test_a_scan_stops_at_a_gap_in_the_transaction_ids(tmp_path: Path) -> None:
    log = WriteLog.make(str(tmp_path / "s-log"), ring=RING)
    assert log is not None
    checkpoint = _checkpoint(1, txn_id=9)
    position = log.append(0, 10, b"a", SALT)
    position = log.append(position, 11, b"b", SALT)
    log.append(position, 13, b"d", SALT)  # 12 committed without a record
    assert [(txn, payload) for txn, payload, _ in log.records(checkpoint)] == [(10, b"a"), (11, b"b")]
    log.close()


def test_a_record_left_from_an_earlier_lap_is_not_taken_for_a_new_one(tmp_path: Path) -> None:
    log = WriteLog.make(str(tmp_path / "s-log"), ring=RING)
    assert log is not None
    log.append(0, 5, b"x" * 100, SALT)  # lap 0, at offset 0
    # A checkpoint a lap later whose first record would lie at offset 0 again:
    # the old record there has the right offset and transaction id, not the
    # right position.
    assert list(log.records(_checkpoint(1, txn_id=4, start=RING))) == []
    log.close()


def test_reopening_finds_the_ring_length(tmp_path: Path) -> None:
    path = str(tmp_path / "s-log")
    made = WriteLog.make(path, ring=128 * 1024)
    assert made is not None
    end = made.append(0, 1, b"payload", SALT)
    made.close()
    log = WriteLog.open(path)
    assert log.ring == 128 * 1024
    assert list(log.records(_checkpoint(1, txn_id=0))) == [(1, b"payload", end)]
    log.close()


def test_records_of_another_salt_are_not_taken(tmp_path: Path) -> None:
    # A store made anew under the same name starts its positions again: the
    # old store's records there carry its salt, not the new one's.
    log = WriteLog.make(str(tmp_path / "s-log"), ring=RING)
    assert log is not None
    log.append(0, 10, b"old store", SALT)
    new = Checkpoint(1, 9, 0, (5, 6), bytes(16), b"", SALT + 1)
    assert list(log.records(new)) == []
    log.close()


def test_a_withdrawn_record_is_not_taken(tmp_path: Path) -> None:
    log = WriteLog.make(str(tmp_path / "s-log"), ring=RING)
    assert log is not None
    position = log.append(0, 10, b"a", SALT)
    log.append(position, 11, b"its commit failed", SALT)
    log.withdraw(position)
    assert [txn for txn, _, _ in log.records(_checkpoint(1, txn_id=9))] == [10]
    log.close()
