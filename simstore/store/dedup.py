"""Batch operations over a whole store: all near-duplicate pairs and clusters.

Functions of an open engine (:mod:`simstore.engine.core`). The algorithms are
pure functions in :mod:`simstore.index.pairs` and :mod:`simstore.index.clusters`; this
module feeds them one snapshot of the store and turns internal document ids
back into keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from simstore.engine import _lmdb
from simstore.engine.band_search import stored_sketches
from simstore.engine.records import decode_record, encode_id
from simstore.engine.settings import store_sketch
from simstore.errors import CorruptStoreError, InvalidTypeError, InvalidValueError
from simstore.fingerprinting.bands import BandKeys, band_keys
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard
from simstore.index.clusters import components, groups, pick_longest, stars
from simstore.index.pairs import IntArray, all_pairs
from simstore.index.permute import U64Array
from simstore.index.shared_keys import cross_members
from simstore.keys import Key, unpack_key, unpack_meta
from simstore.layout.pair_layout import pair_layout
from simstore.results import Record
from simstore.store.arguments import batch_threshold, checked_k
from simstore.store.sketch_pairs import NodePairs, band_node_pairs, by_group

if TYPE_CHECKING:
    from simstore.engine.core import Engine

#: ``progress(tables_done, tables_total)``, called after each table.
Progress = Callable[[int, int], None]
#: A representative policy: ``"first"``, ``"longest"``, or a callable that
#: gets the members' records in the order they were added and returns the
#: key of the one to keep (or its record).
KeepPolicy = str | Callable[[list[Record]], Key | Record]

KEEP_POLICIES = ("first", "longest")
#: How clusters are formed from pairs: connected components (chains join
#: everything they reach) or stars (every member paired with the kept one).
LINKAGES = ("components", "star")
#: The metadata field ``keep="longest"`` compares (the CLI records each
#: document's text length there).
LENGTH_FIELD = "length"


class Pair(NamedTuple):
    """Two stored documents within ``distance`` bits; ``key_a`` was added
    first. ``similarity`` is their estimated Jaccard similarity (see
    :class:`simstore.Match`), ``None`` if either has no sketch."""

    key_a: Key
    key_b: Key
    distance: int
    similarity: float | None = None


class Cluster(NamedTuple):
    """A connected component of the near-duplicate pair graph.

    ``cluster_id`` is the internal id of the member added first: it does not
    depend on the order pairs were found in, so it is the same on every run
    over the same store, and stays while that member stays. ``members`` lists
    every member's key in the order added, the representative included.
    """

    cluster_id: int
    representative: Key
    members: list[Key]
    #: The largest distance of a member from the representative.
    worst_distance: int = 0
    #: The least estimated similarity of a member to the representative
    #: (``None`` when no member's can be estimated).
    worst_similarity: float | None = None
    #: Each member's distance from the representative, in ``members`` order
    #: (0 for the representative itself).
    distances: tuple[int, ...] = ()
    #: Each member's estimated similarity to the representative, in
    #: ``members`` order (``None`` where either has no sketch; the
    #: representative's own is 1.0 when it has one).
    similarities: tuple[float | None, ...] = ()

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def duplicates(self) -> list[Key]:
        """The members other than the representative."""
        return [key for key in self.members if key != self.representative]


@dataclass
class _Snapshot:
    """Every document of one read snapshot: internal ids ascending (the order
    added) and their fingerprints; ``txn`` stays open to resolve keys.

    ``env`` and ``map_changes`` say which map ``txn`` belongs to: when this
    process grows its map (a write during a slow iteration) or reopens the
    file, every open transaction dies, and :func:`_current_txn` begins a
    newer one (``renewed``), in which documents removed since are missing.
    """

    txn: _lmdb.Txn
    doc_ids: U64Array
    fingerprints: U64Array
    env: Any = None
    map_changes: int = 0
    renewed: bool = False


def _current_txn(engine: Engine, snapshot: _Snapshot) -> _lmdb.Txn:
    """The snapshot's transaction, begun anew if the map it read has gone
    (call with the store's lock held, under which maps change)."""
    env = engine.env
    if snapshot.env is env and snapshot.map_changes == env.map_changes:
        return snapshot.txn
    with contextlib.suppress(Exception):  # it died with its map
        snapshot.txn.abort()
    snapshot.txn = env.begin_read()
    snapshot.env, snapshot.map_changes, snapshot.renewed = env, env.map_changes, True
    return snapshot.txn


# ------------------------------------------------------------------ pairs


def near_duplicate_pairs(
    engine: Engine,
    k: int | None,
    min_similarity: float | None,
    progress: Progress | None,
    bands: bool = True,
) -> Iterator[Pair]:
    """``Store.near_duplicate_pairs``: every pair within ``k`` bits, once,
    streamed from one snapshot held until the iterator ends."""
    checked = checked_k(engine, k)
    threshold = batch_threshold(engine, min_similarity)
    return _pairs(engine, checked, threshold, progress, bands)


def _pairs(
    engine: Engine, k: int, threshold: float | None, progress: Progress | None, bands: bool
) -> Iterator[Pair]:
    snapshot = _snapshot(engine)
    try:
        for left, right, distance in _pairs_within(snapshot.fingerprints, k, progress):
            first = np.minimum(left, right)
            second = np.maximum(left, right)
            ids_a = snapshot.doc_ids[first]
            ids_b = snapshot.doc_ids[second]
            with engine.lock:  # no map changes while the transaction is read
                txn = _current_txn(engine, snapshot)
                similarity = _pair_similarities(engine, txn, ids_a, ids_b)
            yield from _resolved_pairs(engine, snapshot, ids_a, ids_b, distance, similarity, threshold)
        if bands and threshold is not None:
            unique, inverse = _split_by_sketch(engine, snapshot, *distinct(snapshot.fingerprints))
            links = _band_links(engine, snapshot, k, threshold, unique, inverse)
            if links is not None:
                for first, second, which in _link_documents(links, *by_group(inverse, len(unique))):
                    yield from _resolved_pairs(
                        engine,
                        snapshot,
                        snapshot.doc_ids[first],
                        snapshot.doc_ids[second],
                        links.distance[which],
                        links.similarity[which],
                        None,
                    )
    finally:
        with contextlib.suppress(Exception):  # it may have died with its map
            snapshot.txn.abort()


def _resolved_pairs(
    engine: Engine,
    snapshot: _Snapshot,
    ids_a: U64Array,
    ids_b: U64Array,
    distance: np.ndarray,
    similarity: np.ndarray,
    threshold: float | None,
) -> Iterator[Pair]:
    """The pairs of documents ``ids_a[i]``, ``ids_b[i]`` (``ids_a`` added
    first) whose ``similarity`` is not below ``threshold``, with their keys."""
    bits = distance.astype(np.int64)
    if threshold is not None:
        kept = ~(similarity < threshold)  # NaN (unjudged) is kept
        ids_a, ids_b, bits, similarity = ids_a[kept], ids_b[kept], bits[kept], similarity[kept]
    id_list_a, id_list_b = ids_a.tolist(), ids_b.tolist()
    with engine.lock:
        txn = _current_txn(engine, snapshot)
        keys = _keys_of(engine, txn, set(id_list_a) | set(id_list_b), gone_ok=snapshot.renewed)
    judged = [None if value != value else value for value in similarity.tolist()]
    for id_a, id_b, pair_bits, pair_similarity in zip(
        id_list_a, id_list_b, bits.tolist(), judged, strict=True
    ):
        if id_a in keys and id_b in keys:  # else removed since the iteration began
            yield Pair(keys[id_a], keys[id_b], pair_bits, pair_similarity)


def _band_links(
    engine: Engine, snapshot: _Snapshot, k: int, threshold: float, unique: U64Array, inverse: IntArray
) -> NodePairs | None:
    """The pairs of nodes (``unique`` fingerprints, ``inverse`` each
    document's node, one sketch a node) linked by their sketches beyond
    ``k`` bits (:mod:`simstore.store.sketch_pairs`), judged on each node's
    first document; ``None`` where the store keeps no sketches."""
    sketch = store_sketch(engine)
    if sketch is None or engine.handles.sketches is None:
        return None
    first = _first_positions(len(unique), inverse)
    rows, present = _all_sketch_rows(engine, snapshot, sketch, first)
    return band_node_pairs(unique, rows, present, sketch, k, threshold)


#: Node pairs expanded into document pairs at a time.
_LINK_CHUNK = 1 << 16


def _link_documents(
    links: NodePairs, members: IntArray, starts: IntArray
) -> Iterator[tuple[IntArray, IntArray, IntArray]]:
    """``(first, second, link)`` in chunks: every document pair of each
    node pair (positions, ``first < second``; node ``i``'s documents are
    ``members[starts[i]:starts[i + 1]]``) and the link it came from."""
    for start in range(0, len(links.left), _LINK_CHUNK):
        left = links.left[start : start + _LINK_CHUNK]
        right = links.right[start : start + _LINK_CHUNK]
        a, b, which = cross_members(members, starts, left, right)
        yield np.minimum(a, b), np.maximum(a, b), which + start


def _all_sketch_rows(
    engine: Engine, snapshot: _Snapshot, sketch: Sketch, positions: IntArray
) -> tuple[np.ndarray, np.ndarray]:
    """The sketches of the documents at ``positions`` of the snapshot, as
    rows in that order (zeros where one has none), and which have one: one
    pass of a cursor over every sketch, placed a chunk at a time (no copy of
    them all is held on the way)."""
    # Each snapshot position's row in the answer (-1: not asked for).
    row_of = np.full(len(snapshot.doc_ids), -1, dtype=np.int64)
    row_of[positions] = np.arange(len(positions))
    rows = np.zeros((len(positions), sketch.nbytes), dtype=np.uint8)
    present = np.zeros(len(positions), dtype=np.bool_)
    if not len(snapshot.doc_ids):
        return rows, present
    with engine.lock:
        engine.check_open()
        for ids, stored in stored_sketches(engine, _current_txn(engine, snapshot), sketch):
            where = np.minimum(np.searchsorted(snapshot.doc_ids, ids), len(snapshot.doc_ids) - 1)
            row = np.where(snapshot.doc_ids[where] == ids, row_of[where], -1)
            wanted = row >= 0
            rows[row[wanted]] = stored[wanted]
            present[row[wanted]] = True
    return rows, present


def _pair_similarities(engine: Engine, txn: _lmdb.Txn, ids_a: U64Array, ids_b: U64Array) -> np.ndarray:
    """The estimated similarity of each pair of documents (float64; NaN
    where either has no sketch, or the store keeps none)."""
    similarity = np.full(len(ids_a), np.nan)
    sketch = store_sketch(engine)
    if sketch is None or not len(ids_a):
        return similarity
    wanted = np.unique(np.concatenate([ids_a, ids_b]))
    rows, present = _sketch_rows(engine, txn, wanted, sketch)
    where_a = np.searchsorted(wanted, ids_a)
    where_b = np.searchsorted(wanted, ids_b)
    both = present[where_a] & present[where_b]
    if both.any():
        similarity[both] = estimate_jaccard(rows[where_a[both]], rows[where_b[both]], sketch)
    return similarity


def _sketch_rows(
    engine: Engine, txn: _lmdb.Txn, doc_ids: U64Array, sketch: Sketch
) -> tuple[np.ndarray, np.ndarray]:
    """The sketches of ``doc_ids`` as rows (zeros where missing), and
    which documents have one."""
    database = engine.handles.sketches
    rows = np.zeros((len(doc_ids), sketch.nbytes), dtype=np.uint8)
    present = np.zeros(len(doc_ids), dtype=np.bool_)
    if database is None:
        return rows, present
    with engine.lock:
        engine.check_open()
        for index, doc_id in enumerate(doc_ids.tolist()):
            raw = txn.get(encode_id(doc_id), db=database)
            if raw is not None:
                if len(raw) != sketch.nbytes:
                    raise CorruptStoreError(f"document {doc_id}'s sketch is {len(raw)} bytes")
                rows[index] = np.frombuffer(raw, dtype=np.uint8)
                present[index] = True
    return rows, present


def _pairs_within(
    fingerprints: U64Array, k: int, progress: Progress | None
) -> Iterator[tuple[IntArray, IntArray, np.ndarray]]:
    """Every pair of positions in ``fingerprints`` within ``k`` bits, once,
    through the tables that make the search cheapest for their number (not
    the store's own, which are chosen for queries)."""
    return all_pairs(fingerprints, pair_layout(k, len(fingerprints)).tables, k, progress=progress)


# --------------------------------------------------------------- clusters


def clusters(
    engine: Engine,
    k: int | None,
    keep: KeepPolicy,
    linkage: str,
    min_similarity: float | None,
    progress: Progress | None,
    bands: bool = True,
) -> list[Cluster]:
    """``Store.clusters``: the clusters of the near-duplicate pair graph of
    one snapshot, by ``linkage``, each represented as ``keep`` asks."""
    k = checked_k(engine, k)
    if not (callable(keep) or keep in KEEP_POLICIES):
        raise InvalidValueError(f"keep must be 'first', 'longest' or a callable, got {keep!r}")
    if linkage not in LINKAGES:
        raise InvalidValueError(f"linkage must be one of {', '.join(LINKAGES)}; got {linkage!r}")
    if linkage == "star" and callable(keep):
        raise InvalidValueError("keep= as a callable needs linkage='components'")
    threshold = batch_threshold(engine, min_similarity)
    # The store's lock is held throughout: a write by another thread could
    # grow the map, which ends the snapshot's transaction mid-computation.
    # Other threads' calls on this Store wait; other processes do not.
    with engine.lock:
        return _clusters(engine, k, keep, linkage, threshold, progress, bands)


def _clusters(
    engine: Engine,
    k: int,
    keep: KeepPolicy,
    linkage: str,
    threshold: float | None,
    progress: Progress | None,
    bands: bool,
) -> list[Cluster]:
    snapshot = _snapshot(engine)
    try:
        unique, inverse, left, right = _linked(engine, snapshot, k, threshold, progress, bands)
        if linkage == "components":
            component = components(len(unique), left, right)[inverse]
            leaders = None
        else:
            rank = _star_rank(engine, snapshot, unique, inverse, left, right, keep)
            component = stars(len(unique), left, right, rank)[inverse]
            leaders = component
        if len(unique) != len(inverse) or not np.array_equal(inverse, np.arange(len(inverse))):
            # Nodes are not documents one for one (shared fingerprints, or
            # nodes split by sketch): label by the smallest document
            # position of each group instead.
            first = np.full(len(unique), len(inverse), dtype=np.int64)
            np.minimum.at(first, component, np.arange(len(inverse), dtype=np.int64))
            component = first[component]
        star_threshold = None if linkage != "star" or threshold is None else (k, threshold, bands)
        clusters = _make_clusters(engine, snapshot, groups(component), keep, leaders, inverse, star_threshold)
        return clusters
    finally:
        snapshot.txn.abort()


def _linked(
    engine: Engine,
    snapshot: _Snapshot,
    k: int,
    threshold: float | None,
    progress: Progress | None,
    bands: bool,
) -> tuple[U64Array, IntArray, IntArray, IntArray]:
    """``(node fingerprints, each document's node, left, right)``: the
    pairs of nodes within ``k`` (and ``threshold``, judged on the first
    document of each).

    A node is the documents of one fingerprint, so that a fingerprint shared
    by thousands of documents costs nothing quadratic here. With a
    threshold, a node is the documents of one fingerprint and one sketch:
    documents may share a fingerprint and not their text (a node judged on
    its first document alone lost or made links for the others), and those
    sharing both, exact copies above all, are judged alike.
    """
    unique, inverse = distinct(snapshot.fingerprints)
    if threshold is not None:
        unique, inverse = _split_by_sketch(engine, snapshot, unique, inverse)
    lefts: list[IntArray] = []
    rights: list[IntArray] = []
    for left, right, _ in _pairs_within(unique, k, progress):
        lefts.append(left)
        rights.append(right)
    empty = np.zeros(0, dtype=np.int64)
    left = np.concatenate(lefts) if lefts else empty
    right = np.concatenate(rights) if rights else empty
    if threshold is not None and len(left):
        first = _first_positions(len(unique), inverse)
        similarity = _pair_similarities(
            engine, snapshot.txn, snapshot.doc_ids[first[left]], snapshot.doc_ids[first[right]]
        )
        kept = ~(similarity < threshold)  # NaN (unjudged) links
        left, right = left[kept], right[kept]
    links = (
        _band_links(engine, snapshot, k, threshold, unique, inverse)
        if bands and threshold is not None
        else None
    )
    if links is not None and len(links.left):
        left = np.concatenate([left, links.left])
        right = np.concatenate([right, links.right])
    return unique, inverse, left, right


def _split_by_sketch(
    engine: Engine, snapshot: _Snapshot, unique: U64Array, inverse: IntArray
) -> tuple[U64Array, IntArray]:
    """Nodes of one fingerprint and one sketch: a fingerprint's documents
    are split by their sketches (only fingerprints shared by several
    documents are read). The node fingerprints may repeat."""
    sketch = store_sketch(engine)
    counts = np.bincount(inverse, minlength=len(unique))
    shared = np.flatnonzero(counts[inverse] > 1)  # documents whose fingerprint others have too
    if sketch is None or not len(shared):
        return unique, inverse
    with engine.lock:
        rows, _ = _sketch_rows(engine, _current_txn(engine, snapshot), snapshot.doc_ids[shared], sketch)
    # Key each shared document by (its fingerprint's node, its sketch), and
    # number the distinct keys after the existing nodes.
    keyed = np.empty(len(shared), dtype=[("node", "<i8"), ("sketch", f"V{sketch.nbytes}")])
    keyed["node"] = inverse[shared]
    keyed["sketch"] = np.ascontiguousarray(rows).view(f"V{sketch.nbytes}").ravel()
    _, first_of_key, key_of = np.unique(keyed, return_index=True, return_inverse=True)
    key_of = key_of.reshape(-1)
    # Keys in document order: the first key of each node keeps that node's
    # number; the others are numbered after the existing nodes, in order.
    order = np.argsort(first_of_key, kind="stable")
    ordered_nodes = keyed["node"][first_of_key[order]]
    keeps = np.zeros(len(order), dtype=np.bool_)
    keeps[np.unique(ordered_nodes, return_index=True)[1]] = True
    node_of_key = np.empty(len(order), dtype=np.int64)
    node_of_key[order[keeps]] = ordered_nodes[keeps]
    node_of_key[order[~keeps]] = len(unique) + np.arange(int(np.count_nonzero(~keeps)), dtype=np.int64)
    split = inverse.copy()
    split[shared] = node_of_key[key_of]
    return np.concatenate([unique, unique[ordered_nodes[~keeps]]]), split


def _star_rank(
    engine: Engine,
    snapshot: _Snapshot,
    unique: U64Array,
    inverse: IntArray,
    left: IntArray,
    right: IntArray,
    keep: KeepPolicy,
) -> IntArray:
    """Each distinct fingerprint's place in the star order: by its first
    document, or (``keep="longest"``) by its longest document first."""
    first = _first_positions(len(unique), inverse)
    if keep != "longest" or not len(left):
        return np.argsort(np.argsort(first, kind="stable"), kind="stable")
    length = np.zeros(len(unique), dtype=np.int64)
    linked = np.zeros(len(unique), dtype=np.bool_)
    linked[left] = linked[right] = True
    positions = np.flatnonzero(linked[inverse])  # only documents in some pair need a length
    records = _records_of(engine, snapshot.txn, snapshot.doc_ids[positions].tolist())
    lengths = [_length_of(record) for record in records]
    np.maximum.at(length, inverse[positions], np.array(lengths, dtype=np.int64))
    order = np.lexsort((first, -length))
    rank = np.empty(len(unique), dtype=np.int64)
    rank[order] = np.arange(len(unique))
    return rank


def _make_clusters(
    engine: Engine,
    snapshot: _Snapshot,
    member_groups: list[IntArray],
    keep: KeepPolicy,
    leaders: IntArray | None,
    inverse: IntArray,
    star_threshold: tuple[int, float, bool] | None = None,
) -> list[Cluster]:
    """The clusters of ``member_groups`` (document positions), each with its
    representative as ``keep`` asks; of a star (``leaders`` given), one of
    its leader's documents. ``star_threshold`` (a star's ``(k,
    min_similarity)``) holds every member to its representative."""
    clusters: list[Cluster] = []
    for positions in member_groups:
        ids = snapshot.doc_ids[positions].tolist()
        records: list[Record] = []
        with engine.lock:
            engine.check_open()
            if keep == "first" and leaders is None:
                keys = _keys_of(engine, snapshot.txn, ids)
                members = [keys[doc_id] for doc_id in ids]
                chosen = 0
            else:
                records = _records_of(engine, snapshot.txn, ids)
                members = [record.key for record in records]
                candidates = list(range(len(records)))
                if leaders is not None:  # a star: its leader's documents only
                    leader = leaders[positions[0]]
                    candidates = np.flatnonzero(inverse[positions] == leader).tolist()
                if keep == "first":
                    chosen = candidates[0]
                else:
                    picked = choose_representative([records[i] for i in candidates], keep)
                    chosen = next(i for i in candidates if records[i].key is picked)
        if star_threshold is None:
            clusters.append(_cluster(engine, snapshot, positions, members, chosen))
        else:
            clusters.extend(_held_stars(engine, snapshot, positions, records, chosen, keep, *star_threshold))
    if star_threshold is not None:
        clusters.sort(key=lambda cluster: cluster.cluster_id)
    return clusters


def _held_stars(
    engine: Engine,
    snapshot: _Snapshot,
    positions: IntArray,
    records: list[Record],
    chosen: int,
    keep: KeepPolicy,
    k: int,
    threshold: float,
    bands: bool,
) -> list[Cluster]:
    """A star whose members are all at least ``threshold`` similar to its
    representative (member ``chosen``), and more stars of those that are not.

    Stars are linked on the first document of each fingerprint, so a
    document sharing a fingerprint with a member may be less similar to the
    representative than the member is. Such documents leave the star and
    form stars of their own, greedily: the one ``keep`` prefers leads, the
    others within ``k`` bits and ``threshold`` of it join, and so on. A
    document left alone is in no cluster.
    """
    clusters: list[Cluster] = []
    fingerprints = snapshot.fingerprints[positions]
    doc_ids = snapshot.doc_ids[positions]
    banded = _member_bands(engine, snapshot, doc_ids) if bands else None
    remaining = np.arange(len(positions))
    lead = chosen
    while True:
        others = remaining[remaining != lead]
        similarity = _pair_similarities(
            engine, snapshot.txn, np.full(len(others), doc_ids[lead], dtype=np.uint64), doc_ids[others]
        )
        near = np.bitwise_count(fingerprints[others] ^ fingerprints[lead]) <= k
        if banded is not None:
            lead_keys = banded.keys[banded.rows == lead]
            near |= np.isin(others, banded.rows[np.isin(banded.keys, lead_keys)])
        joining = near & ~(similarity < threshold)  # NaN (unjudged) joins
        star = np.sort(np.append(others[joining], lead))
        if len(star) > 1:
            keys = [records[index].key for index in star.tolist()]
            clusters.append(
                _cluster(engine, snapshot, positions[star], keys, int(np.searchsorted(star, lead)))
            )
        remaining = others[~joining]
        if len(remaining) < 2:
            return clusters
        if keep == "first":
            lead = int(remaining[0])
        else:
            picked = choose_representative([records[index] for index in remaining.tolist()], keep)
            lead = next(index for index in remaining.tolist() if records[index].key is picked)


def _member_bands(engine: Engine, snapshot: _Snapshot, doc_ids: U64Array) -> BandKeys:
    """The sketch band keys of a cluster's members (``rows`` index
    ``doc_ids``; a member without a sketch has none), read and made once for
    all of its stars."""
    sketch = store_sketch(engine)
    if sketch is None:
        return BandKeys(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64))
    rows, present = _sketch_rows(engine, _current_txn(engine, snapshot), doc_ids, sketch)
    keys = band_keys(rows, sketch)
    with_sketch = present[keys.rows]
    return BandKeys(keys.rows[with_sketch], keys.keys[with_sketch])


