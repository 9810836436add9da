"""Bad input is refused with the documented error types and changes nothing.

Every refusal must be a SimstoreError *and* the standard type it resembles, and after
each refused call the store's contents are exactly what they were.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simstore
from simstore import (
    InvalidTypeError,
    InvalidValueError,
    KeyNotFoundError,
    ReadOnlyError,
    SimstoreError,
    StoreClosedError,
)

# -- fixtures and helpers ------------------------------------------------------------


@pytest.fixture
def filled(store_path: str) -> Iterator[simstore.Store]:
    """A k=3 store with merged documents, unmerged ones, metadata and all key types."""
    with simstore.open(store_path, k=3, merge_threshold=10_000) as store:
        store.add_many(["m1", b"m2", 3], [1, 2, 3], metas=[{"a": 1}, None, {"b": [1, 2]}])
        store.merge()
        store.add("d1", fingerprint=0xFFFF, meta={"c": "x"})
        store.add(-4, fingerprint=0xFFFE)
        yield store


def contents(store: simstore.Store) -> tuple[Any, ...]:
    """Everything observable about a store's contents."""
    stats = store.stats()
    keys = list(store)
    return (
        keys,
        list(store.items()),
        [store.get(key) for key in keys],
        stats.docs,
        stats.delta_docs,
        stats.table_entries,
        [[tuple(m) for m in row] for row in store.query_many([1, 0xFFFF, 12345])],
    )


def assert_refused(
    store: simstore.Store,
    call: Callable[[], object],
    error: type[SimstoreError],
    standard: type[Exception],
) -> None:
    """call() raises ``error`` (also a ``standard`` and a SimstoreError) and changes nothing."""
    before = contents(store)
    with pytest.raises(error) as caught:
        call()
    assert isinstance(caught.value, SimstoreError)
    assert isinstance(caught.value, standard)
    assert contents(store) == before
    assert store.check() == []


# -- the hierarchy ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "standard"),
    [
        (simstore.StoreNotFoundError, FileNotFoundError),
        (simstore.KeyNotFoundError, KeyError),
        (simstore.InvalidValueError, ValueError),
        (simstore.InvalidTypeError, TypeError),
        (simstore.ReadOnlyError, PermissionError),
        (simstore.StoreFullError, OSError),
        (simstore.StoreClosedError, ValueError),
        (simstore.ParameterMismatchError, ValueError),
        (simstore.NotAStoreError, Exception),
        (simstore.CorruptStoreError, Exception),
        (simstore.FormatVersionError, Exception),
        (simstore.StoreLockedError, OSError),
    ],
)
def test_every_error_is_a_simstore_error_and_its_standard_type(
    error: type[Exception], standard: type[Exception]
) -> None:
    """The documented mix-ins, so callers may catch either."""
    assert issubclass(error, SimstoreError)
    assert issubclass(error, standard)


# -- fingerprints ----------------------------------------------------------------------

BAD_FINGERPRINTS: list[Any] = [
    pytest.param(-1, InvalidValueError, id="negative"),
    pytest.param(2**64, InvalidValueError, id="2**64"),
    pytest.param(-(2**70), InvalidValueError, id="very-negative"),
    pytest.param(np.int64(-1), InvalidValueError, id="np-int64-negative"),
    pytest.param(1.0, InvalidTypeError, id="float"),
    pytest.param(float("nan"), InvalidTypeError, id="nan"),
    pytest.param(np.float64(3.0), InvalidTypeError, id="np-float"),
    pytest.param(True, InvalidTypeError, id="True"),
    pytest.param(False, InvalidTypeError, id="False"),
    pytest.param(np.bool_(True), InvalidTypeError, id="np-bool"),
    pytest.param("12", InvalidTypeError, id="str"),
    pytest.param(b"12", InvalidTypeError, id="bytes"),
    pytest.param([1], InvalidTypeError, id="list"),
    pytest.param(1 + 0j, InvalidTypeError, id="complex"),
]


@pytest.mark.parametrize(("bad", "error"), BAD_FINGERPRINTS)
def test_bad_fingerprint_refused_by_add(
    filled: simstore.Store, bad: object, error: type[SimstoreError]
) -> None:
    """add() refuses fingerprints that are not ints in 0..2**64-1, and writes nothing."""
    standard = ValueError if error is InvalidValueError else TypeError
    assert_refused(filled, lambda: filled.add("new", fingerprint=bad), error, standard)  # type: ignore[arg-type]
    assert_refused(filled, lambda: filled.add("m1", fingerprint=bad), error, standard)  # type: ignore[arg-type]


