"""What ``bench_query_engine.py`` (suite) and ``experiments/bench_multi_index.py``
share: the same peers (faiss ``IndexBinaryMultiHash`` and a numpy brute-force
scan), set up, built and timed the same way beside simstore's own systems.

Kept in one place so that the two scripts' figures stay comparable: the suite's
faiss configurations are the ones the experiment chose, and both time their
systems with the same alternating rounds.

- data: :func:`make_fingerprints` (seeded uniform uint64) and :func:`make_queries`
  (stored fingerprints with 0..k bits flipped, so every query has a match);
- memory: :func:`anon_mib` and :func:`trim` (freed heap given back, so that RSS
  growth measures what a build holds);
- systems: :class:`System` (one thing timed in the rounds), :func:`brute` and
  :func:`brute_force_system` (the numpy scan), and for faiss FAISS_CONFIGS /
  FAISS_SHORTLIST with :func:`faiss_configs`, :func:`faiss_label`,
  :func:`faiss_codes`, :func:`faiss_build`, :func:`faiss_trial_us`,
  :func:`keep_fastest` (of the :data:`Trial` entries) and :func:`faiss_system`;
- timing: :func:`warm_up` and :func:`run_rounds`.

faiss is imported only where an index is built, so a script without it can
still import this module (and leave faiss out, saying so). Nothing here imports
simstore: each script imports the simstore it measures.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import MIB, AnonPeakSampler, rss_breakdown_mib

# (nhash, b, nflip): exact for k when nhash * (nflip + 1) > k (3x21 covers 63 bits
# and is still exact, a distance on 63 bits being at most the distance on 64).
# experiments/bench_multi_index.py chose them; the suite's script times the same.
FAISS_CONFIGS: dict[int, list[tuple[int, int, int]]] = {
    3: [(4, 16, 0), (2, 32, 1), (3, 21, 1)],
    5: [(3, 21, 1), (6, 10, 0), (2, 32, 2), (4, 16, 1)],
    8: [(3, 21, 2), (5, 12, 1), (4, 16, 2), (9, 7, 0)],
}
# At N >= FAISS_SHORTLIST_N only these (the others were 8-30x slower at 1M).
FAISS_SHORTLIST: dict[int, list[tuple[int, int, int]]] = {
    3: [(4, 16, 0), (2, 32, 1)],
    5: [(3, 21, 1), (2, 32, 2)],
    8: [(3, 21, 2)],
}
FAISS_SHORTLIST_N = 5_000_000
# Single queries a block of the rounds: every system answers a block in turn.
BLOCK = 50

# A faiss configuration tried alone: (batch µs a query, index, label, bytes a document).
Trial = tuple[float, Any, str, float]


# --------------------------------------------------------------------- data


def make_fingerprints(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, n, dtype=np.uint64)


def make_queries(stored: np.ndarray, count: int, k: int, seed: int) -> np.ndarray:
    """``count`` stored fingerprints, each with 0..k distinct random bits flipped."""
    rng = np.random.default_rng(seed * 100 + k)
    queries = stored[rng.integers(0, len(stored), count)].copy()
    for position, flips in enumerate(rng.integers(0, k + 1, count)):
        mask = 0
        for bit in rng.choice(64, int(flips), replace=False):
            mask |= 1 << int(bit)
        queries[position] ^= np.uint64(mask)
    return queries


# --------------------------------------------------------------------- memory


def anon_mib() -> float:
    return rss_breakdown_mib().get("anon", float("nan"))


def trim() -> None:
    """Give freed heap back to the system, so RSS growth measures what is held."""
    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


# --------------------------------------------------------------------- systems


@dataclass
class System:
    """One thing timed in the rounds."""

    label: str
    kind: str  # each script's own: ours | format2 | format3, and faiss | brute here
    single: Callable[[int], Any]
    batch: Callable[[], Any] | None
    single_count: int
    bytes_per_doc: float = float("nan")
    disk_per_doc: float = float("nan")
    notes: str = ""
    close: Callable[[], None] = lambda: None
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    batch_us: list[float] = field(default_factory=list)


def brute(stored: np.ndarray, query: np.uint64, k: int) -> np.ndarray:
    return np.flatnonzero(np.bitwise_count(stored ^ query) <= k)


def brute_force_system(stored: np.ndarray, queries: np.ndarray, k: int, count: int, *, notes: str) -> System:
    """The numpy scan, single queries only (no batch: it would be one scan a query)."""
    return System(
        label="numpy brute force",
        kind="brute",
        single=lambda position: brute(stored, queries[position], k),
        batch=None,
        single_count=count,
        bytes_per_doc=8.0,
        notes=notes,
    )


def faiss_configs(k: int, size: int, every: bool) -> list[tuple[int, int, int]]:
    """The configurations tried at k: all of them, or at N >= FAISS_SHORTLIST_N the
    shortlist unless ``every`` (``--faiss-all``)."""
    return FAISS_SHORTLIST[k] if size >= FAISS_SHORTLIST_N and not every else FAISS_CONFIGS[k]


def faiss_label(config: tuple[int, int, int]) -> str:
    return f"faiss MultiHash {config[0]}x{config[1]} nflip={config[2]}"


def faiss_codes(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint8).reshape(-1, 8)


def faiss_build(
    stored: np.ndarray, config: tuple[int, int, int], *, sample_peak: bool = True
) -> tuple[Any, float, float, float, float]:
    """The index, add seconds, anonymous RSS growth / N (bytes), the anonymous RSS
    before and its peak during the add (MiB). Without ``sample_peak`` no sampler
    thread runs beside the add (the peak is then nan)."""
    import faiss

    nhash, bits, nflip = config
    trim()
    before = anon_mib()
    sampler = AnonPeakSampler() if sample_peak else None
    with sampler if sampler is not None else contextlib.nullcontext():
        started = time.perf_counter()
        index = faiss.IndexBinaryMultiHash(64, nhash, bits)
        index.nflip = nflip
        index.add(faiss_codes(stored))
        seconds = time.perf_counter() - started
    peak = sampler.peak_mib if sampler is not None else float("nan")
    return index, seconds, (anon_mib() - before) * MIB / len(stored), before, peak


def faiss_trial_us(index: Any, codes: np.ndarray, k: int) -> float:
    """µs a query of one ``range_search`` over ``codes``, after a warm-up call on
    the first 10 (radius k + 1: faiss keeps distances strictly below it)."""
    index.range_search(codes[:10], k + 1)
    started = time.perf_counter_ns()
    index.range_search(codes, k + 1)
    return (time.perf_counter_ns() - started) / 1000 / len(codes)


def keep_fastest(kept: list[Trial]) -> list[Trial]:
    """The fastest two of the configurations tried alone, the second only within 3x
    of the fastest: those go into the rounds (more would only slow the rounds)."""
    ranked = sorted(kept, key=lambda entry: entry[0])
    return [entry for entry in ranked[:2] if entry[0] <= 3 * ranked[0][0]]


def faiss_system(
    index: Any, label: str, queries: np.ndarray, k: int, singles: int, *, bytes_per_doc: float, notes: str
) -> System:
    codes = faiss_codes(queries)
    rows = [codes[position : position + 1] for position in range(singles)]
    radius = k + 1  # faiss keeps distances strictly below the radius
    search_range = index.range_search
    return System(
        label=label,
        kind="faiss",
        single=lambda position: search_range(rows[position], radius),
        batch=lambda: search_range(codes, radius),
        single_count=singles,
        bytes_per_doc=bytes_per_doc,
        notes=notes,
    )


# --------------------------------------------------------------------- timing


def warm_up(systems: list[System]) -> None:
    """A few single queries each before the rounds: first calls pay for imports and caches."""
    for system in systems:
        for position in range(min(5, system.single_count)):
            system.single(position)


def run_rounds(
    systems: list[System], rounds: int, batch_queries: int, *, collect_before_batch: bool = True
) -> None:
    """Every round: the single queries in blocks of BLOCK, every system answering each
    block in turn (order rotated by block and round), systems with fewer single queries
    (brute force) after the blocks; then every batch (order rotated by round), each
    after a ``gc.collect()`` unless not ``collect_before_batch``."""
    count = max(system.single_count for system in systems)
    full = [system for system in systems if system.single_count == count]
    few = [system for system in systems if system.single_count != count]
    clock = time.perf_counter_ns
    for round_number in range(rounds):
        gc.collect()
        samples: dict[int, list[float]] = {id(system): [] for system in systems}
        for number, start in enumerate(range(0, count, BLOCK)):
            shift = (number + round_number) % len(full)
            for system in full[shift:] + full[:shift]:
                single, out = system.single, samples[id(system)]
                for position in range(start, min(start + BLOCK, count)):
                    started = clock()
                    single(position)
                    out.append((clock() - started) / 1000)
        for system in few:
            out = samples[id(system)]
            for position in range(system.single_count):
                started = clock()
                system.single(position)
                out.append((clock() - started) / 1000)
        for system in systems:
            p50, p99 = np.percentile(samples[id(system)], [50, 99])
            system.p50.append(float(p50))
            system.p99.append(float(p99))
        batched = [system for system in systems if system.batch is not None]
        shift = round_number % len(batched)
        for system in batched[shift:] + batched[:shift]:
            if collect_before_batch:
                gc.collect()
            started = clock()
            system.batch()  # type: ignore[misc]
            system.batch_us.append((clock() - started) / 1000 / batch_queries)
