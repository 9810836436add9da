"""Ray Data and pyarrow for :mod:`simstore.ray`, or :class:`RayMissingError`
saying how to install them: every module of the package takes them from here,
so that a missing extra is reported the same way whichever is imported first."""

from __future__ import annotations

from simstore.errors import SimstoreError


class RayMissingError(SimstoreError, ImportError):
    """``simstore.ray`` was imported without Ray installed."""


try:
    import pyarrow as pa
    import pyarrow.compute  # noqa: F401  (makes pa.compute available)
    import ray
    import ray.data
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise RayMissingError("simstore.ray needs Ray Data: pip install 'simstore[ray]'") from exc

__all__ = ["RayMissingError", "pa", "ray"]
