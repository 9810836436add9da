"""Corrupted files: truncated stores, random bytes, LMDB files of other programs and
damaged simstore records. Each is opened (and checked, and queried) in a child process,
so that a segfault or SIGBUS fails the test instead of killing the run, and with a
timeout, so that a hang fails it too. The outcome must be a clear SimstoreError, the file
must be byte-for-byte untouched, and ``simstore check`` must report what is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import numpy as np
import pytest

import simstore

from .conftest import COUNTS, Worker, Zygote, file_digest


def probe(
    zygote: Zygote, path: str, modes: str = "r", cli: bool = False, allow_lmdb_abort: bool = False
) -> list[dict[str, Any]]:
    """Open, check and query ``path`` in a forked child, once per mode, then (with
    ``cli``) run `simstore check` there; the child's reports, after asserting it did
    not crash. With ``allow_lmdb_abort``, a child ended by an LMDB assertion (SIGABRT)
    returns no reports instead."""
    log = path + ".probe.log"
    worker = Worker({"worker": "probe_file", "path": path, "modes": modes, "cli": cli, "log": log}, zygote)
    code = worker.join()
    if allow_lmdb_abort and code == -signal.SIGABRT:
        errors = worker.errors()
        assert "mdb.c" in errors, errors[-800:]
        assert "Assertion" in errors, errors[-800:]
        os.remove(log)
        os.remove(log + ".err")
        return []
    assert code == 0, f"the child died ({code}): {worker.errors()[-800:]}"
    COUNTS["corrupt_files_probed"] += len(modes)
    reports = [json.loads(line) for line in worker.lines()]
    os.remove(log)
    os.remove(log + ".err")
    return reports


@pytest.fixture
def good_store(tmp_path: Path) -> str:
    """A store with merged and unmerged documents, metadata and long keys."""
    path = str(tmp_path / "good.simstore")
    rng = np.random.default_rng(3)
    # Manku's tables (format 2): the damage below names their sub-databases.
    with simstore.open(path, k=3, blocks=5, merge_threshold=100_000, merge_on_close=False) as store:
        store.add_many([f"doc-{i}" for i in range(3000)], rng.integers(0, 2**64, 3000, dtype=np.uint64))
        store.merge()
        for i in range(50):
            store.add(f"delta-{i}", fingerprint=int(rng.integers(0, 2**63)), meta={"i": i})
        store.add("x" * 1000, fingerprint=7)
    os.remove(path + "-lock")
    return path


def assert_refused_untouched(
    zygote: Zygote, path: str, expected: tuple[str, ...], modes: str = "rw"
) -> dict[str, Any]:
    """Every mode refuses ``path`` with one of the ``expected`` errors, `simstore check`
    exits 1 with a message, and the file is byte-for-byte as it was."""
    before = file_digest(path)
    *reports, checked = probe(zygote, path, modes, cli=True)
    for report in reports:
        assert report["outcome"] == "error", report
        assert report["type"] in expected, report
        assert report["message"]
    assert checked["cli"] == 1, checked
    assert checked["stderr"].startswith("simstore: error:"), checked
    assert "Traceback" not in checked["stderr"]
    assert file_digest(path) == before
    return dict(reports[-1])


# -- truncated ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "keep", ["1", "100", "4095", "4096", "8191", "8192", "12288", "half", "minus-page", "minus-1"]
)
def test_truncated_store(zygote: Zygote, good_store: str, keep: str) -> None:
    """A store cut at any length is refused (NotAStoreError for what is too short to be
    LMDB, CorruptStoreError for a store missing pages), never a SIGBUS. Lengths are taken
    from the pages in use: a writer's file runs on to the end of its map."""
    env = lmdb.open(good_store, subdir=False, readonly=True, lock=False)
    size = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    env.close()
    lengths = {"half": size // 2, "minus-page": size - 4096, "minus-1": size - 1}
    length = lengths[keep] if keep in lengths else int(keep)
    with open(good_store, "r+b") as handle:
        handle.truncate(length)
    assert_refused_untouched(zygote, good_store, ("NotAStoreError", "CorruptStoreError"))


# -- random bytes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 4096, 8192, 65536, 1 << 20])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_bytes(zygote: Zygote, tmp_path: Path, size: int, seed: int) -> None:
    path = str(tmp_path / "random.simstore")
    Path(path).write_bytes(np.random.default_rng(seed).bytes(size))
    report = assert_refused_untouched(zygote, path, ("NotAStoreError",))
    assert "not" in report["message"]
    assert not os.path.exists(path + "-lock")


def test_valid_lmdb_header_then_random_pages(zygote: Zygote, good_store: str) -> None:
    """The two LMDB meta pages of a real store followed by random bytes: LMDB accepts the
    header, then every page it follows is garbage."""
    with open(good_store, "r+b") as handle:
        handle.seek(8192)
        handle.write(np.random.default_rng(9).bytes(os.path.getsize(good_store) - 8192))
    assert_refused_untouched(zygote, good_store, ("NotAStoreError", "CorruptStoreError"))


# -- other programs' LMDB files -------------------------------------------------------------------


def _lmdb_with(path: str, body: Callable[[lmdb.Environment], None], **flags: Any) -> None:
    env = lmdb.open(path, subdir=False, max_dbs=64, **flags)
    body(env)
    env.close()
    os.remove(path + "-lock")


def _sub_databases_without_meta(env: lmdb.Environment) -> None:
    for name in (b"keys", b"docs", b"table:000"):
        db = env.open_db(name)
        with env.begin(write=True) as txn:
            txn.put(b"a", b"b", db=db)


def _meta_db_with_wrong_flags(env: lmdb.Environment) -> None:
    db = env.open_db(b"meta", dupsort=True)
    with env.begin(write=True) as txn:
        txn.put(b"meta", b"x", db=db)


def _big_foreign(env: lmdb.Environment) -> None:
    with env.begin(write=True) as txn:
        for i in range(20_000):
            txn.put(b"key-%08d" % i, b"v" * 50)


FOREIGN: dict[str, Callable[[lmdb.Environment], None]] = {
    "simstore-like-names-no-meta": _sub_databases_without_meta,
    "meta-db-with-dupsort": _meta_db_with_wrong_flags,
    "big-plain-lmdb": _big_foreign,
}


@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_other_programs_lmdb_files(zygote: Zygote, tmp_path: Path, kind: str) -> None:
    path = str(tmp_path / "foreign.simstore")
    _lmdb_with(path, FOREIGN[kind])
    assert_refused_untouched(zygote, path, ("NotAStoreError",), modes="rwcn")
    assert not os.path.exists(path + "-lock")


# -- damaged simstore records ---------------------------------------------------------------------


def _edit(path: str, body: Callable[[lmdb.Transaction, Callable[..., Any]], None]) -> None:
    """Change a store behind simstore's back."""
    env = lmdb.open(path, subdir=False, max_dbs=600)

    def db(name: bytes, **flags: bool) -> Any:
        return env.open_db(name, txn=txn, create=False, **flags)

    with env.begin(write=True) as txn:
        body(txn, db)
    env.close()
    os.remove(path + "-lock")


def _put_meta(raw: bytes) -> Callable[[lmdb.Transaction, Callable[..., Any]], None]:
    return lambda txn, db: txn.put(b"meta", raw, db=db(b"meta"))


def _meta_record(**changes: Any) -> Callable[[lmdb.Transaction, Callable[..., Any]], None]:
    def body(txn: lmdb.Transaction, db: Callable[..., Any]) -> None:
        record = msgpack.unpackb(txn.get(b"meta", db=db(b"meta")), raw=False)
        record.update(changes)
        txn.put(b"meta", msgpack.packb(record, use_bin_type=True), db=db(b"meta"))

    return body


def _nested(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"


DAMAGED_AT_OPEN: dict[str, tuple[Callable[[lmdb.Transaction, Callable[..., Any]], None], tuple[str, ...]]] = {
    "meta-not-msgpack": (_put_meta(b"\xc1\xc1 not msgpack"), ("CorruptStoreError", "NotAStoreError")),
    "meta-random": (_put_meta(np.random.default_rng(1).bytes(300)), ("CorruptStoreError", "NotAStoreError")),
    "meta-over-1MiB": (
        _put_meta(b"\xdb" + (2_000_000).to_bytes(4, "big") + b"a" * 2_000_000),
        ("CorruptStoreError",),
    ),
    "meta-nesting-bomb": (_put_meta(_nested(200_000)), ("CorruptStoreError", "NotAStoreError")),
    "meta-ext-type": (
        _put_meta(msgpack.packb(msgpack.ExtType(42, b"payload"))),
        ("NotAStoreError", "CorruptStoreError"),
    ),
    # (Damaged, since the store's write-ahead log names the file; with no log, not a store.)
    "meta-array": (_put_meta(msgpack.packb([1, 2, 3])), ("CorruptStoreError", "NotAStoreError")),
    "meta-empty": (_put_meta(b""), ("CorruptStoreError", "NotAStoreError")),
    "meta-missing": (
        lambda txn, db: txn.delete(b"meta", db=db(b"meta")),
        ("CorruptStoreError", "NotAStoreError"),
    ),
    "tables-not-lists": (_meta_record(tables=["abc", 5]), ("CorruptStoreError",)),
    "tables-bits-out-of-range": (_meta_record(tables=[[list(range(100, 164)), 16]]), ("CorruptStoreError",)),
    "tables-bits-repeated": (_meta_record(tables=[[[0] * 64, 16]]), ("CorruptStoreError",)),
    "tables-prefix-too-long": (_meta_record(tables=[[list(range(64)), 99]]), ("CorruptStoreError",)),
    "k-huge": (_meta_record(k=2**40), ("CorruptStoreError",)),
    "blocks-string": (_meta_record(blocks="five"), ("CorruptStoreError",)),
    "version-newer": (_meta_record(version=99), ("FormatVersionError",)),
    "state-short": (lambda txn, db: txn.put(b"state", b"\x00" * 5, db=db(b"meta")), ("CorruptStoreError",)),
    "state-missing": (lambda txn, db: txn.delete(b"state", db=db(b"meta")), ("CorruptStoreError",)),
    "delta-record-garbage": (
        lambda txn, db: txn.put((10**6).to_bytes(8, "big"), b"zzz", db=db(b"delta")),
        ("CorruptStoreError",),
    ),
    "docs-db-dropped": (lambda txn, db: txn.drop(db(b"docs"), delete=True), ("CorruptStoreError",)),
    "table-db-dropped": (
        lambda txn, db: txn.drop(db(b"table:004", dupsort=True, dupfixed=True), delete=True),
        ("CorruptStoreError",),
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED_AT_OPEN))
def test_damaged_records_are_refused_at_open(zygote: Zygote, good_store: str, damage: str) -> None:
    """Damage to the meta record, the state record, the delta log or the sub-databases:
    a clear error naming the problem at open, in every mode, with the file untouched, and
    `simstore check` exits 1 with the same message."""
    edit, expected = DAMAGED_AT_OPEN[damage]
    _edit(good_store, edit)
    assert_refused_untouched(zygote, good_store, expected)


def _short_record(txn: lmdb.Transaction, db: Callable[..., Any]) -> None:
    docs = db(b"docs")
    cursor = txn.cursor(docs)
    assert cursor.first()
    txn.put(cursor.key(), b"\x01\x02", db=docs)


def _record_bad_key(txn: lmdb.Transaction, db: Callable[..., Any]) -> None:
    docs = db(b"docs")
    cursor = txn.cursor(docs)
    assert cursor.last()
    txn.put(cursor.key(), cursor.value()[:8] + b"\xc1\xc1", db=docs)


def _docmeta_garbage(txn: lmdb.Transaction, db: Callable[..., Any]) -> None:
    docmeta = db(b"docmeta")
    cursor = txn.cursor(docmeta)
    assert cursor.first()
    txn.put(cursor.key(), b"\xc1 not msgpack", db=docmeta)


def _table_entry_moved(txn: lmdb.Transaction, db: Callable[..., Any]) -> None:
    table = db(b"table:002", dupsort=True, dupfixed=True)
    cursor = txn.cursor(table)
    assert cursor.first()
    key, value = cursor.key(), cursor.value()
    cursor.delete()
    txn.put((int.from_bytes(key, "big") ^ 1).to_bytes(8, "big"), value, db=table)


def _state_next_id_too_low(txn: lmdb.Transaction, db: Callable[..., Any]) -> None:
    raw = txn.get(b"state", db=db(b"meta"))
    txn.put(b"state", (1).to_bytes(8, "big") + raw[8:], db=db(b"meta"))


DAMAGED_INSIDE: dict[str, Callable[[lmdb.Transaction, Callable[..., Any]], None]] = {
    "record-too-short": _short_record,
    "record-key-garbage": _record_bad_key,
    "table-entry-under-wrong-key": _table_entry_moved,
    "state-next-id-too-low": _state_next_id_too_low,
}


@pytest.mark.parametrize("damage", sorted(DAMAGED_INSIDE))
def test_damage_inside_is_reported_by_check(zygote: Zygote, good_store: str, damage: str) -> None:
    """Damage that opening does not read: the store opens, check() lists the problem, and
    `simstore check` prints it and exits 1; nothing crashes and the file is untouched."""
    _edit(good_store, DAMAGED_INSIDE[damage])
    before = file_digest(good_store)
    report, checked = probe(zygote, good_store, "r", cli=True)
    if report["outcome"] == "opened":
        assert report["problems"], report
    else:  # reading every record may also raise, clearly
        assert report["type"] == "CorruptStoreError", report
    assert checked["cli"] == 1, checked
    assert "Traceback" not in checked["stderr"]
    assert checked["stdout"].strip() or checked["stderr"].startswith("simstore: error:")
    assert file_digest(good_store) == before


def test_damaged_document_meta_is_a_clear_error(good_store: str) -> None:
    """A document whose metadata is not msgpack: get() raises CorruptStoreError naming it;
    other documents are unaffected."""
    _edit(good_store, _docmeta_garbage)
    with simstore.open(good_store, "r") as store:
        with pytest.raises(simstore.CorruptStoreError, match="metadata"):
            store.get("delta-0")
        assert store.get("doc-1") is not None


# -- bit flips ------------------------------------------------------------------------------------


def damage_randomly(path: str, seed: int) -> None:
    """Overwrite 8 random runs of 1-15 bytes past the LMDB header with random bytes."""
    rng = np.random.default_rng(seed)
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        for offset in rng.integers(8192, size, 8).tolist():
            handle.seek(offset)
            handle.write(rng.bytes(int(rng.integers(1, 16))))


@pytest.mark.parametrize("seed", range(12))
def test_random_byte_damage_never_crashes(zygote: Zygote, good_store: str, seed: int) -> None:
    """Random bytes overwritten anywhere past the LMDB header (B-tree pages, records).

    In the process that reads the file, the store may open, open and report problems,
    or be refused; the one other outcome allowed is LMDB's own abort (SIGABRT on an
    assertion in mdb.c) when a read meets a page damaged in certain ways: LMDB keeps no
    page checksums and asserts in C, which simstore cannot catch (NOTES.md, bug 9).
    Never a segfault, a bus error or a hang. `simstore check` must survive every seed:
    it walks the tables in a child process and reports the damage."""
    damage_randomly(good_store, seed)
    before = file_digest(good_store)
    reports = probe(zygote, good_store, "r", allow_lmdb_abort=True)
    if reports:
        (report,) = reports
        assert report["outcome"] in ("opened", "error")
        if report["outcome"] == "error":
            assert report["type"] in ("CorruptStoreError", "NotAStoreError", "SimstoreError"), report
        COUNTS["corrupt_bitflip_outcome:" + report["outcome"]] += 1
    else:
        COUNTS["corrupt_bitflip_outcome:lmdb_abort"] += 1
    (checked,) = probe(zygote, good_store, modes="", cli=True)
    assert checked["cli"] in (0, 1), checked
    assert "Traceback" not in checked["stderr"]
    if not reports:  # the damage that aborted a reader is reported, not died of
        assert checked["cli"] == 1, checked
        assert "damaged" in checked["stdout"], checked
    assert file_digest(good_store) == before


def test_a_copy_of_a_good_store_is_fine(zygote: Zygote, good_store: str, tmp_path: Path) -> None:
    """The control case: the probe passes an undamaged store, so the refusals above are
    about the damage."""
    copy = str(tmp_path / "copy.simstore")
    shutil.copyfile(good_store, copy)
    report, checked = probe(zygote, copy, "r", cli=True)
    assert report == {"mode": "r", "outcome": "opened", "problems": []}
    assert (checked["cli"], checked["stdout"].strip()) == (0, "ok")
