"""Rebuild ``kjv_near_duplicates.jsonl``: passages of the King James Bible with
planted near-duplicates, deterministic (seeded).

Run from the repository root::

    python examples/corpus/build.py

Source: ``benchmarks/corpora/en_long.jsonl.gz`` (King James Bible chapters
from Debian's ``bible-kjv-text``; public domain, see
``benchmarks/corpora/README.md``).
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "benchmarks" / "corpora" / "en_long.jsonl.gz"
TARGET = Path(__file__).resolve().parent / "kjv_near_duplicates.jsonl"
BASES = 240
PASSAGE_WORDS = 110
VARIANTS_OF = 70
SEED = 2007  # the year of Manku, Jain & Das Sarma's paper


def passage(text: str) -> str:
    """The first sentences of a chapter, about PASSAGE_WORDS words."""
    sentences = re.split(r"(?<=[.?!:;])\s+", text)
    words: list[str] = []
    for sentence in sentences:
        words.extend(sentence.split())
        if len(words) >= PASSAGE_WORDS:
            break
    return " ".join(words)


def cosmetic(text: str, rng: random.Random) -> str:
    """Case, white space and punctuation changes: the fingerprint ignores them."""
    words = text.split()
    changed = [word.upper() if rng.random() < 0.1 else word for word in words]
    joined = "  ".join(changed) if rng.random() < 0.5 else " ".join(changed)
    return joined.replace(",", " ,") + "\n"


def word_edit(text: str, rng: random.Random) -> str:
    """One word replaced by another word of the passage."""
    words = text.split()
    position = rng.randrange(len(words))
    words[position] = rng.choice(words)
    return " ".join(words)


def main() -> None:
    with gzip.open(SOURCE, "rt", encoding="utf-8") as stream:
        chapters = [json.loads(line)["text"] for line in stream]
    rng = random.Random(SEED)
    chosen = rng.sample(range(len(chapters)), BASES)
    documents = [
        {"id": f"kjv-{index:03d}", "text": passage(chapters[chapter]), "variant_of": None, "edit": None}
        for index, chapter in enumerate(chosen)
    ]
    for base in rng.sample(documents[:], VARIANTS_OF):
        for number, kind in enumerate(rng.sample(["cosmetic", "word"], rng.choice([1, 2]))):
            text = cosmetic(base["text"], rng) if kind == "cosmetic" else word_edit(base["text"], rng)
            documents.append(
                {"id": f"{base['id']}-v{number + 1}", "text": text, "variant_of": base["id"], "edit": kind}
            )
    rng.shuffle(documents)
    with TARGET.open("w", encoding="utf-8") as out:
        for document in documents:
            out.write(json.dumps(document, ensure_ascii=False) + "\n")
    print(f"wrote {len(documents)} documents to {TARGET.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