@pytest.mark.parametrize(("bad", "error"), BAD_FINGERPRINTS)
def test_bad_fingerprint_refused_by_query(
    filled: simstore.Store, bad: object, error: type[SimstoreError]
) -> None:
    """query() refuses the same fingerprints."""
    standard = ValueError if error is InvalidValueError else TypeError
    assert_refused(filled, lambda: filled.query(fingerprint=bad), error, standard)  # type: ignore[arg-type]


def test_add_and_query_need_a_fingerprint(filled: simstore.Store) -> None:
    """Neither text nor fingerprint (or both) is a TypeError."""
    assert_refused(filled, lambda: filled.add("new"), InvalidTypeError, TypeError)
    assert_refused(filled, lambda: filled.query(), InvalidTypeError, TypeError)
    assert_refused(filled, lambda: filled.add("new", "some text", fingerprint=1), InvalidTypeError, TypeError)


BAD_BATCHES: list[Any] = [
    pytest.param(np.array([1.0, 2.0, 3.0]), InvalidTypeError, id="float-array"),
    pytest.param(np.array([1.0, 2.0, 3.0], dtype=np.float32), InvalidTypeError, id="float32-array"),
    pytest.param(np.array([1, -2, 3], dtype=np.int64), InvalidValueError, id="int64-negative"),
    pytest.param(np.array([-1, 2, 3], dtype=np.int8), InvalidValueError, id="int8-negative"),
    pytest.param(np.array([True, False, True]), InvalidTypeError, id="bool-array"),
    pytest.param(np.array(["1", "2", "3"]), InvalidTypeError, id="str-array"),
    pytest.param(np.array([[1, 2, 3]], dtype=np.uint64), InvalidValueError, id="2d-array"),
    pytest.param(np.array([1, -1, 3], dtype=object), InvalidValueError, id="object-negative"),
    pytest.param(np.array([1, 2.5, 3], dtype=object), InvalidTypeError, id="object-float"),
    pytest.param([1, -1, 3], InvalidValueError, id="list-negative"),
    pytest.param([1, 2**64, 3], InvalidValueError, id="list-2**64"),
    pytest.param([1, 2.0, 3], InvalidTypeError, id="list-float"),
    pytest.param([1, True, 3], InvalidTypeError, id="list-bool"),
    pytest.param([1, "2", 3], InvalidTypeError, id="list-str"),
    pytest.param([1, None, 3], InvalidTypeError, id="list-none"),
    pytest.param("123", InvalidTypeError, id="a-str"),
    pytest.param(b"123", InvalidTypeError, id="a-bytes"),
    pytest.param(123, InvalidTypeError, id="an-int"),
]


@pytest.mark.parametrize(("bad", "error"), BAD_BATCHES)
def test_bad_fingerprint_batch_refused_by_add_many(
    filled: simstore.Store, bad: object, error: type[SimstoreError]
) -> None:
    """add_many() refuses a batch with any bad fingerprint, and adds none of the batch."""
    standard = ValueError if error is InvalidValueError else TypeError
    assert_refused(filled, lambda: filled.add_many(["n1", "n2", "n3"], bad), error, standard)


@pytest.mark.parametrize(("bad", "error"), BAD_BATCHES)
def test_bad_fingerprint_batch_refused_by_query_many(
    filled: simstore.Store, bad: object, error: type[SimstoreError]
) -> None:
    """query_many() refuses the same batches."""
    standard = ValueError if error is InvalidValueError else TypeError
    assert_refused(filled, lambda: filled.query_many(bad), error, standard)


@pytest.mark.parametrize(
    "good",
    [
        np.array([1, 2, 3], dtype=np.uint8),
        np.array([1, 2, 3], dtype=np.int64),
        np.array([1, 2, 2**64 - 1], dtype=np.uint64),
        [1, 2, 2**64 - 1],
        (1, 2, 3),
        range(3),
        [np.uint64(1), np.int32(2), 3],
    ],
)
def test_integer_batches_of_any_width_are_accepted(filled: simstore.Store, good: object) -> None:
    """The refusals above are not over-eager: unsigned/non-negative integer batches work."""
    expected = [int(value) for value in good]  # type: ignore[attr-defined]
    assert filled.add_many(["n1", "n2", "n3"], good).tolist() == expected
    assert [filled["n1"].fingerprint, filled["n2"].fingerprint, filled["n3"].fingerprint] == expected
    assert len(filled.query_many(good)) == 3


