"""Block layouts and permutation tables (Manku, Jain & Das Sarma, WWW 2007).

A 64-bit fingerprint is cut into ``blocks`` contiguous blocks whose sizes
differ by at most one bit. If two fingerprints differ in at most ``k`` bits,
at least ``blocks - k`` blocks are identical in both. So for every choice of
``blocks - k`` blocks there is one table whose permuted key puts those blocks
first: any fingerprint within ``k`` bits of a query then shares the whole
leading prefix with it in at least one table, and a sorted range scan over
that prefix finds it.

Bit numbering: bit 0 is the least significant bit of the fingerprint. A
table is described by its *bit order*, a tuple of 64 source bit numbers: the
first entry is the source bit that becomes the most significant bit of the
permuted key, the last the one that becomes the least significant. Stores
record these bit orders explicitly, never a seed or a rule, so a change to
this module can never re-key an existing store.

Nothing here does I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from math import comb

import numpy as np
import numpy.typing as npt

from simstore.errors import InvalidTypeError, InvalidValueError

FINGERPRINT_BITS = 64
MAX_FINGERPRINT = (1 << FINGERPRINT_BITS) - 1
MAX_K = 32
MAX_TABLES = 512

U64Array = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class Table:
    """One permutation table: a bit order and the length of its prefix.

    ``runs`` is derived from ``bit_order``: maximal stretches of source bits
    that stay contiguous and in order after permutation, as
    ``(source_shift, width_mask, target_shift)``. Moving whole runs instead of
    single bits is what keeps a Python-level permutation to a few operations.
    """

    bit_order: tuple[int, ...]
    prefix_bits: int
    runs: tuple[tuple[int, int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_bit_order(self.bit_order)
        if not 1 <= self.prefix_bits <= FINGERPRINT_BITS:
            raise InvalidValueError(f"prefix_bits must be in 1..{FINGERPRINT_BITS}, got {self.prefix_bits}")
        object.__setattr__(self, "runs", runs_of(self.bit_order))

    def permute(self, fingerprint: int) -> int:
        """The permuted key of one fingerprint, as an int."""
        permuted = 0
        for source_shift, mask, target_shift in self.runs:
            permuted |= ((fingerprint >> source_shift) & mask) << target_shift
        return permuted

    def permute_array(self, fingerprints: U64Array) -> U64Array:
        """The permuted keys of a uint64 array, vectorised."""
        permuted = np.zeros(fingerprints.shape, dtype=np.uint64)
        moved = np.empty_like(permuted)  # one scratch array, not a temporary per operation
        for source_shift, mask, target_shift in self.runs:
            np.right_shift(fingerprints, np.uint64(source_shift), out=moved)
            np.bitwise_and(moved, np.uint64(mask), out=moved)
            np.left_shift(moved, np.uint64(target_shift), out=moved)
            permuted |= moved
        return permuted

    def unpermute(self, permuted: int) -> int:
        """The fingerprint whose permuted key is ``permuted``."""
        fingerprint = 0
        for source_shift, mask, target_shift in self.runs:
            fingerprint |= ((permuted >> target_shift) & mask) << source_shift
        return fingerprint

    @property
    def suffix_bits(self) -> int:
        """Bits of the permuted key after the prefix."""
        return FINGERPRINT_BITS - self.prefix_bits


class TablesPermuter:
    """One fingerprint's permuted key in every table of a layout, at once.

    ``[table.permute(fp) for table in tables]`` costs a Python loop over every
    run of every table: ~6 µs for Manku's 10 tables at k = 3, a fifth of a
    query. Here the runs of all tables are three numpy arrays, so one
    fingerprint is shifted and masked by every run in a few vectorised steps
    and each table's runs are OR-ed together with ``reduceat``: ~2.5 µs,
    almost whatever the layout. :func:`lane_permuter` is faster for layouts
    of up to a few dozen tables; :func:`tables_permuter` picks.

    >>> tables = one_level_tables(3, 5)
    >>> TablesPermuter(tables)(0x8F3A5C7E12345678) == [t.permute(0x8F3A5C7E12345678) for t in tables]
    True
    """

    __slots__ = ("_masks", "_source_shifts", "_starts", "_target_shifts")

    def __init__(self, tables: Sequence[Table]) -> None:
        runs = [run for table in tables for run in table.runs]
        if not tables or not all(table.runs for table in tables):
            raise InvalidValueError("every table needs at least one run of bits")
        self._source_shifts = np.array([run[0] for run in runs], dtype=np.uint64)
        self._masks = np.array([run[1] for run in runs], dtype=np.uint64)
        self._target_shifts = np.array([run[2] for run in runs], dtype=np.uint64)
        self._starts = np.cumsum([0] + [len(table.runs) for table in tables[:-1]])

    def __call__(self, fingerprint: int) -> list[int]:
        moved = ((np.uint64(fingerprint) >> self._source_shifts) & self._masks) << self._target_shifts
        permuted: list[int] = np.bitwise_or.reduceat(moved, self._starts).tolist()
        return permuted


#: Above this many (tables x distinct shift distances) the lanes of
#: :func:`lane_permuter` grow long enough that numpy's per-call cost wins
#: (measured, µs per fingerprint, lanes against numpy: 0.94/2.14 for 10
#: tables with 8 distances, 1.61/2.31 for 20 (13), 1.63/2.52 for 28 (9), but
#: 10.6/5.6 for 165 (18) and 15.5/6.4 for 210 (29)).
LANE_WORK_LIMIT = 1000

#: One fingerprint's permuted key in every table of a layout.
PermuteAll = Callable[[int], Sequence[int]]


def tables_permuter(tables: Sequence[Table]) -> PermuteAll:
    """The fastest of :func:`lane_permuter` and :class:`TablesPermuter` for ``tables``.

    >>> tables = one_level_tables(3, 5)
    >>> list(tables_permuter(tables)(0x8F3A5C7E12345678)) == [t.permute(0x8F3A5C7E12345678) for t in tables]
    True
    """
    if len(tables) * len(shift_masks(tables)) <= LANE_WORK_LIMIT:
        return lane_permuter(tables)
    return TablesPermuter(tables)


def shift_masks(tables: Sequence[Table]) -> dict[int, int]:
    """``{distance: mask}``: with every table's fingerprint in a 64-bit lane of
    one integer (table ``i`` in bits ``64 i`` to ``64 i + 63``), the bits that
    move left by ``distance`` (right if negative) to their place in the
    permuted keys. Runs never leave their lane, so one shift moves them all."""
    masks: dict[int, int] = {}
    for lane, table in enumerate(tables):
        for source_shift, mask, target_shift in table.runs:
            distance = target_shift - source_shift
            masks[distance] = masks.get(distance, 0) | (mask << source_shift) << (FINGERPRINT_BITS * lane)
    return masks


def lane_permuter(tables: Sequence[Table]) -> PermuteAll:
    """Every table's permuted key of one fingerprint, with Python's big ints.

    The fingerprint is copied into one 64-bit lane per table (a single
    multiplication), every run that moves by the same distance is moved in
    all lanes at once (a mask and a shift per distance: eight for Manku's 10
    tables at k = 3, against 33 runs), and ``struct`` unpacks the lanes.
    Every shift is made a left shift by ``offset`` bits more than its
    distance (the whole result is shifted back once), so one loop without a
    branch does them all: 0.95 µs for 10 tables, where numpy took 2.2.
    """
    lanes = len(tables)
    spread = sum(1 << (FINGERPRINT_BITS * lane) for lane in range(lanes))
    masks = shift_masks(tables)
    offset = max(0, -min(masks))
    moves = tuple((mask, distance + offset) for distance, mask in masks.items())
    unpack = struct.Struct(f"<{lanes}Q").unpack
    size = 8 * lanes

    def permute_all(fingerprint: int) -> tuple[int, ...]:
        copies = fingerprint * spread
        moved = 0
        for mask, shift in moves:
            moved |= (copies & mask) << shift
        keys: tuple[int, ...] = unpack((moved >> offset).to_bytes(size, "little"))
        return keys

    return permute_all


def check_bit_order(bit_order: Sequence[int]) -> None:
    """Raise unless ``bit_order`` is a permutation of 0..63."""
    if len(bit_order) != FINGERPRINT_BITS or sorted(bit_order) != list(range(FINGERPRINT_BITS)):
        raise InvalidValueError(
            f"a bit order must be a permutation of 0..{FINGERPRINT_BITS - 1}, got {list(bit_order)!r}"
        )


def runs_of(bit_order: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """Group a bit order into runs of source bits that move together.

    Returns ``(source_shift, width_mask, target_shift)`` triples: the run's
    lowest source bit, a mask of its width, and where its lowest bit lands.
    """
    runs: list[tuple[int, int, int]] = []
    position = 0
    while position < FINGERPRINT_BITS:
        start = position
        # The run continues while the next target bit takes the next lower source bit.
        while position + 1 < FINGERPRINT_BITS and bit_order[position + 1] == bit_order[position] - 1:
            position += 1
        width = position - start + 1
        lowest_source = bit_order[position]
        lowest_target = FINGERPRINT_BITS - 1 - position
        runs.append((lowest_source, (1 << width) - 1, lowest_target))
        position += 1
    return tuple(runs)


def block_sizes(blocks: int, bits: int = FINGERPRINT_BITS) -> list[int]:
    """Sizes of ``blocks`` contiguous blocks covering ``bits`` bits, the larger
    ones first, differing by at most one.

    >>> block_sizes(5)
    [13, 13, 13, 13, 12]
    """
    base, extra = divmod(bits, blocks)
    return [base + 1 if index < extra else base for index in range(blocks)]


def block_bit_numbers(sizes: Sequence[int], top_bit: int = FINGERPRINT_BITS - 1) -> list[list[int]]:
    """Source bit numbers of each block, most significant block first and
    most significant bit first within a block, starting at ``top_bit``."""
    numbered: list[list[int]] = []
    next_bit = top_bit
    for size in sizes:
        numbered.append(list(range(next_bit, next_bit - size, -1)))
        next_bit -= size
    return numbered


def default_blocks(k: int) -> int:
    """The default number of blocks for ``k``: ``k + 2``.

    Two error-free blocks lead each table, which keeps the prefix near 2/(k+2)
    of the fingerprint (26 bits for k=3, so about N / 2**26 candidates per
    probe) with C(k+2, 2) tables: 10 for k=3.
    """
    return k + 2


def validate_k(k: object) -> int:
    """Return ``k`` if it is an allowed Hamming radius, else raise."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise InvalidTypeError(f"k must be an int, got {type(k).__name__}")
    if not 0 <= int(k) <= MAX_K:
        raise InvalidValueError(f"k must be in 0..{MAX_K}, got {k}")
    return int(k)


