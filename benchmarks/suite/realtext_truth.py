"""Exact ground truth for the real-text benchmark: Jaccard of word 3-shingles, all pairs.

A document's shingles are the runs of three consecutive tokens of
``tokenise(normalise(text))`` of ``simstore.fingerprinting.text`` (jieba for Han); a document
of fewer than three tokens is the one shingle of all its tokens, and one of none has
no shingle (its Jaccard with anything is 0).

:func:`similar_pairs` finds every pair with Jaccard >= t exactly, without looking at
all n(n-1)/2 pairs, by prefix filtering (Chaudhuri, Ganti & Kaushik, ICDE 2006; Bayardo,
Ma & Srikant, WWW 2007): with the shingles of every set ordered rarest first, two sets
with J >= t share a shingle among the first ``|x| - ceil(t |x|) + 1`` of each. The
candidates are the pairs that share a prefix shingle (one sparse product a block of
rows at a time) and pass the size filter ``t <= |x| / |y|``; each candidate's Jaccard
is then computed exactly. :func:`jaccard` gives the exact Jaccard of any given pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse

ShingleMatrix = scipy.sparse.csr_matrix


class Pairs(NamedTuple):
    """Pairs ``first < second`` of row numbers, with their exact Jaccard."""

    first: npt.NDArray[np.int64]
    second: npt.NDArray[np.int64]
    jaccard: npt.NDArray[np.float64]


def tokens_of(texts: Sequence[str]) -> list[list[str]]:
    """simstore's tokens of each text (normalised first)."""
    from simstore.fingerprinting.text import normalise, tokenise

    return [tokenise(normalise(text)) for text in texts]


def shingles(tokens: Sequence[str]) -> set[str]:
    """The word 3-shingles of one token list (all tokens as one if fewer than 3)."""
    return set(ordered_shingles(tokens))


def ordered_shingles(tokens: Sequence[str]) -> list[str]:
    """The distinct word 3-shingles of one token list in order of first occurrence (so
    that column numbers do not depend on Python's per-process string hashing)."""
    if len(tokens) < 3:
        return [" ".join(tokens)] if tokens else []
    return list(dict.fromkeys(map(" ".join, zip(tokens, tokens[1:], tokens[2:], strict=False))))


def shingle_matrix(token_lists: Sequence[Sequence[str]]) -> ShingleMatrix:
    """Binary CSR matrix, one row per document, columns ordered rarest shingle first.

    Column order is by document frequency, ascending (ties by first occurrence), so
    that the first columns of a row are its prefix for :func:`similar_pairs`.
    """
    ids: dict[str, int] = {}
    rows: list[npt.NDArray[np.int64]] = []
    for tokens in token_lists:
        columns_of = (ids.setdefault(s, len(ids)) for s in ordered_shingles(tokens))
        rows.append(np.fromiter(columns_of, dtype=np.int64))
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    columns = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    frequency = np.bincount(columns, minlength=len(ids))
    rank = np.empty(len(ids), dtype=np.int64)
    rank[np.argsort(frequency, kind="stable")] = np.arange(len(ids))
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    matrix = scipy.sparse.csr_matrix(
        (np.ones(len(columns), dtype=np.int32), rank[columns], indptr), shape=(len(rows), len(ids))
    )
    matrix.sort_indices()
    return matrix


def shingle_ids(texts: Sequence[str]) -> ShingleMatrix:
    """:func:`shingle_matrix` of raw texts."""
    return shingle_matrix(tokens_of(texts))


def jaccard(
    matrix: ShingleMatrix, first: npt.ArrayLike, second: npt.ArrayLike, budget: int = 8_000_000
) -> npt.NDArray[np.float64]:
    """Exact Jaccard of the rows ``first[i]`` and ``second[i]`` of ``matrix``.

    Pairs are taken in chunks of about ``budget`` shingles, so that long documents
    do not make the row copies large.
    """
    first = np.asarray(first, dtype=np.int64)
    second = np.asarray(second, dtype=np.int64)
    sizes = np.diff(matrix.indptr).astype(np.int64)
    out = np.zeros(len(first), dtype=np.float64)
    cost = np.cumsum(sizes[first] + sizes[second])
    start = 0
    while start < len(first):
        base = cost[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(cost, base + budget, side="right")))
        a, b = first[start:stop], second[start:stop]
        inter = np.asarray(matrix[a].multiply(matrix[b]).sum(axis=1)).ravel().astype(np.int64)
        union = sizes[a] + sizes[b] - inter
        out[start:stop] = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
        start = stop
    return out


def similar_pairs(matrix: ShingleMatrix, threshold: float, block: int = 1000) -> Pairs:
    """Every pair of rows with Jaccard >= ``threshold`` (0 < threshold <= 1), exactly."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], not {threshold!r}")
    n = matrix.shape[0]
    sizes = np.diff(matrix.indptr).astype(np.int64)
    # The prefix length |x| - ceil(t |x|) + 1; the epsilon keeps t |x| = 5.000000001 at 5.
    prefix = sizes - np.array([math.ceil(threshold * s - 1e-9) for s in sizes], dtype=np.int64) + 1
    prefix = np.minimum(np.maximum(prefix, 0), sizes)
    # Positions in matrix.indices of each row's first prefix[row] columns.
    row_start = np.repeat(matrix.indptr[:-1].astype(np.int64), prefix)
    offsets = np.arange(int(prefix.sum()), dtype=np.int64) - np.repeat(np.cumsum(prefix) - prefix, prefix)
    keep = row_start + offsets
    prefix_matrix = scipy.sparse.csr_matrix(
        (np.ones(len(keep), dtype=np.int32), matrix.indices[keep], np.concatenate([[0], np.cumsum(prefix)])),
        shape=matrix.shape,
    )
    transposed = prefix_matrix.T.tocsr()
    firsts, seconds, values = [], [], []
    for start in range(0, n, block):
        product = (prefix_matrix[start : start + block] @ transposed).tocoo()
        a = product.row.astype(np.int64) + start
        b = product.col.astype(np.int64)
        small, large = np.minimum(sizes[a], sizes[b]), np.maximum(sizes[a], sizes[b])
        candidate = (a < b) & (small >= threshold * large - 1e-9)
        a, b = a[candidate], b[candidate]
        exact = jaccard(matrix, a, b)
        found = exact >= threshold
        firsts.append(a[found])
        seconds.append(b[found])
        values.append(exact[found])
    if not firsts:
        empty = np.zeros(0, dtype=np.int64)
        return Pairs(empty, empty.copy(), np.zeros(0))
    first, second, value = np.concatenate(firsts), np.concatenate(seconds), np.concatenate(values)
    order = np.lexsort((second, first))
    return Pairs(first[order], second[order], value[order])


def brute_force_pairs(matrix: ShingleMatrix, threshold: float) -> Pairs:
    """The same as :func:`similar_pairs` by looking at every pair (small inputs only)."""
    n = matrix.shape[0]
    first, second = np.triu_indices(n, 1)
    exact = jaccard(matrix, first, second)
    found = exact >= threshold
    return Pairs(first[found].astype(np.int64), second[found].astype(np.int64), exact[found])