# -- keys ------------------------------------------------------------------------------

BAD_KEYS: list[Any] = [
    pytest.param(1.5, InvalidTypeError, id="float"),
    pytest.param(None, InvalidTypeError, id="None"),
    pytest.param(["a"], InvalidTypeError, id="list"),
    pytest.param(("a",), InvalidTypeError, id="tuple"),
    pytest.param(True, InvalidTypeError, id="True"),
    pytest.param(False, InvalidTypeError, id="False"),
    pytest.param(bytearray(b"a"), InvalidTypeError, id="bytearray"),
    pytest.param(2**64, InvalidValueError, id="int-2**64"),
    pytest.param(-(2**63) - 1, InvalidValueError, id="int-below-int64"),
    pytest.param("\ud800", InvalidValueError, id="lone-surrogate"),
]


@pytest.mark.parametrize(("bad", "error"), BAD_KEYS)
def test_bad_key_refused_everywhere(filled: simstore.Store, bad: object, error: type[SimstoreError]) -> None:
    """add, add_many, remove, get and [] refuse keys that are not str/bytes/int in range."""
    standard = ValueError if error is InvalidValueError else TypeError
    assert_refused(filled, lambda: filled.add(bad, fingerprint=5), error, standard)  # type: ignore[arg-type]
    assert_refused(filled, lambda: filled.add_many([bad], [5]), error, standard)  # type: ignore[list-item]
    assert_refused(filled, lambda: filled.remove(bad), error, standard)  # type: ignore[arg-type]
    assert_refused(filled, lambda: filled.get(bad), error, standard)  # type: ignore[arg-type]
    assert_refused(filled, lambda: filled[bad], error, standard)  # type: ignore[index]
    assert bad not in filled


def test_a_refused_key_does_not_disturb_the_next_one(filled: simstore.Store) -> None:
    """After a key that cannot be encoded, the next keys are encoded and found correctly."""
    for bad in ("\ud800", 2**64, "ok\udfff"):
        with pytest.raises(InvalidValueError):
            filled.add(bad, fingerprint=1)
        filled.add("after", fingerprint=12)
        assert filled.get("after") == simstore.Record("after", 12, None)
        assert filled.query(fingerprint=12, k=0) == [simstore.Match("after", 0, 12)]
    assert list(filled)[-1] == "after"


@pytest.mark.parametrize("key", [-(2**63), 2**64 - 1, 0, "", b""])
def test_keys_at_the_limits_are_accepted(filled: simstore.Store, key: simstore.store.facade.Key) -> None:
    """The range ends and empty keys are valid."""
    filled.add(key, fingerprint=77)
    assert filled[key] == simstore.Record(key, 77, None)


@pytest.mark.parametrize("position", [0, 2, 4])
@pytest.mark.parametrize(
    ("bad_key", "bad_fp", "bad_meta", "error"),
    [
        pytest.param(1.5, 5, None, InvalidTypeError, id="key"),
        pytest.param(2**64, 5, None, InvalidValueError, id="int-key"),
        pytest.param("ok", -5, None, InvalidValueError, id="fingerprint"),
        pytest.param("ok", 5, {"x": object()}, InvalidValueError, id="meta"),
        pytest.param("ok", 5, ["not", "a", "dict"], InvalidTypeError, id="meta-type"),
    ],
)
def test_one_bad_item_in_add_many_leaves_nothing(
    filled: simstore.Store,
    position: int,
    bad_key: object,
    bad_fp: int,
    bad_meta: object,
    error: type[SimstoreError],
) -> None:
    """A batch with one bad key, fingerprint or meta (first, middle or last) adds nothing,
    not even the good items before it, and replaces nothing."""
    keys: list[Any] = ["n0", "m1", "n2", 3, "n4"]  # m1 and 3 exist: they must not be replaced
    fps: list[Any] = [100, 101, 102, 103, 104]
    metas: list[Any] = [{"i": i} for i in range(5)]
    keys[position], fps[position], metas[position] = bad_key, bad_fp, bad_meta
    standard = ValueError if error is InvalidValueError else TypeError
    assert_refused(filled, lambda: filled.add_many(keys, fps, metas=metas), error, standard)
    assert "n0" not in filled


