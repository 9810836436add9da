"""Clusters of a pair graph: connected components (union-find, vectorised
with numpy) and stars (leader clustering).

The near-duplicate relation is not transitive: if A is near B and B near C,
A and C may be far apart. Connected components put such a chain in one
cluster, however far its ends are (on templated pages, hundreds of pages
whose kept one shares a third of its text with some members). A star keeps
every member next to its leader: nodes are taken in a given order, and each
joins the first leader it is paired with, or else leads a star of its own.
Each component is labelled by its smallest node, each star by its leader,
which makes labels independent of the order the pairs came in.

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def components(node_count: int, left: IntArray, right: IntArray) -> IntArray:
    """Label each of ``node_count`` nodes with the smallest node of its component.

    Args:
        node_count: nodes are ``0 .. node_count - 1``.
        left, right: the edges, as two equally long integer arrays.

    Returns:
        ``labels`` with ``labels[i]`` the smallest node connected to ``i``
        (``i`` itself for a node without edges).

    Union-find done as hooking and pointer jumping over all edges at once:
    each round hooks the larger root of every edge under the smaller one and
    then compresses every path; a round at least halves the number of roots
    an edge can still join, so few rounds are needed even for long chains.

    >>> components(5, np.array([0, 3]), np.array([2, 2])).tolist()
    [0, 1, 0, 0, 4]
    """
    parent = np.arange(node_count, dtype=np.int64)
    left = np.asarray(left, dtype=np.int64)
    right = np.asarray(right, dtype=np.int64)
    if left.shape != right.shape:
        raise ValueError(f"left and right differ in length: {left.shape} and {right.shape}")
    while left.size:
        root_left = parent[left]
        root_right = parent[right]
        unjoined = root_left != root_right
        if not unjoined.any():
            break
        left = left[unjoined]
        right = right[unjoined]
        low = np.minimum(root_left[unjoined], root_right[unjoined])
        high = np.maximum(root_left[unjoined], root_right[unjoined])
        # Several edges may hook the same root; minimum.at keeps the smallest,
        # and every hook points downwards, so no cycle can form.
        np.minimum.at(parent, high, low)
        _compress(parent)
    _compress(parent)
    return parent


def _compress(parent: IntArray) -> None:
    """Point every node straight at its root, in place."""
    while True:
        grand = parent[parent]
        if np.array_equal(grand, parent):
            return
        parent[:] = grand


def stars(node_count: int, left: IntArray, right: IntArray, rank: IntArray | None = None) -> IntArray:
    """Label each of ``node_count`` nodes with the leader of its star.

    Nodes are taken by ascending ``rank`` (``rank[i]`` is node ``i``'s place;
    node order when ``None``). A node paired (an edge of ``left``/``right``)
    with leaders taken before it joins the first of them; otherwise it leads.
    So every member is paired with its leader, and no leader with another.

    >>> stars(5, np.array([0, 1, 3]), np.array([1, 2, 4])).tolist()
    [0, 0, 2, 3, 3]
    >>> stars(3, np.array([0, 1]), np.array([1, 2]), rank=np.array([2, 0, 1])).tolist()
    [1, 1, 1]
    """
    labels = np.arange(node_count, dtype=np.int64)
    if not len(left):
        return labels
    rank = labels if rank is None else np.asarray(rank, dtype=np.int64)
    left = np.asarray(left, dtype=np.int64)
    right = np.asarray(right, dtype=np.int64)
    swap = rank[left] > rank[right]
    earlier = np.where(swap, right, left)
    later = np.where(swap, left, right)
    # Each later node's edges together, later nodes in rank order, and each
    # one's earlier nodes in rank order: the first leader among them wins.
    order = np.lexsort((rank[earlier], rank[later]))
    earlier, later = earlier[order], later[order]
    starts = np.flatnonzero(np.concatenate(([True], later[1:] != later[:-1])))
    leads = np.ones(node_count, dtype=np.bool_)
    ends = [*starts[1:].tolist(), len(later)]
    for start, end in zip(starts.tolist(), ends, strict=True):
        candidates = earlier[start:end]
        leading = leads[candidates]
        if leading.any():
            node = int(later[start])
            leads[node] = False
            labels[node] = candidates[int(np.argmax(leading))]
    return labels


def groups(labels: IntArray) -> list[IntArray]:
    """The components with more than one node, as arrays of nodes in
    ascending order, sorted by their smallest node. ``labels`` is what
    :func:`components` returns.

    >>> [g.tolist() for g in groups(np.array([0, 1, 0, 0, 4, 1]))]
    [[0, 2, 3], [1, 5]]
    """
    labels = np.asarray(labels, dtype=np.int64)
    # Only nodes joined to another matter: those not their own label, and
    # the labels themselves. Sorting just these keeps a corpus with few
    # duplicates from paying for a sort of every document.
    joined = np.flatnonzero(labels != np.arange(len(labels)))
    if not joined.size:
        return []
    nodes = np.union1d(joined, labels[joined])
    node_labels = labels[nodes]
    order = np.argsort(node_labels, kind="stable")
    sorted_nodes = nodes[order]
    sorted_labels = node_labels[order]
    boundaries = np.flatnonzero(sorted_labels[1:] != sorted_labels[:-1]) + 1
    found = np.split(sorted_nodes, boundaries)
    found.sort(key=lambda members: int(members[0]))
    return found


def pick_longest(lengths: Sequence[int | None]) -> int:
    """The ``keep="longest"`` policy: the index of the largest length, the
    first added among equals; a missing length counts as 0.

    >>> pick_longest([3, None, 7, 7])
    2
    """
    best = 0
    best_length = -1
    for index, length in enumerate(lengths):
        value = length if isinstance(length, int) and not isinstance(length, bool) else 0
        if value > best_length:
            best, best_length = index, value
    return best
