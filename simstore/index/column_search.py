"""Exact Hamming search over a run's sorted columns, every probe at once.

A *run* of a multi-index scheme (:mod:`simstore.index.multi_index`) is an
immutable set of documents held as one sorted column per table: table 0's
column is the fingerprints themselves in ascending order (its segment leads
already), with each one's document id beside it; table ``i``'s is the
fingerprints rotated left by segment ``i``'s start, sorted. A rotated key
holds the whole fingerprint, so a candidate is verified from the column it
was found in, and only the matches go back to table 0 for their ids.

Each column has a *directory* of its keys' top bits (at most the table's
segment): a probe's keys lie in one directory slot, found by two array
lookups. A :class:`Snapshot` places every run's columns and directories in
one flat buffer (a store's memory-mapped file, or an array built here), so a
batch of queries costs a fixed number of numpy calls, whatever the number of
tables, runs, probes or queries: every probe's slot read at once, every
candidate gathered, un-rotated and popcounted in one pass. A document found
in several tables is reported once (the matches are sorted by query, run and
fingerprint, and every document holding a matched fingerprint is read from
its run's table 0).

Nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidValueError
from simstore.index.multi_index import MultiIndex
from simstore.index.permute import FINGERPRINT_BITS, U64Array
from simstore.index.ranges import expand_ranges

IntArray = npt.NDArray[np.int64]
IdArray = npt.NDArray[np.unsignedinteger[Any]]


#: A directory slot holds this many keys on average, at most twice as many
#: (the directory costs 4 / DIRECTORY_TARGET to 8 / DIRECTORY_TARGET bytes a
#: document, less once the slot is the whole segment; a probe reads one
#: slot's keys). Measured at 1M (k = 3, 5, 8): 1 answers batches 2.5-5x
#: faster than 4 (every key a probe reads past its own is work).
DIRECTORY_TARGET = 1
#: The directory's least and most bits: at least 2 KiB of entries (an LMDB
#: overflow page), at most 64 MiB.
MIN_DIRECTORY_BITS = 9
MAX_DIRECTORY_BITS = 24


@dataclass(frozen=True)
class Directory:
    """A sorted column's directory: ``positions[v]`` is the first key whose
    top ``bits`` bits are ``v``; ``positions[2**bits]`` is the column's length."""

    bits: int
    positions: npt.NDArray[np.unsignedinteger[Any]]


@dataclass(frozen=True, eq=False)
class ColumnRun:
    """One run's columns.

    Attributes:
        fingerprints: table 0's column, ascending (ties in id order).
        ids: the document id of each entry of ``fingerprints``.
        rotated: the sorted columns of tables 1 and up.
        directories: each table's directory (a probe's keys lie in one slot).
    """

    fingerprints: U64Array
    ids: IdArray
    rotated: tuple[U64Array, ...]
    directories: tuple[Directory, ...]

    def __len__(self) -> int:
        return len(self.fingerprints)

    def column(self, table: int) -> U64Array:
        """Table ``table``'s sorted keys."""
        return self.fingerprints if table == 0 else self.rotated[table - 1]


@dataclass(frozen=True)
class Matches:
    """Pairs of (query, stored document) within the distance asked, in no
    particular order: ``queries[j]`` is the position of the query in its
    batch, ``ids[j]`` the document's id, ``distances[j]`` their Hamming
    distance."""

    queries: IntArray
    ids: IdArray
    distances: IntArray

    def __len__(self) -> int:
        return len(self.queries)


#: Keys a directory is counted from at a time.
DIRECTORY_CHUNK = 1 << 22


def directory_bits(entries: int, width: int) -> int:
    """Directory bits for a column of ``entries`` keys whose probes fix their
    top ``width`` bits: about :data:`DIRECTORY_TARGET` keys a slot, never
    past the segment (a probe's keys then lie in one slot)."""
    wanted = math.floor(math.log2(entries / DIRECTORY_TARGET)) if entries > DIRECTORY_TARGET else 0
    return min(max(wanted, MIN_DIRECTORY_BITS), width, MAX_DIRECTORY_BITS)


