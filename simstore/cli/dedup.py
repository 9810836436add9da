"""The ``simstore dedup`` verb: deduplicate files within themselves or
against a store, keeping one document per cluster or listing pairs or
clusters."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simstore.cli.cleanup import scratch_folder
from simstore.cli.common import QUERY_CHUNK, CommandError, counted, key_to_json, non_negative, print_json
from simstore.cli.documents import (
    Collected,
    add_input_options,
    check_inputs,
    fingerprint_documents,
    inputs_of,
    read_options,
    skip_reporter,
    unique_keys,
)
from simstore.cli.output import Output, output_stream, refuse_clobbers, resolve_output
from simstore.cli.progress import ReadingBar, note, progress, table_progress
from simstore.cli.resume import ProgressLog, resumable
from simstore.cli.stores import (
    StoreOnDemand,
    check_distance,
    open_existing,
    open_or_create,
    run_threshold,
    similarity,
)
from simstore.io.columnar import COLUMNAR_FORMATS, ColumnarWriter, key_column_type, unified_schema
from simstore.io.inputs import Document
from simstore.io.readers import (
    FORMATS,
    ErrorCounter,
    Input,
    ReadOptions,
    columnar_files,
    columnar_schema,
    delimited_header,
    input_format,
    named_format,
    read_documents,
)
from simstore.io.tables import member_provenance
from simstore.io.writers import DocumentWriter
from simstore.keys import Key
from simstore.layout.choose import DEFAULT_K, DEFAULT_MIN_SIMILARITY
from simstore.store.dedup import KEEP_POLICIES, LINKAGES, Cluster
from simstore.store.facade import Store
from simstore.store.opening import open as open_store

#: What ``--format`` may name: an input format other than ``auto``.
OUTPUT_FORMATS = tuple(fmt for fmt in FORMATS if fmt != "auto")


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
        "-k",
        "--k",
        type=non_negative,
        help=f"largest distance of a duplicate (default {DEFAULT_K}): the k of the temporary store, or of a "
        "new --store STORE (an existing one's must equal it, as for `add`); with --against at most the "
        "store's k (default: the store's k)",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--pairs",
        action="store_true",
        help="write the near-duplicate pairs (within k and the similarity threshold) as JSONL",
    )
    what.add_argument("--clusters", action="store_true", help="write the clusters as JSONL")
    parser.add_argument(
        "--bands",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also pair documents whose verification sketches share a band, however far apart their "
        "fingerprints, when they meet the similarity threshold: finds one-word edits of short texts "
        "that move a fingerprint past k (reads every sketch into memory). On by default; with "
        "--against, on where the store keeps a band table (new stores of k >= 5 do), "
        "else only when asked, as it then reads every stored sketch once per million documents",
    )
    parser.add_argument(
        "--keep",
        choices=(*KEEP_POLICIES, "none"),
        default="first",
        help="which document of a cluster is kept: the first read (default), the longest text, "
        "or none (every member of a cluster is dropped)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="with --store: skip the inputs (and batches) a killed run already committed; "
        "the output is an uninterrupted run's",
    )
    parser.add_argument(
        "--annotate",
        action="store_true",
        help="write every document, each with cluster_id, duplicate_of (the key of the cluster's "
        "representative, the document kept in its place; empty for the representative itself, "
        "which --keep none drops too), distance, similarity and cluster_size (the documents in its "
        "cluster; 1 for a document in none; empty with --against for a matched document, which is "
        "not clustered), instead of dropping",
    )
    parser.add_argument(
        "--dropped",
        metavar="FILE",
        help="also write the dropped documents, with the same fields as --annotate, to FILE",
    )
    parser.add_argument(
        "--linkage",
        choices=LINKAGES,
        default="star",
        help="star (default): every dropped document is a near-duplicate of the one kept in its "
        "place; components: chains of near-duplicates form one cluster, however far apart their ends",
    )
    parser.add_argument(
        "--min-similarity",
        type=similarity,
        metavar="J",
        help="a duplicate also shares at least this fraction of its word 3-shingles (0 to 1; "
        "judged by the verification sketches). The temporary store (or a new --store) is made to "
        "find the pairs at J or more: it verifies from a little below J, 0.75 for 0.8, as the "
        "estimate is noisy; so does an existing store made for J. With another existing store, a "
        "pair's estimate must reach J. Default: the store's threshold, "
        f"{DEFAULT_MIN_SIMILARITY} for the temporary store and a new --store; an existing --store or "
        "--against STORE uses the one stored in it (`simstore stats` shows it). --min-similarity 0 "
        "turns the check off: every pair within k bits",
    )
    parser.add_argument(
        "--format",
        dest="output_format",
        choices=OUTPUT_FORMATS,
        help="write the kept documents in this format (default: the one OUT's name says, else the "
        "inputs'); an input whose name says no format (stdin, a pipe) is also read in it, unless "
        "--input-format says otherwise",
    )
    add_input_options(parser, format_is_input=False)


#: Each clustered (or matched) document's fields for ``--annotate`` and ``--dropped``.
Provenance = dict[Key, dict[str, Any]]


@dataclass
class DedupSummary:
    documents: int = 0
    skipped: int = 0
    duplicates: int = 0
    clusters: int = 0
    largest_cluster: int = 0
    worst_distance: int = 0
    worst_similarity: float | None = None
    kept: int = 0
    output: str = ""


def run_dedup(args: argparse.Namespace) -> int:
    if args.against is not None and args.clusters:
        args.parser.error("--clusters needs the documents in a store; it cannot be used with --against")
    if args.against is not None and args.keep != "first":
        args.parser.error("--keep chooses within clusters; it cannot be used with --against")
    if args.against is not None and args.linkage != "star":
        args.parser.error("--linkage forms clusters; it cannot be used with --against")
    if args.resume and args.store is None:
        args.parser.error("--resume continues a run into a kept store; give --store STORE")
    if (args.annotate or args.dropped) and (args.pairs or args.clusters):
        args.parser.error("--annotate and --dropped write documents; not with --pairs or --clusters")
    # --format still reads an input whose name says no format (stdin), so it may come with --pairs.
    named_only = all(named_format(path) is not None for path in args.files)
    if args.output_format not in (None, "jsonl") and (args.pairs or args.clusters) and named_only:
        args.parser.error("--pairs and --clusters write JSONL; --format names the kept documents' format")
    # Before any input is read: a wrong -o should not cost a long first pass.
    output = resolve_output(args.output)
    dropped_output = None if args.dropped is None else resolve_output(args.dropped)
    refuse_clobbers(
        [("-o", output), *([] if dropped_output is None else [("--dropped", dropped_output)])],
        [
            *(("the input", path) for path in args.files),
            *([] if args.store is None else [("the store (--store)", args.store)]),
            *([] if args.against is None else [("the store (--against)", args.against)]),
        ],
    )
    log = None if args.store is None else ProgressLog(args.store, resume=args.resume)
    options = read_options(args)
    errors = skip_reporter(args)
    summary = DedupSummary(output=args.output)
    with scratch_folder() as scratch:
        inputs = inputs_of(args.files, spool_dir=scratch, unnamed_format=_unnamed_format(args))
        check_inputs(inputs, options)  # before a new --store is created
        output_format = None if args.pairs or args.clusters else choose_output_format(args, output, inputs)
        # Every input's columns, from the files' metadata: a schema conflict
        # is refused before the long first pass, not after it.
        schema = output_schema(inputs, options) if output_format in COLUMNAR_FORMATS else None
        if args.against is not None:
            with open_existing(args.against) as store:
                check_distance(args.k, store)
                kept_keys, provenance = dedup_against(args, store, inputs, output, options, errors, summary)
        else:
            target = _dedup_store(args, scratch)
            with target:
                kept_keys, provenance = dedup_within(
                    args, target, inputs, output, options, errors, summary, log
                )
                if args.store is not None and target.exists:
                    try:
                        target.opened().merge()
                    except KeyboardInterrupt:
                        raise KeyboardInterrupt(
                            f"interrupted while merging; the documents were added to {args.store} "
                            "(the store merges its delta later)"
                        ) from None
        summary.skipped = errors.skipped
        # A bad line skipped is an input document too: kept + duplicates + skipped = documents.
        summary.documents += errors.skipped
        if output_format is not None:  # kept documents, not --pairs or --clusters
            summary.kept = write_kept(
                inputs,
                output,
                output_format,
                options,
                kept_keys,
                provenance,
                annotate=args.annotate,
                dropped=dropped_output,
                schema=schema,
            )
    if log is not None:
        log.finish()  # every output is written: nothing is left to resume
    report = vars(summary).copy()
    if args.against is not None:
        # Against a store, a duplicate is a document with a stored match; there are no clusters.
        del report["clusters"], report["largest_cluster"], report["worst_distance"]
        del report["worst_similarity"]
    if args.pairs or args.clusters:
        del report["kept"]
    # The summary never goes into the data stream (-o -, -o /dev/stdout).
    stream = sys.stderr if output.is_stdout else sys.stdout
    if args.json:
        print_json(report, file=stream)
    else:
        for name, value in report.items():
            # None (no pair could be judged, or no cluster): a dash, not Python's word.
            print(f"{name.replace('_', ' '):16} {'-' if value is None else value}", file=stream)
    return 0


def _dedup_store(args: argparse.Namespace, scratch: str) -> StoreOnDemand:
    """``--store STORE``, or a temporary store in ``scratch``; a new one is
    created when the first documents are committed (see :class:`StoreOnDemand`)."""
    if args.store is not None:
        path = str(args.store)

        # As for `add`: -k is the store's k, so an existing store's must equal it;
        # a new one is made to find the pairs at --min-similarity (an existing
        # one holds this run to it: see run_threshold).
        # Merged on success only, not by close() after Ctrl-C or an error.
        def open_new() -> Store:
            preset = {} if os.path.lexists(path) else {"min_similarity": args.min_similarity}
            return open_or_create(path, args.k, merge_on_close=False, **preset)

        return StoreOnDemand(path, args.k, open_new)
    temporary = os.path.join(scratch, "dedup.simstore")
    k = DEFAULT_K if args.k is None else args.k
    # No band table: pairs and clusters band every stored sketch themselves.
    # Made to find the pairs at --min-similarity: it verifies from a little below.
    return StoreOnDemand(
        temporary,
        k,
        lambda: open_store(
            temporary,
            "n",
            k=k,
            sync=False,
            merge_on_close=False,
            bands=False,
            min_similarity=args.min_similarity,
        ),
    )


def _collect(
    args: argparse.Namespace,
    store: Store | StoreOnDemand,
    inputs: list[Input],
    options: ReadOptions,
    errors: ErrorCounter,
    *,
    with_length: bool,
) -> Collected:
    collected = Collected()
    with ReadingBar(args, inputs) as bar:
        documents = unique_keys(read_documents(inputs, options, errors, bar.tracker), options, errors)
        for chunk, values, sketches in fingerprint_documents(
            store, documents, options, errors, with_length=with_length
        ):
            collected.extend(chunk, values, sketches)
            bar.update(len(chunk))
    collected.read = len(collected.keys)
    return collected


def _add_committing(
    args: argparse.Namespace,
    store: StoreOnDemand,
    inputs: list[Input],
    options: ReadOptions,
    errors: ErrorCounter,
    log: ProgressLog,
) -> Collected:
    """Read, fingerprint and add the documents to a kept store, committing
    every chunk and logging it (see :mod:`simstore.cli.resume`); documents
    a resumed run committed already are read again but not fingerprinted.
    Returns the keys read (fingerprints are not kept: they are stored)."""
    collected = Collected()
    seen: dict[Key, str] = {}
    try:
        _add_inputs(args, store, inputs, options, errors, log, collected, seen)
    except KeyboardInterrupt:
        if not store.exists or (store.created and not store.committed):
            raise  # nothing was written (and the new store goes again)
        if resumable(inputs):
            how = "run the same command with --resume to continue"
        else:  # standard input or a pipe: read again in full
            how = "re-running the same input is safe: an existing key is replaced"
        raise KeyboardInterrupt(
            f"interrupted; the documents committed so far are in {args.store} ({how})"
        ) from None
    collected.read = len(collected.keys)
    return collected


def _add_inputs(
    args: argparse.Namespace,
    store: StoreOnDemand,
    inputs: list[Input],
    options: ReadOptions,
    errors: ErrorCounter,
    log: ProgressLog,
    collected: Collected,
    seen: dict[Key, str],
) -> None:
    """:func:`_add_committing`'s reading and committing: the keys read go to
    ``collected``, the keys seen to ``seen``."""
    with ReadingBar(args, inputs) as bar:
        for item in inputs:
            done = log.committed(item)
            read = read_documents([item], options, errors, bar.tracker)
            documents = unique_keys(read, options, errors, seen)
            # Committed by the run resumed: read again for their keys only.
            committed = 0
            for document in itertools.islice(documents, done):
                collected.keys.append(document.key)
                committed += 1
            bar.update(committed)
            for chunk, values, sketches in fingerprint_documents(
                store, documents, options, errors, with_length=True
            ):
                batch = Collected()
                batch.extend(chunk, values, sketches)
                store.add(batch)
                committed += len(chunk)
                log.record(item, committed)
                collected.keys.extend(batch.keys)
                bar.update(len(chunk))


def dedup_within(
    args: argparse.Namespace,
    target: StoreOnDemand,
    inputs: list[Input],
    output: Output,
    options: ReadOptions,
    errors: ErrorCounter,
    summary: DedupSummary,
    log: ProgressLog | None = None,
) -> tuple[set[Key], Provenance]:
    """Add the documents, cluster the store, write pairs or clusters if asked;
    returns the keys of the documents to keep (read, not skipped, not
    dropped) and the provenance of every clustered document. A kept store's
    adds are committed chunk by chunk and logged in ``log``."""
    persistent = log is not None
    if log is not None:
        collected = _add_committing(args, target, inputs, options, errors, log)
    else:
        collected = _collect(args, target, inputs, options, errors, with_length=args.keep == "longest")
    summary.documents = collected.read
    if not collected.keys and not target.exists:
        # Nothing was read: no store is made (a new --store is not created), nothing is clustered.
        if persistent:
            note(args, f"no documents, so {args.store} was not created")
        if args.pairs or args.clusters:
            with output_stream(output):
                pass
        return set(), {}
    store = target.opened()
    if collected.keys and not persistent:
        with progress(args, desc="writing", total=1, unit="txn") as bar:
            target.add(collected)
            bar.update(1)
    try:
        dropped, provenance = _cluster(args, store, output, summary, set(collected.keys))
    except KeyboardInterrupt:
        if persistent and collected.keys:
            raise KeyboardInterrupt(
                f"interrupted; the {counted(len(collected.keys), 'document')} read "
                f"{'was' if len(collected.keys) == 1 else 'were'} added to "
                f"{args.store} "
                "(re-running the same input is safe: an existing key is replaced)"
            ) from None
        raise
    return set(collected.keys) - dropped, provenance


def _cluster(
    args: argparse.Namespace, store: Store, output: Output, summary: DedupSummary, input_keys: set[Key]
) -> tuple[set[Key], Provenance]:
    """Cluster the store, write pairs or clusters if asked; returns the keys
    of the documents not kept. The summary counts the documents of
    ``input_keys`` only (a kept store also holds what earlier runs added)."""
    threshold = run_threshold(store, args.min_similarity)
    bar, update = table_progress(args, "clustering")
    with bar:
        clusters = store.clusters(
            k=args.k,
            keep="first" if args.keep == "none" else args.keep,
            linkage=args.linkage,
            min_similarity=threshold,
            progress=update,
            bands=args.bands is not False,
        )
    dropped: set[Key] = set()
    provenance: Provenance = {}
    for cluster in clusters:
        dropped.update(cluster.members if args.keep == "none" else cluster.duplicates)
        if args.annotate or args.dropped:
            provenance.update(_cluster_provenance(store, cluster))
    _summarize_clusters(store, clusters, dropped, input_keys, summary)
    if args.pairs:
        bar, update = table_progress(args, "pairs")
        with bar, output_stream(output) as stream:
            for pair in store.near_duplicate_pairs(
                k=args.k, min_similarity=threshold, progress=update, bands=args.bands is not False
            ):
                record = {
                    "a": key_to_json(pair.key_a),
                    "b": key_to_json(pair.key_b),
                    "distance": pair.distance,
                }
                if pair.similarity is not None:
                    record["similarity"] = pair.similarity
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    elif args.clusters:
        with output_stream(output) as stream:
            for cluster in clusters:
                record = {
                    "cluster": cluster.cluster_id,
                    "representative": key_to_json(cluster.representative),
                    "size": cluster.size,
                    "members": [key_to_json(key) for key in cluster.members],
                    "worst_distance": cluster.worst_distance,
                }
                if cluster.worst_similarity is not None:
                    record["worst_similarity"] = cluster.worst_similarity
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    return dropped, provenance


def _summarize_clusters(
    store: Store, clusters: list[Cluster], dropped: set[Key], input_keys: set[Key], summary: DedupSummary
) -> None:
    """The summary's cluster figures, over the input's documents: the
    clusters they are in, and their distances and similarities to the
    documents kept in their place."""
    summary.duplicates = len(dropped & input_keys)
    touched = [cluster for cluster in clusters if not input_keys.isdisjoint(cluster.members)]
    summary.clusters = len(touched)
    summary.largest_cluster = max((cluster.size for cluster in touched), default=0)
    worst_distance = 0
    judged: list[float] = []
    for cluster in touched:
        if input_keys.issuperset(cluster.members):
            worst_distance = max(worst_distance, cluster.worst_distance)
            if cluster.worst_similarity is not None:
                judged.append(cluster.worst_similarity)
            continue
        # Stored documents share the cluster: only the input's members count.
        for key, distance, member_similarity in member_provenance(store, cluster):
            if key in input_keys and key != cluster.representative:
                worst_distance = max(worst_distance, distance)
                if member_similarity is not None:
                    judged.append(member_similarity)
    summary.worst_distance = worst_distance
    # The summary is read by people: 4 decimals (the estimate's standard
    # error is about 0.02); the data outputs carry the full estimate.
    summary.worst_similarity = round(min(judged), 4) if judged else None


def _cluster_provenance(store: Store, cluster: Cluster) -> Provenance:
    """Each member's fields for ``--annotate`` and ``--dropped``: its
    cluster, the key kept in its place (``None`` for the kept one), its
    distance and estimated similarity to that document, and the cluster's
    size (every member, stored by an earlier run too)."""
    representative = cluster.representative
    return {
        key: {
            "cluster_id": cluster.cluster_id,
            "duplicate_of": None if key == representative else key_to_json(representative),
            "distance": distance,
            "similarity": similarity,
            "cluster_size": cluster.size,
        }
        for key, distance, similarity in member_provenance(store, cluster)
    }


#: Documents matched against the store per call with --bands, each call
#: reading every stored sketch once (their band keys take ~20 x 16 bytes each).
AGAINST_BAND_CHUNK = 1 << 20


def dedup_against(
    args: argparse.Namespace,
    store: Store,
    inputs: list[Input],
    output: Output,
    options: ReadOptions,
    errors: ErrorCounter,
    summary: DedupSummary,
) -> tuple[set[Key], Provenance]:
    """Match every document against ``store``; returns the keys of the
    documents to keep (read, not skipped, and with no match) and the
    provenance of the matched ones (their closest stored match)."""
    collected = _collect(args, store, inputs, options, errors, with_length=False)
    summary.documents = collected.read
    fingerprints = collected.fingerprint_array()
    sketches = collected.sketch_array()
    matched: set[Key] = set()
    provenance: Provenance = {}
    # Only --pairs writes every match; the rest needs the closest alone,
    # and a query that may stop at it costs a fraction where documents
    # share boilerplate (hundreds of matches each).
    limit = None if args.pairs else 1
    threshold = run_threshold(store, args.min_similarity)
    # A store with a band table looks bands up (the default, bands=None); one
    # without reads every stored sketch once per call for --bands: far larger calls.
    bands = args.bands
    chunk = AGAINST_BAND_CHUNK if bands is True and store.bands is None else QUERY_CHUNK
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(output_stream(output)) if args.pairs else None
        bar = stack.enter_context(progress(args, desc="matching", total=len(fingerprints), unit="doc"))
        for start in range(0, len(fingerprints), chunk):
            results = store.query_many(
                fingerprints[start : start + chunk],
                k=args.k,
                min_similarity=threshold,
                sketches=None if sketches is None else sketches[start : start + chunk],
                limit=limit,
                bands=bands,
            )
            for key, matches in zip(collected.keys[start : start + chunk], results, strict=True):
                if not matches:
                    continue
                matched.add(key)
                if args.annotate or args.dropped:
                    closest = matches[0]  # sorted by distance, then key
                    provenance[key] = {
                        "cluster_id": None,
                        "duplicate_of": key_to_json(closest.key),
                        "distance": closest.distance,
                        "similarity": closest.similarity,
                        "cluster_size": None,  # matched, not clustered
                    }
                if stream is not None:
                    for match in matches:
                        record = {
                            "key": key_to_json(key),
                            "match": key_to_json(match.key),
                            "distance": match.distance,
                        }
                        if match.similarity is not None:
                            record["similarity"] = match.similarity
                        stream.write(json.dumps(record, ensure_ascii=False) + "\n")
            bar.update(len(results))
    summary.duplicates = len(matched)
    return set(collected.keys) - matched, provenance


_UNCLUSTERED: dict[str, Any] = {
    "cluster_id": None,
    "duplicate_of": None,
    "distance": None,
    "similarity": None,
    "cluster_size": 1,  # a document in no cluster is a cluster of its own
}


def _unnamed_format(args: argparse.Namespace) -> str:
    """How inputs whose name says no format (stdin, a pipe) are read:
    ``--input-format``, which names one for every input, else ``--format``,
    as before it named the output's format too, else ``"auto"`` (sniffed)."""
    if args.input_format != "auto":
        return str(args.input_format)
    return "auto" if args.output_format is None else str(args.output_format)


