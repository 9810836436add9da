"""``simstore plan``: the table layouts for k (or a similarity) and a corpus
size, ranked by the cost models, and what a new store asked for a similarity
keeps."""

from __future__ import annotations

import argparse
from typing import Any

from simstore.cli.common import document_count, non_negative, print_json
from simstore.cli.stores import similarity
from simstore.fingerprinting.sketch import Sketch
from simstore.index import costs, multi_index
from simstore.layout.choose import DEFAULT_K, MULTI_INDEX
from simstore.layout.planner import format_plan, plan
from simstore.layout.presets import SimilarityPreset, band_bytes_per_document, similarity_preset


def configure_plan(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-k",
        "--k",
        type=non_negative,
        help=f"largest distance (default {DEFAULT_K}, or what --min-similarity needs)",
    )
    parser.add_argument(
        "--docs", type=document_count, required=True, help="expected number of documents, e.g. 1e9"
    )
    parser.add_argument(
        "--min-similarity",
        type=similarity,
        metavar="J",
        help="what a new store made to find the pairs at J or more keeps (simstore add --min-similarity J): "
        "k=5 and a band table; the layouts listed are those of the k that finds 97 %% of the real pairs "
        "at J or more by fingerprint alone (a store without a band table: --no-bands, or -k)",
    )
    parser.add_argument("--max-tables", type=non_negative, default=None, help="at most this many tables")
    parser.add_argument("--limit", type=non_negative, default=None, help="show only the best N layouts")


