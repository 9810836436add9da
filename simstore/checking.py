"""Verifying a store's invariants, for ``Store.check`` and ``simstore check``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simstore import _lmdb, occupancy
from simstore.delta import Delta
from simstore.errors import CorruptStoreError
from simstore.format import STATE_KEY, State
from simstore.records import decode_id, decode_record, lookup_key, unpack_key

if TYPE_CHECKING:
    from simstore.store import Store


def check_store(store: Store) -> list[str]:
    """Every broken invariant of ``store``, described; empty when sound.

    Every key maps to a record whose key maps back; ids are below the next
    id; the delta log replays to the in-memory delta and matches the
    records; every document outside the delta is in every table exactly
    once, under its permuted fingerprint, and nothing else is; while a merge
    is under way, the tables it has written hold the delta's documents too.
    """
    problems: list[str] = []
    with store._read() as txn:
        handles = store._handles
        state = State.decode(txn.get(STATE_KEY, db=handles.meta))
        replayed = Delta(store._tables)
        cursor = txn.cursor(handles.delta)
        cursor.first()
        try:
            replayed.apply(cursor.iternext())
        except CorruptStoreError as exc:
            problems.append(f"delta log: {exc}")
        replayed_delta = replayed.as_dict()
        if replayed_delta != store._delta.as_dict():
            problems.append("the in-memory delta differs from the delta log")
        fingerprint_of: dict[int, int] = {}
        for id_bytes, raw in txn.cursor(handles.docs):
            doc_id = decode_id(id_bytes)
            try:
                fingerprint, packed = decode_record(raw)
                key_found_by = lookup_key(packed)
                unpack_key(packed)
            except CorruptStoreError as exc:
                problems.append(f"document {doc_id}: {exc}")
                continue
            fingerprint_of[doc_id] = fingerprint
            if doc_id >= state.next_id:
                problems.append(f"document {doc_id} is not below next_id {state.next_id}")
            if txn.get(key_found_by, db=handles.keys) != id_bytes:
                problems.append(f"document {doc_id}'s key does not map back to it")
        key_count = int(txn.stat(handles.keys)["entries"])
        if key_count != len(fingerprint_of):
            problems.append(f"{key_count} keys but {len(fingerprint_of)} document records")
        for doc_id, fingerprint in replayed_delta.items():
            if fingerprint_of.get(doc_id) != fingerprint:
                problems.append(f"delta document {doc_id} does not match its record")
        expected_in_tables = {
            doc_id: fp for doc_id, fp in fingerprint_of.items() if doc_id not in replayed_delta
        }
        for index, (table, db) in enumerate(zip(store._tables, handles.tables, strict=True)):
            expected_here = fingerprint_of if index < state.merged_tables else expected_in_tables
            seen: set[int] = set()
            bitmaps = _trusted_bitmaps(store, txn, index, state.merge_epoch, problems)
            previous_slot = -1
            for permuted_bytes, id_bytes in txn.cursor(db):
                if len(permuted_bytes) != 8 or len(id_bytes) != 8:
                    sizes = f"{len(permuted_bytes)} and {len(id_bytes)}"
                    problems.append(f"table {index} holds an entry of {sizes} bytes, not 8 and 8")
                    continue
                doc_id = decode_id(id_bytes)
                if bitmaps is not None:
                    bitmap, crowded, shift = bitmaps
                    slot = int.from_bytes(permuted_bytes, "big") >> shift
                    if not occupancy.is_set(bitmap, slot):
                        problems.append(f"table {index}'s occupancy bitmap lacks document {doc_id}'s slot")
                    # Keys come sorted, so a slot's entries are adjacent.
                    if crowded is not None and slot == previous_slot and not occupancy.is_set(crowded, slot):
                        problems.append(f"table {index}'s crowded bitmap lacks document {doc_id}'s slot")
                    previous_slot = slot
                expected = expected_here.get(doc_id)
                if expected is None:
                    problems.append(f"table {index} holds document {doc_id}, which should not be there")
                elif table.unpermute(int.from_bytes(permuted_bytes, "big")) != expected:
                    problems.append(f"table {index} holds document {doc_id} under a wrong key")
                if doc_id in seen:
                    problems.append(f"table {index} holds document {doc_id} twice")
                seen.add(doc_id)
            missing = len(expected_here) - len(seen & expected_here.keys())
            if missing:
                problems.append(f"table {index} lacks {missing} documents")
    return problems


def _trusted_bitmaps(
    store: Store, txn: _lmdb.Txn, index: int, merge_epoch: int, problems: list[str]
) -> tuple[bytes, bytes | None, int] | None:
    """Table ``index``'s bitmaps as queries would trust them (see
    :func:`occupancy.trusted_pair`); a damaged record is a problem."""
    try:
        return occupancy.trusted_pair(store._stored_bitmaps(txn, index), merge_epoch)
    except CorruptStoreError as exc:
        problems.append(f"table {index}'s bitmaps: {exc}")
        return None