def test_add_many_length_mismatches(filled: simstore.Store) -> None:
    """Keys, fingerprints and metas of different lengths are refused; nothing is added."""
    assert_refused(filled, lambda: filled.add_many(["a", "b", "c"], [1, 2]), InvalidValueError, ValueError)
    assert_refused(filled, lambda: filled.add_many(["a"], [1, 2]), InvalidValueError, ValueError)
    assert_refused(filled, lambda: filled.add_many([], [1]), InvalidValueError, ValueError)
    assert_refused(
        filled, lambda: filled.add_many(["a", "b"], [1, 2], metas=[None]), InvalidValueError, ValueError
    )
    assert_refused(
        filled,
        lambda: filled.add_many(["a"], [1], metas=[None, {"x": 1}]),
        InvalidValueError,
        ValueError,
    )


def test_add_many_keys_must_be_a_collection(filled: simstore.Store) -> None:
    """A single str or bytes is not a list of keys; fingerprints are required."""
    assert_refused(filled, lambda: filled.add_many("ab", [1, 2]), InvalidTypeError, TypeError)
    assert_refused(filled, lambda: filled.add_many(b"ab", [1, 2]), InvalidTypeError, TypeError)
    assert_refused(filled, lambda: filled.add_many(["a", "b"]), InvalidTypeError, TypeError)


def test_add_many_of_nothing_is_fine(filled: simstore.Store) -> None:
    """An empty batch is not an error and changes nothing."""
    before = contents(filled)
    assert filled.add_many([], np.array([], dtype=np.uint64)).tolist() == []
    assert filled.add_many([], []).tolist() == []
    assert contents(filled) == before


# -- meta ------------------------------------------------------------------------------

BAD_METAS: list[Any] = [
    pytest.param({"x": object()}, InvalidValueError, id="object"),
    pytest.param({"x": {1, 2}}, InvalidValueError, id="set"),
    pytest.param({"x": 2**64}, InvalidValueError, id="huge-int"),
    pytest.param({"x": b"b" * (64 * 1024)}, InvalidValueError, id="too-large"),
    pytest.param({"x": "s" * (70 * 1024)}, InvalidValueError, id="too-large-str"),
    pytest.param(["a", 1], InvalidTypeError, id="list"),
    pytest.param("a", InvalidTypeError, id="str"),
    pytest.param(5, InvalidTypeError, id="int"),
]


@pytest.mark.parametrize(("bad", "error"), BAD_METAS)
def test_bad_meta_refused(filled: simstore.Store, bad: object, error: type[SimstoreError]) -> None:
    """Meta that is not a msgpack-able dict of at most 64 KiB is refused, for new and
    existing keys, without touching the stored meta."""
    standard = ValueError if error is InvalidValueError else TypeError
    assert_refused(filled, lambda: filled.add("new", fingerprint=9, meta=bad), error, standard)  # type: ignore[arg-type]
    assert_refused(filled, lambda: filled.add("m1", fingerprint=9, meta=bad), error, standard)  # type: ignore[arg-type]
    assert_refused(
        filled,
        lambda: filled.add_many(["new"], [9], metas=[bad]),  # type: ignore[list-item]
        error,
        standard,
    )


def test_meta_just_under_the_limit_is_accepted(filled: simstore.Store) -> None:
    """64 KiB of encoded meta is allowed (the limit is not off by a lot)."""
    meta = {"x": b"b" * (64 * 1024 - 100)}
    filled.add("big", fingerprint=1, meta=meta)
    record = filled.get("big")
    assert record is not None
    assert record.meta == meta


