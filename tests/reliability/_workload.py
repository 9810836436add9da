"""Code shared by the reliability tests and the processes they start and kill.

The same deterministic operation stream (:func:`operations`) runs in a worker process,
which logs every operation when it starts (``S``) and once it has returned (``A``), and
in the test, which replays the acknowledged prefix on a dict model. After a SIGKILL the
store must equal the model after the acknowledged operations, or after one more (the
operation in flight may or may not have committed), and nothing else.

Workers are forked from a *zygote*: a ``sys.executable -c`` process that has imported
simstore once and forks a fresh worker per command. A forked worker has never opened a
store, so it is a new LMDB user exactly like a freshly started interpreter, but it costs
milliseconds rather than the 0.4 s of an interpreter start, which is what lets the
default suite afford dozens of kills. Nothing here is collected as a test.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np

Key = str | bytes | int
Meta = dict[str, Any] | None
Model = dict[Key, tuple[int, Meta]]
Op = tuple[Any, ...]

MAX_FP = (1 << 64) - 1

# Mixes of operations: the weight of each kind.
MIXES: dict[str, dict[str, int]] = {
    "adds": {"add": 75, "replace": 12, "add_many": 5, "add_if_new": 5, "remove": 3},
    "merges": {"add_many": 30, "merge": 30, "compact": 10, "add": 20, "replace": 10},
    "removes": {"remove": 40, "add": 30, "replace": 15, "add_many": 10, "merge": 5, "compact": 3},
    # No add_if_new (its outcome would depend on the other writer) and no removal of
    # keys another process added: two of these can write one store at the same time.
    "writer": {
        "add": 45,
        "replace": 15,
        "add_many": 20,
        "remove": 15,
        "merge": 3,
        "compact": 2,
        "relayout": 2,
    },
    "mixed": {
        "add": 35,
        "replace": 15,
        "add_many": 15,
        "add_if_new": 10,
        "remove": 15,
        "merge": 5,
        "compact": 2,
        "relayout": 3,
    },
}

# The largest add_many batch of each mix.
BATCH_SIZES = {"adds": 20, "merges": 150, "removes": 30, "mixed": 60, "writer": 40}


def pack(value: object) -> str:
    """Hex msgpack, for passing keys of every type through a command line or a pipe."""
    return bytes(msgpack.packb(value, use_bin_type=True)).hex()


def unpack(text: str) -> Any:
    return msgpack.unpackb(bytes.fromhex(text), raw=False, strict_map_key=False)


def near(rng: random.Random, fingerprint: int, bits: int) -> int:
    for bit in rng.sample(range(64), bits):
        fingerprint ^= 1 << bit
    return fingerprint


def operations(seed: int, mix: str, live: list[Key], round_no: int, with_relayout: bool) -> Iterator[Op]:
    """An endless, deterministic stream of operations.

    ``live`` holds keys known to be stored when the stream starts; removals and
    replacements pick from it, so they never name a missing key. Its outcome never
    depends on the store (``add_if_new`` keys are not added to ``live``), so the test
    regenerates exactly the stream the worker ran.
    """
    rng = random.Random(seed)
    live = list(live)
    prefix = f"r{round_no}"
    recent: list[int] = [rng.getrandbits(64) for _ in range(4)]
    weights = dict(MIXES[mix])
    if not with_relayout:
        weights.pop("relayout", None)
    kinds = list(weights)
    counts = list(weights.values())
    index = 0

    def fresh_fp() -> int:
        # Half the fingerprints land near a recent one, so queries find neighbours.
        fp = near(rng, rng.choice(recent), rng.randint(0, 4)) if rng.random() < 0.5 else rng.getrandbits(64)
        recent[rng.randrange(len(recent))] = fp
        return fp

    def fresh_key() -> Key:
        nonlocal index
        index += 1
        style = rng.random()
        if style < 0.6:
            return f"{prefix}/page/{index}"
        if style < 0.75:
            number = (round_no << 32) | index  # unique across rounds, as every new key is
            return number if index % 2 else -number - 1
        if style < 0.9:
            return f"{prefix}-{index}".encode()
        return f"https://{prefix}.example/{index}/" + "x" * 500  # looked up by digest

    def meta() -> Meta:
        return {"n": index, "tag": rng.choice(["a", "b", "c"])} if rng.random() < 0.3 else None

    while True:
        kind = rng.choices(kinds, counts)[0]
        if kind in ("replace", "remove") and not live:
            kind = "add"
        if kind == "add":
            key = fresh_key()
            live.append(key)
            yield ("add", key, fresh_fp(), meta())
        elif kind == "replace":
            yield ("add", rng.choice(live), fresh_fp(), meta())
        elif kind == "add_many":
            keys = [fresh_key() for _ in range(rng.randint(1, BATCH_SIZES[mix]))]
            live.extend(keys)
            if rng.random() < 0.3:
                keys.append(rng.choice(live[:-1] or live))  # a replacement inside a batch
            fps = [fresh_fp() for _ in keys]
            metas = [meta() for _ in keys] if rng.random() < 0.5 else None
            yield ("add_many", keys, fps, metas)
        elif kind == "add_if_new":
            yield ("add_if_new", fresh_key(), fresh_fp())
        elif kind == "remove":
            key = live.pop(rng.randrange(len(live)))
            yield ("remove", key)
        elif kind == "relayout":
            yield ("relayout", rng.choice([4, 5, 6]))  # blocks, for k=3: 4, 10 or 20 tables
        else:
            yield (kind,)


def apply(model: Model, op: Op, k: int) -> None:
    """Apply one operation to the dict model, as the store documents it."""
    kind = op[0]
    if kind == "add":
        _, key, fp, meta = op
        model[key] = (fp, meta)
    elif kind == "add_many":
        _, keys, fps, metas = op
        for position, (key, fp) in enumerate(zip(keys, fps, strict=True)):
            model[key] = (fp, None if metas is None else metas[position])
    elif kind == "add_if_new":
        _, key, fp = op
        if not any((stored ^ fp).bit_count() <= k for stored, _ in model.values()):
            model[key] = (fp, None)
    elif kind == "remove":
        del model[op[1]]
    # merge, compact and relayout change no contents


def run_op(store: Any, op: Op) -> None:
    kind = op[0]
    if kind == "add":
        store.add(op[1], fingerprint=op[2], meta=op[3])
    elif kind == "add_many":
        store.add_many(op[1], op[2], metas=op[3], sketches=sketches_of(op[2]))
    elif kind == "add_if_new":
        store.add_if_new(op[1], fingerprint=op[2])
    elif kind == "remove":
        store.remove(op[1])
    elif kind == "merge":
        store.merge()
    elif kind == "compact":
        store.compact()
    elif kind == "relayout":
        store.relayout(blocks=op[1])
    else:
        raise AssertionError(f"unknown op {op!r}")


def sketches_of(fps: list[int]) -> np.ndarray:
    """A 128-byte sketch for each fingerprint, made from it (every bin filled):
    batches carry sketches, so a store's band table holds keys under the kills
    and ``check()`` after each verifies it against them."""
    digests = b"".join(
        hashlib.blake2b(fp.to_bytes(8, "little"), digest_size=64, salt=salt).digest()
        for fp in fps
        for salt in (b"one", b"two")
    )
    rows = np.frombuffer(digests, dtype=np.uint8).reshape(len(fps), 128).copy()
    rows[(rows & 0x0F) == 0] |= 0x01  # no empty bin: every one of a long text's bands
    rows[(rows & 0xF0) == 0] |= 0x10
    return rows


def describe(op: Op) -> str:
    """A short, log-friendly description: the key(s) an operation acknowledges."""
    if op[0] in ("add", "add_if_new", "remove"):
        return f"{op[0]} {op[1]!r} {op[2] if len(op) > 2 else ''}"
    if op[0] == "add_many":
        return f"add_many {len(op[1])} keys, first {op[1][0]!r}"
    return op[0]


# -- the worker ---------------------------------------------------------------------------


class Log:
    """Unbuffered line log: each line is in the kernel once ``write`` returns, so a
    SIGKILL right after it cannot lose it."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())