def directory_dtype(entries: int) -> np.dtype[Any]:
    """The positions' type of a directory of ``entries`` keys."""
    return np.dtype(np.uint32) if entries < 1 << 32 else np.dtype(np.uint64)


def build_directory(
    sorted_keys: U64Array, bits: int, out: npt.NDArray[np.unsignedinteger[Any]] | None = None
) -> Directory:
    """The directory of ``sorted_keys`` over their top ``bits`` bits (its
    positions written into ``out`` if given: ``2**bits + 1`` of
    :func:`directory_dtype`, such as a value's payload to be put)."""
    if not 0 <= bits <= MAX_DIRECTORY_BITS:
        raise InvalidValueError(f"directory bits must be in 0..{MAX_DIRECTORY_BITS}, got {bits}")
    dtype = directory_dtype(len(sorted_keys))
    if out is None:
        positions: npt.NDArray[np.unsignedinteger[Any]] = np.zeros((1 << bits) + 1, dtype=dtype)
    else:
        if out.shape != ((1 << bits) + 1,) or out.dtype != dtype:
            raise ValueError(f"a directory of {bits} bits takes {(1 << bits) + 1} items of {dtype}")
        positions = out
        positions[:] = 0
    if not bits:
        positions[1] = len(sorted_keys)
        return Directory(bits, positions)
    # Counted a stretch of keys at a time: the slots of all of them at once
    # took 16 bytes a key beside the column (a 100M join's largest arrays).
    # Each slot's count goes where its end position will be, then one running sum.
    counts = positions[1:]
    shift = np.uint64(FINGERPRINT_BITS - bits)
    # The slots shifted and rebased in place in one buffer (a slot fits an
    # intp): 0.48x the CPU time of a new array for each step (20M keys, 21 bits).
    slots_buffer = np.empty(min(DIRECTORY_CHUNK, len(sorted_keys)), dtype=np.uint64)
    for start in range(0, len(sorted_keys), DIRECTORY_CHUNK):
        stretch = sorted_keys[start : start + DIRECTORY_CHUNK]
        slots = np.right_shift(stretch, shift, out=slots_buffer[: len(stretch)]).view(np.intp)
        low = int(slots[0])  # (sorted: the stretch's slots are low..slots[-1])
        np.subtract(slots, low, out=slots)
        tally = np.bincount(slots)
        span = counts[low : low + len(tally)]
        np.add(span, tally, out=span, casting="unsafe")
    np.cumsum(counts, out=counts)
    return Directory(bits, positions)


def build_run(scheme: MultiIndex, fingerprints: U64Array, ids: IdArray) -> ColumnRun:
    """The columns of a run holding ``fingerprints`` (``ids[j]`` is the id of
    ``fingerprints[j]``), and each table's directory."""
    fingerprints = np.asarray(fingerprints, dtype=np.uint64)
    ids = np.asarray(ids)
    if fingerprints.ndim != 1 or ids.shape != fingerprints.shape:
        raise InvalidValueError(f"one id per fingerprint: {fingerprints.shape} fingerprints, {ids.shape} ids")
    order = np.lexsort((ids, fingerprints))
    rotated = []
    for table in range(1, scheme.tables):
        keys = scheme.rotate(fingerprints, table)
        keys.sort()
        rotated.append(keys)
    columns = (fingerprints[order], *rotated)
    directories = tuple(
        build_directory(column, directory_bits(len(column), width))
        for column, width in zip(columns, scheme.widths, strict=True)
    )
    return ColumnRun(columns[0], ids[order], tuple(rotated), directories)


@dataclass(frozen=True)
class RunPlace:
    """Where one run lies in a snapshot's buffer, in items from its start.

    Attributes:
        entries: the run's documents.
        key_words: each table's first key (8-byte items).
        directory_bits: each table's directory bits.
        directory_halves: each table's first directory position (4-byte items).
        id_index: the first id: an 8-byte item if ``id_bytes`` is 8, else a 4-byte one.
        id_bytes: 4 or 8.
    """

    entries: int
    key_words: tuple[int, ...]
    directory_bits: tuple[int, ...]
    directory_halves: tuple[int, ...]
    id_index: int
    id_bytes: int