def choose_output_format(args: argparse.Namespace, output: Output, inputs: list[Input]) -> str:
    """The format the kept documents are written in: ``--format``, else the
    one ``OUT``'s name says, else the inputs' (JSONL where they differ, for
    a directory of text files, and for annotated text lines).

    Raises:
        CommandError: for a format that cannot hold what is asked (text
            lines with provenance fields, Parquet or Arrow rows of inputs
            that have no schema); call it before reading the inputs.
    """
    options = read_options(args)
    written = {_written_format(item, options) for item in inputs}
    annotating = bool(args.annotate or args.dropped)
    named = None if output.descriptor is not None else named_format(output.given)
    chosen = args.output_format or (named if named in OUTPUT_FORMATS else None)
    if chosen is None:
        inputs_format = next(iter(written)) if len(written) == 1 else "jsonl"
        if inputs_format == "dir" or (inputs_format == "text" and annotating):
            return "jsonl"
        return inputs_format
    origin = f"--format {chosen}" if args.output_format else f"-o {output.given} (a {chosen} name)"
    if chosen == "text" and annotating:
        raise CommandError(
            f"{origin}: plain text lines cannot carry the fields of --annotate or --dropped; "
            "write jsonl, csv or tsv"
        )
    if chosen in COLUMNAR_FORMATS and not written <= set(COLUMNAR_FORMATS):
        raise CommandError(
            f"{origin}: {chosen} output keeps the columns of Parquet or Arrow inputs, and these "
            f"inputs are {', '.join(sorted(written))}; write jsonl, csv or tsv "
            "(or pass --format to name another)"
        )
    return chosen