def one_level_tables(k: int, blocks: int) -> list[Table]:
    """Manku's one-level layout: a table for every choice of ``blocks - k``
    leading blocks, in lexicographic order of the chosen block numbers.

    The chosen blocks come first in their natural order; the other blocks
    follow, also in natural order.
    """
    k = validate_k(k)
    if isinstance(blocks, bool) or not isinstance(blocks, int | np.integer):
        raise InvalidTypeError(f"blocks must be an int, got {type(blocks).__name__}")
    blocks = int(blocks)
    if not k + 1 <= blocks <= FINGERPRINT_BITS:
        raise InvalidValueError(
            f"blocks must be in {k + 1}..{FINGERPRINT_BITS} for k={k} "
            f"(at least one block must be free of differences), got {blocks}"
        )
    table_count = comb(blocks, blocks - k)
    if table_count > MAX_TABLES:
        raise InvalidValueError(
            f"k={k} with blocks={blocks} needs {table_count} tables; at most {MAX_TABLES} are allowed"
        )
    sizes = block_sizes(blocks)
    numbered = block_bit_numbers(sizes)
    tables: list[Table] = []
    for leading in combinations(range(blocks), blocks - k):
        trailing = [index for index in range(blocks) if index not in leading]
        bit_order = [bit for index in (*leading, *trailing) for bit in numbered[index]]
        prefix_bits = sum(sizes[index] for index in leading)
        tables.append(Table(tuple(bit_order), prefix_bits))
    return tables


