"""Hugging Face ``datasets``: the public path of :mod:`simstore.io.hf`
(``simstore.hf.dedup_dataset``, ``simstore.hf.against_dataset``)."""

from simstore.io.hf import against_dataset, dedup_dataset

__all__ = ["against_dataset", "dedup_dataset"]
