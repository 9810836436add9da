"""Queries limited to their closest matches, which stop as soon as they have them.

``Store.query(..., limit=n)`` answers the first ``n`` matches of the
unlimited query: sorted by ``(distance, key)``, those below the similarity
threshold left out. The tables are visited in the order of
:mod:`simstore.index.scan_plan`; before each, :meth:`Closest.settle` resolves the
documents found closer than the distance the tables visited so far have
settled (nothing closer can turn up later): it reads their keys, sorts them,
and verifies their sketches in that order, one at a time, until it holds
``n`` matches. A query whose closest documents are verified copies of it
thus reads one table of the layout instead of all of them, and verifies
one sketch instead of every near-duplicate's.
"""

from __future__ import annotations

import functools
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from simstore.engine import _lmdb, band_search
from simstore.engine.reads import BATCH_READS_BITMAPS, resolve
from simstore.engine.records import decode_record, encode_id
from simstore.engine.settings import store_sketch
from simstore.engine.tableset import sharing_records
from simstore.errors import CorruptStoreError, InvalidTypeError, InvalidValueError
from simstore.fingerprinting.sketch import HeldSketch, U8Array
from simstore.index.permute import U64Array
from simstore.keys import Key, sort_key, unpack_key, unpack_meta
from simstore.results import Match

if TYPE_CHECKING:
    from simstore.engine.core import Engine


