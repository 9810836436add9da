"""The report of the real-text benchmark: markdown tables and the recall/precision plot.

Takes the :class:`realtext_quality.CorpusResult` of each corpus; writes nothing but what
it is asked to (``benchmarks/results/quality_real.md`` and ``quality_real.png`` by
``bench_quality.py --real``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from realtext_quality import (
    ANSWER_GOALS,
    BANDS,
    DISTANCE_THRESHOLDS,
    RECALL_TARGET,
    SHORT_TOKENS,
    STORE_ANSWERS,
    SWEEP_KS,
    SWEEP_THRESHOLDS,
    VERIFY_POINTS,
    CorpusResult,
    answer_scores,
    lsh_shape,
    smallest_k,
)


def _pct(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def corpora_table(results: Sequence[CorpusResult]) -> list[str]:
    """One row per corpus: size and true pairs per band."""
    rows = []
    for r in results:
        g = r.groups["all"]
        rows.append(
            [r.name, r.docs, f"{r.median_tokens:.0f}", r.short_docs]
            + [g[name] for name, _, _ in BANDS]
            + [g["0.5-0.8"], f"{r.seconds:.0f}"]
        )
    headers = ["corpus", "docs", "median tokens", f"docs < {SHORT_TOKENS} tokens"]
    headers += [f"pairs {name}" for name, _, _ in BANDS] + ["pairs 0.5-0.8", "seconds"]
    return _table(headers, rows)


def bytes_table(sketch_bytes: int | None) -> list[str]:
    """Bytes per document of each system's signature."""
    rows: list[list[object]] = [["simstore (fingerprint)", 8, "uint64 simhash"]]
    if sketch_bytes:
        rows.append(
            ["simstore + verification sketch", 8 + sketch_bytes, f"fingerprint + {sketch_bytes} B sketch"]
        )
    rows.append(["simhash (PyPI)", 8, "64-bit int"])
    try:
        bands, rows_per_band = lsh_shape()
        lsh = (
            "MinHash: 128 hash values held as uint64 (1024 B); the LSH tables add "
            f"{bands} band keys of {rows_per_band} values ({bands * rows_per_band * 8} B)"
        )
    except ImportError:
        lsh = "datasketch not installed"
    rows.append(["datasketch MinHashLSH(0.8, 128)", 1024, lsh])
    return _table(["system", "bytes per document", "what is stored"], rows)


def distance_table(results: Sequence[CorpusResult], kind: str) -> list[str]:
    """Smallest k holding RECALL_TARGET of the pairs t <= J < 1, per corpus and pooled."""
    rows = []
    pooled_j: list[npt.NDArray[np.float64]] = []
    pooled_d: list[npt.NDArray[np.int64]] = []
    for r in results:
        j, d = r.truth_distances[kind]
        pooled_j.append(j)
        pooled_d.append(d)
        rows.append([r.name, *(_k_cell(j, d, t) for t in DISTANCE_THRESHOLDS)])
    j = np.concatenate(pooled_j) if pooled_j else np.zeros(0)
    d = np.concatenate(pooled_d) if pooled_d else np.zeros(0, dtype=np.int64)
    rows.append(["**pooled**", *(_k_cell(j, d, t) for t in DISTANCE_THRESHOLDS)])
    return _table(["corpus", *(f"t = {t}: k (pairs)" for t in DISTANCE_THRESHOLDS)], rows)


def _k_cell(j: npt.NDArray[np.float64], d: npt.NDArray[np.int64], threshold: float) -> str:
    chosen = d[(j >= threshold) & (j < 1.0)]
    k = smallest_k(chosen, RECALL_TARGET)
    return "-" if k is None else f"{k} ({len(chosen)})"


#: The k whose recall :func:`seed_table` gives per seed: the old default, the
#: default, and the 0.9 preset's.
SEED_KS = (3, 5, 8)
#: The Jaccard bands (low, high) of those recalls.
SEED_BANDS = ((0.97, 1.0), (0.9, 1.0))