def _cluster(
    engine: Engine, snapshot: _Snapshot, positions: IntArray, members: list[Key], chosen: int
) -> Cluster:
    """The cluster of the documents at ``positions`` (their keys ``members``)
    represented by member ``chosen``, with each member's distance from it and
    similarity to it."""
    fingerprints = snapshot.fingerprints[positions]
    distances = np.bitwise_count(fingerprints ^ fingerprints[chosen]).astype(np.int64)
    doc_ids = snapshot.doc_ids[positions]
    similarity = _pair_similarities(
        engine, snapshot.txn, np.full(len(doc_ids), doc_ids[chosen], dtype=np.uint64), doc_ids
    )
    others = np.delete(similarity, chosen)
    judged = others[~np.isnan(others)]
    return Cluster(
        int(doc_ids[0]),
        members[chosen],
        members,
        int(distances.max()),
        float(judged.min()) if len(judged) else None,
        tuple(distances.tolist()),
        tuple(None if value != value else value for value in similarity.tolist()),
    )


# --------------------------------------------------------------- snapshot


def _snapshot(engine: Engine) -> _Snapshot:
    """Open a read transaction and read every document's id and fingerprint.

    The transaction is opened outside :meth:`Engine.read` on purpose: it must
    outlive the store lock (a pairs iterator may be consumed slowly, and
    holding the lock would block every other thread), and the document
    records hold every document, delta or not, so no delta is needed.
    """
    with engine.lock:
        engine.check_usable()
        txn = engine.env.begin_read()
        try:
            cursor = txn.cursor(engine.handles.docs)
            raw_ids = b"".join(cursor.iternext(keys=True, values=False))
            cursor.first()
            raw_fingerprints = b"".join(raw[:8] for raw in cursor.iternext(keys=False, values=True))
        except BaseException:
            txn.abort()
            raise
    doc_ids = np.frombuffer(raw_ids, dtype=">u8").astype(np.uint64)
    fingerprints = np.frombuffer(raw_fingerprints, dtype=">u8").astype(np.uint64)
    if len(doc_ids) != len(fingerprints):
        txn.abort()
        raise CorruptStoreError("document records changed while they were read")
    return _Snapshot(txn, doc_ids, fingerprints, engine.env, engine.env.map_changes)


