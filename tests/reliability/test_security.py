"""Security: nothing in a store file is ever unpickled or evaluated, metadata is msgpack
with size limits, and a store opened read-only is never written.
"""

from __future__ import annotations

import ast
import os
import stat
import subprocess
from pathlib import Path

import lmdb
import msgpack
import pytest

import simstore

from .conftest import COUNTS, file_digest, run_python

SOURCE = Path(simstore.__file__).resolve().parent
FORBIDDEN_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "marshal",
    "shelve",
    "dill",
    "cloudpickle",
    "yaml",
    "jsonpickle",
}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def test_no_module_can_unpickle_or_evaluate() -> None:
    """No simstore module imports a deserialiser that runs code, or calls eval/exec."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                names = [node.func.id] if node.func.id in FORBIDDEN_CALLS else []
            else:
                continue
            found += [
                f"{path.relative_to(SOURCE)}:{node.lineno} {name}"
                for name in names
                if name in FORBIDDEN_MODULES | FORBIDDEN_CALLS
            ]
    assert found == []
    assert len(list(SOURCE.rglob("*.py"))) >= 60  # the scan saw every subpackage


HOSTILE = """
import builtins, os, pickle, sys
import simstore
from simstore import cli

def trap(name):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{name} was called while reading a store")
    return refuse

def run_all(path):
    outcomes = []
    for call in CALLS:
        try:
            with simstore.open(path, "r") as store:
                call(store)
            outcomes.append("ok")
        except simstore.SimstoreError as exc:
            outcomes.append(type(exc).__name__)
    for verb in ("stats", "check"):
        try:
            cli.main([verb, path])
        except SystemExit:
            pass
    return outcomes

CALLS = (
    lambda s: s.get("victim"),
    lambda s: s.query(fingerprint=1, with_meta=True),
    lambda s: s.query_many([1, 2], with_meta=True),
    lambda s: list(s.items()),
    lambda s: s.check(),
    lambda s: s.stats(),
    lambda s: s.add_if_new("other", fingerprint=1, with_meta=True),
)

# A warm-up pass over an undamaged store imports everything these paths need, so that
# the traps below (exec is also how Python runs a module it imports) meet only reads.
run_all(sys.argv[2])
pickle.loads = pickle.load = trap("pickle.load")
pickle.Unpickler = trap("pickle.Unpickler")
builtins.eval = trap("eval")
builtins.exec = trap("exec")
print("outcomes:", run_all(sys.argv[1]))
print("survived")
"""


class Payload:
    """Unpickling this runs ``os.system`` and leaves a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_hostile_records_are_never_unpickled(tmp_path: Path) -> None:
    """Pickle payloads planted in the document metadata, a key record and the meta
    record's settings, and msgpack ext types: reading the store (API and CLI) with
    pickle, eval and exec booby-trapped runs none of them. (marshal is left alone: the
    import system needs it; the static test above covers it.)"""
    import pickle

    path = str(tmp_path / "hostile.simstore")
    benign = str(tmp_path / "benign.simstore")
    marker = str(tmp_path / "pwned")
    payload = pickle.dumps(Payload(marker))
    for made in (path, benign):
        with simstore.open(made, k=3) as store:
            store.add("victim", fingerprint=1, meta={"note": "x"})
            store.add("victim2", fingerprint=2)
    env = lmdb.open(path, subdir=False, max_dbs=600)
    with env.begin(write=True) as txn:
        docmeta = env.open_db(b"docmeta", txn=txn, create=False)
        docs = env.open_db(b"docs", txn=txn, create=False)
        meta = env.open_db(b"meta", txn=txn, create=False)
        cursor = txn.cursor(docmeta)
        assert cursor.first()
        txn.put(cursor.key(), payload, db=docmeta)
        cursor = txn.cursor(docs)
        assert cursor.last()
        txn.put(cursor.key(), cursor.value()[:8] + msgpack.packb(msgpack.ExtType(1, payload)), db=docs)
        txn.put(cursor.key(), msgpack.packb({"pickled": msgpack.ExtType(5, payload)}), db=docmeta)
        record = msgpack.unpackb(txn.get(b"meta", db=meta), raw=False)
        record["fingerprinter"]["hostile"] = payload
        record["layout"]["hostile"] = msgpack.ExtType(7, payload)
        txn.put(b"meta", msgpack.packb(record, use_bin_type=True), db=meta)
    env.close()
    completed = run_python(HOSTILE, path, benign)
    assert completed.returncode == 0, completed.stderr[-1000:]
    assert completed.stdout.splitlines()[-1] == "survived"
    assert not os.path.exists(marker), "a pickle payload ran"
    # the damaged records are reported as damage, not returned as something else
    assert "CorruptStoreError" in completed.stdout
    COUNTS["hostile_reads"] += 9


def test_planted_metadata_over_the_limit_is_refused(tmp_path: Path) -> None:
    """Metadata simstore never writes (over its 64 KiB limit), planted in the file, is
    refused on read rather than returned: the limit holds for reads too."""
    path = str(tmp_path / "big-meta.simstore")
    with simstore.open(path, k=3) as store:
        store.add("a", fingerprint=1, meta={"small": 1})
        with pytest.raises(simstore.InvalidValueError, match=r"64|limit"):
            store.add("b", fingerprint=2, meta={"big": b"x" * 70_000})
    env = lmdb.open(path, subdir=False, max_dbs=600)
    with env.begin(write=True) as txn:
        docmeta = env.open_db(b"docmeta", txn=txn, create=False)
        cursor = txn.cursor(docmeta)
        assert cursor.first()
        txn.put(cursor.key(), msgpack.packb({"big": b"x" * 2_000_000}), db=docmeta)
    env.close()
    with simstore.open(path, "r") as store, pytest.raises(simstore.CorruptStoreError):
        store.get("a")