def run_plan(args: argparse.Namespace) -> int:
    k = DEFAULT_K if args.k is None and args.min_similarity is None else args.k
    layouts = plan(k, args.docs, max_tables=args.max_tables, min_similarity=args.min_similarity)
    scheme_k = layouts[0].k if layouts else k
    # Asked for a similarity and no k, a new store keeps a band table beside k = 5.
    preset = (
        None
        if args.min_similarity is None or args.k is not None
        else similarity_preset(args.min_similarity, Sketch().bins)
    )
    if args.json:
        manku = [
            {
                "name": layout.name,
                "format": 2,
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
        schemes = scheme_entries(scheme_k, args.docs, limit=args.limit)
        if preset is not None:
            for entry in schemes:
                entry["chosen"] = False
            schemes.insert(0, preset_entry(preset, args.docs))
        print_json(manku + schemes)
    else:
        if preset is not None:
            print(format_preset(preset, args.docs, scheme_k))
            print()
        print("Manku's permutation tables (format 2: opt-in, blocks= or a Layout):")
        print(format_plan(layouts, limit=args.limit))
        print()
        print(format_schemes(scheme_k, args.docs, limit=args.limit))
    return 0


def ranked_schemes(k: int, docs: int, *, limit: int | None) -> list[multi_index.MultiIndex]:
    """The multi-index schemes exact for ``k``, cheapest first by the model of
    :func:`simstore.index.multi_index.choose`."""
    return sorted(
        multi_index.exact_schemes(k),
        key=lambda scheme: (
            multi_index.query_us(scheme, docs) + multi_index.US_PER_BYTE * multi_index.bytes_per_doc(scheme),
            scheme.tables,
        ),
    )[:limit]


def scheme_entries(k: int, docs: int, *, limit: int | None) -> list[dict[str, Any]]:
    """``plan --json``'s entries for the multi-index schemes (format 3), with the
    keys of Manku's layouts' entries and ``probes``, ``radii`` and ``chosen``
    (the scheme a new store at ``k`` gets, for ``docs``). ``bytes_per_doc``
    counts the records as Manku's entries do (``costs.PER_DOC_BYTES``) beside
    the tables' bytes; ``query_us`` is the model's batch time a query, and
    ``insert_us`` is not modelled (``None``)."""
    chosen = multi_index.choose(k, docs)
    return [
        {
            "name": f"multi-index {scheme.label()}",
            "format": 3,
            "tables": scheme.tables,
            "prefix_bits": list(scheme.widths),
            "expected_candidates": scheme.candidate_rate() * docs,
            "bytes_per_doc": costs.PER_DOC_BYTES + multi_index.bytes_per_doc(scheme),
            "table_bytes_per_doc": multi_index.bytes_per_doc(scheme),
            "query_us": multi_index.query_us(scheme, docs),
            "insert_us": None,
            "spec": {"kind": MULTI_INDEX, "widths": list(scheme.widths), "radii": list(scheme.radii)},
            "probes": scheme.probes,
            "radii": list(scheme.radii),
            "chosen": scheme == chosen,
        }
        for scheme in ranked_schemes(k, docs, limit=limit)
    ]


def format_schemes(k: int, docs: int, *, limit: int | None) -> str:
    """The multi-index schemes exact for ``k``, cheapest first by the model of
    :func:`simstore.index.multi_index.choose` (format 3: a new store's layout
    unless ``blocks=`` or a ``Layout`` is given)."""
    chosen = multi_index.choose(k, docs)
    ranked = ranked_schemes(k, docs, limit=limit)
    lines = [
        f"multi-index schemes for k={k} (format 3: a new store's layout):",
        f"{'scheme':<28} {'tables':>6} {'probes':>7} {'table bytes/doc':>15} {'batch µs/query':>14}",
    ]
    for scheme in ranked:
        mark = "  <- chosen" if scheme == chosen else ""
        lines.append(
            f"{scheme.label():<28} {scheme.tables:>6} {scheme.probes:>7} "
            f"{multi_index.bytes_per_doc(scheme):>15.0f} {multi_index.query_us(scheme, docs):>14.3g}{mark}"
        )
    lines.append("(batch µs/query: the model fitted at 1M, benchmarks/results/multi_index_1M.md)")
    return "\n".join(lines)


def preset_entry(preset: SimilarityPreset, docs: int) -> dict[str, Any]:
    """``plan --json``'s entry for what a new store asked for ``preset.similarity``
    keeps (format 4): the multi-index scheme of ``preset.k`` and a band table.
    ``band_bytes_per_doc`` is measured on long real documents
    (``None`` where not measured); ``query_us`` is the tables' model alone."""
    scheme = multi_index.choose(preset.k, docs)
    band_bytes = band_bytes_per_document(preset.bands_per_width)
    table_bytes = multi_index.bytes_per_doc(scheme)
    return {
        "name": f"multi-index {scheme.label()} + {preset.bands_per_width} bands a width",
        "format": 4,
        "k": preset.k,
        "tables": scheme.tables,
        "prefix_bits": list(scheme.widths),
        "expected_candidates": scheme.candidate_rate() * docs,
        "bytes_per_doc": costs.PER_DOC_BYTES + table_bytes + (band_bytes or 0.0),
        "table_bytes_per_doc": table_bytes,
        "band_bytes_per_doc": band_bytes,
        "query_us": multi_index.query_us(scheme, docs),
        "insert_us": None,
        "spec": {"kind": MULTI_INDEX, "widths": list(scheme.widths), "radii": list(scheme.radii)},
        "probes": scheme.probes,
        "radii": list(scheme.radii),
        "bands": preset.bands_per_width,
        "min_similarity": preset.similarity,
        "threshold": preset.threshold,
        "chosen": True,
    }


def format_preset(preset: SimilarityPreset, docs: int, alone_k: int) -> str:
    """What a new store asked for ``preset.similarity`` keeps, and what it costs."""
    entry = preset_entry(preset, docs)
    band_bytes = entry["band_bytes_per_doc"]
    band_text = (
        "not measured"
        if band_bytes is None
        else f"about {band_bytes:.0f} a long document (a paragraph fewer)"
    )
    return "\n".join(
        [
            f"a new store asked for min_similarity={preset.similarity:g} "
            f"(simstore add --min-similarity {preset.similarity:g}):",
            f"  k={preset.k}, {entry['name']} (format 4)",
            f"  matches are verified from an estimated similarity of {preset.threshold:g}, a little below "
            f"{preset.similarity:g}, so that pairs just above it are kept",
            f"  bytes a document: {entry['table_bytes_per_doc']:.0f} in the tables, band table {band_text}, "
            f"{costs.PER_DOC_BYTES:.0f} the records, beside the sketch",
            f"  batch µs/query: {entry['query_us']:.3g} in the tables (the model) and the band look-ups "
            "(docs/choosing-k.md)",
            f"without a band table (--no-bands), k={alone_k}: the layouts below",
        ]
    )