def hamming(a: int, b: int) -> int:
    """The number of bits in which two 64-bit fingerprints differ.

    >>> hamming(0b1011, 0b0001)
    2
    """
    return (check_fingerprint(a) ^ check_fingerprint(b)).bit_count()


def check_fingerprint(value: object) -> int:
    """Return ``value`` as an int if it is a valid 64-bit fingerprint, else raise."""
    if type(value) is int and 0 <= value <= MAX_FINGERPRINT:
        return value  # the common case, first: this is on every query's path
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidTypeError(f"a fingerprint must be an int in 0..2**64-1, got {type(value).__name__}")
    fingerprint = int(value)
    if not 0 <= fingerprint <= MAX_FINGERPRINT:
        raise InvalidValueError(f"a fingerprint must be in 0..2**64-1, got {fingerprint}")
    return fingerprint


def as_fingerprint_array(values: object) -> U64Array:
    """Validate a batch of fingerprints and return it as a 1-D uint64 array.

    Accepts a numpy integer array (any integer dtype, no negatives) or an
    iterable of ints. Floats, bools and out-of-range values are refused
    rather than rounded or wrapped.
    """
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise InvalidValueError(f"fingerprints must be one-dimensional, got shape {values.shape}")
        if values.dtype == np.uint64:
            return values
        if values.dtype.kind == "u":
            return values.astype(np.uint64)
        if values.dtype.kind == "i":
            if values.size and int(values.min()) < 0:
                raise InvalidValueError(
                    f"fingerprints must be in 0..2**64-1, got a negative value {int(values.min())}"
                )
            return values.astype(np.uint64)
        if values.dtype.kind != "O":
            raise InvalidTypeError(
                f"fingerprints must be an unsigned integer array, got dtype {values.dtype}"
            )
        values = values.tolist()
    if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
        raise InvalidTypeError(
            f"fingerprints must be a numpy uint64 array or an iterable of ints, got {type(values).__name__}"
        )
    checked = [check_fingerprint(value) for value in values]
    return np.array(checked, dtype=np.uint64)