def crash_worker(cfg: dict[str, Any]) -> None:
    """Open the store and run the operation stream until killed (or ``max_ops``)."""
    import warnings

    import simstore

    warnings.simplefilter("ignore")  # StoreFullWarning, ShortTextWarning
    if cfg.get("stepped_joins"):
        # Every join prepared in steps of 16-entry stretches, a step taken by
        # writes every 0.1 ms of credit (this process is forked: no test sees it).
        from simstore.engine import prepared_join
        from simstore.index import column_merge
        from simstore.store import stepped_joins

        prepared_join.STEPPED_JOIN_ENTRIES = 1
        stepped_joins.JOIN_SECONDS_PER_DOCUMENT = 1e-4
        column_merge.CHUNK_ENTRIES = 16
    log = Log(cfg["log"])
    live = [unpack(item) for item in cfg["live"]]
    stream = operations(cfg["seed"], cfg["mix"], live, cfg["round"], cfg["relayout"])
    store = simstore.open(
        cfg["path"],
        cfg["mode"],
        k=cfg.get("k"),
        sync=cfg["sync"],
        merge_threshold=cfg["merge_threshold"],
        merge_on_close=True,
    )
    log.write("O")
    delta = getattr(store, "_delta", None)
    start_at = cfg.get("start_at")
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.monotonic()))
    deadline = time.monotonic() + cfg.get("seconds", 1e9)
    slowest = 0.0
    for number, op in enumerate(stream):
        if number >= cfg["max_ops"] or time.monotonic() > deadline:
            break
        pending = len(delta) if delta is not None else -1
        log.write(f"S {number} {op[0]} {pending}")
        began = time.monotonic()
        run_op(store, op)
        slowest = max(slowest, time.monotonic() - began)
        log.write(f"A {number} {describe(op)}")
    store.close()
    log.write(f"C {slowest}")


