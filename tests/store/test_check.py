"""check() names each kind of damage to a table's buckets, and only that.

The buckets are checked a slice at a time in numpy; these tests rewrite one
bucket behind simstore's back (with a sound checksum unless the damage is
the checksum) and assert the exact problems check() reports, so a vectorised
check that misses an entry, or blames the wrong one, fails here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simstore
from simstore.engine import runs
from simstore.store import inspect as checking

DOCS = 3000
TABLE = 2


def _filled(path: str) -> simstore.Store:
    fingerprints = np.random.default_rng(31).integers(0, 2**64, DOCS, dtype=np.uint64)
    store = simstore.open(path, "n", k=3, blocks=5, sync=False)  # Manku tables (format 2)
    store.add_many(list(range(DOCS)), fingerprints)
    store.merge()
    assert store.check() == []
    return store


def _rewrite_bucket(
    store: simstore.Store, change: Callable[[list[int], list[int]], tuple[list[int], list[int]]]
) -> list[int]:
    """Rewrite the first bucket with two entries or more in table ``TABLE``:
    ``change(tags, ids)`` gives its new tags and ids. Returns the old ids."""
    tableset = store._engine.tableset
    run = tableset.catalog.runs[0]
    geometry = run.geometries[TABLE]
    db = store._engine.handles.tables[TABLE]
    old_ids: list[int] = []

    def body(txn: Any) -> None:
        for key, value in tableset.buckets(txn, TABLE, run):
            _, count = runs._payload(key, value, geometry)
            if count < 2:
                continue
            tag_bytes, id_bytes = geometry.tag_bytes, geometry.id_bytes
            payload = value[runs.HEADER.size :]
            tags = [int.from_bytes(payload[i * tag_bytes : (i + 1) * tag_bytes], "big") for i in range(count)]
            at = count * tag_bytes
            ids = [
                int.from_bytes(payload[at + i * id_bytes : at + (i + 1) * id_bytes], "big")
                for i in range(count)
            ]
            old_ids.extend(ids)
            new_tags, new_ids = change(tags, ids)
            packed = b"".join(t.to_bytes(tag_bytes, "big") for t in new_tags) + b"".join(
                i.to_bytes(id_bytes, "big") for i in new_ids
            )
            txn.put(key, runs.seal(key, packed), db=db)
            return

    store._engine.env.write(body)
    assert old_ids, "no bucket holds two entries"
    return old_ids


def test_entries_under_each_others_keys(tmp_path: Any) -> None:
    """Two entries of a bucket swap ids: both are under a wrong key, nothing else."""
    with _filled(str(tmp_path / "s")) as store:
        ids = _rewrite_bucket(store, lambda tags, ids: (tags, [ids[1], ids[0], *ids[2:]]))
        assert sorted(store.check()) == sorted(
            f"table {TABLE} holds document {i} under a wrong key" for i in ids[:2]
        )


def test_an_entry_of_no_document(tmp_path: Any) -> None:
    """An entry's id names no document: it should not be there, and its document is missing."""
    with _filled(str(tmp_path / "s")) as store:
        stranger = DOCS + 500
        _rewrite_bucket(store, lambda tags, ids: (tags, [stranger, *ids[1:]]))
        assert store.check() == [
            f"table {TABLE} holds document {stranger}, which should not be there",
            f"table {TABLE} lacks 1 documents",
        ]


def test_an_entry_twice(tmp_path: Any) -> None:
    """An entry repeats another's id (under that one's tag): held twice, one document
    missing, and a shared slot the bitmap does not mark crowded."""
    with _filled(str(tmp_path / "s")) as store:
        ids = _rewrite_bucket(
            store, lambda tags, ids: ([tags[0], tags[0], *tags[2:]], [ids[0], ids[0], *ids[2:]])
        )
        problems = store.check()
        # The two entries share a slot, which the run's bitmap never marked crowded.
        assert problems[0].startswith(f"table {TABLE}'s crowded bitmap of run ")
        assert problems[1:] == [
            f"table {TABLE} holds document {ids[0]} twice",
            f"table {TABLE} lacks 1 documents",
        ]


