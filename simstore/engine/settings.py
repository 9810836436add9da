"""What an open store's stored settings make: the text fingerprinter (and
its verification sketch). Made at first use, and kept on the engine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from simstore.errors import warn_caller
from simstore.fingerprinting.algorithms import UNRECORDED_SETTINGS
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.fingerprinting.segmenter import segmenter_info
from simstore.fingerprinting.sketch import Sketch
from simstore.results import SegmenterChangedWarning

if TYPE_CHECKING:
    from simstore.engine.core import Engine


def fingerprinter(engine: Engine) -> Fingerprinter:
    """The text fingerprinter of the stored settings, to fingerprint text
    with: the first call warns if the Chinese segmenter changed since the
    store was made."""
    made = _stored_fingerprinter(engine)
    if not engine.segmenter_checked:
        _warn_if_segmenter_changed(engine)
        engine.segmenter_checked = True
    return made


def _stored_fingerprinter(engine: Engine) -> Fingerprinter:
    """The fingerprinter of the stored settings, made at first use."""
    if engine.fingerprinter is None:
        stored = engine.params.fingerprinter
        engine.fingerprinter = Fingerprinter.from_settings(UNRECORDED_SETTINGS if stored is None else stored)
    return engine.fingerprinter


def _warn_if_segmenter_changed(engine: Engine) -> None:
    stored = engine.params.segmenter
    if stored is None:
        return
    current = segmenter_info()
    changed = sorted(name for name in set(stored) | set(current) if stored.get(name) != current.get(name))
    if changed:
        listed = ", ".join(
            f"{name}: stored {_shown(stored, name)!r}, now {_shown(current, name)!r}" for name in changed
        )
        # A store whose Chinese rjieba cut says how to cut as it did.
        hint = (
            "; SIMSTORE_SEGMENTER=rjieba cuts as it was made"
            if str(stored.get("segmenter", "")).startswith("rjieba") and "segmenter" not in current
            else ""
        )
        warn_caller(
            f"{engine.path}: text fingerprints were made with a different segmenter ({listed}); "
            f"Chinese text may fingerprint differently from documents already stored{hint}",
            SegmenterChangedWarning,
        )


def _shown(info: Mapping[str, Any], name: str) -> Any:
    """A segmenter record's value as a warning names it: no ``segmenter``
    entry means jieba cut (see :func:`segmenter_info`)."""
    value = info.get(name)
    return "jieba" if value is None and name == "segmenter" else value


def store_sketch(engine: Engine) -> Sketch | None:
    """The verification sketch the store keeps beside each document added
    as text (``None``: it keeps none)."""
    if engine.handles.sketches is None:
        return None
    # Its geometry only: no text is cut, so no word on the segmenter.
    return _stored_fingerprinter(engine).sketch