def check_limit(limit: object) -> int | None:
    """A call's ``limit``: ``None`` (every match) or a positive int."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidTypeError(f"limit must be a positive int or None, got {limit!r}")
    if limit < 1:
        raise InvalidValueError(f"limit must be at least 1 (or None for every match), got {limit}")
    return int(limit)


class Search:
    """What the queries of one call share: ``k``, ``limit``, the similarity
    threshold, whether matches carry their metadata, the store's sketch
    geometry (``None``: it keeps no sketches) and the scan plan's bounds;
    and what they read from one snapshot, kept for the others, since
    documents that share boilerplate are candidates of many queries: each
    document's record (``records``, by id bytes, see
    :func:`simstore.engine.tableset.sharing_records`), its key decoded
    (``decoded``: ``(sort key, key, fingerprint)``) and its sketch."""

    __slots__ = (
        "decoded",
        "geometry",
        "k",
        "limit",
        "records",
        "settled",
        "sketches",
        "threshold",
        "with_meta",
    )

    def __init__(self, engine: Engine, k: int, limit: int, threshold: float | None, with_meta: bool) -> None:
        # Made inside the read: the layout may have changed at its start.
        self.k = k
        self.limit = limit
        self.threshold = threshold
        self.with_meta = with_meta
        self.geometry = store_sketch(engine)
        self.settled = engine.tableset.scan_plan().settled
        self.records: dict[bytes, bytes | None] = {}
        self.decoded: dict[int, tuple[tuple[int, Key], Key, int]] = {}
        self.sketches: dict[int, bytes | None] = {}


class Closest:
    """The closest ``limit`` matches of one query, resolved while the tables
    are searched. ``found`` and ``records`` are the search's (the delta's
    matches in ``found`` from the start); :attr:`matches` is the answer once
    :meth:`settle` has returned true, or after :meth:`finish`. Document
    ``excluded`` is never a match (``add_if_new``'s own key)."""

    __slots__ = (
        "_below",
        "_engine",
        "_excluded",
        "_found",
        "_records",
        "_search",
        "_sketch",
        "_txn",
        "done",
        "matches",
    )

    def __init__(
        self,
        engine: Engine,
        txn: _lmdb.Txn,
        search: Search,
        found: dict[int, int],
        records: dict[int, bytes],
        sketch: bytes | None,
        excluded: int | None = None,
    ) -> None:
        self._engine = engine
        self._excluded = excluded
        self._txn = txn
        self._search = search
        self._found = found
        self._records = records
        # Similarity is known only where both sides have a sketch (as resolve()).
        self._sketch = (
            None if sketch is None or search.geometry is None else HeldSketch(sketch, search.geometry)
        )
        self._below = 0  # every document found closer than this has been judged
        self.matches: list[Match] = []
        self.done = False

    def settle(self, tables_visited: int) -> bool:
        """Judge the documents that the first ``tables_visited`` tables of
        the scan plan have settled; true once the answer is complete."""
        if self.done:
            return True
        search = self._search
        bound = min(search.settled[tables_visited], search.k + 1)
        if bound > self._below:
            self._judge(self._below, bound)
            self._below = bound
            if bound > search.k:
                self.done = True
        return self.done

    def finish(self) -> None:
        """Judge whatever is left: every table has been searched."""
        if not self.done:
            self._judge(self._below, self._search.k + 1)
            self.done = True

    def _judge(self, low: int, high: int) -> None:
        """Take the documents found at distances ``low`` to ``high - 1`` in
        ``(distance, key)`` order, verified, until :attr:`matches` is full."""
        excluded = self._excluded
        band = [
            (doc_id, distance)
            for doc_id, distance in self._found.items()
            if low <= distance < high and doc_id != excluded
        ]
        if not band:
            return
        txn = self._txn
        search = self._search
        decoded = search.decoded
        ordered = []
        for doc_id, distance in band:
            known = decoded.get(doc_id)
            if known is None:
                raw = self._records.get(doc_id)
                if raw is None:  # a match of the delta
                    raw = txn.get(encode_id(doc_id), db=self._engine.handles.docs)
                    if raw is None:
                        raise CorruptStoreError(f"document {doc_id} is indexed but has no record")
                fingerprint, packed = decode_record(raw)
                key = unpack_key(packed)
                known = decoded[doc_id] = (sort_key(key), key, fingerprint)
            ordered.append(((distance, known[0]), doc_id, known[1], known[2]))
        ordered.sort(key=itemgetter(0))  # keys are unique: no tie reaches the ids
        for (distance, _), doc_id, key, fingerprint in ordered:
            similarity = self._similarity(doc_id)
            if search.threshold is not None and similarity is not None and similarity < search.threshold:
                continue
            meta = None
            if search.with_meta:
                meta = unpack_meta(txn.get(encode_id(doc_id), db=self._engine.handles.docmeta))
            self.matches.append(Match(key, distance, fingerprint, meta, similarity))
            if len(self.matches) == search.limit:
                self.done = True
                return

    def _similarity(self, doc_id: int) -> float | None:
        """The estimated similarity of document ``doc_id`` to the query
        (``None``: one of them has no sketch), as :func:`simstore.engine.reads.similarities`."""
        search = self._search
        geometry = search.geometry
        if self._sketch is None or geometry is None:
            return None
        try:
            raw = search.sketches[doc_id]
        except KeyError:
            raw = search.sketches[doc_id] = self._txn.get(encode_id(doc_id), db=self._engine.handles.sketches)
        if raw is None:
            return None
        if len(raw) != geometry.nbytes:
            raise CorruptStoreError(f"a stored sketch is {len(raw)} bytes, not the store's {geometry.nbytes}")
        return self._sketch.estimate_bytes(raw)


def query(
    engine: Engine,
    fingerprint: int,
    sketch: bytes | None,
    k: int,
    with_meta: bool,
    threshold: float | None,
    limit: int,
) -> list[Match]:
    """``Store.query`` limited to its closest ``limit`` matches, arguments checked."""
    with engine.read(query=True) as txn:
        records: dict[int, bytes] = {}
        matches = closest_in(engine, txn, fingerprint, sketch, k, with_meta, threshold, limit, records)
        if engine.tableset.bitmaps_unread:
            engine.tableset.read_bitmaps(txn)
        return matches


def closest_in(
    engine: Engine,
    txn: _lmdb.Txn,
    fingerprint: int,
    sketch: bytes | None,
    k: int,
    with_meta: bool,
    threshold: float | None,
    limit: int,
    records: dict[int, bytes],
    own_id: int | None = None,
) -> list[Match]:
    """The closest ``limit`` matches of one fingerprint in the delta and the
    tables, read in ``txn`` (the document ``own_id`` left out), the search
    stopped once it has them."""
    permuted = engine.permuted_for_query(fingerprint)
    found = engine.delta.matches(permuted, fingerprint, k)
    search = Search(engine, k, limit, threshold, with_meta)
    closest = Closest(engine, txn, search, found, records, sketch, own_id)
    engine.tableset.find(
        txn,
        permuted,
        fingerprint,
        k,
        found,
        records,
        engine.handles.docs,
        engine.permute_all,
        closest.settle,
    )
    closest.finish()
    answers = [closest.matches]
    if engine.delta_bands is not None and sketch is not None and threshold is not None:
        _add_band_matches(
            engine, txn, [fingerprint], [sketch], k, with_meta, threshold, limit, answers, own_id
        )
    return answers[0]


def query_many(
    engine: Engine,
    queries: U64Array,
    sketches: U8Array | None,
    k: int,
    with_meta: bool,
    threshold: float | None,
    limit: int,
    bands: bool = False,
) -> list[list[Match]]:
    """``Store.query_many`` limited to each query's closest ``limit``
    matches (``bands``: as :func:`simstore.engine.reads.query_many`).
    Queries equal in fingerprint and sketch (copies of one text in the
    batch) are answered once."""
    rows = None
    if sketches is not None:
        # Sliced from one bytes object: a row of a SketchRows array costs a
        # Python __array_finalize__ each.
        width = sketches.shape[1]  # (checked: one row of the store's sketch bytes a query)
        blob = np.ascontiguousarray(sketches, dtype=np.uint8).tobytes()
        rows = [blob[start : start + width] for start in range(0, width * len(queries), width)]
    first_of: dict[tuple[int, bytes | None], int] = {}
    answer_of = [
        first_of.setdefault((fingerprint, None if rows is None else rows[index]), len(first_of))
        for index, fingerprint in enumerate(queries.tolist())
    ]
    distinct = list(first_of)
    answers = _query_distinct(
        engine,
        np.array([fingerprint for fingerprint, _ in distinct], dtype=np.uint64),
        None if rows is None else [row for _, row in distinct],
        k,
        with_meta,
        threshold,
        limit,
        bands,
    )
    return [list(answers[index]) for index in answer_of]


def _query_distinct(
    engine: Engine,
    queries: U64Array,
    sketches: list[bytes | None] | None,
    k: int,
    with_meta: bool,
    threshold: float | None,
    limit: int,
    bands: bool,
) -> list[list[Match]]:
    with engine.read(query=True) as txn:
        tableset = engine.tableset
        tableset.read_bitmaps(txn, 1 << 30 if len(queries) >= BATCH_READS_BITMAPS else 1)
        columns, rows = engine.permuted_for_queries(queries)
        query_list = queries.tolist()
        founds = [
            engine.delta.matches(permuted, query, k) for query, permuted in zip(query_list, rows, strict=True)
        ]
        records: list[dict[int, bytes]] = [{} for _ in query_list]
        search = Search(engine, k, limit, threshold, with_meta)
        closests = [
            Closest(engine, txn, search, found, found_records, None if sketches is None else sketches[index])
            for index, (found, found_records) in enumerate(zip(founds, records, strict=True))
        ]
        docs = engine.handles.docs
        tableset.find_many(
            txn,
            columns,
            query_list,
            k,
            founds,
            records,
            docs,
            engine.permute_all,
            functools.partial(_settle, closests),
            sharing_records(txn, docs, search.records),
        )
        for closest in closests:
            closest.finish()
        answers = [closest.matches for closest in closests]
        if bands and sketches is not None and threshold is not None:
            _add_band_matches(engine, txn, query_list, sketches, k, with_meta, threshold, limit, answers)
        return answers


def _add_band_matches(
    engine: Engine,
    txn: _lmdb.Txn,
    queries: list[int],
    sketches: list[bytes | None],
    k: int,
    with_meta: bool,
    threshold: float,
    limit: int,
    answers: list[list[Match]],
    own_id: int | None = None,
) -> None:
    """Fill each answer short of ``limit`` with its band matches beyond
    ``k``: they come after every match within ``k``, closest first
    (``own_id``, a document to leave out)."""
    short = [index for index, matches in enumerate(answers) if len(matches) < limit]
    if not short:
        return
    rows = np.frombuffer(b"".join(sketches[index] or b"" for index in short), dtype=np.uint8)
    matched = band_search.band_matches(engine, txn, rows.reshape(len(short), -1), threshold)
    found = band_search.beyond_k(engine, txn, [queries[index] for index in short], matched, k)
    for index, (distances, records) in zip(short, found, strict=True):
        if own_id is not None:
            distances.pop(own_id, None)
        if distances:
            extra = resolve(engine, txn, distances, with_meta, records, sketches[index], threshold)
            answers[index].extend(extra[: limit - len(answers[index])])


def _settle(closests: list[Closest], query_index: int, tables_visited: int) -> bool:
    return closests[query_index].settle(tables_visited)
