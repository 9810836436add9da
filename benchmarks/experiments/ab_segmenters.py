"""Do faster Chinese segmenters cut exactly as jieba does, and how much faster?

simstore's fingerprints depend on jieba's words (``jieba.Tokenizer().lcut``,
HMM on), so a faster segmenter may replace it only if it gives the same
words for every input. This compares candidates with jieba on the Han runs
of the Chinese corpora (as simstore hands them over: one string per document,
runs joined by spaces) and on synthetic strings (random dictionary words,
random characters from the dictionary, and random CJK characters, which
exercise the HMM), and times each on the corpora (CPU seconds, one process).

Run in a venv holding the candidates (none is a simstore dependency)::

    pip install jieba==0.42.1 rjieba jieba-fast-dat
    python benchmarks/experiments/ab_segmenters.py --synthetic 20000

Machine: the project's 2-core AMD EPYC VM (KVM, 23.5 GiB RAM, ext4, CPython 3.11), shared
with other jobs; the header of each result file gives its versions and load average.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

# simstore.fingerprinting.text._HAN, copied so that this runs without simstore installed.
_HAN = "\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\U00030000-\U000323af"
CORPORA = Path(__file__).resolve().parents[1] / "corpora"


def corpus_inputs() -> list[str]:
    inputs = []
    for name in ("zh_long", "zh_short"):
        with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
            inputs += [" ".join(re.findall(f"[{_HAN}]+", json.loads(line)["text"])) for line in handle]
    return inputs


def synthetic_inputs(count: int, words: list[str], seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    characters = sorted({c for w in words for c in w})
    inputs = []
    for index in range(count):
        kind = index % 3
        if kind == 0:
            text = "".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        elif kind == 1:
            text = "".join(rng.choice(characters) for _ in range(rng.randint(1, 30)))
        else:
            text = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(1, 30)))
        inputs.append(text)
    return inputs


def candidates() -> dict[str, Callable[[str], list[str]]]:
    found: dict[str, Callable[[str], list[str]]] = {}
    try:
        import rjieba

        found["rjieba"] = lambda text: list(rjieba.cut(text))
    except ImportError:
        pass
    try:
        import jieba_fast_dat

        tokenizer = jieba_fast_dat.Tokenizer()
        tokenizer.initialize()
        found["jieba-fast-dat"] = tokenizer.lcut
    except ImportError:
        pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--synthetic", type=int, default=20000)
    args = parser.parse_args()
    import jieba

    jieba.setLogLevel(60)
    reference = jieba.Tokenizer()
    reference.initialize()
    words = [w for w in reference.FREQ if reference.FREQ[w] and re.fullmatch(f"[{_HAN}]+", w)]
    sets = {"corpora": corpus_inputs(), "synthetic": synthetic_inputs(args.synthetic, words)}
    expected = {name: [reference.lcut(text) for text in texts] for name, texts in sets.items()}
    started = time.process_time()
    for text in sets["corpora"]:
        reference.lcut(text)
    jieba_seconds = time.process_time() - started
    count = len(sets["corpora"])
    print(f"jieba {jieba.__version__}: {jieba_seconds:.3f} CPU s on the corpora ({count} inputs)")
    for name, cut in candidates().items():
        for set_name, texts in sets.items():
            differing = [t for t, want in zip(texts, expected[set_name], strict=True) if cut(t) != want]
            print(f"  {name}: {set_name}: {len(texts) - len(differing)} of {len(texts)} identical")
            if differing:
                want, got = reference.lcut(differing[0]), cut(differing[0])
                at = next(i for i, pair in enumerate(zip(want, got, strict=False)) if pair[0] != pair[1])
                print(f"    e.g. jieba {want[at : at + 4]} against {got[at : at + 4]}")
        started = time.process_time()
        for text in sets["corpora"]:
            cut(text)
        seconds = time.process_time() - started
        print(f"  {name}: {seconds:.3f} CPU s on the corpora ({jieba_seconds / seconds:.1f}x jieba)")


if __name__ == "__main__":
    main()
