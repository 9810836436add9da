"""The ``simstore`` verbs that work on one store: ``add``, ``query``,
``stats``, ``plan``, ``relayout``, ``check``, ``merge``, ``remove``,
``export`` and ``import``."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from simstore.cli.check_child import check_in_child
from simstore.cli.cleanup import existing_files, remove_new_store
from simstore.cli.common import (
    PROG,
    CommandError,
    counted,
    document_count,
    from_json,
    hex_fingerprint,
    json_safe,
    key_to_json,
    non_negative,
    parse_fingerprint,
    print_json,
    show_key,
)
from simstore.cli.documents import (
    Collected,
    add_input_options,
    check_inputs,
    fingerprint_documents,
    inputs_of,
    read_options,
    skip_reporter,
)
from simstore.cli.output import output_stream, refuse_clobbers, resolve_output
from simstore.cli.progress import ReadingBar, note, progress
from simstore.cli.stores import StoreOnDemand, check_distance, open_existing, open_or_create, similarity
from simstore.errors import InvalidTypeError, InvalidValueError, ParameterMismatchError, SimstoreError
from simstore.fingerprinting.fingerprinter import Fingerprinter, ShortTextWarning
from simstore.io.inputs import STDIN, STDIN_NAME, InputError
from simstore.io.readers import ON_ERROR, read_documents
from simstore.io.streams import text_lines
from simstore.keys import Key
from simstore.layout.choose import DEFAULT_K, MULTI_INDEX
from simstore.layout.presets import ExactThreshold
from simstore.store.dedup import LENGTH_FIELD
from simstore.store.facade import Store
from simstore.store.opening import open as open_store


def configure_add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file (created if missing)")
    parser.add_argument("files", nargs="+", metavar="FILE", help="input files or directories; - for stdin")
    parser.add_argument(
        "-k",
        "--k",
        type=non_negative,
        help=f"k of a new store (default {DEFAULT_K}); an existing store's must equal it",
    )
    parser.add_argument(
        "--batch-size",
        type=non_negative,
        default=0,
        metavar="N",
        help="commit every N documents (default 0: everything in one transaction)",
    )
    parser.add_argument(
        "--no-length", action="store_true", help=f"do not record each text's length as meta[{LENGTH_FIELD!r}]"
    )
    parser.add_argument(
        "--bands",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a new store keeps a band table, so that queries by text find one-word edits past k "
        "(the default where k >= 5; about 60 bytes a document); --no-bands keeps none",
    )
    parser.add_argument(
        "--min-similarity",
        type=similarity,
        metavar="J",
        help="a new store is made to find the documents whose word 3-shingles are at least this "
        "similar (0 to 1): k=5 beside a band table of 8 bands a width (16 below 0.9), verifying "
        "estimates from a little below J (0.862 for 0.9, 0.75 for 0.8; `simstore stats` shows it). "
        "An existing store's must match",
    )
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="with no document to add, still create a missing STORE, empty (else that is an error and "
        "nothing is created)",
    )
    add_input_options(parser)


def run_add(args: argparse.Namespace) -> int:
    options = read_options(args)
    errors = skip_reporter(args)
    committed = 0
    pending = Collected()
    inputs = inputs_of(args.files)
    check_inputs(inputs, options)  # before a new store is created
    # The delta is merged below on success only: a merge run by close() after
    # Ctrl-C or an error would hold the command up (16 s at 10M documents).
    with StoreOnDemand(
        args.store,
        args.k,
        lambda: open_or_create(
            args.store, args.k, merge_on_close=False, bands=args.bands, min_similarity=args.min_similarity
        ),
    ) as target:

        def commit(batch: Collected) -> None:
            nonlocal committed
            target.add(batch)
            committed = target.committed

        try:
            with ReadingBar(args, inputs) as bar:
                documents = read_documents(inputs, options, errors, bar.tracker)
                for chunk, values, sketches in fingerprint_documents(
                    target,
                    documents,
                    options,
                    errors,
                    with_length=not args.no_length,
                    chunk_docs=args.batch_size or None,
                ):
                    pending.extend(chunk, values, sketches)
                    pending.read += len(chunk)
                    bar.update(len(chunk))
                    # Commit at exact multiples of --batch-size.
                    while args.batch_size and len(pending.keys) >= args.batch_size:
                        commit(pending.take(args.batch_size))
            commit(pending)
            pending.clear()
        except KeyboardInterrupt:
            if committed:
                raise KeyboardInterrupt(
                    f"interrupted; {_committed_earlier(committed)} "
                    "(re-running the same input is safe: an existing key is replaced)"
                ) from None
            raise
        except SimstoreError as exc:
            if committed:
                raise CommandError(
                    f"{exc}; {_committed_earlier(committed)} "
                    "(re-running the same input is safe: an existing key is replaced)"
                ) from exc
            raise
        if not target.exists and not args.allow_empty:
            skipped = f", {counted(errors.skipped, 'bad line')} skipped" if errors.skipped else ""
            raise CommandError(
                f"no documents to add (the input holds none{skipped}), so {args.store} was not created "
                "(--allow-empty creates it empty)"
            )
        store = target.opened()  # with --allow-empty, a new store with no documents
        try:
            store.merge()
        except KeyboardInterrupt:
            raise KeyboardInterrupt(
                f"interrupted while merging; all {counted(committed, 'document')} "
                f"{'was' if committed == 1 else 'were'} committed "
                "(the store merges its delta later)"
            ) from None
        total = len(store)
    summary = {"store": args.store, "added": committed, "skipped": errors.skipped, "docs": total}
    if args.json:
        print_json(summary)
    else:
        skipped = f", skipped {counted(errors.skipped, 'bad line')}" if errors.skipped else ""
        print(f"added {counted(committed, 'document')}{skipped}; the store holds {total}")
    return 0


def _committed_earlier(count: int) -> str:
    """What a failed ``add --batch-size`` had committed: "1 document of earlier batches was committed"."""
    return f"{counted(count, 'document')} of earlier batches {'was' if count == 1 else 'were'} committed"


def configure_query(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    parser.add_argument("text", nargs="?", help="the query text")
    parser.add_argument("--file", metavar="F", help="read the query text from a file (- for stdin)")
    parser.add_argument("--fingerprint", type=parse_fingerprint, metavar="HEX", help="query a fingerprint")
    parser.add_argument("-k", "--k", type=non_negative, help="largest distance (default: the store's k)")
    parser.add_argument("--meta", action="store_true", help="show each match's metadata")
    parser.add_argument(
        "--min-similarity",
        type=similarity,
        metavar="J",
        help="only matches that share at least this estimated fraction of the text's word "
        "3-shingles (0 to 1; needs a query text)",
    )


def run_query(args: argparse.Namespace) -> int:
    given = [args.text is not None, args.file is not None, args.fingerprint is not None]
    if sum(given) != 1:
        args.parser.error("give exactly one of TEXT, --file F or --fingerprint HEX")
    if args.fingerprint is not None and args.min_similarity is not None:
        args.parser.error("--min-similarity needs a query text, not --fingerprint")
    with open_existing(args.store) as store:
        text = None
        if args.fingerprint is not None:
            query = args.fingerprint
        else:
            text = args.text
            if args.file is not None:
                if args.file == STDIN:
                    text = sys.stdin.read()
                else:
                    with open(args.file, encoding="utf-8") as handle:
                        text = handle.read()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ShortTextWarning)
                query = store.fingerprinter.fingerprint(text)
        check_distance(args.k, store)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ShortTextWarning)
            if text is None:
                matches = store.query(fingerprint=query, k=args.k, with_meta=args.meta)
            else:
                matches = store.query(
                    text=text, k=args.k, with_meta=args.meta, min_similarity=args.min_similarity
                )
    if args.json:
        print_json(
            {
                "fingerprint": hex_fingerprint(query),
                "matches": [
                    {
                        "key": key_to_json(match.key),
                        "distance": match.distance,
                        "fingerprint": hex_fingerprint(match.fingerprint),
                        **({"meta": json_safe(match.meta)} if args.meta else {}),
                        **({} if match.similarity is None else {"similarity": round(match.similarity, 4)}),
                    }
                    for match in matches
                ],
            }
        )
        return 0
    for match in matches:
        line = f"{match.distance}\t{show_key(match.key)}"
        if args.meta:
            line += "\t" + json.dumps(json_safe(match.meta), ensure_ascii=False)
        print(line)
    if not matches:
        note(args, f"no document within {store.k if args.k is None else args.k} bits")
    return 0


def configure_store_only(parser: argparse.ArgumentParser) -> None:
    """Options of a verb that takes only the store."""
    parser.add_argument("store", help="the store file")


def configure_stats(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    parser.add_argument(
        "--skew",
        action="store_true",
        help="also measure per-table skew and degenerate fingerprints (reads every fingerprint)",
    )


def run_stats(args: argparse.Namespace) -> int:
    with open_existing(args.store) as store:
        stats = store.stats(skew=args.skew)
    summary: dict[str, Any] = {
        "path": stats.path,
        "docs": stats.docs,
        "delta_docs": stats.delta_docs,
        "k": stats.k,
        "layout": stats.layout_name,
        "blocks": stats.blocks,
        "tables": stats.tables,
        "prefix_bits": list(stats.prefix_bits),
        "bytes_on_disk": stats.bytes_on_disk,
        "bytes_used": stats.bytes_used,
        "bytes_live": stats.bytes_live,
        "runs": stats.runs,
        "compacting": stats.compacting,
        "sketched_docs": stats.sketched_docs,
        "sketch_bytes": stats.sketch_bytes,
        "min_similarity": stats.min_similarity,
    }
    if stats.skew is not None and stats.degenerate is not None:
        summary["largest_range"] = [table.largest_range for table in stats.skew]
        summary["p99_range"] = [table.p99_range for table in stats.skew]
        summary["hot_prefixes"] = [
            [[hex(prefix), size] for prefix, size in table.hot_prefixes] for table in stats.skew
        ]
        summary["zero_fingerprints"] = stats.degenerate.zeros
        summary["all_ones_fingerprints"] = stats.degenerate.ones
        summary["most_shared"] = [[hex_fingerprint(fp), docs] for fp, docs in stats.degenerate.shared]
    if args.json:
        print_json(summary)
    else:
        for name, value in summary.items():
            print(f"{name:18} {value}")
    return 0


def configure_relayout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    choice = parser.add_mutually_exclusive_group(required=True)
    choice.add_argument(
        "--docs", type=document_count, help="the multi-index scheme (format 3) for this many documents"
    )
    choice.add_argument("--blocks", type=non_negative, help="Manku's one-level layout with this many blocks")
    choice.add_argument(
        "--multi-index",
        action="store_true",
        help="a multi-index scheme: a few tables searched with many probes (format 3)",
    )
    parser.add_argument("-k", "--k", type=non_negative, default=None, help="a new k (default: the store's)")


def run_relayout(args: argparse.Namespace) -> int:
    with open_existing(args.store, "w") as store:
        if args.multi_index:
            store.relayout(MULTI_INDEX, k=args.k)
        elif args.docs is not None:
            store.relayout(k=args.k, expected_docs=args.docs)
        else:
            store.relayout(k=args.k, blocks=args.blocks)
        stats = store.stats()
    note(args, f"{stats.path}: {stats.layout_name}, k={stats.k}, {stats.tables} tables")
    return 0


def run_check(args: argparse.Namespace) -> int:
    # Open here first, so that a file that is not a store is refused as
    # usual; the walk over every page runs in a child process that damage
    # can kill without taking the command with it (simstore.cli.check_child).
    open_existing(args.store).close()
    problems = check_in_child(args.store)
    if args.json:
        print_json({"ok": not problems, "problems": problems})
    else:
        for problem in problems:
            print(problem)
        if not problems:
            print("ok")
    if problems:
        print(f"{PROG}: error: {len(problems)} problem(s) found", file=sys.stderr)
        return 1
    return 0


def run_merge(args: argparse.Namespace) -> int:
    with open_existing(args.store, "w") as store:
        merged = store.merge()
    print(f"merged {counted(merged, 'document')}")
    return 0


def configure_remove(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    parser.add_argument(
        "keys", nargs="+", metavar="KEY", help="keys to remove (a number also matches an int key)"
    )
    parser.add_argument("--missing-ok", action="store_true", help="ignore keys the store does not hold")


def run_remove(args: argparse.Namespace) -> int:
    with open_existing(args.store, "w") as store:
        # Resolve every key first, so that a missing one removes nothing.
        resolved: list[Key] = []
        missing: list[str] = []
        for text in args.keys:
            key = _stored_key(store, text)
            if key is None:
                missing.append(text)
            else:
                resolved.append(key)
        if missing and not args.missing_ok:
            raise CommandError(f"no document with key {', '.join(map(repr, missing))}; nothing was removed")
        store.remove_many(resolved)  # one transaction: all of them or none
    print(f"removed {counted(len(dict.fromkeys(resolved)), 'document')}")
    return 0


def _stored_key(store: Store, text: str) -> Key | None:
    """The stored key a command-line word names: the string, or else the
    integer it spells (keys read from JSON ids may be ints)."""
    if text in store:
        return text
    try:
        number = int(text)
    except ValueError:
        return None
    return number if number in store else None


def configure_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    parser.add_argument(
        "-o", "--output", default=STDIN, metavar="OUT", help="where to write (default: stdout)"
    )


#: The first line of an export names the store's settings under this key.
EXPORT_HEADER = "simstore_export"
#: The version of that line this simstore writes (and the newest it reads).
EXPORT_VERSION = 1


def run_export(args: argparse.Namespace) -> int:
    output = resolve_output(args.output)
    refuse_clobbers([("-o", output)], [("the store", args.store)])
    with open_existing(args.store) as store:
        items = list(store.items())
        # Each sketch names its geometry, so that import refuses another one.
        geometry = "" if store.sketch is None else f"{store.sketch.bins}x{store.sketch.bits}"
        with (
            output_stream(output) as stream,
            progress(args, desc="exporting", total=len(items), unit="doc") as bar,
        ):
            stream.write(json.dumps(_export_header(store)) + "\n")
            for key, _fingerprint in items:
                record = store.get(key)
                if record is None:  # removed by another process since items()
                    continue
                line = {"key": key_to_json(key), "fingerprint": hex_fingerprint(record.fingerprint)}
                if record.meta is not None:
                    line["meta"] = json_safe(record.meta)
                sketch = store.sketch_of(key) if geometry else None
                if sketch is not None:
                    line["sketch"] = f"{geometry}:{base64.b64encode(sketch).decode('ascii')}"
                stream.write(json.dumps(line, ensure_ascii=False) + "\n")
                bar.update(1)
    return 0


def _export_header(store: Store) -> dict[str, Any]:
    """The settings line an export starts with: what :func:`run_import`
    needs to make a store that answers as this one does."""
    return {
        EXPORT_HEADER: EXPORT_VERSION,
        "k": store.k,
        "fingerprinter": store.fingerprinter.settings(),
        "min_similarity": store.min_similarity,
        "bands": store.bands,
    }


@dataclass(frozen=True)
class ExportSettings:
    """The settings an export's first line names (see :func:`_export_header`)."""

    k: int
    fingerprinter: Fingerprinter
    min_similarity: float | None
    #: The exported store's band table (``False``: none; ``None``: an export
    #: from before band tables, so a new store gets the default).
    bands: bool | int | None = None


