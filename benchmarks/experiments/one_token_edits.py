"""How far does a one-token edit move a default fingerprint, and would probing the
query's weakest bits bring it back within k? (Issue 36, parts 3 and 4: measured
before choosing a candidate generator.)

For every text of at least ``--min-tokens`` words in the shipped corpora
(``benchmarks/corpora/*.jsonl.gz``, English and Chinese), one token is
appended, deleted or replaced (by a word of the same corpus) at a random place,
and both texts are fingerprinted with the default settings (word 1- and 2-grams,
log weights) under feature-hash seeds 0..``--seeds``-1. Reported per corpus,
edit and seed: the distance distribution and the share of edits past k = 3, 5, 8,
the worst seed last (a user's corpus draws one seed's luck).

Weak-bit probes (Sood & Loguinov, CIKM 2011): the query's tally per bit is known
when it is fingerprinted; the bits whose tally is closest to zero are the ones an
edit flips. The share of edits found at k if the query is also probed with each of
its ``w`` weakest bits flipped (one flip: ``w`` extra probes; up to two: ``w +
C(w, 2)``) is reported for w = 4, 8, 16. The tallies are computed here from
``simstore.fingerprinting.reference.feature_counts`` with numpy, and checked
against ``Fingerprinter`` (every fingerprint must agree).

What the store's pairs find at the defaults is reported too: a copy is found when
the two fingerprints are within k = 5 bits or the two sketches share a band
(:mod:`simstore.fingerprinting.bands`), and the sketches estimate J >= 0.8 (the
default threshold); "k=5, t=0.8" is the same without the bands. What ``query``
and ``add_if_new`` find (a band table's bands: ``DEFAULT_BANDS_PER_WIDTH`` a width)
is the third such column.

Run (2-core VM, CPython 3.11, numpy 2.4)::

    python benchmarks/experiments/one_token_edits.py --seeds 5 \\
        --output benchmarks/results/one_token_edits.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from itertools import combinations
from pathlib import Path

import numpy as np

from simstore import Fingerprinter
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.reference import feature_counts
from simstore.fingerprinting.sketch import estimate_jaccard
from simstore.fingerprinting.text import normalise, tokenise
from simstore.layout.choose import DEFAULT_BANDS_PER_WIDTH

CORPORA = Path(__file__).resolve().parents[1] / "corpora"
EDITS = ("append", "delete", "replace")
#: Every shipped corpus, and whether it is Chinese (joined without spaces).
CORPUS_LANGUAGES = (
    ("en_long", False),
    ("en_short", False),
    ("en_negative", False),
    ("zh_long", True),
    ("zh_short", True),
)
KS = (3, 5, 8)
WEAK = (4, 8, 16)


def load(name: str, min_tokens: int) -> list[list[str]]:
    """The corpus's texts of at least ``min_tokens`` tokens, as token lists
    (simstore's own tokeniser: words, jieba's for Chinese)."""
    with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in handle]
    token_lists = [tokenise(normalise(text)) for text in texts]
    return [tokens for tokens in token_lists if len(tokens) >= min_tokens]


def joined(tokens: list[str], chinese: bool) -> str:
    return "".join(tokens) if chinese else " ".join(tokens)


def edited(tokens: list[str], edit: str, vocabulary: list[str], rng: random.Random) -> list[str]:
    out = list(tokens)
    if edit == "append":
        out.append(rng.choice(vocabulary))
    elif edit == "delete":
        del out[rng.randrange(len(out))]
    else:
        place = rng.randrange(len(out))
        replacement = rng.choice(vocabulary)
        while replacement == out[place]:
            replacement = rng.choice(vocabulary)
        out[place] = replacement
    return out


def tallies(text: str, seed: int) -> np.ndarray:
    """Each bit's weighted vote (bit 0 first), as the default fingerprint takes it."""
    counts = feature_counts(text, seed=seed)
    features = np.fromiter(counts.keys(), dtype=np.uint64, count=len(counts))
    tf = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
    weights = np.rint(1000.0 * (1.0 + np.log(tf))).astype(np.int64)
    bits = ((features[:, np.newaxis] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(np.int64)
    return ((2 * bits - 1) * weights[:, np.newaxis]).sum(axis=0)


def fingerprint_of(tally: np.ndarray) -> int:
    return sum(1 << bit for bit in range(64) if tally[bit] > 0)


def found_with_weak_probes(query: int, tally: np.ndarray, stored: int, k: int, weak: int, flips: int) -> bool:
    if (query ^ stored).bit_count() <= k:
        return True
    order = np.argsort(np.abs(tally), kind="stable")[:weak].tolist()
    for count in range(1, flips + 1):
        for bits in combinations(order, count):
            probe = query
            for bit in bits:
                probe ^= 1 << bit
            if (probe ^ stored).bit_count() <= k:
                return True
    return False


def store_found(
    fingerprinter: Fingerprinter, pairs: list[tuple[str, str]], per_width: int | None = None
) -> tuple[float, float]:
    """The share of ``(stored, edited)`` text pairs the store's pairs find at
    the defaults: ``(with bands, without)`` (see the module's docstring);
    with ``per_width``, the bands a band table keeps: what ``query`` and
    ``add_if_new`` find."""
    stored, stored_rows = fingerprinter.fingerprints_and_sketches([a for a, _ in pairs])
    edited, edited_rows = fingerprinter.fingerprints_and_sketches([b for _, b in pairs])
    near = np.bitwise_count(np.asarray(stored, np.uint64) ^ np.asarray(edited, np.uint64)) <= 5
    similar = estimate_jaccard(np.asarray(stored_rows), np.asarray(edited_rows), fingerprinter.sketch) >= 0.8
    keys_a = band_keys(np.asarray(stored_rows), fingerprinter.sketch, per_width)
    keys_b = band_keys(np.asarray(edited_rows), fingerprinter.sketch, per_width)
    shared_keys = set(zip(keys_a.rows.tolist(), keys_a.keys.tolist(), strict=True))
    banded = np.zeros(len(pairs), dtype=np.bool_)
    for row, key in zip(keys_b.rows.tolist(), keys_b.keys.tolist(), strict=True):
        if (row, key) in shared_keys:
            banded[row] = True
    return float(np.mean((near | banded) & similar)), float(np.mean(near & similar))


def _band(tokens: int) -> str:
    for low, high in ((50, 100), (100, 200), (200, 400)):
        if low <= tokens < high:
            return f"{low}-{high - 1}"
    return "400+" if tokens >= 400 else "< 50"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--min-tokens", type=int, default=50)
    parser.add_argument("--limit", type=int, default=0, help="at most this many texts a corpus (0: all)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    started = time.time()
    say("# One-token edits of default fingerprints, and weak-bit probes")
    say()
    say(
        f"Command: `python benchmarks/experiments/one_token_edits.py --seeds {args.seeds} "
        f"--min-tokens {args.min_tokens}" + (f" --limit {args.limit}" if args.limit else "") + "`  "
    )
    say(f"Date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  ")
    say()
    worst: dict[tuple[str, str, int], float] = {}
    # (corpus, length band) -> [edits past k=5, edits], over every edit and seed
    by_length: dict[tuple[str, str], list[int]] = {}
    for name, chinese in CORPUS_LANGUAGES:
        token_lists = load(name, args.min_tokens)
        if args.limit:
            token_lists = token_lists[: args.limit]
        vocabulary = sorted({token for tokens in token_lists for token in tokens if token.strip()})
        say(f"## {name}: {len(token_lists)} texts of >= {args.min_tokens} tokens")
        say()
        header = ["edit", "seed", "median d", "p90 d", "max d"]
        header += [f"> k={k}" for k in KS]
        header += [f"k=5 + {w} weak, 1 flip" for w in WEAK] + [f"k=5 + {w} weak, <= 2 flips" for w in WEAK]
        header += ["k=5, t=0.8", "k=5 + bands, t=0.8", "query: k=5 + table's bands, t=0.8"]
        say("| " + " | ".join(header) + " |")
        say("|" + "---|" * len(header))
        for edit in EDITS:
            rng = random.Random(f"{name}-{edit}")
            pairs = [(tokens, edited(tokens, edit, vocabulary, rng)) for tokens in token_lists]
            for seed in range(args.seeds):
                fingerprinter = Fingerprinter(seed=seed)
                distances = []
                weak_found = {(w, f): 0 for w in WEAK for f in (1, 2)}
                for original, changed in pairs:
                    stored_text, query_text = joined(original, chinese), joined(changed, chinese)
                    stored_tally, query_tally = tallies(stored_text, seed), tallies(query_text, seed)
                    stored, query = fingerprint_of(stored_tally), fingerprint_of(query_tally)
                    assert stored == fingerprinter.fingerprint(stored_text), "tallies disagree with simstore"
                    assert query == fingerprinter.fingerprint(query_text), "tallies disagree with simstore"
                    distances.append((stored ^ query).bit_count())
                    band = _band(len(original))
                    tally_row = by_length.setdefault((name, band), [0, 0])
                    tally_row[0] += distances[-1] > 5
                    tally_row[1] += 1
                    for weak, flips in weak_found:
                        if found_with_weak_probes(query, query_tally, stored, 5, weak, flips):
                            weak_found[(weak, flips)] += 1
                d = np.array(distances)
                row = [edit, str(seed), f"{np.median(d):.0f}", f"{np.percentile(d, 90):.0f}", str(d.max())]
                for k in KS:
                    share = float(np.mean(d > k))
                    worst[(name, edit, k)] = max(worst.get((name, edit, k), 0.0), share)
                    row.append(f"{100 * share:.1f} %")
                for flips in (1, 2):
                    for weak in WEAK:
                        share = weak_found[(weak, flips)] / len(pairs)
                        key = (name, f"{edit} weak{weak}x{flips}", 5)
                        worst[key] = max(worst.get(key, 0.0), 1 - share)
                        row.append(f"{100 * share:.1f} %")
                texts = [(joined(original, chinese), joined(changed, chinese)) for original, changed in pairs]
                banded, plain = store_found(fingerprinter, texts)
                queried, _ = store_found(fingerprinter, texts, DEFAULT_BANDS_PER_WIDTH)
                for label, share in (("t=0.8", plain), ("bands t=0.8", banded), ("query t=0.8", queried)):
                    key = (name, f"{edit} {label}", 5)
                    worst[key] = max(worst.get(key, 0.0), 1 - share)
                    row.append(f"{100 * share:.1f} %")
                say("| " + " | ".join(row) + " |")
        say()
    say("## By length (every edit and seed pooled)")
    say()
    say("| corpus | tokens | edits | past k = 5 |")
    say("|---|---|---|---|")
    for (name, band), (past, total) in sorted(by_length.items()):
        say(f"| {name} | {band} | {total} | {100 * past / total:.1f} % |")
    say()
    say("## Worst seed")
    say()
    say("| corpus | edit (and probes) | k | missed, worst seed |")
    say("|---|---|---|---|")
    for (name, edit, k), share in sorted(worst.items()):
        say(f"| {name} | {edit} | {k} | {100 * share:.1f} % |")
    say()
    say(f"Took {time.time() - started:.0f} s.")
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
