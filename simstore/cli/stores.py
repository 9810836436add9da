"""Opening stores in the command line's words: an existing store, one created on demand
(with a message when it is made), and the distance a command may ask of it."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable
from typing import Any

from simstore.cli.cleanup import existing_files, remove_new_store, remove_stale_creations, remove_unused_store
from simstore.cli.common import CommandError
from simstore.cli.documents import Collected
from simstore.errors import ParameterMismatchError, SimstoreError, StoreNotFoundError
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.index.permute import validate_k
from simstore.layout.presets import named_threshold
from simstore.store.facade import Store
from simstore.store.opening import open as open_store


def similarity(value: str) -> float:
    """An argparse type: a similarity threshold, a number from 0 to 1."""
    try:
        threshold = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0.0 <= threshold <= 1.0:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1: {value!r}")
    return threshold


def open_existing(path: str, mode: str = "r") -> Store:
    """The store at ``path``, which the command needs to exist already."""
    try:
        return open_store(path, mode)
    except StoreNotFoundError:
        raise CommandError(
            f"no simstore store at {path} (`simstore add {path} FILE...` or `simstore import` creates one)"
        ) from None


def open_or_create(path: str, k: int | None, **options: Any) -> Store:
    """The store at ``path``, created with ``-k k`` if missing."""
    try:
        return open_store(path, "c", k=k, **options)
    except ParameterMismatchError as exc:
        stored_k, _ = exc.differences.get("k", (None, None))
        if set(exc.differences) == {"k"}:
            raise CommandError(
                f"{path} has k={stored_k}, not {k}: leave out -k to use the store's k, or change it "
                f"with `simstore relayout {path} -k {k} --docs N`"
            ) from None
        raise


class StoreOnDemand:
    """The store a command adds documents to: one that exists is opened at
    once (so a wrong ``-k`` is refused before any input is read), a missing
    one is created only when the first documents are committed, by
    ``open_new()`` (:meth:`opened`). A command that fails before then (a
    bad line, a text that cannot be fingerprinted, Ctrl-C) leaves no new
    store behind, with a ``k`` nobody chose for it; nor does one that fails
    or is interrupted while the store is being created or its first
    documents committed: the store it created, empty, is removed again
    (see :func:`simstore.cli.cleanup.remove_unused_store`).

    Until the store exists, documents are fingerprinted with the settings a
    new store gets (``Fingerprinter()``); :meth:`opened` checks that the
    store it creates has them.
    """

    def __init__(self, path: str, k: int | None, open_new: Callable[[], Store]) -> None:
        self.path = path
        self._open_new = open_new
        self._store: Store | None = None
        # The store's files that existed before this command created it (None: it did not).
        self._existed_before: set[str] | None = None
        self.committed = 0  # documents this command committed
        if os.path.lexists(path):
            self._store = open_new()
            self.fingerprinter = self._store.fingerprinter
            self.sketch = self._store.sketch
            return
        # What creating it would refuse, refused now rather than after the whole input.
        if k is not None:
            validate_k(k)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise CommandError(f"cannot create {path}: there is no directory {folder}")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise CommandError(f"cannot create {path}: the directory {folder} is not writable")
        self.fingerprinter = Fingerprinter()
        self.sketch = self.fingerprinter.sketch

    @property
    def exists(self) -> bool:
        """Whether the store is open (it existed, or :meth:`opened` created it)."""
        return self._store is not None

    @property
    def created(self) -> bool:
        """Whether this command created the store."""
        return self._existed_before is not None

    def opened(self) -> Store:
        """The store, created now if it does not exist yet."""
        if self._store is None:
            before = existing_files(self.path)
            if self.path not in before:
                remove_stale_creations(self.path)
            try:
                # Ours as soon as it is returned: __exit__ closes it (and removes it if need be).
                self._store = self._open_new()
            except BaseException:
                if self.path not in before:
                    # Interrupted after the store appeared, before it was ours to close.
                    remove_new_store(self.path, before)
                raise
            if self.path not in before:
                self._existed_before = before
            store = self._store
            if store.fingerprinter != self.fingerprinter or store.sketch != self.sketch:
                # Another process created it meanwhile, with other settings: the
                # fingerprints made for a new store would not match its own.
                self._store = self._existed_before = None
                store.close()
                raise CommandError(
                    f"{self.path} was created meanwhile by another process, with other fingerprinter "
                    "settings; nothing was added (run the command again)"
                )
        return self._store

    def add(self, batch: Collected) -> None:
        """Commit ``batch`` to the store (created now if need be), in one transaction."""
        if batch.keys:
            batch.add_to(self.opened())
            self.committed += len(batch.keys)

    def __enter__(self) -> StoreOnDemand:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        store, self._store = self._store, None
        if store is None:
            return
        existed_before = self._existed_before
        if exc_type is None or existed_before is None or self.committed:
            store.close()
            return
        # This command created the store and failed before it committed a
        # document. A second try if an interrupt cuts the first short.
        try:
            self._close_and_remove(store, existed_before)
        except KeyboardInterrupt:
            self._close_and_remove(store, existed_before)
            raise

    def _close_and_remove(self, store: Store, existed_before: set[str]) -> None:
        documents = None
        if not store.closed:
            with contextlib.suppress(SimstoreError):
                documents = len(store)
            store.close()
        remove_unused_store(self.path, existed_before, documents)


def run_threshold(store: Store, similarity: float | None) -> float | None:
    """The estimate a command's ``--min-similarity J`` holds pairs to in
    ``store``: the store's own threshold where ``J`` names it (the
    similarity the store was made to find, whose threshold is a little below
    it, or the threshold itself), else ``J`` (``None``: the store's); the
    rule a reopening's ``min_similarity`` follows."""
    sketch = store.sketch
    return named_threshold(similarity, store.min_similarity, None if sketch is None else sketch.bins)


def check_distance(k: int | None, store: Store) -> None:
    """``-k`` of a query against ``store``, which finds nothing beyond its own k."""
    if k is not None and k > store.k:
        raise CommandError(
            f"-k {k} is larger than the k={store.k} of {store.path}: its tables find documents within "
            f"{store.k} bits only (change it with `simstore relayout {store.path} -k {k} --docs N`)"
        )
