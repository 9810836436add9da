"""Recall of the sketch bands alone (``simstore.fingerprinting.bands``) on the real-text
corpora: for each corpus, the share of the true pairs at J >= 0.97, 0.9 and 0.8 whose
sketches share a band (before verification) and that also pass the 0.8 estimate, the
keys a document, the candidate pairs and the seconds (issue 36).

Needs the corpora of ``benchmarks/suite/realtext_corpora.py --build`` and scipy.
Measured on the 2-core AMD EPYC VM (CPython 3.11, numpy 2.4)::

    python benchmarks/experiments/band_recall.py docs_en licence_en_para docs_zh_para
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite"))

import realtext_quality

from simstore.fingerprinting import sketch as sketches
from simstore.fingerprinting.bands import band_keys
from simstore.index.shared_keys import pairs_sharing_keys


def main(names: list[str]) -> None:
    sketch = sketches.Sketch()
    for name in names:
        corpus = realtext_quality.prepare(name)
        shingles, starts = sketches.batch_shingles(corpus.texts, shingle=sketches.SHINGLE_TOKENS)
        rows = sketches.sketches_of_shingles(shingles, starts, sketch)
        began = time.perf_counter()
        keys = band_keys(rows, sketch)
        first, second = pairs_sharing_keys(keys.rows, keys.keys)
        seconds = time.perf_counter() - began
        found = first * len(corpus.texts) + second
        kept = found[sketches.estimate_jaccard(rows[first], rows[second], sketch) >= 0.8]
        cells = []
        for low in (0.97, 0.9, 0.8):
            wanted = corpus.keys[(corpus.pairs.jaccard >= low) & (corpus.pairs.jaccard < 1)]
            if len(wanted):
                cells.append(
                    f"J>={low}: {np.isin(wanted, found).mean():.1%} / {np.isin(wanted, kept).mean():.1%} "
                    f"of {len(wanted)}"
                )
        print(
            f"{name}: {len(keys.rows) / len(corpus.texts):.1f} keys/doc, {len(first)} candidates, "
            f"{seconds:.2f} s; " + "; ".join(cells),
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["docs_en", "licence_en", "licence_en_para", "docs_zh", "docs_zh_para"])