# -- k ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "error"),
    [
        pytest.param(4, InvalidValueError, id="above-store-k"),
        pytest.param(32, InvalidValueError, id="max"),
        pytest.param(33, InvalidValueError, id="above-max"),
        pytest.param(-1, InvalidValueError, id="negative"),
        pytest.param(1.0, InvalidTypeError, id="float"),
        pytest.param(True, InvalidTypeError, id="bool"),
        pytest.param("2", InvalidTypeError, id="str"),
    ],
)
def test_bad_k_refused_by_queries(filled: simstore.Store, k: object, error: type[SimstoreError]) -> None:
    """k must be an int in 0..store.k for query and query_many."""
    standard = ValueError if error is InvalidValueError else TypeError
    assert_refused(filled, lambda: filled.query(fingerprint=1, k=k), error, standard)  # type: ignore[arg-type]
    assert_refused(filled, lambda: filled.query_many([1], k=k), error, standard)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "standard"),
    [
        ({"k": -1}, ValueError),
        ({"k": 33}, ValueError),
        ({"k": 1.0}, TypeError),
        ({"k": True}, TypeError),
        ({"k": 3, "blocks": 3}, ValueError),
        ({"k": 3, "blocks": 65}, ValueError),
        ({"k": 3, "blocks": 0}, ValueError),
        ({"k": 3, "blocks": 5.0}, TypeError),
        ({"k": 8, "blocks": 20}, ValueError),  # too many tables
    ],
)
def test_bad_parameters_refused_when_creating(
    store_path: str, kwargs: dict[str, Any], standard: type
) -> None:
    """Impossible k/blocks for a new store are refused before anything is written: no file."""
    with pytest.raises(SimstoreError) as caught:
        simstore.open(store_path, **kwargs)
    assert isinstance(caught.value, standard)
    assert not os.path.exists(store_path)
    assert not os.path.exists(store_path + "-lock")


# -- options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "standard"),
    [
        ({"merge_treshold": 5}, TypeError),
        ({"syncc": False}, TypeError),
        ({"k_max": 3}, TypeError),
        ({"sync": "yes"}, TypeError),
        ({"sync": 1}, TypeError),
        ({"merge_on_close": None}, TypeError),
        ({"merge_threshold": 0}, ValueError),
        ({"merge_threshold": -5}, ValueError),
        ({"merge_threshold": 5.0}, TypeError),
        ({"merge_threshold": True}, TypeError),
        ({"map_size": 100}, ValueError),
        ({"map_size": "1G"}, TypeError),
        ({"max_map_size": 1024}, ValueError),
        ({"max_map_size": True}, TypeError),
        ({"readonly": "no"}, TypeError),
    ],
)
def test_bad_open_options_refused_before_touching_disk(
    store_path: str, options: dict[str, Any], standard: type
) -> None:
    """Unknown options and bad option values raise (TypeError for unknown names) and create
    no file."""
    with pytest.raises(SimstoreError) as caught:
        simstore.open(store_path, **options)
    assert isinstance(caught.value, standard)
    assert not os.path.exists(store_path)
    assert not os.path.exists(store_path + "-lock")


def test_unknown_option_message_names_it(store_path: str) -> None:
    """The TypeError for a misspelt option names the misspelling."""
    with pytest.raises(TypeError, match="merge_treshold"):
        simstore.open(store_path, merge_treshold=5)


# -- missing keys, read-only and closed stores ----------------------------------------------


def test_missing_key(filled: simstore.Store) -> None:
    """[] and remove of a missing key raise KeyNotFoundError (a KeyError); get returns None."""
    assert_refused(filled, lambda: filled["absent"], KeyNotFoundError, KeyError)
    assert_refused(filled, lambda: filled.remove("absent"), KeyNotFoundError, KeyError)
    assert_refused(filled, lambda: filled.remove(b"m1"), KeyNotFoundError, KeyError)  # "m1" is a str key
    assert_refused(filled, lambda: filled.remove("3"), KeyNotFoundError, KeyError)  # 3 is an int key
    assert filled.get("absent") is None
    sentinel = simstore.Record("x", 1, None)
    assert filled.get("absent", sentinel) is sentinel


def test_remove_twice(filled: simstore.Store) -> None:
    """Removing a key twice: the second removal is a KeyNotFoundError and changes nothing."""
    filled.remove("d1")
    assert_refused(filled, lambda: filled.remove("d1"), KeyNotFoundError, KeyError)