def seed_table(results: Sequence[CorpusResult]) -> list[str]:
    """Per feature-hash seed, pooled over corpora (texts of >= SHORT_TOKENS tokens): the
    smallest k holding RECALL_TARGET of the pairs t <= J < 1, and the recall of each
    SEED_BANDS band within each of SEED_KS bits (unverified: the default threshold
    of 0.8 keeps every pair of these bands that k finds, see the sweep below); the
    last row is the worst seed's, column by column."""
    seeds = sorted(set.intersection(*(set(r.seed_distances) for r in results))) if results else []
    if len(seeds) < 2:
        return ["(one seed: run with --real-seeds N to see the spread)"]
    rows = []
    cells_by_seed = []
    for seed in seeds:
        j = np.concatenate([r.seed_distances[seed][0] for r in results])
        d = np.concatenate([r.seed_distances[seed][1] for r in results])
        ks = [smallest_k(d[(j >= t) & (j < 1.0)], RECALL_TARGET) for t in DISTANCE_THRESHOLDS]
        recalls = []
        for low, high in SEED_BANDS:
            band = d[(j >= low) & (j < high)]
            recalls += [float((band <= k).mean()) if len(band) else math.nan for k in SEED_KS]
        cells_by_seed.append((ks, recalls))
        rows.append([seed, *("-" if k is None else k for k in ks), *(_pct(v) for v in recalls)])
    worst = [max((c[0][i] for c in cells_by_seed if c[0][i] is not None), default="-") for i in range(3)]
    lows = [min(c[1][i] for c in cells_by_seed) for i in range(len(cells_by_seed[0][1]))]
    rows.append(["**worst**", *worst, *(_pct(v) for v in lows)])
    headers = ["seed", *(f"k for t = {t}" for t in DISTANCE_THRESHOLDS)]
    headers += [f"recall {low} <= J < {high:g}, k={k} %" for low, high in SEED_BANDS for k in SEED_KS]
    return _table(headers, rows)


#: The columns of the answer tables: (heading, score name).
ANSWER_COLUMNS = (("J >= 0.97", ">=0.97"), ("0.9 <= J < 1", "r90"), ("0.8 <= J < 1", "r80"))


def answer_table(results: Sequence[CorpusResult], kind: str) -> list[str]:
    """Per STORE_ANSWERS system, pooled over the corpora, the pairs of ``kind``: recall
    and precision on the worst feature-hash seed, column by column, and the range over
    seeds."""
    seeds = sorted(set.intersection(*(set(r.answers) for r in results))) if results else []
    if not seeds:
        return ["(not measured: run without --no-verify)"]
    rows = []
    for system, _, _ in STORE_ANSWERS:
        by_seed = [answer_scores(results, seed, system, kind) for seed in seeds]
        cells: list[object] = [system]
        for _, name in (*ANSWER_COLUMNS, ("precision", "precision")):
            values = [s[name] for s in by_seed if not math.isnan(s[name])]
            cells.append(
                "-" if not values else f"**{_pct(min(values))}** ({_pct(min(values))}-{_pct(max(values))})"
            )
        cells.append(max(int(s["fp"]) for s in by_seed))
        rows.append(cells)
    headers = ["system", *(f"recall {h} %" for h, _ in ANSWER_COLUMNS), "precision %", "false pairs (worst)"]
    return [
        f"Seeds {seeds[0]}..{seeds[-1]}; the worst seed in bold, the range after it.",
        "",
        *_table(headers, rows),
    ]


def goal_table(results: Sequence[CorpusResult]) -> list[str]:
    """Issue 36's goals against the store's answers: each figure on the worst seed,
    pooled over the corpora and in the worst corpus, texts of >= 20 tokens."""
    seeds = sorted(set.intersection(*(set(r.answers) for r in results))) if results else []
    if not seeds:
        return ["(not measured: run without --no-verify)"]
    names = {">=0.97": "recall 0.97 <= J < 1", "r90": "recall 0.9 <= J < 1", "r80": "recall 0.8 <= J < 1"}
    rows = []
    for system, name, goal in ANSWER_GOALS:
        pooled_worst = min(answer_scores(results, seed, system, "long")[name] for seed in seeds)
        corpora = []
        for r in results:
            # A corpus without pairs in the range has no recall there (NaN).
            by_seed = [answer_scores([r], seed, system, "long")[name] for seed in seeds if seed in r.answers]
            by_seed = [value for value in by_seed if not math.isnan(value)]
            if by_seed:
                corpora.append((min(by_seed), r.name))
        worst, where = min(corpora) if corpora else (math.nan, "-")
        met = "met" if pooled_worst * 100 >= goal else f"short by {goal - pooled_worst * 100:.1f} points"
        figure = names.get(name, name)
        rows.append([system, figure, f">= {goal}", _pct(pooled_worst), f"{_pct(worst)} ({where})", met])
    headers = ["setting", "figure", "goal %", "pooled, worst seed %", "worst corpus, worst seed %", ""]
    return _table(headers, rows)