def _parse_export_header(record: dict[str, Any], name: str, number: int) -> ExportSettings:
    """The settings of an export's header line ``record``.

    Raises:
        InputError: naming the line, for a newer version or a bad setting.
    """
    version = record[EXPORT_HEADER]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputError(name, number, f"{EXPORT_HEADER} must be a version number, got {version!r}")
    if version > EXPORT_VERSION:
        raise InputError(
            name, number, f"an export of version {version}, written by a newer simstore (this one reads 1)"
        )
    k = record.get("k")
    min_similarity = record.get("min_similarity")
    bands = record.get("bands")
    try:
        if bands is not None and (isinstance(bands, bool) or not isinstance(bands, int)):
            raise InvalidValueError(f"bands must be an integer or null, got {bands!r}")
        if isinstance(k, bool) or not isinstance(k, int):
            raise InvalidValueError(f"k must be an integer, got {k!r}")
        if min_similarity is not None and (
            isinstance(min_similarity, bool) or not isinstance(min_similarity, int | float)
        ):
            raise InvalidValueError(f"min_similarity must be a number or null, got {min_similarity!r}")
        fingerprinter = Fingerprinter.from_settings(record.get("fingerprinter"))  # type: ignore[arg-type]
    except (InvalidValueError, InvalidTypeError) as exc:
        raise InputError(name, number, f"bad settings line: {exc}") from None
    stored_bands: bool | int | None = (False if bands is None else bands) if "bands" in record else None
    return ExportSettings(
        k, fingerprinter, None if min_similarity is None else float(min_similarity), stored_bands
    )


