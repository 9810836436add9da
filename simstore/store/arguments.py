"""What callers give a store, checked and turned into what it stores:
fingerprints and sketches made from text with the stored fingerprinter,
given sketches, ``k``, similarity thresholds, and ``add_many`` batches.

Functions of an open engine (:mod:`simstore.engine.core`): everything here raises
before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from simstore.columns import as_column
from simstore.engine.packed import PackedKeys
from simstore.engine.settings import fingerprinter, store_sketch
from simstore.errors import InvalidTypeError, InvalidValueError
from simstore.fingerprinting.sketch import U8Array, check_similarity
from simstore.index.permute import U64Array, as_fingerprint_array, check_fingerprint, validate_k
from simstore.keys import pack_meta

T = TypeVar("T")

if TYPE_CHECKING:
    from simstore.engine.core import Engine


def fingerprint_and_sketch(engine: Engine, text: object, fingerprint: object) -> tuple[int, bytes | None]:
    """The fingerprint of one document, and its sketch if it came as
    text and the store keeps sketches."""
    if (text is None) == (fingerprint is None):
        raise InvalidTypeError("pass exactly one of text= or fingerprint=")
    if text is None:
        return check_fingerprint(fingerprint), None
    if store_sketch(engine) is None:
        return fingerprinter(engine).fingerprint(text), None  # type: ignore[arg-type]
    return fingerprinter(engine).fingerprint_and_sketch(text)  # type: ignore[arg-type]


def fingerprints_and_sketches(
    engine: Engine, texts: object, fingerprints: object, processes: int | None = 1, sketches: object = None
) -> tuple[U64Array, U8Array | None]:
    """Fingerprints from ``texts`` or ``fingerprints``, and their sketches:
    made from the texts, or given as ``sketches`` beside fingerprints."""
    if (texts is None) == (fingerprints is None):
        raise InvalidTypeError("pass exactly one of texts= or fingerprints=")
    if texts is None:
        values = as_fingerprint_array(fingerprints)
        return values, (None if sketches is None else checked_sketches(engine, sketches, len(values)))
    if sketches is not None:
        raise InvalidTypeError("sketches= goes with fingerprints=; from texts= they are made here")
    if isinstance(texts, str | bytes):
        raise InvalidTypeError("texts must be an iterable of texts, not a single str or bytes")
    if store_sketch(engine) is None:
        return fingerprinter(engine).fingerprint_many(texts, processes), None  # type: ignore[arg-type]
    return fingerprinter(engine).fingerprints_and_sketches(texts, processes)  # type: ignore[arg-type]


def checked_sketches(engine: Engine, sketches: object, count: int) -> U8Array:
    """Given sketches, checked against the store's: one row of bytes a document."""
    geometry = store_sketch(engine)
    if geometry is None:
        raise InvalidValueError(f"the store {engine.path!r} keeps no sketches; pass none")
    if not isinstance(sketches, np.ndarray) or sketches.dtype != np.uint8 or sketches.ndim != 2:
        raise InvalidTypeError(
            "sketches must be a 2-D uint8 array (Fingerprinter.fingerprints_and_sketches makes one)"
        )
    made_with = getattr(sketches, "sketch", None)
    if made_with is not None and made_with != geometry:
        raise InvalidValueError(
            f"these sketches were made with {made_with.bins} bins of {made_with.bits} bits; the "
            f"store {engine.path!r} keeps {geometry.bins} of {geometry.bits}: make them with the "
            "store's fingerprinter (store.fingerprinter)"
        )
    if sketches.shape != (count, geometry.nbytes):
        raise InvalidValueError(
            f"sketches must be {count} rows of {geometry.nbytes} bytes (the store's "
            f"{geometry.bins} bins of {geometry.bits} bits); got {sketches.shape[0]} of {sketches.shape[1]}"
        )
    return sketches


def checked_k(engine: Engine, k: object) -> int:
    """A call's ``k``: the store's if ``None``, and never above it."""
    if k is None:
        return engine.params.k
    k = validate_k(k)
    if k > engine.params.k:
        raise InvalidValueError(
            f"k={k} is larger than the store's k={engine.params.k}; "
            "the tables only guarantee finding documents within the store's k"
        )
    return k


