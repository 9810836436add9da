"""add_if_new: look-up and insert in one transaction; racing processes never double-insert."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import simstore
from simstore.keys import pack_key
from simstore.store import writes


def test_inserts_only_when_nothing_is_near(store: simstore.Store) -> None:
    """An empty result means inserted; a near-duplicate returns its matches and is not stored."""
    assert store.add_if_new("a", fingerprint=0b1111_0000) == []
    assert "a" in store
    matches = store.add_if_new("b", fingerprint=0b1111_0001, meta={"url": "b"})
    assert [(m.key, m.distance) for m in matches] == [("a", 1)]
    assert "b" not in store
    assert store.add_if_new("c", fingerprint=0b1111_0001 ^ (0xFF << 40), k=1) == []
    assert "c" in store


def test_k_limits_what_counts_as_near(store: simstore.Store) -> None:
    store.add("a", fingerprint=0)
    assert store.add_if_new("b", fingerprint=0b111, k=2) == []
    assert [(m.key, m.distance) for m in store.add_if_new("c", fingerprint=0b11, k=2)] == [("b", 1), ("a", 2)]


def test_matches_carry_meta_on_request(store: simstore.Store) -> None:
    store.add("a", fingerprint=5, meta={"title": "A"})
    [match] = store.add_if_new("b", fingerprint=4, with_meta=True)
    assert match.meta == {"title": "A"}
    assert store.query(fingerprint=5, with_meta=True)[0].meta == {"title": "A"}
    assert store.query(fingerprint=5)[0].meta is None


RACER = textwrap.dedent(
    """
    import sys, time
    import simstore
    path, name, start, offered = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    fingerprints = [int(line) for line in open(offered).read().split()]
    with simstore.open(path, "w", sync=False) as store:
        while time.time() < start:
            time.sleep(0.001)
        inserted = sum(
            1 for i, fp in enumerate(fingerprints) if not store.add_if_new(f"{name}-{i}", fingerprint=fp)
        )
    print(inserted)
    """
)


def test_two_racing_processes_never_both_insert_a_near_duplicate(store_path: str, tmp_path: Path) -> None:
    """Two writers offer the same 300 documents (one copy each, a bit apart): each is stored once."""
    rng = np.random.default_rng(11)
    base = rng.integers(0, 2**64, 300, dtype=np.uint64)
    with simstore.open(store_path, k=3):
        pass
    start = time.time() + 1.0
    racers = []
    for name, flip in (("left", 0), ("right", 1)):
        offered = tmp_path / f"{name}.txt"
        offered.write_text("\n".join(str(int(fp) ^ flip) for fp in base.tolist()))
        racers.append(
            subprocess.Popen(
                [sys.executable, "-c", RACER, store_path, name, str(start), str(offered)],
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    inserted = [int(racer.communicate(timeout=120)[0]) for racer in racers]
    assert sum(inserted) == 300
    with simstore.open(store_path, "r") as store:
        assert len(store) == 300
        for fp in base.tolist():
            assert len(store.query(fingerprint=fp, k=1)) == 1
        assert store.check() == []


# ------------------------------------------------- a key that is stored already

SENTENCE = (
    "the crawler fetched a page about rivers and mountains and the long history of the valley "
    "where farmers grew wheat and barley while traders carried salt over the northern pass "
    "every spring before the snow melted and the roads turned to mud for many weeks"
)
WORDS = SENTENCE.split(" ")


def page(seed: int, words: int = 120) -> str:
    """A page of English-like text; different seeds share few 3-shingles."""
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, size=words).tolist())


def edited(text: str) -> str:
    """``text`` with one word changed: a near-duplicate of it."""
    words = text.split()
    words[len(words) // 2] = "lighthouse"
    return " ".join(words)


@pytest.fixture
def crawl(tmp_path: Path) -> Iterator[simstore.Store]:
    with simstore.open(str(tmp_path / "crawl.simstore")) as opened:  # k = 5, threshold 0.8
        yield opened


def test_the_same_page_again_is_not_its_own_duplicate(crawl: simstore.Store) -> None:
    """A retry after a crash gets the answer the first call got."""
    text = page(1)
    assert crawl.add_if_new("u", text, meta={"try": 1}) == []
    assert crawl.add_if_new("u", text, meta={"try": 2}) == []
    assert len(crawl) == 1
    assert crawl["u"].fingerprint == crawl.fingerprinter.fingerprint(text)
    assert crawl["u"].meta == {"try": 2}


def test_an_edited_page_replaces_its_old_version(crawl: simstore.Store) -> None:
    """A small edit (a near-duplicate of the old version) and a large one
    (another text) both update the page: its old version is not another page."""
    old = page(1)
    crawl.add_if_new("u", old)
    small = edited(old)
    assert [m.key for m in crawl.query(text=small)] == ["u"]  # near the old version
    assert crawl.add_if_new("u", small) == []
    assert crawl["u"].fingerprint == crawl.fingerprinter.fingerprint(small)
    large = page(2)
    assert crawl.query(text=large) == []
    assert crawl.add_if_new("u", large) == []
    assert crawl["u"].fingerprint == crawl.fingerprinter.fingerprint(large)
    assert len(crawl) == 1
    assert crawl.check() == []


def test_a_page_edited_into_another_pages_copy_is_kept_out(crawl: simstore.Store) -> None:
    """The other page is the match (not the key's own document), and nothing
    changes: the old version stays."""
    crawl.add_if_new("other", page(7))
    crawl.add_if_new("u", page(1))
    before = crawl["u"]
    matches = crawl.add_if_new("u", edited(page(7)))
    assert [m.key for m in matches] == ["other"]
    assert crawl["u"] == before


def test_another_key_with_a_near_duplicate_is_kept_out(crawl: simstore.Store) -> None:
    crawl.add_if_new("u", page(1))
    matches = crawl.add_if_new("v", edited(page(1)))
    assert [m.key for m in matches] == ["u"]
    assert matches[0].similarity is not None
    assert "v" not in crawl


def test_limit_returns_the_closest_matches(crawl: simstore.Store) -> None:
    text = page(3)
    for number in range(5):
        crawl.add(f"copy-{number}", text)
    everything = crawl.add_if_new("new", text)
    assert [m.key for m in everything] == [f"copy-{number}" for number in range(5)]
    assert crawl.add_if_new("new", text, limit=1) == everything[:1]
    assert crawl.add_if_new("new", text, limit=3) == everything[:3]
    assert crawl.add_if_new("copy-0", text, limit=1) == [everything[1]]  # not itself
    assert crawl.add_if_new("fresh", page(4), limit=1) == []
    assert "fresh" in crawl


def test_the_own_key_rule_holds_in_a_batch(crawl: simstore.Store) -> None:
    """batch.add_if_new sees the batch's earlier writes, its own key's included."""
    crawl.add("other", page(7))
    with crawl.batch() as batch:
        first = batch.add_if_new("u", page(1))
        again = batch.add_if_new("u", page(1))  # the same page again, in the same batch
        small = batch.add_if_new("u", edited(page(1)))
        large = batch.add_if_new("w", page(2))
        large_again = batch.add_if_new("w", page(5), limit=1)
        copy = batch.add_if_new("v", edited(page(7)))
        into_other = batch.add_if_new("u", page(7))
    assert first.result() == again.result() == small.result() == []
    assert large.result() == large_again.result() == []
    assert [m.key for m in copy.result()] == ["other"]
    assert [m.key for m in into_other.result()] == ["other"]
    assert crawl["u"].fingerprint == crawl.fingerprinter.fingerprint(edited(page(1)))
    assert crawl["w"].fingerprint == crawl.fingerprinter.fingerprint(page(5))
    assert "v" not in crawl


def test_the_own_key_rule_holds_in_group_commits(crawl: simstore.Store) -> None:
    """Threads retrying one page all hear it is new; threads offering copies
    of one page under other keys let exactly one in. Their writes share
    commits (sync=True's group commit)."""
    threads = 8
    barrier = threading.Barrier(threads)
    retried = page(1)

    def retry(_: int) -> list[simstore.Match]:
        barrier.wait()
        return crawl.add_if_new("u", retried)

    with ThreadPoolExecutor(threads) as pool:
        assert list(pool.map(retry, range(threads))) == [[]] * threads
    assert len(crawl) == 1

    copied = page(2)

    def offer(number: int) -> list[simstore.Match]:
        barrier.wait()
        return crawl.add_if_new(f"copy-{number}", edited(copied) if number % 2 else copied)

    with ThreadPoolExecutor(threads) as pool:
        answers = list(pool.map(offer, range(threads)))
    inserted = [number for number, answer in enumerate(answers) if not answer]
    assert len(inserted) == 1
    assert all([m.key for m in answer] == [f"copy-{inserted[0]}"] for answer in answers if answer)
    assert len(crawl) == 2


def test_a_logged_spec_of_the_previous_version_runs_as_it_did(crawl: simstore.Store) -> None:
    """A 9-field add_if_new spec (the write-ahead log's or another process's,
    from before limit=) still counts the key's own document as a match."""
    engine = crawl._engine
    crawl.add("u", fingerprint=5)
    spec = ["add_if_new", pack_key("u"), 5, None, None, 3, False, None, engine.params.generation]
    body = writes.body_of(engine, spec)
    assert body is not None
    assert [m.key for m in engine.write(body)] == ["u"]
    current = writes.body_of(engine, [*spec[:8], None, engine.params.generation])
    assert current is not None
    assert engine.write(current) == []
