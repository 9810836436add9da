"""Pairs found by text rather than by fingerprint: documents whose
verification sketches share a band key (:mod:`simstore.fingerprinting.bands`),
whose fingerprints lie more than ``k`` bits apart, and whose estimated
similarity reaches the threshold. ``near_duplicate_pairs`` and ``clusters``
add them to the pairs within ``k`` bits when a similarity threshold applies,
so a one-word edit of a short text, which can move its fingerprint past any
``k``, is still found (issue 36).

Pure numpy over one snapshot's arrays; the caller reads them. Documents are
grouped first into nodes of one sketch and one fingerprint, so that a
thousand exact copies cost one node, not half a million pairs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import Sketch, estimate_jaccard
from simstore.index.shared_keys import cross_members, pairs_sharing_keys

__all__ = ["SketchLinks", "cross_members", "sketch_links"]

IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]
#: Candidate pairs of sketches estimated at a time (a few hundred MB at most).
ESTIMATE_CHUNK = 1 << 20


class SketchLinks(NamedTuple):
    """Pairs of nodes (documents of one sketch and one fingerprint) linked
    by their sketches: ``left < right`` index nodes, ``distance`` is their
    fingerprints' and ``similarity`` their sketches' estimate. Node ``i``'s
    documents are ``members[starts[i]:starts[i + 1]]`` (positions in the
    snapshot, ascending)."""

    left: IntArray
    right: IntArray
    distance: IntArray
    similarity: npt.NDArray[np.float64]
    members: IntArray
    starts: IntArray

    def first_documents(self) -> IntArray:
        """Each node's first document."""
        return self.members[self.starts[:-1]]


def sketch_links(
    fingerprints: U64Array,
    rows: npt.NDArray[np.uint8],
    present: npt.NDArray[np.bool_],
    sketch: Sketch,
    k: int,
    threshold: float,
) -> SketchLinks:
    """The node pairs whose sketches share a band key (identical sketches
    included, if they have one), whose fingerprints are more than ``k`` bits
    apart, and whose estimated similarity is at least ``threshold``.
    ``rows[i]`` is document ``i``'s packed sketch where ``present[i]``."""
    positions = np.flatnonzero(present)
    members, starts = _nodes(fingerprints, rows, positions, sketch)
    firsts = members[starts[:-1]]
    # Nodes of one sketch form a group; band keys are made once per group.
    group_rows, group_of = np.unique(
        np.ascontiguousarray(rows[firsts]).view(f"V{sketch.nbytes}").ravel(), return_inverse=True
    )
    group_sketches = group_rows.view(np.uint8).reshape(len(group_rows), sketch.nbytes)
    keys = band_keys(group_sketches, sketch)
    group_left, group_right = pairs_sharing_keys(keys.rows, keys.keys)
    similarity = _estimates(group_sketches, group_left, group_right, sketch)
    kept = similarity >= threshold
    group_left, group_right, similarity = group_left[kept], group_right[kept], similarity[kept]
    # Nodes of one group share their sketch (similarity 1) and every key of it.
    keyed = np.zeros(len(group_rows), dtype=np.bool_)
    keyed[keys.rows] = True
    inner_left, inner_right = pairs_sharing_keys(
        np.flatnonzero(keyed[group_of]), group_of[keyed[group_of]].astype(np.uint64)
    )
    left, right, pair_similarity = _expand(group_of, len(group_rows), group_left, group_right, similarity)
    left = np.concatenate([left, inner_left])
    right = np.concatenate([right, inner_right])
    pair_similarity = np.concatenate([pair_similarity, np.ones(len(inner_left))])
    distance = np.bitwise_count(fingerprints[firsts[left]] ^ fingerprints[firsts[right]]).astype(np.int64)
    beyond = distance > k  # those within k are the fingerprint search's
    return SketchLinks(
        left[beyond], right[beyond], distance[beyond], pair_similarity[beyond], members, starts
    )


def _nodes(
    fingerprints: U64Array, rows: npt.NDArray[np.uint8], positions: IntArray, sketch: Sketch
) -> tuple[IntArray, IntArray]:
    """``(members, starts)``: the positions grouped into nodes of one
    (sketch, fingerprint), each node's members ascending, nodes in order of
    their first member."""
    keyed = np.empty(len(positions), dtype=[("sketch", f"V{sketch.nbytes}"), ("fingerprint", "<u8")])
    keyed["sketch"] = np.ascontiguousarray(rows[positions]).view(f"V{sketch.nbytes}").ravel()
    keyed["fingerprint"] = fingerprints[positions]
    _, first_index, node_of = np.unique(keyed, return_index=True, return_inverse=True)
    # Number nodes by their first member, so that results follow the order added.
    renumber = np.empty(len(first_index), dtype=np.int64)
    renumber[np.argsort(first_index, kind="stable")] = np.arange(len(first_index))
    order, starts = _by_group(renumber[node_of.ravel()], len(first_index))
    return positions[order], starts


def _by_group(group_of: IntArray, groups: int) -> tuple[IntArray, IntArray]:
    """``(order, starts)``: the indices of ``group_of`` sorted by group (in
    their order within one), and where each of the ``groups`` groups starts
    in it (``groups + 1`` offsets)."""
    order = np.argsort(group_of, kind="stable")
    return order, np.searchsorted(group_of[order], np.arange(groups + 1))


def _estimates(
    group_sketches: npt.NDArray[np.uint8], left: IntArray, right: IntArray, sketch: Sketch
) -> npt.NDArray[np.float64]:
    out = np.empty(len(left), dtype=np.float64)
    for start in range(0, len(left), ESTIMATE_CHUNK):
        end = start + ESTIMATE_CHUNK
        out[start:end] = estimate_jaccard(
            group_sketches[left[start:end]], group_sketches[right[start:end]], sketch
        )
    return out


def _expand(
    group_of: IntArray,
    groups: int,
    group_left: IntArray,
    group_right: IntArray,
    similarity: npt.NDArray[np.float64],
) -> tuple[IntArray, IntArray, npt.NDArray[np.float64]]:
    """Group pairs as node pairs (every node of one group with every node of
    the other; nearly always one each), ``left < right``."""
    order, group_starts = _by_group(group_of, groups)
    a, b, which = cross_members(order, group_starts, group_left, group_right)
    return np.minimum(a, b), np.maximum(a, b), similarity[which]