def test_a_damaged_bucket_among_sound_ones(tmp_path: Any) -> None:
    """A bucket whose checksum fails is reported, its entries count as missing, and the
    sound buckets of its slice are still checked (a wrong key in one is found too)."""
    with _filled(str(tmp_path / "s")) as store:
        tableset = store._engine.tableset
        run = tableset.catalog.runs[0]
        db = store._engine.handles.tables[TABLE]
        geometry = run.geometries[TABLE]

        def body(txn: Any) -> tuple[bytes, int]:
            stored = list(tableset.buckets(txn, TABLE, run))
            damaged_key, damaged_value = stored[0]
            txn.put(
                damaged_key, damaged_value[:5] + bytes([damaged_value[5] ^ 0xFF]) + damaged_value[6:], db=db
            )
            return damaged_key, runs._payload(damaged_key, damaged_value, geometry)[1]

        damaged_key, lost = store._engine.env.write(body)
        problems = store.check()
        assert problems == [
            f"table {TABLE}: bucket {damaged_key.hex()} of a table is damaged (checksum mismatch)",
            f"table {TABLE} lacks {lost} documents",
        ]


@pytest.mark.parametrize("removed", [1, 40])
def test_check_is_clean_after_removals_and_a_delta(tmp_path: Any, removed: int) -> None:
    """Removed documents and documents still in the delta are not expected in the tables."""
    with _filled(str(tmp_path / "s")) as store:
        for key in range(removed):
            store.remove(key)
        store.add_many([f"new-{i}" for i in range(5)], [1, 2, 3, 4, 5])
        assert store.check() == []


def test_buckets_of_a_run_the_catalog_lacks(tmp_path: Any) -> None:
    """Buckets left by a run no catalog names are counted, once per run."""
    with _filled(str(tmp_path / "s")) as store:
        db = store._engine.handles.tables[TABLE]
        stray = [runs.KEY.pack(999, bucket) for bucket in (3, 7)]
        store._engine.env.write(lambda txn: [txn.put(key, runs.seal(key, b""), db=db) for key in stray])
        assert store.check() == [f"table {TABLE} holds 2 buckets of run 999, which the catalog lacks"]


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.integers(0, 2**40), unique=True, max_size=60),
    asked=st.lists(st.integers(0, 2**41), max_size=60),
    small=st.booleans(),
)
def test_tabled_positions(ids: list[int], asked: list[int], small: bool) -> None:
    """Where each asked id is among the tabled ones (-1: not there), both when ids are
    dense enough to be looked up by id and when they are searched."""
    if small:  # ids under 5000: the table by id
        ids, asked = sorted({i % 5000 for i in ids}), [i % 8000 for i in asked]
    ordered = np.array(sorted(ids), dtype=np.uint64)
    tabled = checking._Tabled((ordered, ordered ^ np.uint64(5)))
    if small:
        assert tabled.dense is not None
    where = {doc_id: at for at, doc_id in enumerate(sorted(ids))}
    probe = asked + ids
    found = tabled.positions(np.array(probe, dtype=np.uint64)).tolist()
    assert found == [where.get(doc_id, -1) for doc_id in probe]


@pytest.mark.parametrize("new_key", [b"\xa5other", b"\xc3", b"\xa9cut"])
def test_a_record_under_another_key(tmp_path: Any, new_key: bytes) -> None:
    """A record whose key is a sound key of no document does not map back; one whose key
    is not a key (a bool, a cut string) is damaged. Nothing else is reported either way."""
    with _filled(str(tmp_path / "s")) as store:
        docs = store._engine.handles.docs

        def body(txn: Any) -> int:
            cursor = txn.cursor(docs)
            assert cursor.set_range((1234).to_bytes(8, "big"))
            txn.put(cursor.key(), cursor.value()[:8] + new_key, db=docs)
            return int.from_bytes(cursor.key(), "big")

        doc_id = store._engine.env.write(body)
        problems = store.check()
    if new_key == b"\xa5other":
        assert problems == [f"document {doc_id}'s key does not map back to it"]
    else:
        assert len(problems) >= 2
        assert problems[0].startswith(f"document {doc_id}: a stored key")
        assert problems[1] == f"{DOCS} keys but {DOCS - 1} document records"


def test_tabled_documents_out_of_id_order_are_still_found() -> None:
    """A damaged record can put ids out of order: check() found the largest id by
    the last one and failed with an IndexError (a random-damage run hit it)."""
    ids = np.array([7, 900, 3], dtype=np.uint64)
    tabled = checking._Tabled((ids, np.array([70, 9000, 30], dtype=np.uint64)))
    assert tabled.positions(np.array([3, 7, 900, 5], dtype=np.uint64)).tolist() == [2, 0, 1, -1]