def write_kept(
    inputs: list[Input],
    output: Output,
    output_format: str,
    options: ReadOptions,
    kept_keys: set[Key],
    provenance: Provenance,
    *,
    annotate: bool = False,
    dropped: Output | None = None,
    schema: Any = None,
) -> int:
    """Read the inputs again and write the documents of ``kept_keys`` in
    ``output_format`` (see :func:`choose_output_format`); with ``annotate``
    every document, with its provenance fields; the dropped ones, annotated,
    to ``dropped`` too. A document skipped as a bad line in the first pass
    is in neither, even where reading alone accepts it (a text with no
    words). Parquet and Arrow rows are written under ``schema`` (see
    :func:`output_schema`; read here if not given). Returns how many
    documents were kept."""
    quiet = ErrorCounter(None)  # bad lines were reported by the first pass
    again = ReadOptions(options.format, options.id_field, options.text_field, (), "skip")
    kept = 0
    with contextlib.ExitStack() as stack:
        writer: DocumentWriter | _RowWriter
        dropped_writer: DocumentWriter | _RowWriter | None = None
        if output_format in COLUMNAR_FORMATS:
            if schema is None:
                schema = output_schema(inputs, options)
            extra, keys_as_text = _provenance_columns(schema, options, provenance)
            writer = _RowWriter(stack, output, output_format, schema, extra if annotate else (), keys_as_text)
            if dropped is not None:
                dropped_writer = _RowWriter(stack, dropped, output_format, schema, extra, keys_as_text)
        else:
            # With no row written (a header-only CSV, every row dropped) the header still goes out.
            header = _input_header(inputs, options, output_format)
            names = list(_UNCLUSTERED)
            writer = DocumentWriter(
                stack.enter_context(output_stream(output)), output_format, header, names if annotate else ()
            )
            stack.callback(writer.close)
            if dropped is not None:
                dropped_writer = DocumentWriter(
                    stack.enter_context(output_stream(dropped)), output_format, header, names
                )
                stack.callback(dropped_writer.close)
        for document in unique_keys(read_documents(inputs, again, quiet), again, quiet):
            is_kept = document.key in kept_keys
            kept += is_kept
            fields = provenance.get(document.key, _UNCLUSTERED)
            if annotate:
                if is_kept or document.key in provenance:  # else skipped in the first pass
                    writer.write(document, fields)
            elif is_kept:
                writer.write(document)
            if dropped_writer is not None and not is_kept and document.key in provenance:
                dropped_writer.write(document, fields)
        if isinstance(writer, DocumentWriter):
            writer.finish()
        if isinstance(dropped_writer, DocumentWriter):
            dropped_writer.finish()
    return kept


