"""Columns of dataframe libraries as plain values.

Keys, texts and fingerprints may come as pyarrow arrays (or chunked
arrays), pandas or polars Series, or numpy arrays, not only as Python
sequences. Numeric columns become numpy arrays without a Python object per
row; strings become a list (tokenising needs Python strings anyway). None
of those libraries is imported here: a column is recognised by what it
offers (``to_numpy``, ``to_pylist``, ``tolist``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["as_column"]


def as_column(values: Any) -> Any:
    """``values`` as a numpy array (numeric columns) or a list (others), if
    it is a dataframe library's column; anything else is returned as it is."""
    if isinstance(values, np.ndarray | list | tuple | range | str | bytes):
        return values
    module = type(values).__module__.split(".")[0]
    if module == "pyarrow":
        import pyarrow as pa

        kind = values.type
        if pa.types.is_integer(kind) and values.null_count == 0:
            return values.to_numpy(zero_copy_only=False)
        return values.to_pylist()
    if module in ("pandas", "polars"):
        if _integer(getattr(values, "dtype", None)) and not bool(
            values.isna().any() if module == "pandas" else values.is_null().any()
        ):
            return values.to_numpy()
        return values.to_list() if hasattr(values, "to_list") else values.tolist()
    return values


def _integer(dtype: object) -> bool:
    """Whether a pandas or polars dtype is an integer one."""
    try:
        return np.dtype(str(dtype).lower()).kind in "iu"
    except TypeError:
        return False
