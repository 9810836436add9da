"""The ``simstore`` command line; ``main(argv) -> int``.

Verbs: ``add``, ``query``, ``dedup``, ``stats``, ``check``, ``merge``,
``remove``, ``export``, ``import``. Each verb is a ``configure`` function
(its arguments) and a ``run`` function (``args -> exit status``), listed once
in :data:`VERBS`; a new verb is two functions and one line there.

Exit status: 0 success, 1 a simstore error or bad input (one line on stderr,
``simstore: error: ...``, no traceback), 2 a usage error (argparse's usage
message). Progress bars go to stderr, only when it is a terminal and ``-q``
is not given. Read verbs take ``--json``.

Writes are all or nothing by default: ``add`` and ``import`` read, check and
fingerprint the whole input first and write it in one transaction, so with
``--on-error fail`` a bad line leaves the store exactly as it was, and an
interrupted run commits nothing. ``--batch-size N`` commits every ``N``
documents instead (bounded memory); each batch is all or nothing, and a
failure reports how many documents the earlier batches committed. Re-running
the same input is safe either way: adding an existing key replaces it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from simstore.batch import KEEP_POLICIES, LENGTH_FIELD
from simstore.errors import InvalidValueError, SimstoreError
from simstore.opening import open as open_store
from simstore.permute import MAX_FINGERPRINT
from simstore.planner import format_plan, plan
from simstore.readers import (
    FORMATS,
    ON_ERROR,
    STDIN,
    STDIN_NAME,
    Document,
    DocumentWriter,
    ErrorCounter,
    Input,
    InputError,
    ReadOptions,
    format_of,
    read_documents,
)
from simstore.records import Key
from simstore.simhash import ShortTextWarning
from simstore.store import Store, __version__

PROG = "simstore"
#: Texts fingerprinted per call: enough characters for the fingerprinter to
#: use every core, few enough documents for a responsive progress bar.
FINGERPRINT_CHUNK_DOCS = 20_000
FINGERPRINT_CHUNK_CHARS = 16_000_000
#: Queries per query_many call in ``dedup --against``.
QUERY_CHUNK = 10_000
DEFAULT_K = 3


class CommandError(SimstoreError):
    """A command cannot go on; its message is printed as ``simstore: error: ...``."""


# ------------------------------------------------------------ shared helpers


def progress(args: argparse.Namespace, **options: Any) -> Any:
    """A tqdm bar on stderr, disabled by ``-q`` or when stderr is not a terminal."""
    from tqdm import tqdm  # lazily: `simstore stats` should start fast

    disabled = bool(getattr(args, "quiet", False)) or not sys.stderr.isatty()
    return tqdm(file=sys.stderr, disable=disabled, dynamic_ncols=True, **options)


def table_progress(args: argparse.Namespace, description: str) -> tuple[Any, Callable[[int, int], None]]:
    bar = progress(args, desc=description, unit="table")

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    return bar, update


def note(args: argparse.Namespace, message: str) -> None:
    """A line on stderr unless ``-q``."""
    if not getattr(args, "quiet", False):
        print(f"{PROG}: {message}", file=sys.stderr)


def key_to_json(key: Key) -> Any:
    """Keys as JSON: str and int as themselves, bytes as ``{"$bytes": base64}``."""
    if isinstance(key, bytes):
        return {"$bytes": base64.b64encode(key).decode("ascii")}
    return key


def json_safe(value: Any) -> Any:
    """Metadata as JSON: bytes anywhere become ``{"$bytes": base64}``."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(name): json_safe(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def from_json(value: Any) -> Any:
    """The inverse of :func:`json_safe`."""
    if isinstance(value, dict):
        if len(value) == 1 and "$bytes" in value and isinstance(value["$bytes"], str):
            return base64.b64decode(value["$bytes"], validate=True)
        return {name: from_json(item) for name, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def show_key(key: Key) -> str:
    return key if isinstance(key, str) else repr(key)


def hex_fingerprint(value: int) -> str:
    return f"{value:016x}"


def parse_fingerprint(text: str) -> int:
    """A fingerprint given as hex (``0x`` optional)."""
    try:
        value = int(text, 16)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a hexadecimal fingerprint: {text!r}") from None
    if not 0 <= value <= MAX_FINGERPRINT:
        raise argparse.ArgumentTypeError(f"a fingerprint has 64 bits; {text!r} is too large")
    return value


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False))