def _input_header(inputs: list[Input], options: ReadOptions, output_format: str) -> list[str] | None:
    """The columns of the CSV or TSV inputs written back as such, in
    first-seen order; ``None`` if there are none."""
    if output_format not in ("csv", "tsv"):
        return None
    columns: dict[str, None] | None = None
    for item in inputs:
        if input_format(item, options.format) == output_format:
            columns = columns if columns is not None else {}
            columns.update(dict.fromkeys(delimited_header(item, output_format) or ()))
    return None if columns is None else list(columns)


def _written_format(item: Input, options: ReadOptions) -> str:
    """The format ``item`` is written back in: its own, or its parts' for a
    directory of Parquet or Arrow files."""
    fmt = input_format(item, options.format)
    if fmt == "dir":
        parts = columnar_files(item.path)
        if parts is not None and len({part_format for _, part_format in parts}) == 1:
            return parts[0][1]
    return fmt


def output_schema(inputs: list[Input], options: ReadOptions) -> Any:
    """The schema of a Parquet or Arrow output: the columns of every
    columnar input file (a directory's parts each), unified by
    :func:`simstore.io.columnar.unified_schema` from the files' metadata.

    Raises:
        SchemaConflictError: a column no one type holds for two files.
        InputError: a file pyarrow cannot read.
    """
    named_schemas = []
    for item in inputs:
        fmt = input_format(item, options.format)
        if fmt == "dir":
            for path, part_format in columnar_files(item.path) or []:
                shown = os.path.join(item.display, os.path.relpath(path, item.path))
                named_schemas.append((shown, columnar_schema(path, part_format, shown)))
        elif fmt in COLUMNAR_FORMATS:
            named_schemas.append((item.display, columnar_schema(item.path, fmt, item.display)))
    return unified_schema(named_schemas)