#: Matches at most this many are de-duplicated and given ids in Python
#: (a single query's usually are): cheaper than the numpy calls below.
SMALL_MATCHES = 24
#: A single query reads every probe's directory slot as a block of keys (as
#: many as the fullest slot holds), so one gather serves every probe; a slot
#: fuller than a snapshot's block limit (many copies of one text) sends the
#: query down the path batches take. The limit is this many keys, or
#: BLOCK_FILL times the mean fill of the fullest directory's slots if more
#: (a 21-bit slot of a 100M run holds some 50 keys), at most MAX_BLOCK_KEYS.
#: Measured in one process, alternating, k = 5: a query's search in 0.88x
#: the time of that path at 1M, 0.57x at 100M (blocks of up to 128 keys).
BLOCK_KEYS = 32
BLOCK_FILL = 4
MAX_BLOCK_KEYS = 256
#: Probe rows (queries x probes x runs) a batch searches at once: bounds the
#: batch's temporary arrays to a few tens of MiB.
BATCH_ROWS = 1 << 16


class Snapshot:
    """Runs of one scheme placed in one buffer, ready to search.

    ``words`` is the buffer as little-endian 8-byte items; its 4-byte
    halves hold the directories and narrow ids. Per-probe arrays (each
    run's probes of each table, with where its slot and keys are) are made
    once here, so a search costs no Python work per probe.
    """

    def __init__(self, scheme: MultiIndex, words: U64Array, runs: Sequence[RunPlace]) -> None:
        for place in runs:
            if len(place.key_words) != scheme.tables or len(place.directory_bits) != scheme.tables:
                raise InvalidValueError(
                    f"a run placed with {len(place.key_words)} tables, not {scheme.tables}"
                )
            if any(
                not 0 < bits <= width for bits, width in zip(place.directory_bits, scheme.widths, strict=True)
            ):
                raise InvalidValueError(f"directory bits {place.directory_bits} do not fit {scheme.label()}")
        self.scheme = scheme
        self.words = words
        self.halves: npt.NDArray[np.uint32] = words.view(np.dtype("<u4"))
        self.runs = tuple(runs)
        self.entries = sum(place.entries for place in runs)
        # A probe that flips a bit below a directory's bits reads the same
        # slot as the probe without that flip, and every key of a slot is
        # compared with the whole query: only probes whose flips lie within
        # the directory's bits are kept, so no slot is read twice and no
        # document is found twice in one table (at k = 3 and 1M, 21 of a
        # 32-bit table's 33 probes).
        rows = [
            (run, table, mask)
            for run, place in enumerate(self.runs)
            if place.entries
            for table in range(scheme.tables)
            for mask in scheme.flip_masks(table).tolist()
            if not mask & ((1 << (FINGERPRINT_BITS - place.directory_bits[table])) - 1)
        ]
        run_of = np.array([row[0] for row in rows], dtype=np.int64)
        table_of = np.array([row[1] for row in rows], dtype=np.int64)
        self._row_table = table_of
        self._row_run = run_of
        self._row_mask = np.array([row[2] for row in rows], dtype=np.uint64)
        starts = np.array(scheme.starts, dtype=np.int64)
        self._starts = starts.astype(np.uint64)
        self._back_starts = ((FINGERPRINT_BITS - starts) % FINGERPRINT_BITS).astype(np.uint64)
        self._row_start = starts[table_of].astype(np.uint64)
        self._row_back_start = self._back_starts[table_of]
        self._row_prefix = np.array([scheme.prefix_mask(table) for table in range(scheme.tables)], np.uint64)[
            table_of
        ]
        bits = np.array([place.directory_bits for place in self.runs], dtype=np.int64).reshape(
            -1, scheme.tables
        )
        dir_base = np.array([place.directory_halves for place in self.runs], np.int64).reshape(
            -1, scheme.tables
        )
        key_base = np.array([place.key_words for place in self.runs], dtype=np.int64).reshape(
            -1, scheme.tables
        )
        self._row_dir_shift = (FINGERPRINT_BITS - bits[run_of, table_of]).astype(np.uint64)
        self._row_dir_base = dir_base[run_of, table_of].astype(np.uint64)
        self._row_key_base = key_base[run_of, table_of]
        # Table 0 of each run, for turning fingerprints into ids.
        self._run_dir0_shift = (FINGERPRINT_BITS - bits[:, 0]).astype(np.uint64)
        self._run_dir0_base = dir_base[:, 0].astype(np.uint64)
        self._run_key0_base = key_base[:, 0]
        self._run_id_index = np.array([place.id_index for place in self.runs], dtype=np.int64)
        self._run_wide_ids = np.array([place.id_bytes == 8 for place in self.runs], dtype=bool)
        self._row_numbers = np.arange(len(rows), dtype=np.int64)
        # The same as Python lists, for a handful of matches.
        self._row_run_list: list[int] = run_of.tolist()
        self._run_dir0_shift_list: list[int] = self._run_dir0_shift.tolist()
        self._run_dir0_base_list: list[int] = self._run_dir0_base.tolist()
        self._run_key0_base_list: list[int] = self._run_key0_base.tolist()
        self._wide_ids = bool(self._run_wide_ids.all())
        self._init_blocks(scheme, table_of)

    def _init_blocks(self, scheme: MultiIndex, table_of: IntArray) -> None:
        """What :meth:`_block_candidates` needs: each table's rotation and
        prefix as Python ints, and how far past its columns the buffer goes."""
        self._table_starts: list[int] = [int(start) for start in scheme.starts]
        self._table_prefixes: list[int] = [int(scheme.prefix_mask(table)) for table in range(scheme.tables)]
        self._row_start_list: list[int] = self._row_start.tolist()
        # Takes, from a query's rotation by each table then their prefixes,
        # each probe row's rotated query (row 0) and its prefix (row 1).
        self._row_query_and_low = np.stack([table_of, table_of + scheme.tables])
        # A slot's end is the next slot's start.
        self._halves_after = self.halves[1:]
        # A block may read past its slot's keys, never past the buffer.
        column_ends = [
            place.key_words[table] + place.entries for place in self.runs for table in range(scheme.tables)
        ]
        room = len(self.words) - max(column_ends, default=0)
        fullest_mean = max(
            (place.entries / (1 << bits) for place in self.runs for bits in place.directory_bits),
            default=0.0,
        )
        wanted = min(max(BLOCK_KEYS, int(BLOCK_FILL * fullest_mean)), MAX_BLOCK_KEYS)
        self._block_limit = max(0, min(wanted, room))
        self._blocks: dict[int, npt.NDArray[np.uint64]] = {}

    @classmethod
    def of(cls, scheme: MultiIndex, runs: Sequence[ColumnRun]) -> Snapshot:
        """A snapshot of runs held in memory (copied into one buffer)."""
        parts: list[npt.NDArray[Any]] = []
        places: list[RunPlace] = []
        size = 0

        def place(array: npt.NDArray[Any]) -> int:
            nonlocal size
            words = np.ascontiguousarray(array)
            if words.dtype.itemsize == 4 and len(words) % 2:
                words = np.append(words, words.dtype.type(0))
            words = words.view(np.dtype("<u8"))
            parts.append(words)
            size += len(words)
            return size - len(words)

        for run in runs:
            key_words = tuple(place(run.column(table).astype("<u8")) for table in range(scheme.tables))
            directory_halves = tuple(
                2 * place(directory.positions.astype("<u4")) for directory in run.directories
            )
            id_index = place(run.ids.astype("<u8"))
            bits = tuple(directory.bits for directory in run.directories)
            places.append(RunPlace(len(run), key_words, bits, directory_halves, id_index, 8))
        words = np.concatenate(parts) if parts else np.zeros(1, dtype=np.dtype("<u8"))
        return cls(scheme, words, places)

    def search(self, queries: U64Array, k: int) -> Matches:
        """Every document within ``k`` bits of each of ``queries``.

        Raises:
            InvalidValueError: ``k`` is past what the scheme answers exactly.
        """
        self._check_k(k)
        queries = np.asarray(queries, dtype=np.uint64).reshape(-1)
        rows = len(self._row_table)
        if not rows or not len(queries):
            return _no_matches()
        if len(queries) == 1:
            return self._search_one(queries[0], k)
        step = max(1, BATCH_ROWS // rows)
        parts = [
            self._search(queries[first : first + step], first, k) for first in range(0, len(queries), step)
        ]
        return parts[0] if len(parts) == 1 else _joined(parts)

    def _check_k(self, k: int) -> None:
        if not 0 <= k <= self.scheme.k:
            raise InvalidValueError(
                f"the scheme {self.scheme.label()} answers k up to {self.scheme.k}, not {k}"
            )

    def _search(self, queries: U64Array, offset: int, k: int) -> Matches:
        rows = len(self._row_table)
        # Every probe of every table of every run: the lowest key of its
        # range, and the directory slot holding its keys.
        shifted = queries[:, np.newaxis]
        rotated = (shifted << self._starts) | (shifted >> self._back_starts)
        lows = ((rotated[:, self._row_table] & self._row_prefix) ^ self._row_mask).reshape(-1)
        slots = (lows.reshape(-1, rows) >> self._row_dir_shift) + self._row_dir_base
        first = self.halves[slots].reshape(-1)
        positions, probe = expand_ranges(first, self.halves[slots + np.uint64(1)].reshape(-1) - first)
        row = probe % rows
        places = self._row_key_base[row] + positions
        keys = self.words[places]
        fingerprints = (keys >> self._row_start[row]) | (keys << self._row_back_start[row])
        query = probe // rows
        distances = np.bitwise_count(fingerprints ^ queries[query])
        found = np.flatnonzero(distances <= k)
        if not len(found):
            return _no_matches()
        if len(found) <= SMALL_MATCHES:
            return self._reported_few(
                query[found].tolist(),
                offset,
                row[found].tolist(),
                fingerprints[found].tolist(),
                distances[found].tolist(),
            )
        return self._reported(query[found], offset, row[found], fingerprints[found], distances[found])

    def search_one(self, query: int, k: int) -> tuple[list[int], list[int]]:
        """The ids of the documents within ``k`` bits of one ``query``, and
        their distances, as Python lists: :meth:`search` of one query
        without building arrays the caller would only turn back into ints."""
        self._check_k(k)
        if not len(self._row_table):
            return [], []
        query = int(query)
        block = self._block_candidates(query, k)
        if block is not None:
            row_list, fingerprint_list, distance_list = block
            if len(row_list) <= SMALL_MATCHES:
                _queries, ids, found_distances = self._few(
                    [0] * len(row_list), 0, row_list, fingerprint_list, distance_list
                )
                return ids, found_distances
            candidates: tuple[IntArray, U64Array, npt.NDArray[Any]] | None = (
                np.array(row_list, dtype=np.int64),
                np.array(fingerprint_list, dtype=np.uint64),
                np.array(distance_list, dtype=np.int64),
            )
        else:
            candidates = self._candidates_one(np.uint64(query), k)
        if candidates is None:
            return [], []
        row, fingerprints, distances = candidates
        if len(row) > SMALL_MATCHES:
            matches = self._reported(np.zeros(len(row), dtype=np.int64), 0, row, fingerprints, distances)
            return matches.ids.tolist(), matches.distances.tolist()
        _queries, ids, found_distances = self._few(
            [0] * len(row), 0, row.tolist(), fingerprints.tolist(), distances.tolist()
        )
        return ids, found_distances

    def _search_one(self, query: np.uint64, k: int) -> Matches:
        """:meth:`_search` for one query (:meth:`search_one`, as arrays)."""
        ids, distances = self.search_one(int(query), k)
        return Matches(
            np.zeros(len(ids), dtype=np.int64),
            np.array(ids, dtype=np.uint64),
            np.array(distances, dtype=np.int64),
        )

    def _block_candidates(self, query: int, k: int) -> tuple[list[int], list[int], list[int]] | None:
        """One query's matches before they are reported, as lists (each
        one's probe row, fingerprint and distance; empty lists: none), or
        ``None`` if a probe's slot holds more keys than a block does.

        A single query's time is mostly numpy's per-call overhead, so this
        takes as few calls as it can: every probe's slot bounds in two
        gathers, then a block of the fullest slot's count of keys from every
        slot's start in one more, compared with the query rotated as each
        table is (popcount is the same either way round). The keys a
        block holds past its slot's are skipped (they may lie past the
        column); those inside it whose segment is not the probe's (a
        directory narrower than the segment holds several) are keys of the
        same column, real documents, so they need no prefix check: the
        distance is exact, and a document found twice is reported once. Only the few
        matches are rotated back, in Python.
        """
        full = (1 << FINGERPRINT_BITS) - 1
        rotated = [
            ((query << start) | (query >> (FINGERPRINT_BITS - start))) & full if start else query
            for start in self._table_starts
        ]
        lows = [key & prefix for key, prefix in zip(rotated, self._table_prefixes, strict=True)]
        # (take, not fancy indexing: a fraction of the call's overhead.)
        query_and_low = np.array(rotated + lows, dtype=np.uint64).take(self._row_query_and_low)
        slots = (((query_and_low[1] ^ self._row_mask) >> self._row_dir_shift) + self._row_dir_base).astype(
            np.intp
        )
        first = self.halves.take(slots)
        counts = self._halves_after.take(slots) - first
        width = int(counts.max())
        if width > self._block_limit:
            return None
        if not width:
            return [], [], []
        blocks = self._blocks.get(width)
        if blocks is None:
            words = self.words
            blocks = self._blocks[width] = np.lib.stride_tricks.as_strided(
                words, shape=(len(words) - width + 1, width), strides=(8, 8), writeable=False
            )
        keys = blocks[first + self._row_key_base]
        distances = np.bitwise_count(keys ^ query_and_low[0][:, np.newaxis])
        found = np.flatnonzero(distances <= k)
        rows: list[int] = []
        fingerprints: list[int] = []
        found_distances: list[int] = []
        starts = self._row_start_list
        for place in found.tolist():
            row, offset = divmod(place, width)
            if offset >= counts.item(row):
                continue  # past the slot, maybe past the column: not a key of this table
            key, start = keys.item(place), starts[row]
            if start:
                key = ((key >> start) | (key << (FINGERPRINT_BITS - start))) & full
            rows.append(row)
            fingerprints.append(key)
            found_distances.append(distances.item(place))
        return rows, fingerprints, found_distances

    def _candidates_one(self, query: np.uint64, k: int) -> tuple[IntArray, U64Array, npt.NDArray[Any]] | None:
        """One query's matches before they are reported: each one's probe
        row, fingerprint and distance (``None``: none)."""
        lows = (
            ((query << self._row_start) | (query >> self._row_back_start)) & self._row_prefix
        ) ^ self._row_mask
        slots = (lows >> self._row_dir_shift) + self._row_dir_base
        first = self.halves[slots]
        counts = self.halves[slots + np.uint64(1)] - first
        row = np.repeat(self._row_numbers, counts)
        if not len(row):
            return None
        # Each candidate's position: its range's first plus its place in the range.
        places = (
            np.arange(len(row), dtype=np.int64)
            + (self._row_key_base + first - (np.cumsum(counts, dtype=np.int64) - counts))[row]
        )
        keys = self.words[places]
        fingerprints = (keys >> self._row_start[row]) | (keys << self._row_back_start[row])
        distances = np.bitwise_count(fingerprints ^ query)
        found = np.flatnonzero(distances <= k)
        if not len(found):
            return None
        return row[found], fingerprints[found], distances[found]

    def _reported_few(
        self, query: list[int], offset: int, row: list[int], fingerprints: list[int], distances: list[int]
    ) -> Matches:
        """As :meth:`_reported`, for a handful of matches (a single query's,
        usually): in Python, where a numpy call costs more than the work."""
        found_queries, found_ids, found_distances = self._few(query, offset, row, fingerprints, distances)
        return Matches(
            np.array(found_queries, dtype=np.int64),
            np.array(found_ids, dtype=np.uint64),
            np.array(found_distances, dtype=np.int64),
        )

    def _few(
        self, query: list[int], offset: int, row: list[int], fingerprints: list[int], distances: list[int]
    ) -> tuple[list[int], list[int], list[int]]:
        """:meth:`_reported_few`'s queries, ids and distances, as lists."""
        run_of = self._row_run_list
        seen: dict[tuple[int, int, int], int] = {}
        for match_query, match_row, fingerprint, distance in zip(
            query, row, fingerprints, distances, strict=True
        ):
            seen.setdefault((match_query, run_of[match_row], fingerprint), distance)
        found_queries: list[int] = []
        found_ids: list[int] = []
        found_distances: list[int] = []
        for (match_query, run, fingerprint), distance in seen.items():
            slot = (fingerprint >> self._run_dir0_shift_list[run]) + self._run_dir0_base_list[run]
            first, past = self.halves.item(slot), self.halves.item(slot + 1)
            base = self._run_key0_base_list[run]
            for position in range(first, past):
                if self.words.item(base + position) == fingerprint:
                    found_queries.append(match_query + offset)
                    found_ids.append(self._id_at(run, position))
                    found_distances.append(distance)
        return found_queries, found_ids, found_distances

    def _id_at(self, run: int, position: int) -> int:
        place = self.runs[run]
        if place.id_bytes == 8:
            return int(self.words.item(place.id_index + position))
        return int(self.halves.item(place.id_index + position))

    def _reported(
        self,
        query: IntArray,
        offset: int,
        row: IntArray,
        fingerprints: U64Array,
        distances: npt.NDArray[Any],
    ) -> Matches:
        """The matches found, each reported once, with ids."""
        # A document near the query is usually found in several tables: keep
        # one of each (query, run, fingerprint), then take every document of
        # that run holding the fingerprint from its table 0.
        run = self._row_run[row]
        order = np.lexsort((fingerprints, run, query))
        query, run, fingerprints, distances = query[order], run[order], fingerprints[order], distances[order]
        if len(order) > 1:
            first = np.empty(len(order), dtype=bool)
            first[0] = True
            first[1:] = (
                (fingerprints[1:] != fingerprints[:-1]) | (run[1:] != run[:-1]) | (query[1:] != query[:-1])
            )
            if not first.all():
                query, run, fingerprints, distances = (
                    query[first],
                    run[first],
                    fingerprints[first],
                    distances[first],
                )
        slots = (fingerprints >> self._run_dir0_shift[run]) + self._run_dir0_base[run]
        first_spot = self.halves[slots]
        spots, owner = expand_ranges(first_spot, self.halves[slots + np.uint64(1)] - first_spot)
        run = run[owner]
        same = np.flatnonzero(self.words[self._run_key0_base[run] + spots] == fingerprints[owner])
        owner, run = owner[same], run[same]
        return Matches(query[owner] + offset, self._ids(run, spots[same]), distances[owner].astype(np.int64))

    def _ids(self, runs: IntArray, positions: IntArray) -> npt.NDArray[np.uint64]:
        indexes = self._run_id_index[runs] + positions
        if self._wide_ids:
            wide_only: npt.NDArray[np.uint64] = self.words[indexes]
            return wide_only
        wide = self._run_wide_ids[runs]
        ids = np.empty(len(runs), dtype=np.uint64)
        ids[wide] = self.words[indexes[wide]]
        ids[~wide] = self.halves[indexes[~wide]]
        return ids


def search(scheme: MultiIndex, run: ColumnRun, queries: U64Array, k: int) -> Matches:
    """Every document of one in-memory ``run`` within ``k`` bits of each of
    ``queries``: a snapshot of that run alone, made for this call (searching
    a run many times, make its :class:`Snapshot` once)."""
    return Snapshot.of(scheme, [run]).search(queries, k)


def _no_matches() -> Matches:
    return Matches(np.empty(0, np.int64), np.empty(0, np.uint64), np.empty(0, np.int64))


def _joined(parts: Sequence[Matches]) -> Matches:
    return Matches(
        np.concatenate([part.queries for part in parts]),
        np.concatenate([part.ids for part in parts]),
        np.concatenate([part.distances for part in parts]),
    )