@pytest.mark.parametrize("value", ["str", "array"])
def test_planted_metadata_over_the_limit_of_any_type_is_refused(tmp_path: Path, value: str) -> None:
    path = str(tmp_path / "big-meta.simstore")
    with simstore.open(path, k=3) as store:
        store.add("a", fingerprint=1, meta={"small": 1})
    big = "x" * 2_000_000 if value == "str" else list(range(300_000))
    env = lmdb.open(path, subdir=False, max_dbs=600)
    with env.begin(write=True) as txn:
        docmeta = env.open_db(b"docmeta", txn=txn, create=False)
        cursor = txn.cursor(docmeta)
        assert cursor.first()
        txn.put(cursor.key(), msgpack.packb({"big": big}), db=docmeta)
    env.close()
    with simstore.open(path, "r") as store, pytest.raises(simstore.CorruptStoreError):
        store.get("a")


@pytest.mark.parametrize("meta", [{(1, 2): "x"}, {"outer": {("a",): 1}}, {(): None}])
def test_meta_that_is_accepted_round_trips(store_path: str, meta: dict[object, object]) -> None:
    """Either add() refuses the meta (InvalidValueError) or get() gives it back."""
    with simstore.open(store_path, k=3) as store:
        try:
            store.add("m", fingerprint=5, meta=meta)  # type: ignore[arg-type]
        except simstore.InvalidValueError:
            return
        assert store.get("m") is not None
        assert store.query(fingerprint=5, with_meta=True)[0].key == "m"


# -- read-only ------------------------------------------------------------------------------------


def store_fds(path: str) -> list[int]:
    """This process's file descriptors open on ``path``."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == os.path.realpath(path):
                fds.append(int(name))
        except OSError:
            continue
    return fds


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_read_only_store_holds_the_file_open_read_only(tmp_path: Path) -> None:
    """A store opened read-only holds its file through descriptors opened O_RDONLY, so
    no code path (simstore's or LMDB's) can write it, and its map is not writable."""
    path = str(tmp_path / "ro.simstore")
    with simstore.open(path, k=3) as store:
        store.add("a", fingerprint=1)
    for mode, readonly in (("r", False), ("w", True)):
        with simstore.open(path, mode, readonly=readonly) as store:
            store.query(fingerprint=1)
            fds = store_fds(path)
            assert fds, "no descriptor found for the store file"
            for fd in fds:
                flags = int(Path(f"/proc/self/fdinfo/{fd}").read_text().split("flags:")[1].split()[0], 8)
                assert flags & os.O_ACCMODE == os.O_RDONLY, f"fd {fd} has flags {flags:o}"
            maps = [line for line in Path("/proc/self/maps").read_text().splitlines() if line.endswith(path)]
            assert maps, "the store file is not mapped"
            assert all(line.split()[1][1] == "-" for line in maps), maps  # r--s / r--p, never rw


def test_read_only_session_never_changes_the_file(tmp_path: Path) -> None:
    """Every read, every refused write and close (with an unmerged delta in the file,
    which a read-only close must not merge) leave the file's bytes and mtime as they were."""
    path = str(tmp_path / "ro.simstore")
    with simstore.open(path, k=3, merge_on_close=False) as store:
        store.add_many(["a", "b"], [1, 2])
        store.merge()
        store.add("delta", fingerprint=3, meta={"m": 1})
    before = (file_digest(path), os.stat(path).st_mtime_ns, os.path.getsize(path))
    with simstore.open(path, "r") as store:
        store.query(fingerprint=1, with_meta=True)
        store.query_many([1, 2, 3])
        list(store.items())
        store.check()
        store.stats()
        writes = [
            lambda: store.add("c", fingerprint=4),
            lambda: store.add_many(["c"], [4]),
            lambda: store.add_if_new("c", fingerprint=1000),
            lambda: store.remove("a"),
            lambda: store.remove("missing"),
            store.merge,
        ]
        if hasattr(store, "relayout"):
            writes.append(lambda: store.relayout(blocks=4))
        for write in writes:
            with pytest.raises(simstore.ReadOnlyError):
                write()
        assert store.stats().delta_docs == 1
    assert (file_digest(path), os.stat(path).st_mtime_ns, os.path.getsize(path)) == before


def test_read_only_filesystem(tmp_path: Path) -> None:
    """A store on a read-only filesystem (a tmpfs remounted read-only, when this process may
    mount one): mode "r" either reads it or refuses with a clear SimstoreError; mode "w"
    refuses; nothing crashes."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    folder = tmp_path / "ro-fs"
    folder.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=False
    ).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        path = str(folder / "ro.simstore")
        with simstore.open(path, k=3) as store:
            store.add("a", fingerprint=1)
        os.chmod(path, stat.S_IRUSR)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        completed = run_python(
            """
            import sys, simstore
            path = sys.argv[1]
            try:
                with simstore.open(path, "r") as store:
                    print("read", list(store.items()))
            except simstore.SimstoreError as exc:
                print("refused-r", type(exc).__name__)
            try:
                simstore.open(path, "w").close()
                print("opened-w")
            except simstore.SimstoreError as exc:
                print("refused-w", type(exc).__name__)
            """,
            path,
        )
        assert completed.returncode == 0, completed.stderr[-600:]
        lines = completed.stdout.splitlines()
        assert lines[0] in ("read [('a', 1)]",) or lines[0].startswith("refused-r"), lines
        assert lines[1].startswith("refused-w"), lines
    finally:
        subprocess.run(["umount", str(folder)], check=False)