def _provenance_columns(
    schema: Any, options: ReadOptions, provenance: Provenance
) -> tuple[list[tuple[str, Any]], bool]:
    """The provenance columns of a columnar output, and whether its
    ``duplicate_of`` keys are written as text. ``duplicate_of`` holds keys:
    an integer type (the id column's where it holds them) when every key
    written is an integer that fits one, else string (see
    :func:`simstore.io.columnar.key_column_type`)."""
    id_field = options.id_field or "id"
    id_type = schema.field(id_field).type if id_field in schema.names else None
    duplicate_keys = (fields["duplicate_of"] for fields in provenance.values())
    key_type, keys_as_text = key_column_type(id_type, (key for key in duplicate_keys if key is not None))
    columns = [
        ("cluster_id", "int64"),
        ("duplicate_of", key_type),
        ("distance", "int64"),
        ("similarity", "float64"),
        ("cluster_size", "int64"),
    ]
    return columns, keys_as_text


class _RowWriter:
    """Documents written back as rows of a Parquet or Arrow IPC file: the
    rows as read (under every input's columns, :func:`output_schema`), plus
    ``extra``."""

    def __init__(
        self,
        stack: contextlib.ExitStack,
        output: Output,
        fmt: str,
        schema: Any,
        extra: Sequence[tuple[str, Any]],
        keys_as_text: bool = False,
    ) -> None:
        stream = stack.enter_context(output_stream(output, binary=True))
        self._writer = ColumnarWriter(stream, fmt, schema, extra, name=output.given)
        self._keys_as_text = keys_as_text
        # Closed before the stream: the footer must be written into it.
        stack.callback(self._writer.close)

    def write(self, document: Document, extra: Mapping[str, Any] | None = None) -> None:
        record = document.record if isinstance(document.record, dict) else {}
        if extra is not None and self._keys_as_text and extra["duplicate_of"] is not None:
            extra = {**extra, "duplicate_of": _key_text(extra["duplicate_of"])}
        self._writer.write(record if extra is None else {**record, **extra})


def _key_text(key: Any) -> str:
    """A key (as :func:`key_to_json` gives it) in a string column: a str as
    itself, an int in decimal, bytes as the ``{"$bytes": ...}`` JSON a CSV
    cell holds."""
    if isinstance(key, str):
        return key
    if isinstance(key, int):
        return str(key)
    return json.dumps(key)