def _open_import_target(
    args: argparse.Namespace, settings: ExportSettings | None, sketches: list[tuple[str, bytes] | None]
) -> Store:
    """The store to import into: a new one made with the export's settings
    (``-k`` overriding its k), or an existing one whose settings equal them.
    A new store is not made when the lines' sketches would not fit it."""
    if not os.path.exists(args.store):
        fingerprinter = Fingerprinter() if settings is None else settings.fingerprinter
        geometries = {sketch[0] for sketch in sketches if sketch is not None}
        expected = fingerprinter.sketch
        kept = "none" if expected is None else f"{expected.bins}x{expected.bits}"
        if geometries and geometries != {kept}:
            raise CommandError(
                f"the lines carry sketches of geometry {', '.join(sorted(geometries))}, but a new store "
                f"made from {_shown(args.file)} would keep {kept}"
                + (" (it has no settings line naming the exported store's)" if settings is None else "")
                + "; nothing was written"
            )
    if settings is None:
        if not os.path.exists(args.store):
            print(
                f"{PROG}: warning: {_shown(args.file)} has no settings line (an export of an older "
                f"simstore): {args.store} gets k={DEFAULT_K if args.k is None else args.k} and the default "
                "fingerprinter, so text queries find its documents only if the exported store had them too",
                file=sys.stderr,
            )
        return open_or_create(args.store, args.k)
    k = settings.k if args.k is None else args.k
    try:
        return open_store(
            args.store,
            "c",
            k=k,
            fingerprinter=settings.fingerprinter,
            # The export's threshold as it is: not the lower one a new store
            # asked to find pairs that similar verifies at.
            min_similarity=None
            if settings.min_similarity is None
            else ExactThreshold(settings.min_similarity),
            # A new store keeps the exported one's band table, or none; an
            # existing one keeps its own (it changes no stored document).
            bands=None if os.path.exists(args.store) else settings.bands,
        )
    except ParameterMismatchError as exc:
        listed = "; ".join(
            f"{name}: {stored!r} in the store, {requested!r} in the export"
            for name, (stored, requested) in sorted(exc.differences.items())
        )
        hint = "import into a new store"
        if set(exc.differences) == {"k"}:
            stored_k = exc.differences["k"][0]
            hint += f", or pass -k {stored_k} to add the fingerprints to this k={stored_k} store"
        raise CommandError(
            f"{args.store} has other settings than the export {_shown(args.file)} ({listed}); {hint}"
        ) from None