def query_threshold(engine: Engine, min_similarity: object, query_sketch: object) -> float | None:
    """The similarity threshold of a query, checked: ``None`` if none
    applies. The store's own applies where the query has a sketch."""
    if min_similarity is None:
        return engine.params.min_similarity if query_sketch is not None else None
    threshold = _checked_threshold(engine, min_similarity)
    if query_sketch is None:
        raise InvalidValueError(
            "min_similarity needs the query's text (a bare fingerprint has no sketch to compare)"
        )
    return threshold


def checked_bands(engine: Engine, bands: object, query_sketches: object, threshold: float | None) -> bool:
    """``bands`` of a batch query, checked: it needs the queries' sketches
    and a similarity threshold to judge what the bands find. ``None``: on
    where the store keeps a band table and the queries have both."""
    if bands is None:
        return engine.delta_bands is not None and query_sketches is not None and threshold is not None
    if not check_flag("bands", bands):
        return False
    if store_sketch(engine) is None:
        raise InvalidValueError(
            f"bands=True compares verification sketches, and the store {engine.path!r} keeps none "
            "(it was made before sketches existed, or with Fingerprinter(sketch=None))"
        )
    if query_sketches is None:
        raise InvalidValueError(
            "bands=True matches by text: give texts= (or sketches=), not bare fingerprints"
        )
    if threshold is None:
        raise InvalidValueError(
            f"bands=True needs a similarity threshold, and the store {engine.path!r} has none: "
            "give min_similarity="
        )
    return True


def batch_threshold(engine: Engine, min_similarity: object) -> float | None:
    """The threshold of a pairs or clusters call: its own or the store's."""
    if min_similarity is None:
        return engine.params.min_similarity
    return _checked_threshold(engine, min_similarity)


def _checked_threshold(engine: Engine, min_similarity: object) -> float:
    threshold = check_similarity(min_similarity)
    if store_sketch(engine) is None:
        raise InvalidValueError(
            f"min_similarity needs verification sketches, and the store {engine.path!r} keeps none "
            "(it was made before sketches existed, or with Fingerprinter(sketch=None))"
        )
    return threshold


def checked_batch(
    engine: Engine,
    keys: object,
    fingerprints: object,
    texts: object,
    metas: object,
    processes: int | None = 1,
    sketches: object = None,
) -> tuple[PackedKeys, U64Array, list[bytes | None] | None, U8Array | None]:
    """``add_many``'s arguments, checked and packed: ``(keys,
    fingerprints, packed metas or None, sketches or None)``."""
    keys, texts, fingerprints = as_column(keys), as_column(texts), as_column(fingerprints)
    if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
        raise InvalidTypeError("keys must be an iterable of keys, not a single key")
    if isinstance(keys, np.ndarray) and keys.ndim != 1:
        raise InvalidTypeError(f"keys must be a one-dimensional array, got {keys.ndim} dimensions")
    packed_keys = PackedKeys.of(keys)
    fps, given_sketches = fingerprints_and_sketches(engine, texts, fingerprints, processes, sketches)
    if len(packed_keys) != len(fps):
        raise InvalidValueError(f"got {len(packed_keys)} keys but {len(fps)} fingerprints")
    meta_list: list[bytes | None] | None = None
    if metas is not None:
        if isinstance(metas, Mapping) or not isinstance(metas, Iterable):
            raise InvalidTypeError("metas must be an iterable of dicts (or None), one per key")
        meta_list = [pack_meta(meta) for meta in metas]
        if len(meta_list) != len(packed_keys):
            raise InvalidValueError(f"got {len(packed_keys)} keys but {len(meta_list)} metas")
    return packed_keys, fps, meta_list, given_sketches


def check_flag(name: str, value: object) -> bool:
    """A ``True``/``False`` argument, refused as anything else (``"yes"``
    would otherwise count as true)."""
    if not isinstance(value, bool | np.bool_):
        raise InvalidTypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_progress(progress: T | None) -> T | None:
    """A progress callback: callable, or ``None``."""
    if progress is not None and not callable(progress):
        raise InvalidTypeError(f"progress must be callable (tables_done, tables_total), got {progress!r}")
    return progress
