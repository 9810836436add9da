"""Pairs found by text rather than by fingerprint: nodes whose verification
sketches share a band key (:mod:`simstore.fingerprinting.bands`), whose
fingerprints lie more than ``k`` bits apart, and whose estimated similarity
reaches the threshold. ``near_duplicate_pairs`` and ``clusters`` add them to
the pairs within ``k`` bits when asked, so a one-word edit of a short text,
which can move its fingerprint past any ``k``, is still found (issue 36).

Pure numpy over one snapshot's arrays; the caller reads them. The caller
groups documents into nodes of one fingerprint and one sketch first, so that
a thousand exact copies cost one node, not half a million pairs. The band
places are searched one at a time (two sketches share a key only in one
place), so at most one key a node is held at once, not the twenty or so a
node has in all, and keys nobody shares are dropped before any pairing.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from simstore.fingerprinting.bands import band_slots, filled_bins, slot_keys
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard
from simstore.index.shared_keys import pairs_beyond_k

__all__ = ["NodePairs", "band_node_pairs", "by_group"]

IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]
#: Candidate pairs of sketches estimated at a time (a few hundred MB at most).
ESTIMATE_CHUNK = 1 << 20


class NodePairs(NamedTuple):
    """Pairs of nodes, ``left < right`` (indices), each once, with their
    fingerprints' ``distance`` and their sketches' estimated ``similarity``."""

    left: IntArray
    right: IntArray
    distance: IntArray
    similarity: npt.NDArray[np.float64]


def band_node_pairs(
    fingerprints: U64Array,
    rows: npt.NDArray[np.uint8],
    present: npt.NDArray[np.bool_],
    sketch: Sketch,
    k: int,
    threshold: float,
) -> NodePairs:
    """The pairs of nodes whose sketches share a band key, whose
    fingerprints are more than ``k`` bits apart and whose estimated
    similarity is at least ``threshold``. Node ``i`` has fingerprint
    ``fingerprints[i]`` and, where ``present[i]``, the packed sketch ``rows[i]``."""
    sketched = np.flatnonzero(present)
    if len(sketched) < len(rows):  # (else no copy)
        rows = rows[sketched]
    rows = np.ascontiguousarray(rows)
    filled = filled_bins(rows, sketch)
    found: list[tuple[IntArray, IntArray, IntArray]] = []
    for slot in band_slots(sketch):
        keys = slot_keys(rows, filled, sketch, slot)
        shared = _repeated(keys.keys)
        if not shared.any():
            continue
        at = keys.rows[shared]
        first, second, distance = pairs_beyond_k(keys.keys[shared], at, fingerprints[sketched[at]], k)
        if len(first):
            found.append((first, second, distance))
    empty = np.zeros(0, dtype=np.int64)
    if not found:
        return NodePairs(empty, empty, empty, np.zeros(0))
    first = np.concatenate([part[0] for part in found])
    second = np.concatenate([part[1] for part in found])
    distance = np.concatenate([part[2] for part in found])
    # A pair sharing bands in several places is found in each.
    pairs, once = np.unique(np.stack([first, second], axis=1), axis=0, return_index=True)
    first, second, distance = pairs[:, 0], pairs[:, 1], distance[once]
    similarity = _estimates(rows, first, second, sketch)
    kept = similarity >= threshold
    return NodePairs(sketched[first[kept]], sketched[second[kept]], distance[kept], similarity[kept])


def _repeated(keys: U64Array) -> npt.NDArray[np.bool_]:
    """Which keys occur more than once (most occur once: no pair)."""
    ordered = np.sort(keys)
    twice = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(twice):
        return np.zeros(len(keys), dtype=np.bool_)
    twice = np.unique(twice)
    where = np.minimum(np.searchsorted(twice, keys), len(twice) - 1)
    repeated: npt.NDArray[np.bool_] = twice[where] == keys
    return repeated


def by_group(group_of: IntArray, groups: int) -> tuple[IntArray, IntArray]:
    """``(order, starts)``: the indices of ``group_of`` sorted by group (in
    their order within one), and where each of the ``groups`` groups starts
    in it (``groups + 1`` offsets)."""
    order = np.argsort(group_of, kind="stable")
    return order, np.searchsorted(group_of[order], np.arange(groups + 1))


def _estimates(
    rows: npt.NDArray[np.uint8], left: IntArray, right: IntArray, sketch: Sketch
) -> npt.NDArray[np.float64]:
    out = np.empty(len(left), dtype=np.float64)
    for start in range(0, len(left), ESTIMATE_CHUNK):
        end = start + ESTIMATE_CHUNK
        out[start:end] = estimate_jaccard(rows[left[start:end]], rows[right[start:end]], sketch)
    return out