@contextlib.contextmanager
def output_stream(path: str) -> Iterator[TextIO]:
    """``path`` opened for writing (``-`` is stdout); a failed command leaves
    no half-written file: it writes to a temporary file renamed at the end."""
    if path == STDIN:
        yield sys.stdout
        sys.stdout.flush()
        return
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".simstore-", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            yield stream
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


# ------------------------------------------------------------------- inputs


def add_input_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("input")
    group.add_argument(
        "--format",
        choices=FORMATS,
        default="auto",
        help="input format (default: by extension; stdin: sniffed)",
    )
    group.add_argument(
        "--id-field", help="JSONL field / CSV column holding the key (default: id, else FILE:LINE)"
    )
    group.add_argument(
        "--text-field", default="text", help="JSONL field / CSV column holding the text (default: text)"
    )
    group.add_argument(
        "--meta-field",
        action="append",
        default=[],
        metavar="FIELD",
        help="also store this field as metadata (repeatable)",
    )
    group.add_argument(
        "--on-error",
        choices=ON_ERROR,
        default="fail",
        help="a bad input line stops the command before anything is written (fail, the default) "
        "or is reported and skipped (skip)",
    )


def read_options(args: argparse.Namespace) -> ReadOptions:
    return ReadOptions(
        format=args.format,
        id_field=args.id_field,
        text_field=args.text_field,
        meta_fields=tuple(args.meta_field),
        on_error=args.on_error,
    )


def inputs_of(paths: Sequence[str], spool_dir: str | None = None) -> list[Input]:
    """Command-line paths as inputs; with ``spool_dir``, stdin is first copied
    to a file there so that it can be read twice."""
    if sum(path == STDIN for path in paths) > 1:
        raise CommandError("standard input (-) may be given only once")
    inputs = []
    for path in paths:
        if path == STDIN and spool_dir is not None:
            spooled = os.path.join(spool_dir, "stdin")
            with open(spooled, "wb") as copy:
                source = getattr(sys.stdin, "buffer", None)
                if source is not None:
                    shutil.copyfileobj(source, copy)
                else:
                    copy.write(sys.stdin.read().encode("utf-8"))
            inputs.append(Input(spooled, STDIN_NAME, format=_sniff_spooled(spooled)))
        else:
            inputs.append(Input(path, STDIN_NAME if path == STDIN else ""))
    return inputs


def _sniff_spooled(path: str) -> str:
    with open(path, "rb") as stream:
        for line in stream:
            if line.strip():
                return "jsonl" if line.lstrip(b"\xef\xbb\xbf").lstrip().startswith(b"{") else "text"
    return "text"


@dataclass
class Collected:
    """Documents read and fingerprinted: keys, fingerprints, metadata."""

    keys: list[Key] = field(default_factory=list)
    fingerprints: list[np.ndarray] = field(default_factory=list)
    metas: list[dict[str, Any] | None] = field(default_factory=list)
    read: int = 0

    def fingerprint_array(self) -> np.ndarray:
        if not self.fingerprints:
            return np.zeros(0, dtype=np.uint64)
        return np.concatenate(self.fingerprints)

    def clear(self) -> None:
        self.keys.clear()
        self.fingerprints.clear()
        self.metas.clear()