def _keys_of(
    engine: Engine, txn: _lmdb.Txn, doc_ids: Sequence[int] | set[int], *, gone_ok: bool = False
) -> dict[int, Key]:
    """The keys of ``doc_ids``; with ``gone_ok`` (a renewed snapshot), those
    removed since are left out instead of being reported as damage."""
    with engine.lock:
        engine.check_open()
        docs = engine.handles.docs
        keys: dict[int, Key] = {}
        for doc_id in doc_ids:
            raw = txn.get(encode_id(doc_id), db=docs)
            if raw is None:
                if gone_ok:
                    continue
                raise CorruptStoreError(f"document {doc_id} vanished from its snapshot")
            keys[doc_id] = unpack_key(decode_record(raw)[1])
        return keys


def _records_of(engine: Engine, txn: _lmdb.Txn, doc_ids: Sequence[int]) -> list[Record]:
    docs = engine.handles.docs
    docmeta = engine.handles.docmeta
    records: list[Record] = []
    for doc_id in doc_ids:
        id_bytes = encode_id(doc_id)
        raw = txn.get(id_bytes, db=docs)
        if raw is None:
            raise CorruptStoreError(f"document {doc_id} vanished from its snapshot")
        fingerprint, packed = decode_record(raw)
        records.append(Record(unpack_key(packed), fingerprint, unpack_meta(txn.get(id_bytes, db=docmeta))))
    return records