def answer_corpus_table(results: Sequence[CorpusResult]) -> list[str]:
    """Per corpus with long pairs, per STORE_ANSWERS system: recall of 0.9 <= J < 1 and
    0.8 <= J < 1 on the worst seed."""
    rows = []
    for r in results:
        if not r.answers or not sum(r.answer_counts["long"][b] for b in (">=0.97", "0.9-0.97", "0.8-0.9")):
            continue
        cells: list[object] = [r.name]
        for system, _, _ in STORE_ANSWERS:
            by_seed = [answer_scores([r], seed, system, "long") for seed in r.answers]
            cells += [_pct(min(s[name] for s in by_seed)) for name in ("r90", "r80")]
        rows.append(cells)
    headers = ["corpus"] + [
        f"{system}: {band}" for system, _, _ in STORE_ANSWERS for band in ("0.9-1", "0.8-1")
    ]
    return _table(headers, rows)


def error_table(results: Sequence[CorpusResult]) -> list[str]:
    """Sketch estimate minus exact J, pooled over corpora, per geometry: on pairs with
    J >= 0.5 (all of them, and those with a short text apart) and below."""
    with_errors = [r for r in results if r.errors is not None]
    if not with_errors:
        return ["(no verification sketch in this simstore: skipped)"]
    exact = np.concatenate([r.errors["exact"] for r in with_errors])
    short = np.concatenate([r.errors["short"] for r in with_errors])
    geometries = [key for key in with_errors[0].errors if key not in ("exact", "short")]
    high = exact >= 0.5
    parts = (high, high & short, ~high)
    rows = []
    for geometry in geometries:
        bins, bits = (int(v) for v in geometry.split("x"))
        diff = np.concatenate([r.errors[geometry] for r in with_errors]) - exact
        cells: list[object] = [geometry.replace("x", " x "), bins * bits // 8]
        for part in parts:
            err = diff[part]
            if len(err):
                spread = f"{np.percentile(err, 1):+.3f} / {np.percentile(err, 99):+.3f}"
                cells += [f"{np.abs(err).mean():.4f}", spread]
            else:
                cells += ["-", "-"]
        for k, threshold in VERIFY_POINTS:
            cells.append(_verified(with_errors, geometry, k, threshold))
        rows.append(cells)
    headers = ["bins x bits", "bytes", "MAE, J >= 0.5", "p1 / p99 of est - J, J >= 0.5"]
    headers += [f"MAE, J >= 0.5, a text < {SHORT_TOKENS} tokens", "p1 / p99, same"]
    headers += ["MAE, J < 0.5", "p1 / p99, J < 0.5"]
    headers += [f"k={k}, est >= {t}: recall 0.9<=J<1 / precision %" for k, t in VERIFY_POINTS]
    note = (
        f"Pairs: {int(high.sum())} with J >= 0.5 (every true pair; {int((high & short).sum())} "
        f"with a text of < {SHORT_TOKENS} tokens) and {int((~high).sum())} below (candidates "
        "within 12 bits, a sample of at most 20,000 a corpus, and 20,000 random pairs a corpus), "
        "pooled over the corpora."
    )
    return [note, "", *_table(headers, rows)]


def _verified(results: Sequence[CorpusResult], geometry: str, k: int, threshold: float) -> str:
    """Pooled recall of 0.9 <= J < 1 and precision of the candidates within k kept at est >= t."""
    near = hits = fp = reported = 0
    for r in results:
        held = (r.verify_by_geometry or {}).get(geometry)
        if held:
            near += int(held["near"])
            hits += int(held[f"k{k} t{threshold} hits"])
            fp += int(held[f"k{k} t{threshold} fp"])
            reported += int(held[f"k{k} t{threshold} reported"])
    precision = 1 - fp / reported if reported else 1.0
    return f"{_pct(hits / near if near else math.nan)} / {_pct(precision)}"


def system_rows(
    tables: dict[str, dict[int, dict[str, float]]], single: dict[str, dict[str, float]]
) -> list[list[object]]:
    """Rows (system, k, recall per band, r90, reported, FP, precision)."""
    rows: list[list[object]] = []
    for system, by_k in tables.items():
        for k, s in by_k.items():
            rows.append(_score_row(system, k, s))
    for system, s in single.items():
        rows.append(_score_row(system, "-", s))
    return rows


def _score_row(system: str, k: object, s: dict[str, float]) -> list[object]:
    return [
        system,
        k,
        *(_pct(s[name]) for name, _, _ in BANDS),
        _pct(s["r90"]),
        int(s["reported"]),
        int(s["fp"]),
        f"{100 * s['precision']:.2f}",
    ]


SCORE_HEADERS = [
    "system",
    "k",
    "recall J=1",
    "0.97-1",
    "0.9-0.97",
    "0.8-0.9",
    "0.9<=J<1",
    "reported",
    "false (J<0.5)",
    "precision %",
]


def pooled_every_k(results: Sequence[CorpusResult]) -> list[str]:
    """The k = 0..12 table of every system with a k, summed over the corpora (all pairs)."""
    systems = list(dict.fromkeys(name for r in results for name in r.tables["all"]))
    rows = []
    for system in systems:
        for k in range(13):
            s = pooled(results, system, k)
            if s is not None:
                rows.append(_score_row(system, k, s))
    minhash = pooled(results, "MinHashLSH", -1)
    if minhash is not None:
        rows.append(_score_row("MinHashLSH", "-", minhash))
    return _table(SCORE_HEADERS, rows)


def corpus_sections(results: Sequence[CorpusResult]) -> list[str]:
    """The full k = 0..12 tables, per corpus and pair group."""
    lines: list[str] = []
    for r in results:
        for group, tables in r.tables.items():
            label = {
                "all": "all pairs",
                "long": f"pairs of texts of >= {SHORT_TOKENS} tokens",
                "short": f"pairs with a text of < {SHORT_TOKENS} tokens",
            }[group]
            counts = r.groups[group]
            lines += [
                "",
                f"### {r.name}: {label}",
                "",
                "True pairs: " + ", ".join(f"{k} {v}" for k, v in counts.items()),
                "",
            ]
            lines += _table(SCORE_HEADERS, system_rows(tables, r.single.get(group, {})))
    return lines


def headline(results: Sequence[CorpusResult], systems: Sequence[tuple[str, int]]) -> list[str]:
    """A compact table: recall of 0.97 <= J < 1 and of 0.9 <= J < 1, and precision, at
    chosen (system, k), per corpus and pooled."""
    rows = []
    for system, k in systems:
        cells: list[object] = [f"{system} k={k}" if k >= 0 else system]
        for r in results:
            s = r.single.get("all", {}).get(system) if k < 0 else r.tables["all"].get(system, {}).get(k)
            cells.append(_cell(s))
        cells.append(_cell(pooled(results, system, k)))
        rows.append(cells)
    return _table(["system", *(r.name for r in results), "**pooled**"], rows)


def short_headline(results: Sequence[CorpusResult], systems: Sequence[tuple[str, int]]) -> list[str]:
    """Recall of 0.8 <= J < 0.9 and of 0.9 <= J < 1, and precision, on the pairs with a
    text of fewer than SHORT_TOKENS tokens, per corpus that has them."""
    with_short = [r for r in results if "short" in r.tables]
    if not with_short:
        return ["(no corpus has short texts)"]
    rows = []
    for system, k in systems:
        cells: list[object] = [f"{system} k={k}" if k >= 0 else system]
        for r in with_short:
            by_k = r.tables["short"].get(system, {})
            s = r.single.get("short", {}).get(system) if k < 0 else by_k.get(k)
            cells.append(
                "-" if s is None else f"{_pct(s['0.8-0.9'])} / {_pct(s['r90'])} / {100 * s['precision']:.1f}"
            )
        rows.append(cells)
    headers = [
        "system",
        *(f"{r.name} ({r.groups['short']['0.8-0.9']} / {_near(r)} pairs)" for r in with_short),
    ]
    return _table(headers, rows)


def _near(r: CorpusResult) -> int:
    return r.groups["short"][">=0.97"] + r.groups["short"]["0.9-0.97"]


def _cell(s: dict[str, float] | None) -> str:
    if s is None:
        return "-"
    return f"{_pct(s['>=0.97'])} / {_pct(s['r90'])} / {100 * s['precision']:.1f}"


def pooled(results: Sequence[CorpusResult], system: str, k: int) -> dict[str, float] | None:
    """Scores of ``system`` at ``k`` (k < 0: a system without k) summed over the corpora
    (all pairs): recall = hits / true pairs per band, precision from the summed counts."""
    hits = dict.fromkeys([name for name, _, _ in BANDS] + ["r90"], 0.0)
    totals = dict.fromkeys(hits, 0)
    reported = fp = below = 0
    found = False
    for r in results:
        s = _scores_of(r, system, k)
        if s is None:
            continue
        found = True
        below += int(s.get("below", 0))
        counts = dict(r.groups["all"])
        counts["r90"] = counts[">=0.97"] + counts["0.9-0.97"]
        for name in hits:
            if counts[name]:
                hits[name] += s[name] * counts[name]
                totals[name] += counts[name]
        reported += int(s["reported"])
        fp += int(s["fp"])
    if not found:
        return None
    out = {name: hits[name] / totals[name] if totals[name] else math.nan for name in hits}
    out.update(reported=reported, fp=fp, precision=1 - fp / reported if reported else 1.0, below=below)
    return out


def _scores_of(r: CorpusResult, system: str, k: int) -> dict[str, float] | None:
    """One corpus's scores (all pairs) of a system at k, a threshold-sweep entry included."""
    if k < 0:
        return r.single.get("all", {}).get(system)
    found = r.tables["all"].get(system, {}).get(k)
    return found if found is not None else r.sweep.get(system, {}).get(k)


def sweep_table(results: Sequence[CorpusResult]) -> list[str]:
    """Pooled scores of the default sketch's threshold sweep."""
    if not any(r.sweep for r in results):
        return ["(no verification sketch in this simstore: skipped)"]
    rows = []
    for threshold in SWEEP_THRESHOLDS:
        for k in SWEEP_KS:
            s = pooled(results, f"est>={threshold}", k)
            if s is None:
                continue
            share = s["below"] / s["reported"] if s["reported"] else 0.0
            counts = [int(s["reported"]), int(s["fp"]), f"{100 * s['precision']:.2f}", f"{100 * share:.1f}"]
            rows.append([threshold, k, *(_pct(s[name]) for name, _, _ in BANDS), _pct(s["r90"]), *counts])
    headers = ["est >=", *SCORE_HEADERS[1:], "kept with J < t %"]
    return _table(headers, rows)


def markdown(
    results: Sequence[CorpusResult],
    header: dict[str, Any],
    sketch_bytes: int | None,
    configs: Sequence[str] = (),
) -> str:
    """The whole report (``configs``: other simstore configurations scored)."""
    lines = ["# Fingerprint quality on real text", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    lines += ["", "## Corpora", "", *corpora_table(results)]
    lines += ["", "## Bytes per document", "", *bytes_table(sketch_bytes)]
    lines += ["", "## Headline: recall 0.97 <= J < 1 / recall 0.9 <= J < 1 / precision, %", ""]
    chosen = [("simstore", k) for k in (3, 5, 8)]
    chosen += [(f"simstore[{config}]", k) for config in configs for k in (3, 5, 8)]
    if any("simstore+verify>=0.9" in r.tables["all"] for r in results):
        chosen += [("simstore+verify>=0.9", k) for k in (8, 12)] + [("simstore+verify>=0.8", 8)]
    chosen += [("simhash (PyPI)", 3), ("simhash (PyPI)", 8), ("MinHashLSH", -1)]
    lines += headline(results, chosen)
    lines += [
        "",
        f"Pairs with a text of < {SHORT_TOKENS} tokens: "
        "recall 0.8 <= J < 0.9 / recall 0.9 <= J < 1 / precision, %",
        "",
    ]
    lines += short_headline(results, chosen)
    lines += [
        "",
        f"## Smallest k holding {RECALL_TARGET:.0%} of the pairs t <= J < 1 (default fingerprint)",
        "",
    ]
    lines += [f"Texts of >= {SHORT_TOKENS} tokens:", "", *distance_table(results, "long")]
    lines += ["", f"Pairs with a text of < {SHORT_TOKENS} tokens:", "", *distance_table(results, "short")]
    lines += ["", "One feature-hash seed is one draw; the same, pooled, per seed:", "", *seed_table(results)]
    lines += [
        "",
        "## The store's answers, per feature-hash seed",
        "",
        "Issue 36's goals (texts of >= 20 tokens; a pair below J = 0.5 is false; the worst "
        "corpus among those with pairs in the range):",
        "",
        *goal_table(results),
        "",
        f"A store of each corpus (k = 5, fingerprinted with seed s) asked for "
        "`near_duplicate_pairs(min_similarity=t, bands=...)`, end to end. "
        f"Texts of >= {SHORT_TOKENS} tokens:",
        "",
        *answer_table(results, "long"),
        "",
        f"Pairs with a text of < {SHORT_TOKENS} tokens:",
        "",
        *answer_table(results, "short"),
        "",
        "Per corpus, worst seed, texts of >= 20 tokens (recall %):",
        "",
        *answer_corpus_table(results),
    ]
    lines += ["", "## Verification sketch: estimate against exact J", "", *error_table(results)]
    lines += ["", "## Verification threshold sweep (default sketch), pooled over the corpora", ""]
    lines += [
        "Candidates within k of the default fingerprint, kept when the sketch estimates J >= t; "
        "the last column is the share of kept pairs whose exact J is below t.",
        "",
        *sweep_table(results),
    ]
    lines += ["", "## Every k, pooled over the corpora", "", *pooled_every_k(results)]
    lines += ["", "## Every k, per corpus", *corpus_sections(results), ""]
    return "\n".join(lines)


STYLES = {
    "simstore": "C0",
    "simstore+verify>=0.8": "C2",
    "simstore+verify>=0.9": "C3",
    "simstore+verify>=0.97": "C4",
    "simhash (PyPI)": "C1",
}


def plot(results: Sequence[CorpusResult], path: Path) -> Path | None:
    """Recall (0.9 <= J < 1) against precision per system as k goes 0..12: one panel
    pooled over the corpora, one per corpus; corpora without such pairs (the templated
    and negative ones) show their false pairs against k instead."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels: list[tuple[str, CorpusResult | None]] = [("pooled: all corpora", None)]
    panels += [(r.name, r) for r in results]
    columns = 4
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.7 * rows), squeeze=False)
    for ax, (title, r) in zip(axes.flat, panels, strict=False):
        curves: dict[str, dict[int, dict[str, float]]] = {}
        for system in STYLES:
            if r is None:
                found = {k: pooled(results, system, k) for k in range(13)}
                by_k = {k: s for k, s in found.items() if s is not None}
            else:
                by_k = r.tables["all"].get(system, {})
            if by_k:
                curves[system] = by_k
        minhash = (
            pooled(results, "MinHashLSH", -1) if r is None else r.single.get("all", {}).get("MinHashLSH")
        )
        near = 1 if r is None else r.groups["all"][">=0.97"] + r.groups["all"]["0.9-0.97"]
        if near:
            _recall_panel(ax, curves, minhash)
        else:
            _false_panel(ax, curves, minhash)
        ax.set_title(title if r is None else f"{title} ({r.docs} docs)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(
        "Real text: recall of 0.9 <= J < 1 against precision (false pair: J < 0.5) "
        "as k goes 0..12 (labels: k)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _recall_panel(
    ax: Any, curves: dict[str, dict[int, dict[str, float]]], minhash: dict[str, float] | None
) -> None:
    """Recall of 0.9 <= J < 1 against precision, one line per system."""
    for system, by_k in curves.items():
        x = [100 * s["precision"] for s in by_k.values()]
        y = [100 * s["r90"] for s in by_k.values()]
        ax.plot(x, y, marker="o", ms=2.5, color=STYLES[system], label=system)
        for k in (3, 8, 12):
            if k in by_k:
                ax.annotate(str(k), (x[k], y[k]), fontsize=6, color=STYLES[system])
    if minhash:
        ax.plot(
            [100 * minhash["precision"]], [100 * minhash["r90"]], "k*", ms=9, label="MinHashLSH(0.8, 128)"
        )
    ax.set_xlabel("precision %", fontsize=8)
    ax.set_ylabel("recall % of 0.9 <= J < 1", fontsize=8)


def _false_panel(
    ax: Any, curves: dict[str, dict[int, dict[str, float]]], minhash: dict[str, float] | None
) -> None:
    """False pairs against k, one line per system (a corpus without near-duplicates)."""
    for system, by_k in curves.items():
        y = [s["fp"] + 0.5 for s in by_k.values()]
        ax.plot(list(by_k), y, marker="o", ms=2.5, color=STYLES[system], label=system)
    if minhash:
        ax.plot([0], [minhash["fp"] + 0.5], "k*", ms=9, label="MinHashLSH(0.8, 128)")
    ax.set_yscale("log")
    ax.set_xlabel("k (no pairs with 0.9 <= J < 1 here)", fontsize=8)
    ax.set_ylabel("false pairs + 0.5 (log scale)", fontsize=8)
