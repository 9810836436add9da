"""The map room a write needs, grown ahead of it: a map that fills part-way
through a write transaction reruns the whole transaction once it has grown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from simstore.engine.reads import document_count
from simstore.engine.runs import filter_bits_for
from simstore.engine.tableset import run_bytes
from simstore.index.permute import Table

if TYPE_CHECKING:
    from simstore.engine.core import Engine


def reserve_for(
    engine: Engine,
    documents: int,
    key_bytes: int,
    *,
    run_entries: int,
    tables: Sequence[Table] | None = None,
    extra_values: tuple[int, int] = (0, 0),
    band_entries: int | None = None,
) -> None:
    """Grow the map ahead of a write of ``documents`` new documents (their
    keys ``key_bytes`` long in all) and a new run of ``run_entries``
    entries in every table (of ``tables``, the store's own unless given),
    and ``extra_values`` ``(count, bytes)`` of further values (sketches and
    metadata: a map that fills reruns the whole transaction, so a large
    batch that left them out was rerun once per growth step). A run's band
    keys are ``band_entries`` where known (a join's, a batch of bare
    fingerprints' none), else estimated from ``run_entries``."""
    # Per new document, its record and key-table entry: the key twice
    # and 40 bytes of ids, fingerprint and LMDB nodes (measured: 56 bytes
    # a document beside 8-byte keys); or its delta log entry, as much.
    # The map adds its own headroom (Environment.reserve).
    value_count, value_bytes = extra_values
    estimate = documents * 40 + 2 * key_bytes + value_count * 24 + value_bytes
    if run_entries and (engine.params.scheme is not None if tables is None else False):
        # A multi-index run: a column of 8-byte keys a table, 4-8 bytes of
        # ids and a directory of about one 4-byte slot an entry.
        estimate += run_entries * (8 * engine.params.stored_tables + 16)
        if engine.params.bands is not None:
            # Its band keys: 8 bytes a key with its id, ``bands`` keys a long
            # text (a medium one banded at two widths keeps up to twice as
            # many, a short one fewer; the map grows if a batch needs more).
            # The file holds real blocks for all of the map: an estimate
            # for documents without sketches took 64 bytes a document.
            banded = run_entries * engine.params.bands if band_entries is None else band_entries
            estimate += banded * 8
    elif run_entries:
        max_id = 2 * (document_count(engine) + documents)  # the id width, roughly
        estimate += run_bytes(
            run_entries,
            engine.tables if tables is None else tables,
            max_id,
            filter_bits_for(engine.params.k),
        )
    with engine.lock:
        engine.check_usable()
        if engine.readonly:
            return
        engine.env.reserve(estimate)