def probe_worker(cfg: dict[str, Any]) -> None:
    """Open the store, read from it, report, and wait to be killed."""
    import simstore

    log = Log(cfg["log"])
    store = simstore.open(cfg["path"], cfg["mode"], sync=False)
    for _ in range(cfg.get("reads", 3)):
        len(store)
    if cfg.get("write"):
        store.add(cfg["write"], fingerprint=1)
    log.write(f"R {len(store)}")
    time.sleep(600)


# -- one writer, several readers --------------------------------------------------------------

GROUP_SIZE = 8
MOVERS = 4


# String seeds keep the groups', singles' and movers' random streams apart (integer seeds
# once gave a single document the fingerprint of a mover).
def group_centre(seed: int, group: int) -> int:
    return random.Random(f"group-{seed}-{group}").getrandbits(64)


def single_fp(group: int) -> int:
    return random.Random(f"single-{group}").getrandbits(64)


def group_members(seed: int, group: int) -> tuple[list[str], list[int]]:
    """A batch of GROUP_SIZE documents, each one bit from the group's centre."""
    centre = group_centre(seed, group)
    bits = random.Random(f"bits-{seed}-{group}").sample(range(64), GROUP_SIZE)
    return [f"g{group}-{bit}" for bit in bits], [centre ^ (1 << bit) for bit in bits]


def mover_fps(seed: int, mover: int) -> tuple[int, int]:
    rng = random.Random(f"mover-{seed}-{mover}")
    return rng.getrandbits(64), rng.getrandbits(64)


