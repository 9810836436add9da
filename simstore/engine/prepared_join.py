"""A large join of format-3 runs made a step at a time across store calls.

Done in one write transaction, a join of 100M entries takes some 20 s: the
write that pays for it stalls that long, and so does every writer of other
processes. A join of at least :data:`STEPPED_JOIN_ENTRIES` entries is made
in three parts instead (the caller, :mod:`simstore.store.stepped_joins`, paces
them by the documents written):

1. **Begun** in one write transaction: the joined run's id is taken from the
   catalog (so no other run is ever written under it), the join is recorded
   in the ``meta`` sub-database (:class:`Joining`: the run id, the process
   preparing it, the runs joined), and which entries it keeps is decided by
   the graves then (as a whole join decides); the joined run is stamped with
   the count of removals then, so graves written later stay to be applied.
2. **Stepped**: each step merges one stretch of about
   :data:`~simstore.index.column_merge.CHUNK_ENTRIES` entries of the runs
   (:func:`simstore.engine.column_tables.join_values`,
   :func:`simstore.engine.band_tables.join_band_values`), read in place
   through a read transaction, and holds no view of them past its end. The
   values a step finishes (a whole column) are put under the reserved id in a
   write transaction of their own. The catalog does not name the run, so
   queries never see it.
3. **Published** in one small write transaction: if the runs joined are
   still in the catalog, side by side, the joined run takes their place and
   they are dropped; if not (another process joined them, a ``compact()``
   did), the prepared values are dropped instead.

A crash, or a close in the middle, leaves the reserved run's values and the
record behind: the next process to begin a join finds the record's process
gone (or, in the process that wrote it, no longer preparing it) and drops
them. Nothing acknowledged is ever in them: the runs joined stay in the
catalog until the publish.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import msgpack
import numpy as np
import numpy.typing as npt

from simstore.engine import columns
from simstore.engine.band_tables import BandJoinSteps, join_band_values
from simstore.engine.column_index import RunEntry
from simstore.engine.column_tables import Finished, JoinSteps, join_values
from simstore.errors import CorruptStoreError
from simstore.index.band_runs import BandRun
from simstore.index.column_search import ColumnRun
from simstore.index.multi_index import MultiIndex

#: A join of at least this many entries is prepared in steps; a smaller one
#: (a few seconds at most) is made whole, in the write that pays for it.
STEPPED_JOIN_ENTRIES = 1 << 24

#: ``meta`` key of the record of the join being prepared (absent: none).
JOINING_KEY = b"joining"
_RECORD_VERSION = 1

Mask = npt.NDArray[np.bool_] | None


@dataclass(frozen=True)
class Joining:
    """The record of a join being prepared: the id its run is written
    under, the process preparing it, and the ids of the runs it joins
    (oldest first)."""

    run_id: int
    pid: int
    sources: tuple[int, ...]

    def encode(self) -> bytes:
        encoded: bytes = msgpack.packb([_RECORD_VERSION, self.run_id, self.pid, list(self.sources)])
        return encoded

    @classmethod
    def decode(cls, raw: bytes) -> Joining:
        """The record ``raw`` holds.

        Raises:
            CorruptStoreError: ``raw`` is not a record this simstore wrote.
        """
        try:
            value = msgpack.unpackb(raw, use_list=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
            raise CorruptStoreError("the record of the join being prepared is damaged") from exc
        if not (
            isinstance(value, list)
            and len(value) == 4
            and value[0] == _RECORD_VERSION
            and all(isinstance(number, int) and number > 0 for number in value[1:3])
            and isinstance(value[3], list)
            and value[3]
            and all(isinstance(run_id, int) and run_id > 0 for run_id in value[3])
        ):
            raise CorruptStoreError(f"the record of the join being prepared is damaged: {str(value)[:80]}")
        return cls(value[1], value[2], tuple(value[3]))

    def abandoned(self, preparing: Joining | None) -> bool:
        """Whether nobody prepares this join any more: its process is gone,
        or it is this process, which (``preparing``) prepares another or none."""
        if self.pid == os.getpid():
            return self != preparing
        try:
            os.kill(self.pid, 0)  # (signal 0: only asks whether the process exists)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # another user's process: alive
        return False


class PreparedJoin:
    """A join being prepared in this process: the band table's join (if the
    store keeps one), then the columns', stepped by :meth:`step`."""

    def __init__(
        self,
        joining: Joining,
        sources: Sequence[RunEntry],
        stamp: int,
        scheme: MultiIndex,
        kept: Sequence[Mask],
        band_kept: Sequence[Mask] | None,
        make: columns.MakeValue,
    ) -> None:
        self.joining = joining
        #: The runs joined, as the catalog named them when the join began.
        self.sources = tuple(sources)
        #: The count of removals when it began: the joined run's stamp.
        self.stamp = stamp
        self.scheme = scheme
        self._kept = list(kept)
        self._band_kept = None if band_kept is None else list(band_kept)
        self._make = make
        self._band_steps: BandJoinSteps | None = None
        self._column_steps: JoinSteps | None = None
        self._bands_done = band_kept is None
        #: The joined run's entries once every step is taken (0: it keeps none).
        self.entries: int | None = None
        self.steps = 0
        #: Values the last step finished, not put yet (the caller puts them).
        self.finished: list[Finished] = []

    @property
    def done(self) -> bool:
        """Whether every stretch is merged (finished values may wait to be put)."""
        return self.entries is not None

    def step(self, runs: Sequence[ColumnRun], band_runs: Sequence[BandRun]) -> list[Finished]:
        """One step: ``runs`` and ``band_runs`` are the runs joined, viewed
        afresh (no view is held past this call); returns the values it
        finished (possibly none)."""
        if self.done:
            raise ValueError("the join is prepared already")
        self.steps += 1
        if not self._bands_done:
            assert self._band_kept is not None
            try:
                if self._band_steps is None:
                    self._band_steps = join_band_values(band_runs, self._band_kept, self._make)
                    finished = next(self._band_steps)
                else:
                    finished = self._band_steps.send(band_runs)
            except StopIteration:
                self._bands_done = True
                self._band_steps = None
                self._band_kept = None
                return []
            return [(0, kind, value) for kind, value in finished]
        try:
            if self._column_steps is None:
                self._column_steps = join_values(self.scheme, runs, self._kept, self._make)
                return list(next(self._column_steps))
            return list(self._column_steps.send(runs))
        except StopIteration as joined:
            self.entries = int(joined.value)
            self._column_steps = None
            self._kept = []
            return []

    def close(self) -> None:
        """Let go of the values being built (the generators' buffers)."""
        for steps in (self._band_steps, self._column_steps):
            if steps is not None:
                steps.close()
        self._band_steps = self._column_steps = None
        self._kept, self._band_kept = [], None
        self.finished = []


def sources_at(runs: Sequence[RunEntry], sources: Sequence[RunEntry]) -> int | None:
    """The index in ``runs`` at which ``sources`` stand side by side, as they
    were, or ``None`` (some were joined, or taken out, since)."""
    if not sources:
        return None
    for index, run in enumerate(runs):
        if run.run_id == sources[0].run_id:
            return index if tuple(runs[index : index + len(sources)]) == tuple(sources) else None
    return None
