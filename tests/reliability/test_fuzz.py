"""Bad input, fuzzed with hypothesis: the public API and the command line.

Every call either succeeds (and then only with valid arguments, with the documented
effect) or raises a ``SimstoreError`` subclass, ``ValueError`` or ``TypeError`` whose
message names the argument at fault; and a refused call leaves the store unchanged
(the digest of everything observable is the same before and after).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simstore
from simstore import cli

from .conftest import COUNTS, contents_digest, file_digest

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
ALLOWED = (simstore.SimstoreError, ValueError, TypeError)

# -- strategies -------------------------------------------------------------------------------

any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=30)
hashable = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    any_text,
    st.binary(max_size=20),
)
scalars = st.one_of(
    hashable,
    st.sampled_from([-(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 2**63, -1, 0]),
    st.builds(np.uint64, st.integers(0, 2**64 - 1)),
    st.builds(np.int8, st.integers(-128, 127)),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(bytearray, st.binary(max_size=5)),
    st.just(object()),
    st.just(b"\x00" * 3),
    st.just("a\x00b"),
    st.just("\ud800"),
    st.just("x" * 600),
)


def object_array(items: list[object]) -> np.ndarray:
    """A 1-D object array of ``items``, element by element: ``np.array(items,
    dtype=object)`` tries to broadcast nested arrays and fails on ragged ones."""
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item
    return array


anything = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        # tuple and frozenset keys are left out: see test_security's meta key test
        st.dictionaries(hashable, children, max_size=3),
        st.builds(object_array, st.lists(children, max_size=3)),
    ),
    max_leaves=6,
)
metas = st.one_of(st.none(), st.dictionaries(hashable, anything, max_size=4), anything)


def key_problem(key: object) -> bool:
    """True if ``key`` is not a valid key (str, bytes or int in range, encodable; a
    numpy integer counts as its int)."""
    if isinstance(key, np.integer):
        key = int(key)
    if isinstance(key, bool) or not isinstance(key, str | bytes | int):
        return True
    if isinstance(key, int):
        return not -(2**63) <= key <= 2**64 - 1
    if isinstance(key, str):
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False


def fingerprint_problem(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return True
    return not 0 <= int(value) <= 2**64 - 1


def same_meta(stored: Any, given_meta: Any) -> bool:
    """msgpack-equal: tuples come back as lists, and NaN equals NaN."""
    return bytes(msgpack.packb(stored, use_bin_type=True)) == bytes(
        msgpack.packb(given_meta, use_bin_type=True)
    )


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[simstore.Store]:
    path = str(tmp_path_factory.mktemp("fuzz") / "fuzz.simstore")
    with simstore.open(path, k=3, merge_threshold=10_000, sync=False) as store:
        store.add_many(
            ["m1", b"m2", 3, -4], [1, 2, 3, 0xFFFF], metas=[{"a": 1}, None, {"b": [1]}, None]
        )  # STORED_KEYS
        store.merge()
        store.add("d1", fingerprint=0xFFFE, meta={"c": "x"})
        yield store


#: The keys fuzz_store holds: test_reads_fuzzed removes whatever key it draws.
STORED_KEYS = {"m1", b"m2", 3, -4, "d1"}


def is_stored_key(key: object) -> bool:
    """Whether ``key`` names a stored document: a numpy integer is the key of
    its Python int (``simstore.keys``), as the store treats it."""
    if isinstance(key, np.integer):
        key = int(key)
    return type(key) in (str, bytes, int) and key in STORED_KEYS


def refused_cleanly(store: simstore.Store, before: str, exc: BaseException, *names: str) -> None:
    assert isinstance(exc, ALLOWED), f"{type(exc).__name__}: {exc}"
    message = str(exc)
    assert message, f"{type(exc).__name__} without a message"
    assert any(name in message for name in names), f"message {message!r} names none of {names}"
    assert contents_digest(store) == before
    COUNTS["fuzz_refused"] += 1


# -- the API -------------------------------------------------------------------------------------


@FUZZ
@given(
    key=st.one_of(anything, st.sampled_from(["new", b"new", 77, "x" * 600])), fingerprint=anything, meta=metas
)
def test_add_fuzzed(fuzz_store: simstore.Store, key: object, fingerprint: object, meta: object) -> None:
    COUNTS["fuzz_cases"] += 1
    store = fuzz_store
    before = contents_digest(store)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            store.add(key, fingerprint=fingerprint, meta=meta)  # type: ignore[arg-type]
    except Exception as exc:
        if fingerprint_problem(fingerprint):
            refused_cleanly(store, before, exc, "fingerprint")
        elif key_problem(key):
            refused_cleanly(store, before, exc, "key")
        else:
            refused_cleanly(store, before, exc, "meta")
        return
    assert not fingerprint_problem(fingerprint)
    assert not key_problem(key)
    record = store.get(key)  # type: ignore[arg-type]
    assert record is not None
    assert record.key == key
    # Keys come back as the type they went in; a numpy integer as a Python int.
    assert type(record.key) is (int if isinstance(key, np.integer) else type(key))
    assert record.fingerprint == int(fingerprint)  # type: ignore[call-overload]
    assert same_meta(record.meta, meta)
    assert store.check() == []
    store.remove(key)  # type: ignore[arg-type]


text_values = st.one_of(
    anything,
    any_text,
    st.binary(max_size=40),
    st.sampled_from(["", " ", "\x00", "a\x00b", "\ud800 word", "...", "hello world", "你好世界", "\t\n"]),
    st.sampled_from([b"\xff\xfe", b"caf\xc3", b"ok words", b"\x00\x00"]),
)


@FUZZ
@given(text=text_values, key=st.sampled_from(["t", 5, b"t"]))
def test_add_text_fuzzed(fuzz_store: simstore.Store, text: object, key: object) -> None:
    """Texts of every type and content: invalid UTF-8, NUL bytes, surrogates, empty."""
    COUNTS["fuzz_cases"] += 1
    store = fuzz_store
    before = contents_digest(store)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fp = store.add(key, text)  # type: ignore[arg-type]
    except Exception as exc:
        refused_cleanly(store, before, exc, "text")
        return
    assert isinstance(text, str | bytes | bytearray | memoryview)
    assert store.get(key) == simstore.Record(key, fp, None)  # type: ignore[arg-type]
    store.remove(key)  # type: ignore[arg-type]


def test_huge_and_tiny_texts(fuzz_store: simstore.Store) -> None:
    """A 2 MB text is fingerprinted and stored; empty and feature-less texts are refused."""
    store = fuzz_store
    huge = "the quick brown fox jumps over the lazy dog " * 50_000  # 2.2 MB
    fp = store.add("huge", huge)
    assert store.get("huge") == simstore.Record("huge", fp, None)
    assert store.query(text=huge, k=0)[0].key == "huge"
    store.remove("huge")
    before = contents_digest(store)
    for text in ("", "   ", "\x00\x00", "!!!", "\u200b"):
        with pytest.raises(simstore.InvalidValueError, match="text"):
            store.add("tiny", text)
    assert contents_digest(store) == before
    COUNTS["fuzz_cases"] += 6


keys_lists = st.one_of(
    anything,
    st.lists(st.one_of(st.sampled_from(["a", "b", 7, b"c"]), anything), max_size=5),
    st.builds(iter, st.lists(st.text(max_size=3), max_size=4)),
)


@FUZZ
@given(keys=keys_lists, fingerprints=st.one_of(anything, st.lists(anything, max_size=5)), metas_=anything)
def test_add_many_fuzzed(
    fuzz_store: simstore.Store, keys: object, fingerprints: object, metas_: object
) -> None:
    COUNTS["fuzz_cases"] += 1
    store = fuzz_store
    before = contents_digest(store)
    metas_arg = metas_ if isinstance(metas_, list | tuple) or metas_ is None else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            store.add_many(keys, fingerprints, metas=metas_arg)  # type: ignore[arg-type]
    except Exception as exc:
        refused_cleanly(store, before, exc, "key", "fingerprint", "meta", "text")
        return
    assert store.check() == []
    # Undo what was added, so the store stays small; the keys were valid.
    for key in {key for key, _ in store.items()} - {"m1", b"m2", 3, -4, "d1"}:
        store.remove(key)


@FUZZ
@given(
    fingerprint=anything,
    k=st.one_of(anything, st.integers(-2, 70)),
    with_meta=anything,
    key=anything.filter(lambda key: not is_stored_key(key)),
)
def test_reads_fuzzed(
    fuzz_store: simstore.Store, fingerprint: object, k: object, with_meta: object, key: object
) -> None:
    """query, query_many, add_if_new, get, [], in, remove: refused cleanly or answered."""
    COUNTS["fuzz_cases"] += 1
    store = fuzz_store
    before = contents_digest(store)
    calls = {
        "query": lambda: store.query(fingerprint, k=k),  # type: ignore[arg-type]
        "query_many": lambda: store.query_many(fingerprint, k=k),
        "query_many_list": lambda: store.query_many([fingerprint, 1], k=k),
        "get": lambda: store.get(key),  # type: ignore[arg-type]
        "getitem": lambda: store[key],  # type: ignore[index]
        "remove": lambda: store.remove(key),  # type: ignore[arg-type]
    }
    for name, call in calls.items():
        try:
            call()
        except KeyError as exc:  # KeyNotFoundError, for a valid key that is not stored
            assert isinstance(exc, simstore.KeyNotFoundError)  # noqa: PT017 - one try block, several outcomes to tell apart
            assert not key_problem(key)
        except Exception as exc:
            refused_cleanly(store, before, exc, "fingerprint", "k=", "key", "k ", "k must")
        else:
            if name in ("get", "getitem"):
                assert not key_problem(key)
            if name == "remove":
                # it removed a stored document: put it back as it was
                raise AssertionError("the fuzzed keys are never stored ones")
    assert isinstance(key in store, bool)  # `in` never raises, whatever the key
    assert contents_digest(store) == before


@settings(FUZZ, max_examples=80)
@given(
    mode=st.one_of(st.sampled_from(["r", "w", "c", "n"]), anything),
    k=st.one_of(st.none(), anything, st.integers(-1, 70)),
    blocks=st.one_of(st.none(), anything, st.integers(-1, 70)),
    options=st.dictionaries(
        st.sampled_from(["sync", "merge_threshold", "merge_on_close", "map_size", "max_map_size", "bogus"]),
        anything,
        max_size=2,
    ),
)
def test_open_fuzzed(
    tmp_path: Path, mode: object, k: object, blocks: object, options: dict[str, Any]
) -> None:
    """open() with arbitrary mode, parameters and options on an existing store: either it
    opens or it is refused with a message, and the file is not modified by a refusal; on
    a missing path a refusal creates nothing."""
    COUNTS["fuzz_cases"] += 1
    existing = str(tmp_path / "existing.simstore")
    if not os.path.exists(existing):
        with simstore.open(existing, k=3) as store:
            store.add("a", fingerprint=1)
    missing = str(tmp_path / "missing.simstore")
    before = file_digest(existing)
    # mode "n" on the existing store: see test_mode_n_with_bad_arguments_keeps_the_store
    mode_n = isinstance(mode, str) and mode == "n"
    for path in (missing,) if mode_n else (existing, missing):
        try:
            store = simstore.open(path, mode, k=k, blocks=blocks, **options)  # type: ignore[arg-type]
        except Exception as exc:
            assert isinstance(exc, ALLOWED), f"{type(exc).__name__}: {exc}"  # noqa: PT017 - one try block, several outcomes to tell apart
            assert str(exc)  # noqa: PT017 - one try block, several outcomes to tell apart
            if path == existing:
                assert file_digest(existing) == before
            else:
                assert not os.path.exists(missing)
                assert not os.path.exists(missing + "-lock")
            COUNTS["fuzz_refused"] += 1
        else:
            store.close()
            if path == missing:
                os.remove(missing)
                os.remove(missing + "-lock")


@pytest.mark.parametrize("arguments", [{"blocks": 0}, {"k": 3, "blocks": 2}, {"k": 2, "blocks": 65}])
def test_mode_n_with_bad_arguments_keeps_the_store(tmp_path: Path, arguments: dict[str, int]) -> None:
    """Bad input is refused before anything is written: mode "n" with invalid parameters
    raises and leaves the existing store as it was."""
    path = str(tmp_path / "precious.simstore")
    with simstore.open(path, k=3) as store:
        store.add("precious", fingerprint=1)
    before = file_digest(path)
    with pytest.raises(ValueError, match="blocks"):
        simstore.open(path, "n", **arguments)
    assert os.path.exists(path), "the store was deleted"
    assert file_digest(path) == before


# -- the command line ----------------------------------------------------------------------------


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def cli_verbs() -> set[str]:
    parser = cli.build_parser()
    for action in parser._actions:  # argparse keeps subcommands here
        if action.choices and isinstance(action.choices, Mapping):
            return set(action.choices)
    return set()


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("cli") / "cli.simstore")
    with simstore.open(path, k=3) as store:
        store.add_many(["a", "b", 3], [1, 2, 3])
    return path


argument_pool = st.sampled_from(
    [
        "stats",
        "check",
        "merge",
        "--json",
        "-q",
        "-k",
        "3",
        "--bogus",
        "",
        "\x00",
        "-",
        "--",
        "x" * 300,
        "\udcff",
    ]
)


@FUZZ
@given(argv=st.lists(st.one_of(argument_pool, any_text, st.just("STORE"), st.just("MISSING")), max_size=5))
def test_cli_arguments_fuzzed(cli_store: str, tmp_path: Path, argv: list[str]) -> None:
    """Arbitrary argument lists for the read and merge verbs: exit 0, 1 or 2, never a
    traceback, and the store's contents never change (its delta is empty, so merge is a
    no-op for the contents)."""
    COUNTS["fuzz_cases"] += 1
    verbs = {"stats", "check", "merge"}
    argv = [
        cli_store if arg == "STORE" else str(tmp_path / "missing") if arg == "MISSING" else arg
        for arg in argv
    ]
    if argv and argv[0] not in verbs:
        argv = [sorted(verbs)[len(argv[0]) % 3], *argv]
    with simstore.open(cli_store, "r") as store:
        before = contents_digest(store)
    code, out, err = run_cli(argv)
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in out + err
    if code == 1:
        assert "simstore: error:" in err
    with simstore.open(cli_store, "r") as store:
        assert contents_digest(store) == before


# Lines of an input file: good ones, and the bad one the test plants.
WORDS = ["alpha", "beta", "gamma", "delta", "crawler", "page", "news", "today", "simhash", "store"]


def good_jsonl_line(number: int) -> bytes:
    text = " ".join(WORDS[(number + i) % len(WORDS)] for i in range(6))
    return json.dumps({"id": f"doc-{number}", "text": text}).encode()


BAD_JSONL = [
    b"{not json",
    b'{"id": "x", "text": "unterminated',
    b"[1, 2, 3]",
    b'"just a string"',
    b"42",
    b"null",
    b'{"id": "x"}',
    b'{"id": "x", "text": 17}',
    b'{"id": "x", "text": null}',
    b'{"id": "x", "text": ["a", "b"]}',
    b'{"id": "x", "text": ""}',
    b'{"id": "x", "text": "!!! ..."}',
    b'{"id": 1.5, "text": "alpha beta gamma"}',
    b'{"id": [1], "text": "alpha beta gamma"}',
    b'{"id": true, "text": "alpha beta gamma"}',
    b'{"id": 36893488147419103232, "text": "alpha beta gamma"}',
    b'{"id": "x", "text": "alpha \\ud800 beta"}',
    b'{"id": "x", "text": "caf\xc3 alpha beta"}',
    b'{"id": "x", "text": "alpha\xff\xfe beta"}',
    b'{"id": "x\x00y", "text": "alpha beta\x00 gamma", "extra": {"a": [1, {"b": null}]}, "bad": }',
    b"\x1f\x8b",  # a first line that opens like gzip: damaged gzip data at line 1 (found by this test)
]


@FUZZ
@given(
    good_before=st.integers(0, 5),
    good_after=st.integers(0, 5),
    bad=st.one_of(st.sampled_from(BAD_JSONL), st.binary(min_size=1, max_size=40)),
)
def test_cli_add_malformed_jsonl(
    cli_store: str, tmp_path: Path, good_before: int, good_after: int, bad: bytes
) -> None:
    """`simstore add STORE FILE.jsonl` with one malformed line among good ones: exit 1 with
    `simstore: error: FILE:LINE: ...` naming the line (or, for a line that turns out to
    be valid, exit 0), no traceback, and with the default --on-error fail nothing of the
    file is written."""
    if "add" not in cli_verbs():
        pytest.skip("the CLI has no `add` verb yet")
    COUNTS["fuzz_cases"] += 1
    bad = bad.replace(b"\n", b" ").replace(b"\r", b" ")
    lines = [good_jsonl_line(n) for n in range(good_before)] + [bad]
    lines += [good_jsonl_line(100 + n) for n in range(good_after)]
    source = tmp_path / "input.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    with simstore.open(cli_store, "r") as store:
        before = contents_digest(store)
    code, out, err = run_cli(["add", cli_store, str(source), "-q"])
    assert "Traceback" not in out + err
    if code == 0:
        # the planted line was valid after all (a blank line or a real document): undo it
        with simstore.open(cli_store, "w") as store:
            for key in {key for key, _ in store.items()} - {"a", "b", 3}:
                store.remove(key)
        return
    assert code == 1, (bad, code, err)
    assert err.startswith("simstore: error:"), err
    assert f"input.jsonl:{good_before + 1}" in err, (bad, err)
    with simstore.open(cli_store, "r") as store:
        assert contents_digest(store) == before
    COUNTS["fuzz_refused"] += 1


BAD_CSV_ROWS = [
    b'"unterminated,alpha beta',
    b"only-one-column",
    b"x,,",
    b"x,",
    b"x,!!!",
    b"x,alpha \xff beta",
    b"x,alpha\x00beta gamma",
    b'"x""y",alpha beta,extra,columns',
]


@FUZZ
@given(
    good_before=st.integers(0, 4),
    bad=st.one_of(st.sampled_from(BAD_CSV_ROWS), st.binary(min_size=1, max_size=30)),
    header=st.sampled_from([b"id,text", b"id,body", b"", b"text"]),
)
def test_cli_add_malformed_csv(
    cli_store: str, tmp_path: Path, good_before: int, bad: bytes, header: bytes
) -> None:
    """The same for CSV, including a missing or wrong header."""
    if "add" not in cli_verbs():
        pytest.skip("the CLI has no `add` verb yet")
    COUNTS["fuzz_cases"] += 1
    bad = bad.replace(b"\n", b" ").replace(b"\r", b" ")
    rows = [header] + [f"row-{n},{good_jsonl_line(n).decode()[-40:-2]}".encode() for n in range(good_before)]
    rows.append(bad)
    source = tmp_path / "input.csv"
    source.write_bytes(b"\n".join(rows) + b"\n")
    with simstore.open(cli_store, "r") as store:
        before = contents_digest(store)
    code, out, err = run_cli(["add", cli_store, str(source), "-q"])
    assert "Traceback" not in out + err
    if code == 0:
        with simstore.open(cli_store, "w") as store:
            for key in {key for key, _ in store.items()} - {"a", "b", 3}:
                store.remove(key)
        return
    assert code == 1, (bad, header, code, err)
    assert err.startswith("simstore: error:"), err
    assert "input.csv" in err
    with simstore.open(cli_store, "r") as store:
        assert contents_digest(store) == before
    COUNTS["fuzz_refused"] += 1


def test_fuzz_helpers_are_not_vacuous() -> None:
    """The validity oracles used above agree with simple cases."""
    assert key_problem(True)
    assert key_problem(2**64)
    assert key_problem("\ud800")
    assert key_problem(1.0)
    assert not key_problem("")
    assert not key_problem(b"")
    assert not key_problem(-(2**63))
    assert fingerprint_problem(-1)
    assert fingerprint_problem(np.int8(-1))
    assert fingerprint_problem(1.0)
    assert not fingerprint_problem(np.uint64(2**64 - 1))
    assert same_meta({"a": (1, 2), "n": math.nan}, {"a": [1, 2], "n": math.nan})
