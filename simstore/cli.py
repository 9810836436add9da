"""The ``simstore`` command line; ``main(argv) -> int``.

Exit status: 0 success, 1 a simstore error (message on stderr, no
traceback), 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from simstore.errors import SimstoreError
from simstore.store import __version__
from simstore.store import open as open_store


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simstore", description="A persistent near-duplicate index.")
    parser.add_argument("--version", action="version", version=f"simstore {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True)
    stats = verbs.add_parser("stats", help="print a store's size and layout")
    stats.add_argument("store")
    stats.add_argument("--json", action="store_true", help="print JSON")
    check = verbs.add_parser("check", help="verify a store's invariants")
    check.add_argument("store")
    merge = verbs.add_parser("merge", help="fold a store's delta into its tables")
    merge.add_argument("store")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.verb == "stats":
            with open_store(args.store, "r") as store:
                stats = store.stats()
            summary = {
                "path": stats.path,
                "docs": stats.docs,
                "delta_docs": stats.delta_docs,
                "k": stats.k,
                "blocks": stats.blocks,
                "tables": stats.tables,
                "prefix_bits": list(stats.prefix_bits),
                "bytes_on_disk": stats.bytes_on_disk,
            }
            if args.json:
                print(json.dumps(summary))
            else:
                for name, value in summary.items():
                    print(f"{name:14} {value}")
        elif args.verb == "check":
            with open_store(args.store, "r") as store:
                problems = store.check()
            for problem in problems:
                print(problem)
            if problems:
                print(f"{len(problems)} problem(s) found", file=sys.stderr)
                return 1
            print("ok")
        elif args.verb == "merge":
            with open_store(args.store, "w") as store:
                merged = store.merge()
            print(f"merged {merged} documents")
    except SimstoreError as exc:
        print(f"simstore: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