def _first_positions(count: int, inverse: IntArray) -> IntArray:
    """For each of ``count`` distinct fingerprints, its first document's position."""
    first = np.full(count, len(inverse), dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(len(inverse), dtype=np.int64))
    return first


def _length_of(record: Record) -> int:
    length = None if record.meta is None else record.meta.get(LENGTH_FIELD)
    return length if isinstance(length, int) and not isinstance(length, bool) else 0


def distinct(fingerprints: U64Array) -> tuple[U64Array, IntArray]:
    """``(unique, inverse)`` as :func:`numpy.unique` gives them, but without
    its slow inverse when no fingerprint repeats (the common case)."""
    ordered = np.sort(fingerprints)
    if not bool(np.any(ordered[1:] == ordered[:-1])):
        return fingerprints, np.arange(len(fingerprints), dtype=np.int64)
    unique, inverse = np.unique(fingerprints, return_inverse=True)
    return unique, inverse.reshape(-1).astype(np.int64)


def choose_representative(records: list[Record], keep: KeepPolicy) -> Key:
    """The representative's key under a ``"longest"`` or callable policy;
    ``records`` are the cluster's members in the order added."""
    if keep == "longest":
        lengths: list[Any] = [
            None if record.meta is None else record.meta.get(LENGTH_FIELD) for record in records
        ]
        return records[pick_longest(lengths)].key
    if not callable(keep):  # pragma: no cover - checked by clusters()
        raise InvalidValueError(f"unknown keep policy {keep!r}")
    chosen = keep(list(records))
    keys = [record.key for record in records]
    if isinstance(chosen, tuple) and hasattr(chosen, "key"):
        chosen = chosen.key  # a Record was returned rather than its key
    if isinstance(chosen, bool) or not isinstance(chosen, str | bytes | int):
        raise InvalidTypeError(f"keep= must return a member's key, got {type(chosen).__name__}")
    for key in keys:
        if type(key) is type(chosen) and key == chosen:
            return key
    raise InvalidValueError(f"keep= returned {chosen!r}, which is not a member of the cluster {keys!r}")