def fingerprint_documents(
    store: Store,
    documents: Iterable[Document],
    options: ReadOptions,
    errors: ErrorCounter,
    *,
    with_length: bool,
) -> Iterator[tuple[list[Document], np.ndarray]]:
    """Fingerprint documents in chunks; a text the fingerprinter refuses is a
    bad line like any other."""
    fingerprinter = store.fingerprinter
    chunk: list[Document] = []
    characters = 0

    def flush() -> Iterator[tuple[list[Document], np.ndarray]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ShortTextWarning)
            try:
                values = fingerprinter.fingerprint_many([doc.text for doc in chunk])
                yield list(chunk), values
                return
            except InvalidValueError:
                pass
            # Some text has no features: find which, one at a time.
            good: list[Document] = []
            good_values: list[int] = []
            for doc in chunk:
                try:
                    good_values.append(fingerprinter.fingerprint(doc.text))
                    good.append(doc)
                except InvalidValueError as exc:
                    error = InputError(doc.source, doc.line, str(exc))
                    if options.on_error == "fail":
                        raise error from None
                    errors(error)
            yield good, np.array(good_values, dtype=np.uint64)

    for document in documents:
        if with_length:
            meta = dict(document.meta or {})
            meta[LENGTH_FIELD] = len(document.text)
            document = Document(
                document.key, document.text, document.source, document.line, document.record, meta
            )
        chunk.append(document)
        characters += len(document.text)
        if len(chunk) >= FINGERPRINT_CHUNK_DOCS or characters >= FINGERPRINT_CHUNK_CHARS:
            yield from flush()
            chunk = []
            characters = 0
    if chunk:
        yield from flush()


def skip_reporter(args: argparse.Namespace) -> ErrorCounter:
    def report(error: InputError) -> None:
        if not args.quiet:
            print(f"{PROG}: skipped {error}", file=sys.stderr)

    return ErrorCounter(report)


def unique_keys(
    documents: Iterable[Document], options: ReadOptions, errors: ErrorCounter
) -> Iterator[Document]:
    """Documents with a key seen before are bad lines (``dedup`` needs unique keys)."""
    first_seen: dict[Key, str] = {}
    for document in documents:
        seen = first_seen.get(document.key)
        if seen is not None:
            error = InputError(
                document.source, document.line, f"key {document.key!r} repeats (first at {seen})"
            )
            if options.on_error == "fail":
                raise error
            errors(error)
            continue
        first_seen[document.key] = f"{document.source}:{document.line}"
        yield document


# --------------------------------------------------------------------- verbs


