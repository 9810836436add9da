"""What an open store's stored settings make: the text fingerprinter (and
its verification sketch). Made at first use, and kept on the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simstore.errors import warn_caller
from simstore.fingerprinting.algorithms import UNRECORDED_SETTINGS
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.fingerprinting.segmenter import segmenter_info
from simstore.fingerprinting.sketch import Sketch
from simstore.results import SegmenterChangedWarning

if TYPE_CHECKING:
    from simstore.engine.core import Engine


def fingerprinter(engine: Engine) -> Fingerprinter:
    """The text fingerprinter of the stored settings (made at first use,
    with a warning if the Chinese segmenter changed since the store was made)."""
    if engine.fingerprinter is None:
        stored = engine.params.fingerprinter
        made = Fingerprinter.from_settings(UNRECORDED_SETTINGS if stored is None else stored)
        _warn_if_segmenter_changed(engine)
        engine.fingerprinter = made
    return engine.fingerprinter


def _warn_if_segmenter_changed(engine: Engine) -> None:
    stored = engine.params.segmenter
    if stored is None:
        return
    current = segmenter_info()
    changed = sorted(name for name in set(stored) | set(current) if stored.get(name) != current.get(name))
    if changed:
        listed = ", ".join(
            f"{name}: stored {stored.get(name)!r}, now {current.get(name)!r}" for name in changed
        )
        warn_caller(
            f"{engine.path}: text fingerprints were made with a different segmenter ({listed}); "
            "Chinese text may fingerprint differently from documents already stored",
            SegmenterChangedWarning,
        )


def store_sketch(engine: Engine) -> Sketch | None:
    """The verification sketch the store keeps beside each document added
    as text (``None``: it keeps none)."""
    if engine.handles.sketches is None:
        return None
    return fingerprinter(engine).sketch
