"""The maintenance verbs: ``compact`` and ``migrate``."""

from __future__ import annotations

import argparse

from simstore.cli.common import CommandError, counted, print_json
from simstore.cli.progress import progress
from simstore.cli.stores import open_existing
from simstore.errors import StoreLockedError, StoreNotFoundError
from simstore.store.migrate import migrate
from simstore.store.shrink import shrink


def configure_compact(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    parser.add_argument(
        "--copy-to",
        metavar="NEW",
        help="also write a compacted copy of the store to NEW (a path that does not exist): "
        "only the pages in use, so the copy is as small as the store can be",
    )
    parser.add_argument(
        "--shrink",
        action="store_true",
        help="then rewrite the store's file with only the pages in use, giving back to the disk "
        "what removals freed (every other process must have closed the store)",
    )


def run_compact(args: argparse.Namespace) -> int:
    if args.shrink:
        if args.copy_to:
            raise CommandError("--shrink rewrites the store itself; leave out --copy-to")
        return _shrink(args)
    with open_existing(args.store, "w") as store:
        before = store.stats()
        moved = store.compact(copy_to=args.copy_to)
        after = store.stats()
    summary = {
        "entries_moved": moved,
        "bytes_used_before": before.bytes_used,
        "bytes_used_after": after.bytes_used,
        "bytes_live_before": before.bytes_live,
        "bytes_live_after": after.bytes_live,
        "bytes_on_disk": after.bytes_on_disk,
        "copy": args.copy_to,
    }
    if args.json:
        print_json(summary)
    else:
        print(
            f"compacted: {moved} table entries moved; {after.bytes_live:,} bytes hold data "
            f"({before.bytes_live:,} before), {after.bytes_used:,} bytes of pages used so far, "
            f"of a {after.bytes_on_disk:,}-byte file (freed pages are reused by later writes)"
        )
        if args.copy_to:
            print(f"wrote a compacted copy to {args.copy_to}")
    return 0


def _shrink(args: argparse.Namespace) -> int:
    open_existing(args.store, "r").close()  # a missing store is named as every verb names it
    try:
        shrunk = shrink(args.store)
    except StoreLockedError as exc:
        raise CommandError(f"{exc}; nothing was changed") from None
    if args.json:
        print_json({"bytes_before": shrunk.bytes_before, "bytes_after": shrunk.bytes_after})
    else:
        print(f"shrunk {args.store}: {shrunk.bytes_before:,} bytes before, {shrunk.bytes_after:,} after")
    return 0


def configure_migrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", help="a store written by simstore 0.1 (format 1); it is only read")
    parser.add_argument("new", help="where to write the new store (a path that does not exist)")


def run_migrate(args: argparse.Namespace) -> int:
    bar = progress(args, desc="migrating", unit="doc")

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    with bar:
        try:
            copied = migrate(args.old, args.new, progress=update)
        except StoreNotFoundError:
            raise CommandError(f"no store at {args.old} to migrate") from None
    if args.json:
        print_json({"documents": copied, "new": args.new})
    else:
        print(f"migrated {counted(copied, 'document')} into {args.new}")
    return 0