def configure_add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file (created if missing)")
    parser.add_argument("files", nargs="+", metavar="FILE", help="input files or directories; - for stdin")
    parser.add_argument(
        "-k", type=non_negative, help="k of a new store (default 3); an existing store's must equal it"
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
    add_input_options(parser)


def run_add(args: argparse.Namespace) -> int:
    options = read_options(args)
    errors = skip_reporter(args)
    committed = 0
    pending = Collected()
    with open_store(args.store, "c", k=args.k) as store:

        def commit() -> None:
            nonlocal committed
            if pending.keys:
                metas = pending.metas if any(meta is not None for meta in pending.metas) else None
                store.add_many(pending.keys, pending.fingerprint_array(), metas=metas)
                committed += len(pending.keys)
                pending.clear()

        try:
            with progress(args, desc="reading", unit="doc") as bar:
                documents = read_documents(inputs_of(args.files), options, errors)
                for chunk, values in fingerprint_documents(
                    store, documents, options, errors, with_length=not args.no_length
                ):
                    pending.keys.extend(doc.key for doc in chunk)
                    pending.metas.extend(doc.meta for doc in chunk)
                    pending.fingerprints.append(values)
                    pending.read += len(chunk)
                    bar.update(len(chunk))
                    if args.batch_size and len(pending.keys) >= args.batch_size:
                        commit()
            commit()
        except (SimstoreError, KeyboardInterrupt) as exc:
            if committed:
                raise CommandError(
                    f"{exc}; {committed} documents of earlier batches were committed "
                    "(re-running the same input is safe: an existing key is replaced)"
                ) from exc
            raise
        total = len(store)
    summary = {"store": args.store, "added": committed, "skipped": errors.skipped, "docs": total}
    if args.json:
        print_json(summary)
    else:
        skipped = f", skipped {errors.skipped} bad lines" if errors.skipped else ""
        print(f"added {committed} documents{skipped}; the store holds {total}")
    return 0


def configure_query(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    parser.add_argument("text", nargs="?", help="the query text")
    parser.add_argument("--file", metavar="F", help="read the query text from a file (- for stdin)")
    parser.add_argument("--fingerprint", type=parse_fingerprint, metavar="HEX", help="query a fingerprint")
    parser.add_argument("-k", type=non_negative, help="largest distance (default: the store's k)")
    parser.add_argument("--meta", action="store_true", help="show each match's metadata")


def run_query(args: argparse.Namespace) -> int:
    given = [args.text is not None, args.file is not None, args.fingerprint is not None]
    if sum(given) != 1:
        args.parser.error("give exactly one of TEXT, --file F or --fingerprint HEX")
    with open_store(args.store, "r") as store:
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
        matches = store.query(fingerprint=query, k=args.k, with_meta=args.meta)
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


def configure_dedup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="input files or directories; - for stdin")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write (- for stdout)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--store", metavar="STORE", help="add the documents to this store (default: a temporary one)"
    )
    where.add_argument(
        "--against", metavar="STORE", help="match the documents against this store, inserting nothing"
    )
    parser.add_argument(
        "-k", type=non_negative, help="largest distance of a duplicate (default: the store's k, or 3)"
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--pairs", action="store_true", help="write the near-duplicate pairs as JSONL")
    what.add_argument("--clusters", action="store_true", help="write the clusters as JSONL")
    parser.add_argument(
        "--keep",
        choices=KEEP_POLICIES,
        default="first",
        help="which document of a cluster is kept: the first read (default) or the longest text",
    )
    add_input_options(parser)


@dataclass
class DedupSummary:
    documents: int = 0
    skipped: int = 0
    duplicates: int = 0
    clusters: int = 0
    largest_cluster: int = 0
    kept: int = 0
    output: str = ""


def run_dedup(args: argparse.Namespace) -> int:
    if args.against is not None and args.clusters:
        args.parser.error("--clusters needs the documents in a store; it cannot be used with --against")
    if args.against is not None and args.keep != "first":
        args.parser.error("--keep chooses within clusters; it cannot be used with --against")
    options = read_options(args)
    errors = skip_reporter(args)
    summary = DedupSummary(output=args.output)
    with tempfile.TemporaryDirectory(prefix="simstore-dedup-") as scratch:
        inputs = inputs_of(args.files, spool_dir=scratch)
        if args.against is not None:
            with open_store(args.against, "r") as store:
                dropped = dedup_against(args, store, inputs, options, errors, summary)
        else:
            if args.store is not None:
                # An existing store keeps its k; -k then only narrows the distance.
                new_k = args.k if not os.path.exists(args.store) else None
                store = open_store(args.store, "c", k=new_k)
            else:
                store = open_store(
                    os.path.join(scratch, "dedup.simstore"),
                    "n",
                    k=DEFAULT_K if args.k is None else args.k,
                    sync=False,
                    merge_on_close=False,
                )
            with store:
                dropped = dedup_within(args, store, inputs, options, errors, summary)
        summary.skipped = errors.skipped
        if not (args.pairs or args.clusters):
            summary.kept = write_kept(args, inputs, options, dropped)
    report = vars(summary).copy()
    if args.against is not None:
        # Against a store, a duplicate is a document with a stored match; there are no clusters.
        del report["clusters"], report["largest_cluster"]
    if args.pairs or args.clusters:
        del report["kept"]
    if args.json:
        print_json(report)
    else:
        stream = sys.stderr if args.output == STDIN else sys.stdout
        for name, value in report.items():
            print(f"{name.replace('_', ' '):16} {value}", file=stream)
    return 0


def _collect(
    args: argparse.Namespace,
    store: Store,
    inputs: list[Input],
    options: ReadOptions,
    errors: ErrorCounter,
    *,
    with_length: bool,
) -> Collected:
    collected = Collected()
    with progress(args, desc="reading", unit="doc") as bar:
        documents = unique_keys(read_documents(inputs, options, errors), options, errors)
        for chunk, values in fingerprint_documents(
            store, documents, options, errors, with_length=with_length
        ):
            collected.keys.extend(doc.key for doc in chunk)
            collected.metas.extend(doc.meta for doc in chunk)
            collected.fingerprints.append(values)
            bar.update(len(chunk))
    collected.read = len(collected.keys)
    return collected


def dedup_within(
    args: argparse.Namespace,
    store: Store,
    inputs: list[Input],
    options: ReadOptions,
    errors: ErrorCounter,
    summary: DedupSummary,
) -> set[Key]:
    """Add the documents, cluster the store, write pairs or clusters if asked;
    returns the keys of the documents not kept."""
    persistent = args.store is not None
    collected = _collect(
        args, store, inputs, options, errors, with_length=persistent or args.keep == "longest"
    )
    summary.documents = collected.read
    metas = collected.metas if any(meta is not None for meta in collected.metas) else None
    if collected.keys:
        with progress(args, desc="writing", total=1, unit="txn") as bar:
            store.add_many(collected.keys, collected.fingerprint_array(), metas=metas)
            bar.update(1)
    bar, update = table_progress(args, "clustering")
    with bar:
        clusters = store.clusters(k=args.k, keep=args.keep, progress=update)
    dropped: set[Key] = set()
    for cluster in clusters:
        dropped.update(cluster.duplicates)
    summary.duplicates = len(dropped)
    summary.clusters = len(clusters)
    summary.largest_cluster = max((cluster.size for cluster in clusters), default=0)
    if args.pairs:
        bar, update = table_progress(args, "pairs")
        with bar, output_stream(args.output) as stream:
            for pair in store.near_duplicate_pairs(k=args.k, progress=update):
                record = {
                    "a": key_to_json(pair.key_a),
                    "b": key_to_json(pair.key_b),
                    "distance": pair.distance,
                }
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    elif args.clusters:
        with output_stream(args.output) as stream:
            for cluster in clusters:
                record = {
                    "cluster": cluster.cluster_id,
                    "representative": key_to_json(cluster.representative),
                    "size": cluster.size,
                    "members": [key_to_json(key) for key in cluster.members],
                }
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    return dropped


def dedup_against(
    args: argparse.Namespace,
    store: Store,
    inputs: list[Input],
    options: ReadOptions,
    errors: ErrorCounter,
    summary: DedupSummary,
) -> set[Key]:
    """Match every document against ``store``; returns the keys that matched."""
    collected = _collect(args, store, inputs, options, errors, with_length=False)
    summary.documents = collected.read
    fingerprints = collected.fingerprint_array()
    matched: set[Key] = set()
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(output_stream(args.output)) if args.pairs else None
        bar = stack.enter_context(progress(args, desc="matching", total=len(fingerprints), unit="doc"))
        for start in range(0, len(fingerprints), QUERY_CHUNK):
            results = store.query_many(fingerprints[start : start + QUERY_CHUNK], k=args.k)
            for key, matches in zip(collected.keys[start : start + QUERY_CHUNK], results, strict=True):
                if not matches:
                    continue
                matched.add(key)
                if stream is not None:
                    for match in matches:
                        record = {
                            "key": key_to_json(key),
                            "match": key_to_json(match.key),
                            "distance": match.distance,
                        }
                        stream.write(json.dumps(record, ensure_ascii=False) + "\n")
            bar.update(len(results))
    summary.duplicates = len(matched)
    return matched


def write_kept(args: argparse.Namespace, inputs: list[Input], options: ReadOptions, dropped: set[Key]) -> int:
    """Read the inputs again and write every document not dropped, in the
    inputs' format (JSONL when they differ)."""
    formats = {
        format_of(item.path, item.format if item.format != "auto" else options.format) for item in inputs
    }
    output_format = formats.pop() if len(formats) == 1 else "jsonl"
    if output_format == "dir":
        output_format = "jsonl"
    quiet = ErrorCounter(None)  # bad lines were reported by the first pass
    again = ReadOptions(options.format, options.id_field, options.text_field, (), "skip")
    kept = 0
    with output_stream(args.output) as stream:
        writer = DocumentWriter(stream, output_format)
        for document in unique_keys(read_documents(inputs, again, quiet), again, quiet):
            if document.key not in dropped:
                writer.write(document)
                kept += 1
    return kept


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
    with open_store(args.store, "r") as store:
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


def configure_plan(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-k", type=non_negative, default=3, help="largest Hamming distance (default 3)")
    parser.add_argument("--docs", type=float, required=True, help="expected number of documents, e.g. 1e9")
    parser.add_argument("--max-tables", type=non_negative, default=None, help="at most this many tables")
    parser.add_argument("--limit", type=non_negative, default=None, help="show only the best N layouts")


def run_plan(args: argparse.Namespace) -> int:
    layouts = plan(args.k, args.docs, max_tables=args.max_tables)
    if args.json:
        print_json(
            [
                {
                    "name": layout.name,
                    "tables": layout.table_count,
                    "prefix_bits": list(layout.prefix_bits),
                    "expected_candidates": layout.expected_candidates,
                    "bytes_per_doc": layout.bytes_per_doc,
                    "query_us": layout.query_us,
                    "insert_us": layout.insert_us,
                    "spec": layout.spec,
                }
                for layout in layouts[: args.limit]
            ]
        )
    else:
        print(format_plan(layouts, limit=args.limit))
    return 0


def configure_relayout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    choice = parser.add_mutually_exclusive_group(required=True)
    choice.add_argument("--docs", type=float, help="let the planner choose for this many documents")
    choice.add_argument("--blocks", type=non_negative, help="Manku's one-level layout with this many blocks")
    parser.add_argument("-k", type=non_negative, default=None, help="a new k (default: the store's)")


def run_relayout(args: argparse.Namespace) -> int:
    with open_store(args.store, "w") as store:
        if args.docs is not None:
            store.relayout(k=args.k, expected_docs=args.docs)
        else:
            store.relayout(k=args.k, blocks=args.blocks)
        stats = store.stats()
    note(args, f"{stats.path}: {stats.layout_name}, k={stats.k}, {stats.tables} tables")
    return 0


def run_check(args: argparse.Namespace) -> int:
    with open_store(args.store, "r") as store:
        problems = store.check()
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
    with open_store(args.store, "w") as store:
        merged = store.merge()
    print(f"merged {merged} documents")
    return 0


def configure_remove(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file")
    parser.add_argument(
        "keys", nargs="+", metavar="KEY", help="keys to remove (a number also matches an int key)"
    )
    parser.add_argument("--missing-ok", action="store_true", help="ignore keys the store does not hold")


def run_remove(args: argparse.Namespace) -> int:
    with open_store(args.store, "w") as store:
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
        for key in dict.fromkeys(resolved):
            store.remove(key)
    print(f"removed {len(dict.fromkeys(resolved))} documents")
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


def run_export(args: argparse.Namespace) -> int:
    with open_store(args.store, "r") as store:
        items = list(store.items())
        with (
            output_stream(args.output) as stream,
            progress(args, desc="exporting", total=len(items), unit="doc") as bar,
        ):
            for key, _fingerprint in items:
                record = store.get(key)
                if record is None:  # removed by another process since items()
                    continue
                line = {"key": key_to_json(key), "fingerprint": hex_fingerprint(record.fingerprint)}
                if record.meta is not None:
                    line["meta"] = json_safe(record.meta)
                stream.write(json.dumps(line, ensure_ascii=False) + "\n")
                bar.update(1)
    return 0


def configure_import(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="the store file (created if missing)")
    parser.add_argument("file", metavar="FILE", help="JSONL written by `simstore export` (- for stdin)")
    parser.add_argument("-k", type=non_negative, help="k for a new store (default 3)")
    parser.add_argument(
        "--on-error", choices=ON_ERROR, default="fail", help="stop at a bad line (default) or skip it"
    )


def run_import(args: argparse.Namespace) -> int:
    errors = skip_reporter(args)
    keys: list[Key] = []
    fingerprints: list[int] = []
    metas: list[dict[str, Any] | None] = []
    stream = sys.stdin if args.file == STDIN else open(args.file, encoding="utf-8")  # noqa: SIM115
    name = STDIN_NAME if args.file == STDIN else args.file
    try:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                key, fingerprint, meta = _parse_export_line(line)
            except ValueError as exc:
                error = InputError(name, number, str(exc))
                if args.on_error == "fail":
                    raise error from None
                errors(error)
                continue
            keys.append(key)
            fingerprints.append(fingerprint)
            metas.append(meta)
    finally:
        if stream is not sys.stdin:
            stream.close()
    with open_store(args.store, "c", k=args.k) as store:
        if keys:
            has_meta = any(meta is not None for meta in metas)
            store.add_many(keys, np.array(fingerprints, dtype=np.uint64), metas=metas if has_meta else None)
        total = len(store)
    print(f"imported {len(keys)} documents; the store holds {total}")
    return 0


def _parse_export_line(line: str) -> tuple[Key, int, dict[str, Any] | None]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg}") from None
    if not isinstance(record, dict) or "key" not in record or "fingerprint" not in record:
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
    return key, fingerprint, from_json(meta) if meta is not None else None


# ---------------------------------------------------------------- the parser


@dataclass(frozen=True)
class Verb:
    """One verb: its help line, its arguments, what it runs, and whether it
    only reads (read verbs take ``--json``)."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    reads: bool = False
    json_option: bool = False


VERBS: dict[str, Verb] = {
    "add": Verb("add documents from files to a store", configure_add, run_add, json_option=True),
    "query": Verb("find stored documents near a text or fingerprint", configure_query, run_query, reads=True),
    "dedup": Verb(
        "deduplicate files: keep one document per cluster, or list pairs or clusters",
        configure_dedup,
        run_dedup,
        reads=True,
    ),
    "stats": Verb("print a store's size and layout", configure_stats, run_stats, reads=True),
    "plan": Verb("rank the table layouts for k and a corpus size", configure_plan, run_plan, reads=True),
    "relayout": Verb("rebuild a store's tables in another layout", configure_relayout, run_relayout),
    "check": Verb("verify a store's invariants", configure_store_only, run_check, reads=True),
    "merge": Verb("fold a store's delta into its tables", configure_store_only, run_merge),
    "remove": Verb("remove documents by key", configure_remove, run_remove),
    "export": Verb("write a store's keys, fingerprints and metadata as JSONL", configure_export, run_export),
    "import": Verb("add documents from `simstore export` JSONL", configure_import, run_import),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A persistent near-duplicate index: add documents, query them, deduplicate files.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, verb in VERBS.items():
        sub = verbs.add_parser(name, help=verb.help, description=verb.help[:1].upper() + verb.help[1:] + ".")
        verb.configure(sub)
        sub.add_argument("-q", "--quiet", action="store_true", help="no progress bars or notes")
        if verb.reads or verb.json_option:
            sub.add_argument("--json", action="store_true", help="print the result as JSON")
        sub.set_defaults(run=verb.run, parser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (usage errors exit 2 via
    argparse's ``SystemExit``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except (SimstoreError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            # The reader went away (`simstore export STORE | head`): stop quietly.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        print(f"{PROG}: error: {_message(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing of the unfinished transaction was written", file=sys.stderr)
        return 130


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, SimstoreError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