def configure_import(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file (created if missing)")
    parser.add_argument("file", metavar="FILE", help="JSONL written by `simstore export` (- for stdin)")
    parser.add_argument(
        "-k",
        "--k",
        type=non_negative,
        help="k of a new store (default: the exported store's, named by the export's first line; "
        f"{DEFAULT_K} for an export without one)",
    )
    parser.add_argument(
        "--on-error", choices=ON_ERROR, default="fail", help="stop at a bad line (default) or skip it"
    )


def run_import(args: argparse.Namespace) -> int:
    errors = skip_reporter(args)
    keys: list[Key] = []
    fingerprints: list[int] = []
    metas: list[dict[str, Any] | None] = []
    sketches: list[tuple[str, bytes] | None] = []
    settings: ExportSettings | None = None
    first = True
    for number, line in text_lines(args.file):
        if isinstance(line, str) and not line.strip():
            continue
        at_start, first = first, False
        try:
            if isinstance(line, InputError):
                raise line
            record = _parse_json_object(line)
            if EXPORT_HEADER in record and not at_start:
                raise ValueError("a settings line belongs on the first line of an export")
            if EXPORT_HEADER not in record:
                key, fingerprint, meta, sketch = _parse_export_record(record)
        except ValueError as exc:
            error = exc if isinstance(exc, InputError) else InputError(_shown(args.file), number, str(exc))
            if args.on_error == "fail":
                raise error from None
            errors(error)
            continue
        if EXPORT_HEADER in record:
            # Not a bad line to skip: without its settings the store would answer wrongly.
            settings = _parse_export_header(record, _shown(args.file), number)
            continue
        keys.append(key)
        fingerprints.append(fingerprint)
        metas.append(meta)
        sketches.append(sketch)
    before = existing_files(args.store)
    committed = False
    try:
        with _open_import_target(args, settings, sketches) as store:
            if keys:
                has_meta = any(meta is not None for meta in metas)
                store.add_many(
                    keys,
                    np.array(fingerprints, dtype=np.uint64),
                    metas=metas if has_meta else None,
                    sketches=_sketch_rows(store, sketches),
                )
            committed = True
            total = len(store)
    except BaseException:
        if not committed:
            # A store this command created (closed by now) goes again; see simstore.cli.cleanup.
            remove_new_store(args.store, before)
        raise
    print(f"imported {counted(len(keys), 'document')}; the store holds {total}")
    return 0


def _sketch_rows(store: Store, sketches: list[tuple[str, bytes] | None]) -> np.ndarray | None:
    """The imported sketches as rows for ``add_many`` (zeros where a line had
    none), checked against the store's geometry; ``None`` if no line had one."""
    if all(sketch is None for sketch in sketches):
        return None
    expected = store.sketch
    if expected is None:
        raise CommandError(f"the lines carry sketches, but {store.path} keeps none")
    geometry = f"{expected.bins}x{expected.bits}"
    rows = np.zeros((len(sketches), expected.nbytes), dtype=np.uint8)
    for index, sketch in enumerate(sketches):
        if sketch is None:
            continue
        name, raw = sketch
        if name != geometry or len(raw) != expected.nbytes:
            raise CommandError(
                f"a line's sketch has geometry {name} ({len(raw)} bytes); {store.path} keeps {geometry}"
            )
        rows[index] = np.frombuffer(raw, dtype=np.uint8)
    return rows


def _shown(path: str) -> str:
    return STDIN_NAME if path == STDIN else path


def _parse_json_object(line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg}") from None
    if not isinstance(record, dict):
        raise ValueError('expected an object with "key" and "fingerprint"')
    return record


def _parse_export_record(
    record: dict[str, Any],
) -> tuple[Key, int, dict[str, Any] | None, tuple[str, bytes] | None]:
    if "key" not in record or "fingerprint" not in record:
        raise ValueError('expected an object with "key" and "fingerprint"')
    key = from_json(record["key"])
    if isinstance(key, bool) or not isinstance(key, str | bytes | int):
        raise ValueError(f"a key must be a string, an integer or {{'$bytes': ...}}, got {record['key']!r}")
    raw_fingerprint = record["fingerprint"]
    if not isinstance(raw_fingerprint, str):
        raise ValueError("the fingerprint must be a hexadecimal string")
    try:
        fingerprint = parse_fingerprint(raw_fingerprint)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(str(exc)) from None
    meta = record.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise ValueError("meta must be an object")
    sketch = None
    raw_sketch = record.get("sketch")
    if raw_sketch is not None:
        geometry, _, encoded = str(raw_sketch).partition(":")
        try:
            sketch = (geometry, base64.b64decode(encoded, validate=True))
        except ValueError:
            raise ValueError('a sketch must be "BINSxBITS:BASE64"') from None
    return key, fingerprint, from_json(meta) if meta is not None else None, sketch
