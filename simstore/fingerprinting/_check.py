"""Argument checks shared by the fingerprinter and vector fingerprints."""

from __future__ import annotations

from simstore.errors import InvalidTypeError, InvalidValueError

__all__ = ["check_int"]


def check_int(name: str, value: object, low: int, high: int | None) -> None:
    """Raise unless ``value`` is an int (not bool) within ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be int, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidValueError(f"{name} must be {bound}; got {value}")