def concurrent_writer(cfg: dict[str, Any]) -> None:
    """Adds a group per step (one add_many), moves a mover (one add that replaces a
    fingerprint), adds a single document, merges now and then; logs each ack time."""
    import simstore

    log = Log(cfg["log"])
    seed = cfg["seed"]
    store = simstore.open(cfg["path"], "w", sync=False, merge_threshold=cfg["merge_threshold"])
    log.write("O")
    time.sleep(max(0.0, cfg["start_at"] - time.monotonic()))
    deadline = cfg["start_at"] + cfg["seconds"]
    group = 0
    latencies: list[float] = []
    while time.monotonic() < deadline:
        keys, fps = group_members(seed, group)
        began = time.monotonic()
        store.add_many(keys, fps)
        done = time.monotonic()
        latencies.append(done - began)
        log.write(f"G {group} {done!r}")
        mover = group % MOVERS
        store.add(f"mover-{mover}", fingerprint=mover_fps(seed, mover)[(group // MOVERS) % 2])
        began = time.monotonic()
        store.add(f"single-{group}", fingerprint=single_fp(group))
        latencies.append(time.monotonic() - began)
        if group % 40 == 39:
            began = time.monotonic()
            store.merge()
            latencies.append(time.monotonic() - began)
        group += 1
    store.close()
    latencies.sort()
    log.write(f"C {group} {latencies[-1]!r} {latencies[len(latencies) // 2]!r}")


def concurrent_reader(cfg: dict[str, Any]) -> None:
    """Queries groups, movers and sizes while the writer runs; logs what it saw and
    ``X`` lines for anything a reader must never see."""
    import numpy as np

    import simstore

    log = Log(cfg["log"])
    seed = cfg["seed"]
    rng = random.Random(cfg["reader"])
    store = simstore.open(cfg["path"], cfg["mode"], merge_on_close=False)
    movers = [fp for mover in range(MOVERS) for fp in mover_fps(seed, mover)]
    mover_queries = np.array(movers, dtype=np.uint64)
    log.write("O")
    time.sleep(max(0.0, cfg["start_at"] - time.monotonic()))
    deadline = cfg["start_at"] + cfg["seconds"]
    newest = -1
    last_len = 0
    last_check = time.monotonic()
    rounds = 0
    while time.monotonic() < deadline:
        group = newest + 1 if rng.random() < 0.5 or newest < 0 else rng.randint(0, newest)
        began = time.monotonic()
        matches = store.query(fingerprint=group_centre(seed, group))
        keys = sorted(match.key for match in matches)
        expected = sorted(group_members(seed, group)[0])
        if keys and keys != expected:
            log.write(f"X group {group}: saw {len(keys)} of {len(expected)} documents: {keys}")
        log.write(f"Q {group} {int(bool(keys))} {began!r}")
        if keys:
            newest = max(newest, group)
        rows = store.query_many(mover_queries, k=0)
        for mover in range(MOVERS):
            seen = [m.key for row in rows[2 * mover : 2 * mover + 2] for m in row]
            if seen != [f"mover-{mover}"]:
                log.write(f"X mover {mover} seen as {seen}; {mover_diagnosis(store, seed, mover)}")
        size = len(store)
        if size < last_len:
            log.write(f"X len went from {last_len} to {size}")
        last_len = size
        log.write(f"N {size} {began!r}")
        if time.monotonic() - last_check > cfg["check_every"]:
            problems = store.check()
            if problems:
                log.write(f"X check: {problems[:3]}")
            log.write("K")
            last_check = time.monotonic()
        rounds += 1
    store.close()
    log.write(f"C {rounds}")


def mover_diagnosis(store: Any, seed: int, mover: int) -> str:
    """What a later snapshot says of a mover a reader missed (or saw twice): its
    record, where it is indexed, and the reader's delta, so that a rare failure
    of the concurrency test explains itself from its log."""
    key = f"mover-{mover}"
    fingerprints = mover_fps(seed, mover)
    record = store.get(key)
    state = store._engine.delta.state
    with store._engine.read() as txn:
        doc_id = int.from_bytes(txn.get(store_lookup(key), db=store._engine.handles.keys) or b"", "big")
        tableset = store._engine.tableset
        in_tables = [
            (index, run.run_id)
            for index in range(len(store._engine.tables))
            for run, low, high in tableset.catalog.table_runs(index)
            for _, _, ids in tableset.entries(txn, index, run, low, high)
            if doc_id in ids.tolist()
        ]
    again = [[m.key for m in row] for row in store.query_many(list(fingerprints), k=0)]
    return (
        f"record fp index {fingerprints.index(record.fingerprint) if record else None}, "
        f"id {doc_id}, reader delta holds {store._engine.delta.get(doc_id)}, in tables {in_tables}, "
        f"state {tuple(state)}, runs {[run.run_id for run in store._engine.tableset.catalog.runs]}, "
        f"queried again {again}"
    )


def store_lookup(key: str) -> bytes:
    from simstore.engine.records import lookup_key
    from simstore.keys import pack_key

    return lookup_key(pack_key(key))


def snapshot_holder(cfg: dict[str, Any]) -> None:
    """A raw LMDB reader that holds one read transaction for the whole run: the writer
    must not wait for it, and its snapshot must not change under it."""
    import lmdb

    log = Log(cfg["log"])
    env = lmdb.open(cfg["path"], subdir=False, readonly=True, lock=True, max_dbs=1000)
    keys_db = env.open_db(b"keys", create=False)
    with env.begin() as txn:
        entries = txn.stat(keys_db)["entries"]
        last = txn.get(b"\xa8single-0")
        log.write("O")
        log.write(f"H {time.monotonic()!r}")
        time.sleep(max(0.0, cfg["start_at"] + cfg["seconds"] - time.monotonic()))
        if txn.stat(keys_db)["entries"] != entries or txn.get(b"\xa8single-0") != last:
            log.write("X the held snapshot changed")
        log.write(f"R {time.monotonic()!r}")
    env.close()
    log.write(f"C {entries}")


def file_prober(cfg: dict[str, Any]) -> None:
    """Open, check and query a possibly damaged file in each mode, then run
    ``simstore check`` on it; one JSON line per step in the log. Run forked, so that a
    crash is this process's exit status, not the test run's."""
    import contextlib
    import io

    import simstore
    from simstore import cli

    log = Log(cfg["log"])
    for mode in cfg["modes"]:
        try:
            with simstore.open(cfg["path"], mode) as store:
                problems = store.check()
                len(store)
                store.query(fingerprint=12345)
                list(store.items())
            report: dict[str, Any] = {"outcome": "opened", "problems": problems}
        except simstore.SimstoreError as exc:
            report = {"outcome": "error", "type": type(exc).__name__, "message": str(exc)}
        log.write(json.dumps({"mode": mode, **report}))
    if cfg.get("cli"):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(["check", cfg["path"]])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
        log.write(json.dumps({"cli": code, "stdout": out.getvalue(), "stderr": err.getvalue()}))


def creator(cfg: dict[str, Any]) -> None:
    """Wait for ``start_at``, open ``path`` (which may not exist yet) in ``mode``, and,
    once open, add ``count`` documents one at a time, logging ``A key`` after each
    returns. A refused open is logged as ``F type``. A ``mode`` "r" creator instead
    polls until the store is there, logging what each failed open raised."""
    import simstore

    log = Log(cfg["log"])
    tag, count = cfg["tag"], cfg["count"]
    while time.monotonic() < cfg["start_at"]:
        pass
    if cfg["mode"] == "r":
        while True:
            try:
                with simstore.open(cfg["path"], "r") as store:
                    log.write(f"O {len(store)}")
                    break
            except simstore.StoreNotFoundError:
                log.write("N")
    else:
        try:
            store = simstore.open(cfg["path"], cfg["mode"], k=cfg.get("k"), sync=False)
        except simstore.SimstoreError as exc:
            log.write(f"F {type(exc).__name__}")
            log.write("C")
            return
        with store:
            for index in range(count):
                store.add(f"{tag}-{index}", fingerprint=creator_fp(tag, index))
                log.write(f"A {tag}-{index}")
    log.write("C")


def creator_fp(tag: str, index: int) -> int:
    return random.Random(f"creator {tag} {index}").getrandbits(64)


def group_fp(tag: str, thread: int, number: int) -> int:
    """The fingerprint group writer ``tag``'s thread ``thread`` gives its ``number``-th page."""
    return random.Random(f"group {tag} {thread} {number}").getrandbits(64)


def group_writer(cfg: dict[str, Any]) -> None:
    """``threads`` threads add pages (``sync=True``) as fast as they can, so that
    their adds share group commits; thread 0 adds them ten at a time through
    ``store.batch()`` when ``batches`` is set. After each call returns (each batch
    ends) the thread logs ``A KEY`` for each page it acknowledged."""
    import threading

    import simstore

    log = Log(cfg["log"])
    tag = cfg["tag"]
    store = simstore.open(cfg["path"], "w", sync=True, merge_threshold=cfg["merge_threshold"])
    log.write("O")

    def work(thread: int) -> None:
        number = 0
        while True:
            if thread == 0 and cfg.get("batches"):
                keys = [f"{tag}-{thread}-{number + index}" for index in range(10)]
                with store.batch() as batch:
                    for index, key in enumerate(keys):
                        batch.add(key, fingerprint=group_fp(tag, thread, number + index))
                log.write("\n".join(f"A {key}" for key in keys))
                number += 10
                continue
            key = f"{tag}-{thread}-{number}"
            store.add(key, fingerprint=group_fp(tag, thread, number))
            log.write(f"A {key}")
            number += 1

    for thread in range(cfg["threads"]):
        threading.Thread(target=work, args=(thread,), daemon=True).start()
    threading.Event().wait()  # until killed


WORKERS = {
    "group": group_writer,
    "creator": creator,
    "probe_file": file_prober,
    "crash": crash_worker,
    "probe": probe_worker,
    "writer": concurrent_writer,
    "reader": concurrent_reader,
    "holder": snapshot_holder,
}


def _run_forked(cfg: dict[str, Any]) -> None:
    # In the forked worker: detach from the zygote's pipes, run, and never return.
    status = 0
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        err = os.open(cfg["log"] + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(err, 2)
        WORKERS[cfg["worker"]](cfg)
    except BaseException as exc:
        traceback.print_exc()
        sys.stderr.flush()
        Log(cfg["log"]).write(f"E {type(exc).__name__}: {exc}".replace("\n", " "))
        status = 1
    finally:
        os._exit(status)


def zygote() -> None:
    """Serve fork requests on stdin: ``run JSON`` answers ``pid N``; ``wait N`` answers
    ``status S`` once worker N has ended (S as os.waitpid gives it)."""
    import numpy  # noqa: F401 - imported once here, inherited by every worker

    import simstore  # noqa: F401

    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        verb, _, rest = line.strip().partition(" ")
        if verb == "run":
            pid = os.fork()
            if pid == 0:
                _run_forked(json.loads(rest))
            out.write(f"pid {pid}\n")
        elif verb == "wait":
            _, status = os.waitpid(int(rest), 0)
            out.write(f"status {status}\n")
        out.flush()


ZYGOTE_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from reliability import _workload
_workload.zygote()
"""

SINGLE_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from reliability import _workload
cfg = json.loads(sys.argv[2])
_workload.WORKERS[cfg["worker"]](cfg)
"""
