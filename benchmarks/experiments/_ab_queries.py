"""Shared by the in-process query A/B scripts (``ab_permute.py``): one query mix, and one loop that
runs every query under each variant of a store's scan plan (or of another
attribute), the order alternating.

On the shared 2-core VM the machine's speed swings by up to 1.6x for seconds
to minutes at a time, so runs of one code tree after another (even
alternated) did not separate a 20% change from that noise. Running every
query under every variant in a row, in one process, gives the variants the
same machine and the same warm caches.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import numpy as np

import simstore


def near_and_random_queries(store: simstore.Store, seed: int = 11) -> list[tuple[int, str]]:
    """4,000 stored fingerprints (of any document: their records are cold too)
    with 1, 2 or 3 random bits flipped (cycling) and 1,000 random ones,
    shuffled, each tagged ``"near"`` or ``"random"``."""
    rng = np.random.default_rng(seed)
    stored = store.fingerprints()
    near = stored[rng.integers(0, len(stored), 4000)].copy()
    for index in range(len(near)):
        for bit in rng.choice(64, size=1 + index % 3, replace=False):
            near[index] ^= np.uint64(1) << np.uint64(bit)
    queries = [(query, "near") for query in near.tolist()]
    queries += [(query, "random") for query in rng.integers(0, 2**64, 1000, dtype=np.uint64).tolist()]
    rng.shuffle(queries)  # type: ignore[arg-type]
    return queries


def warm_up(store: simstore.Store, queries: list[tuple[int, str]]) -> None:
    """One pass of every query, which also reads every table's bitmaps."""
    for query, _ in queries:
        store.query(fingerprint=query)


def alternate(
    store: simstore.Store,
    variants: Mapping[str, object],
    queries: list[tuple[int, str]],
    rounds: int = 3,
    *,
    attribute: str,
    owner: object | None = None,
) -> None:
    """Time ``store.query`` of every query under every variant (a value of
    ``attribute`` of ``owner``, the store unless given, e.g. ``store._engine``), the order
    alternating from query to query and round to round, with the same answers
    required; print p50 and p99 per variant and query kind."""
    target = store if owner is None else owner
    original = getattr(target, attribute)
    latencies: dict[tuple[str, str], list[int]] = {
        (name, kind): [] for name in variants for kind in ("near", "random")
    }
    try:
        for round_number in range(rounds):
            for index, (query, kind) in enumerate(queries):
                order = list(variants.items())
                if (index + round_number) % 2:
                    order.reverse()
                answers = []
                for name, value in order:
                    setattr(target, attribute, value)
                    started = time.perf_counter_ns()
                    answers.append(store.query(fingerprint=query))
                    latencies[name, kind].append(time.perf_counter_ns() - started)
                if any(answer != answers[0] for answer in answers):
                    raise AssertionError(f"the variants answer {query:#x} differently")
    finally:
        setattr(target, attribute, original)
    print(f"{store.path}: {len(store):,} documents, load {os.getloadavg()[0]:.2f}")
    for (name, kind), values in latencies.items():
        micros = np.array(values) / 1000
        p50, p99 = np.percentile(micros, [50, 99])
        print(f"  {name:28} {kind:6} p50 {p50:6.1f} us  p99 {p99:6.1f} us")