def test_writes_to_a_read_only_store(store_path: str) -> None:
    """Every write on a read-only store raises ReadOnlyError (a PermissionError); reads work."""
    with simstore.open(store_path, k=3, merge_on_close=False) as store:
        store.add_many(["a", "b"], [1, 2])
        store.merge()
        store.add("c", fingerprint=3)
    with simstore.open(store_path, "r") as store:
        writes: list[Callable[[], object]] = [
            lambda: store.add("new", fingerprint=1),
            lambda: store.add("a", fingerprint=99),
            lambda: store.add("a", fingerprint=1, meta={"x": 1}),
            lambda: store.add_many(["new", "b"], [1, 2]),
            lambda: store.remove("a"),
            lambda: store.remove("c"),
            lambda: store.merge(),
        ]
        for write in writes:
            assert_refused(store, write, ReadOnlyError, PermissionError)
        assert store.stats().delta_docs == 1
        assert [m.key for m in store.query(fingerprint=1, k=1)] == ["a", "c"]
    with simstore.open(store_path, "r") as store:
        assert list(store.items()) == [("a", 1), ("b", 2), ("c", 3)]


def test_read_only_refuses_writes_even_with_missing_key(store_path: str) -> None:
    """remove() on a read-only store says read-only, whatever the key."""
    simstore.open(store_path, k=3).close()
    with simstore.open(store_path, "r") as store, pytest.raises(ReadOnlyError):
        store.remove("absent")


def test_every_call_on_a_closed_store(filled: simstore.Store) -> None:
    """After close(), every operation raises StoreClosedError (a ValueError)."""
    filled.close()
    assert filled.closed
    calls: list[Callable[[], object]] = [
        lambda: filled.add("x", fingerprint=1),
        lambda: filled.add_many(["x"], [1]),
        lambda: filled.remove("m1"),
        lambda: filled.query(fingerprint=1),
        lambda: filled.query_many([1]),
        lambda: filled.get("m1"),
        lambda: filled["m1"],
        lambda: "m1" in filled,
        lambda: len(filled),
        lambda: list(filled),
        lambda: filled.keys(),
        lambda: list(filled.items()),
        lambda: filled.fingerprints(),
        lambda: filled.stats(),
        lambda: filled.check(),
        lambda: filled.merge(),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError) as caught:
            call()
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value, SimstoreError)
    filled.close()  # a second close is harmless
    with simstore.open(filled.path, "r") as reopened:
        assert len(reopened) == 5


def test_a_store_is_not_pickled_or_copied(tmp_path: Path) -> None:
    """A Store is an open file: pickling or copying it is refused in simstore's words (a
    copy used to share the file, and closing it closed the original)."""
    import copy
    import pickle

    with simstore.open(str(tmp_path / "s.simstore"), k=3) as store:
        store.add("a", fingerprint=1)
        for attempt in (lambda: pickle.dumps(store), lambda: copy.copy(store), lambda: copy.deepcopy(store)):
            with pytest.raises(simstore.InvalidTypeError, match="cannot be pickled or copied"):
                attempt()
        assert store.keys() == ["a"]


def test_flags_and_callbacks_are_checked(tmp_path: Path) -> None:
    with simstore.open(str(tmp_path / "s.simstore"), k=3) as store:
        store.add("a", fingerprint=1)
        with pytest.raises(simstore.InvalidTypeError, match="with_meta"):
            store.query(fingerprint=1, with_meta="yes")  # type: ignore[arg-type]
        with pytest.raises(simstore.InvalidTypeError, match="with_meta"):
            store.query_many([1], with_meta=1)  # type: ignore[arg-type]
        with pytest.raises(simstore.InvalidTypeError, match="progress"):
            store.clusters(progress=5)  # type: ignore[arg-type]
        with pytest.raises(simstore.InvalidTypeError, match="progress"):
            store.near_duplicate_pairs(progress=5)  # type: ignore[arg-type]
        with pytest.raises(simstore.InvalidTypeError, match="copy_to"):
            store.compact(copy_to=5)  # type: ignore[arg-type]
        with pytest.raises(simstore.StoreNotFoundError, match="does not exist"):
            store.compact(copy_to=tmp_path / "no-such-folder" / "copy.simstore")
        assert store.query(fingerprint=1, with_meta=True)[0].key == "a"


def test_estimate_jaccard_takes_a_stored_sketch(tmp_path: Path) -> None:
    text = "the quick brown fox jumps over the lazy dog " * 5
    with simstore.open(str(tmp_path / "s.simstore")) as store:
        store.add("a", text)
        store.add("b", text + " again")
        estimate = simstore.estimate_jaccard(store.sketch_of("a"), store.sketch_of("b"))
        assert 0.5 < float(estimate[0]) <= 1.0
