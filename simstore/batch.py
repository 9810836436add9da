"""Batch operations over a whole store: all near-duplicate pairs and clusters.

Kept apart from :mod:`simstore.store` as a mixin so that the per-document
facade and the whole-corpus operations stay in modules of their own.
"""

from __future__ import annotations


class BatchMixin:
    """Whole-store batch operations, mixed into :class:`simstore.Store`."""
