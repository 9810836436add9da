"""Format 4's band table: ``query``, ``query_many`` and ``add_if_new`` by text
find the documents within ``k`` bits and those whose sketches share a band
of the table's with the text's, both estimated at least as similar as the
threshold. The oracle is brute force over the model's texts, at every step of
a hypothesis state machine of adds, batches, replacements, removals,
``add_if_new``, merges, compactions and reopens."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from _merge_faults import SmallStretches
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import simstore
from simstore.engine import columns, scratch
from simstore.engine.format import BAND_TABLE_FORMAT_VERSION, MULTI_INDEX_FORMAT_VERSION
from simstore.errors import CorruptStoreError, InvalidValueError, ParameterMismatchError
from simstore.fingerprinting.bands import band_keys
from simstore.fingerprinting.sketch import estimate_jaccard
from simstore.index.band_runs import BandRun, band_stretch_into, build_band_run, join_band_runs, look_up
from simstore.index.column_merge import stretch_count, stretch_cuts

pytestmark = pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")

VOCABULARY = [f"w{i}" for i in range(400)]
FINGERPRINTER = simstore.Fingerprinter()


def _texts(seed: int, bases: int = 6) -> list[str]:
    """Texts of 10 to 120 words and one-to-four-word edits of each."""
    rng = random.Random(seed)
    texts = []
    for _ in range(bases):
        words = rng.choices(VOCABULARY, k=rng.randint(10, 120))
        texts.append(" ".join(words))
        for edits in (1, 2, 4):
            edited = list(words)
            for _ in range(edits):
                edited[rng.randrange(len(edited))] = rng.choice(VOCABULARY)
            texts.append(" ".join(edited))
        texts.append(" ".join([*words, "appended"]))
    return texts


TEXTS = _texts(7)


def expected_matches(
    model: dict[str, str], text: str, k: int, threshold: float, per_width: int | None
) -> list[tuple[str, int]]:
    """``(key, distance)`` of every document of ``model`` whose sketch is
    estimated at least ``threshold`` similar to ``text``'s and whose
    fingerprint is within ``k`` bits or which shares a band of the table's."""
    if not model:
        return []
    keys = list(model)
    fingerprints, rows = FINGERPRINTER.fingerprints_and_sketches([text, *(model[key] for key in keys)])
    rows = np.asarray(rows)
    found = band_keys(rows, FINGERPRINTER.sketch, per_width)  # type: ignore[arg-type]
    query_keys = set(found.keys[found.rows == 0].tolist())
    estimates = estimate_jaccard(rows[0], rows[1:])
    matches = []
    for position, key in enumerate(keys, start=1):
        distance = int(fingerprints[0] ^ fingerprints[position]).bit_count()
        shares = bool(query_keys & set(found.keys[found.rows == position].tolist()))
        if estimates[position - 1] >= threshold and (distance <= k or shares):
            matches.append((key, distance))
    return sorted(matches, key=lambda match: (match[1], match[0]))


def _pairs(matches: list[simstore.Match]) -> list[tuple[str, int]]:
    return [(str(match.key), match.distance) for match in matches]


# ------------------------------------------------------------------ pure runs


def test_look_up_finds_every_entry_of_a_key_in_every_run() -> None:
    rng = np.random.default_rng(3)
    pool = rng.integers(0, 2**64, size=40, dtype=np.uint64)
    runs = [
        build_band_run(rng.choice(pool, 300), rng.integers(0, 50, 300).astype(np.uint32)) for _ in range(3)
    ]
    queries = np.concatenate([pool[:10], rng.integers(0, 2**64, size=5, dtype=np.uint64)])
    positions, ids = look_up(runs, queries)
    got = sorted(zip(positions.tolist(), ids.tolist(), strict=True))
    short = queries >> np.uint64(32)
    expected = sorted(
        (q, int(doc_id))
        for run in runs
        for q in range(len(queries))
        for key, doc_id in zip(run.keys.tolist(), run.ids.tolist(), strict=True)
        if key == int(short[q])
    )
    assert got == expected
    for run in runs:  # sorted by key then id, each (key, id) once
        order = np.lexsort((run.ids, run.keys))
        assert np.array_equal(order, np.arange(len(run.keys)))
        pairs = set(zip(run.keys.tolist(), run.ids.tolist(), strict=True))
        assert len(pairs) == len(run.keys)


def test_a_join_keeps_all_but_the_dropped_documents_entries() -> None:
    rng = np.random.default_rng(4)
    runs = [
        build_band_run(
            rng.integers(0, 2**64, 100, dtype=np.uint64), rng.integers(0, 30, 100).astype(np.uint32)
        )
        for _ in range(2)
    ]
    dropped = [np.array([1, 2, 3], dtype=np.uint32), None]
    joined = join_band_runs(runs, dropped)
    expected = {
        (key, doc_id)
        for run, gone in zip(runs, dropped, strict=True)
        for key, doc_id in zip(run.keys.tolist(), run.ids.tolist(), strict=True)
        if gone is None or doc_id not in gone.tolist()
    }
    assert set(zip(joined.keys.tolist(), joined.ids.tolist(), strict=True)) == expected
    assert len(joined.keys) == len(expected)
    assert bool(np.all(joined.keys[1:] >= joined.keys[:-1]))
    empty = join_band_runs([BandRun(np.zeros(0, np.uint32), np.zeros(0, np.uint32))], [None])
    assert len(empty.keys) == 0


# ------------------------------------------------------------------ the store


@pytest.mark.parametrize("seed", [0, 1])
def test_batches_straight_into_the_tables_band_the_sketches_they_carry(tmp_path: Path, seed: int) -> None:
    """An add_many big enough to go straight to a run bands the sketches it
    was given (its new documents) and reads the rest back (the delta's, the
    replaced ones'): the same table as banding every stored sketch, and the
    brute-force answers. Batches repeat keys and replace stored ones."""
    rng = random.Random(seed)
    model: dict[str, str] = {}
    with simstore.open(tmp_path / "s.simstore", "n", merge_threshold=6) as store:
        per_width = store._engine.params.bands
        assert per_width is not None
        for _ in range(8):
            keys = [f"d{rng.randrange(30)}" for _ in range(rng.randrange(1, 12))]
            texts = [rng.choice(TEXTS) for _ in keys]
            store.add_many(keys, texts=texts)
            model.update(zip(keys, texts, strict=True))
            assert store.check() == []  # every run holds every key of its documents' sketches
            query = rng.choice(TEXTS)
            assert _pairs(store.query(text=query)) == expected_matches(model, query, 5, 0.8, per_width)
        queries = TEXTS[:10]
        assert [_pairs(matches) for matches in store.query_many(texts=queries)] == [
            expected_matches(model, query, 5, 0.8, per_width) for query in queries
        ]


@pytest.mark.parametrize(("seed", "in_scratch"), [(0, False), (1, False), (1, True)])
def test_query_by_text_equals_brute_force_through_merges_and_joins(
    tmp_path: Path, seed: int, in_scratch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if in_scratch:  # every run value, band values too, built in a scratch file
        monkeypatch.setattr(scratch, "SCRATCH_BYTES", 0)
    rng = random.Random(seed)
    model: dict[str, str] = {}
    path = tmp_path / "s.simstore"
    store = simstore.open(path, "n", merge_threshold=7)
    per_width = store._engine.params.bands
    assert per_width is not None
    try:
        for step in range(60):
            key = f"d{rng.randrange(40)}"
            action = rng.random()
            if action < 0.1 and model:
                gone = rng.choice(sorted(model))
                store.remove(gone)
                del model[gone]
            else:
                model[key] = rng.choice(TEXTS)
                store.add(key, model[key])
            if step % 17 == 16:
                store.compact()
            if step % 23 == 22:
                store.close()
                store = simstore.open(path)
            query = rng.choice(TEXTS)
            assert _pairs(store.query(text=query)) == expected_matches(model, query, 5, 0.8, per_width)
        assert store.check() == []
        queries = TEXTS[:12]
        assert [_pairs(matches) for matches in store.query_many(texts=queries)] == [
            expected_matches(model, query, 5, 0.8, per_width) for query in queries
        ]
        assert [_pairs(matches) for matches in store.query_many(texts=queries, limit=1)] == [
            expected_matches(model, query, 5, 0.8, per_width)[:1] for query in queries
        ]
    finally:
        store.close()


@pytest.mark.parametrize("seed", [0, 1])
def test_a_query_with_many_band_candidates_equals_brute_force(tmp_path: Path, seed: int) -> None:
    """Boilerplate: dozens of edits of one text share its bands, so a query's
    candidates are checked in numpy (band_search.FEW_CANDIDATES), a few of
    another text's in Python; both are brute force's answers."""
    from simstore.engine.band_search import FEW_CANDIDATES

    rng = random.Random(seed)
    words = rng.choices(VOCABULARY, k=60)
    model: dict[str, str] = {}
    for number in range(3 * FEW_CANDIDATES):
        edited = list(words)
        # Most a few words off (they match), some many (they share bands, but fall short).
        for _ in range(rng.choice([1, 2, 3, 12])):
            edited[rng.randrange(len(edited))] = rng.choice(VOCABULARY)
        model[f"copy{number}"] = " ".join(edited)
    for number, text in enumerate(TEXTS[:10]):
        model[f"other{number}"] = text
    with simstore.open(tmp_path / "s.simstore", "n") as store:
        store.add_many(list(model), texts=list(model.values()))
        per_width = store._engine.params.bands
        queries = [" ".join(words), model["copy0"], model["copy5"], TEXTS[0], TEXTS[3]]
        for query in queries:
            assert _pairs(store.query(text=query)) == expected_matches(model, query, 5, 0.8, per_width)
        assert len(store.query(text=queries[0])) > FEW_CANDIDATES  # the numpy check was taken
        store.compact()
        for query in queries:
            assert _pairs(store.query(text=query)) == expected_matches(model, query, 5, 0.8, per_width)


def test_a_one_word_edit_is_found_by_query_and_add_if_new_at_the_defaults(tmp_path: Path) -> None:
    """Texts of 50 to 80 words, each edited once (a word appended, deleted
    or replaced): the default store finds the original for all but a few."""
    rng = random.Random(12)
    originals = [
        " ".join(rng.choices([f"v{i}" for i in range(5000)], k=rng.randint(50, 80))) for _ in range(300)
    ]
    edits = []
    for text in originals:
        words = text.split()
        kind = rng.randrange(3)
        at = rng.randrange(len(words))
        if kind == 0:
            words.append("extra")
        elif kind == 1:
            del words[at]
        else:
            words[at] = "changed"
        edits.append(" ".join(words))
    with simstore.open(tmp_path / "s.simstore", "n") as store:
        store.add_many(range(150), texts=originals[:150])  # a run
        for key in range(150, 300):  # the delta
            store.add(key, originals[key])
        found = [any(match.key == key for match in store.query(text=edit)) for key, edit in enumerate(edits)]
        rejected = [bool(store.add_if_new(f"copy{key}", edit)) for key, edit in enumerate(edits)]
        past_k = sum(
            any(match.key == key and match.distance > 5 for match in store.query(text=edit))
            for key, edit in enumerate(edits)
        )
    assert sum(found) >= 299
    assert sum(rejected) >= 299
    assert past_k > 0  # some were found by their bands alone


def test_a_store_without_a_band_table_is_format_3_and_the_choice_is_checked(tmp_path: Path) -> None:
    with simstore.open(tmp_path / "plain.simstore", "n", bands=False) as plain:
        assert plain._engine.params.version == MULTI_INDEX_FORMAT_VERSION
    with simstore.open(tmp_path / "banded.simstore", "n", bands=3) as banded:
        assert banded._engine.params.version == BAND_TABLE_FORMAT_VERSION
        assert banded._engine.params.bands == 3
    with pytest.raises(ParameterMismatchError, match="bands"):
        simstore.open(tmp_path / "plain.simstore", bands=True)
    with pytest.raises(ParameterMismatchError, match="bands"):
        simstore.open(tmp_path / "banded.simstore", bands=4)
    with simstore.open(tmp_path / "banded.simstore", bands=True) as again:
        assert again._engine.params.bands == 3
    with pytest.raises(InvalidValueError, match="multi-index"):
        simstore.open(tmp_path / "k3.simstore", "n", k=3, blocks=5, bands=True)
    with pytest.raises(InvalidValueError, match="keeps none"):
        simstore.open(
            tmp_path / "bare.simstore", "n", bands=True, fingerprinter=simstore.Fingerprinter(sketch=None)
        )
    with simstore.open(tmp_path / "k3.simstore", "n", k=3) as small:
        assert small._engine.params.bands is None  # below k = 5 a band table is asked for
    with simstore.open(tmp_path / "k3-banded.simstore", "n", k=3, bands=True) as asked:
        assert asked._engine.params.version == BAND_TABLE_FORMAT_VERSION


def test_relayout_keeps_the_band_table(tmp_path: Path) -> None:
    with simstore.open(tmp_path / "s.simstore", "n") as store:
        store.add_many(range(len(TEXTS)), texts=TEXTS)
        store.relayout(expected_docs=1000)
        assert store._engine.params.bands is not None
        assert store.check() == []
        expected = expected_matches(
            dict(zip(map(str, range(len(TEXTS))), TEXTS, strict=True)), TEXTS[0], 5, 0.8, 8
        )
        assert [(str(key), distance) for key, distance in _pairs(store.query(text=TEXTS[0]))] == expected


def test_check_reports_a_damaged_or_missing_band_run(tmp_path: Path) -> None:
    with simstore.open(tmp_path / "s.simstore", "n") as store:
        store.add_many(range(len(TEXTS)), texts=TEXTS)
        store.merge()
        engine = store._engine
        run_id = engine.tableset.catalog.runs[0].run_id
        table = engine.handles.tables[0]
        key = columns.run_key(run_id, columns.BAND_KEYS)
        with engine.env.env.begin(write=True) as txn:
            value = bytearray(txn.get(key, db=table))
            value[40] ^= 0xFF
            txn.put(key, bytes(value), db=table)
        assert any("CRC" in problem for problem in store.check())
        with engine.env.env.begin(write=True) as txn:
            txn.delete(key, db=table)
        engine.tableset.release()
        assert any("band keys" in problem for problem in store.check())
        with pytest.raises(CorruptStoreError):
            store.query(text=TEXTS[0])


# ------------------------------------------------------------------ state machine


class BandTableMachine(RuleBasedStateMachine):
    """Text documents in a store with a band table, against a dict model."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="simstore-bands-sm-")
        self.path = Path(self.folder) / "machine.simstore"
        self.store = simstore.open(self.path, "n", merge_threshold=5)
        self.per_width = self.store._engine.params.bands
        self.model: dict[str, str] = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    @rule(key=st.integers(0, 15), text=st.sampled_from(TEXTS))
    def add(self, key: int, text: str) -> None:
        self.store.add(str(key), text)
        self.model[str(key)] = text

    @rule(batch=st.lists(st.tuples(st.integers(0, 15), st.sampled_from(TEXTS)), min_size=1, max_size=12))
    def add_many(self, batch: list[tuple[int, str]]) -> None:
        self.store.add_many([str(key) for key, _ in batch], texts=[text for _, text in batch])
        self.model.update((str(key), text) for key, text in batch)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        self.store.remove(key)
        del self.model[key]

    @rule(key=st.integers(16, 40), text=st.sampled_from(TEXTS))
    def add_if_new(self, key: int, text: str) -> None:
        others = {other: stored for other, stored in self.model.items() if other != str(key)}
        expected = expected_matches(others, text, 5, 0.8, self.per_width)
        assert _pairs(self.store.add_if_new(str(key), text)) == expected
        if not expected:
            self.model[str(key)] = text

    @rule()
    def merge(self) -> None:
        self.store.merge()

    @rule()
    def compact(self) -> None:
        self.store.compact()

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = simstore.open(self.path)

    @rule(text=st.sampled_from(TEXTS), limit=st.sampled_from([None, 1, 2]))
    def query(self, text: str, limit: int | None) -> None:
        expected = expected_matches(self.model, text, 5, 0.8, self.per_width)
        got = _pairs(self.store.query(text=text, limit=limit))
        assert got == (expected if limit is None else expected[:limit])

    @invariant()
    def sound(self) -> None:
        assert len(self.store) == len(self.model)

    @precondition(lambda self: len(self.model) > 8)
    @rule()
    def check(self) -> None:
        assert self.store.check() == []


BandTableMachine.TestCase.settings = settings(
    max_examples=20, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
)
TestBandTable = BandTableMachine.TestCase


class StretchedBandJoinMachine(SmallStretches, BandTableMachine):
    """The same, with joins merging 2 entries at a time (instead of about 4M):
    every band join cuts its runs into many stretches."""

    STRETCH = 2


StretchedBandJoinMachine.TestCase.settings = settings(
    max_examples=15, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
)
TestStretchedBandJoin = StretchedBandJoinMachine.TestCase


@pytest.mark.parametrize("batch", [False, True], ids=["add", "add_many"])
@pytest.mark.parametrize("merged", [False, True], ids=["in-delta", "in-a-run"])
def test_a_new_text_under_the_same_fingerprint_is_banded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: bool, merged: bool
) -> None:
    """The band table must follow a document's sketch even when a
    replacement leaves its fingerprint as it was (two texts of one
    fingerprint: each given the same far one)."""
    first, second = TEXTS[0], TEXTS[5]
    far = 0x5555_5555_5555_5555  # past k of both texts' own fingerprints
    original = simstore.Fingerprinter.fingerprint_and_sketch

    def same_fingerprint(self: simstore.Fingerprinter, text: str) -> tuple[int, bytes]:
        return far, original(self, text)[1]

    with simstore.open(tmp_path / "s.simstore", "n") as store:
        rows = np.asarray(store.fingerprinter.fingerprints_and_sketches([first, second])[1])
        store.add_many(["a"], np.array([far], dtype=np.uint64), sketches=rows[:1])
        if merged:
            store.merge()
        store.query(text=first)  # the delta's bands made before the replacement
        if batch:
            store.add_many(["a"], np.array([far], dtype=np.uint64), sketches=rows[1:])
        else:
            monkeypatch.setattr(simstore.Fingerprinter, "fingerprint_and_sketch", same_fingerprint)
            store.add("a", second)
            monkeypatch.undo()
        assert store["a"].fingerprint == far
        assert [match.key for match in store.query(text=second)] == ["a"]
        assert store.query(text=first) == []
        store.compact()
        assert [match.key for match in store.query(text=second)] == ["a"]
        assert store.check() == []


def test_a_batch_into_the_tables_that_keeps_a_fingerprint_but_not_the_sketch(tmp_path: Path) -> None:
    """The document is then in two runs under one fingerprint, the older one's
    entry stale: check() looks for its bands in the newer run (found by the
    state machine), and queries judge it by its new sketch."""
    old, new, other = TEXTS[0], TEXTS[5], TEXTS[10]
    with simstore.open(tmp_path / "s.simstore", "n", merge_threshold=5) as store:
        rows = np.asarray(store.fingerprinter.fingerprints_and_sketches([old, new, other])[1])
        far = np.array([0x5555_5555_5555_5555, 0x3333_3333_3333_3333], dtype=np.uint64)
        store.add_many(["a", "b"], far, sketches=rows[[0, 2]])
        store.compact()
        keys = ["a", *(f"c{index}" for index in range(7))]
        store.add_many(keys, far[[0] * 8] + np.arange(8, dtype=np.uint64), sketches=rows[[1] * 8])
        stats = store.stats()
        assert (stats.runs, stats.delta_docs) == (2, 0)
        assert store.check() == []
        assert "a" in {match.key for match in store.query(text=new)}
        assert "a" not in {match.key for match in store.query(text=old)}
        store.compact()
        assert store.check() == []


_WRITER = """
import sys, warnings
warnings.simplefilter("ignore")
import simstore
with simstore.open(sys.argv[1], "w", merge_on_close=sys.argv[4] == "merge") as store:
    store.add(sys.argv[2], sys.argv[3])
    if sys.argv[4] == "merge":
        store.merge()
"""


@pytest.mark.parametrize("merge", [False, True], ids=["into-the-delta", "merged"])
def test_a_document_another_process_adds_is_found_by_its_bands(tmp_path: Path, merge: bool) -> None:
    """This process's delta follows the other's writes through the log, and
    its in-memory band keys are made from the sketches they stored; a merge
    the other process made is seen as a new run with its band keys."""
    import subprocess
    import sys

    path = tmp_path / "s.simstore"
    edited = " ".join([*TEXTS[0].split(), "appended"])
    with simstore.open(path, "n") as store:
        store.add("mine", TEXTS[10])
        assert store.query(text=edited) == []  # the delta's bands made now, before the other's write
        how = "merge" if merge else "delta"
        subprocess.run([sys.executable, "-c", _WRITER, str(path), "theirs", TEXTS[0], how], check=True)
        assert store.stats().delta_docs == (0 if merge else 2)
        expected = expected_matches({"mine": TEXTS[10], "theirs": TEXTS[0]}, edited, 5, 0.8, store.bands)
        assert [key for key, _ in expected] == ["theirs"]
        assert _pairs(store.query(text=edited)) == expected
        assert _pairs(store.add_if_new("copy", edited)) == expected
        assert store.check() == []


@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5)), max_size=12).map(sorted),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 5),
    st.data(),
)
def test_a_join_a_stretch_at_a_time_keeps_each_kept_entry_once_in_order(
    drawn: list[list[tuple[int, int]]], chunk: int, data: st.DataObject
) -> None:
    runs = [
        BandRun(
            np.array([key for key, _ in run], dtype=np.uint32), np.array([i for _, i in run], dtype=np.uint32)
        )
        for run in drawn
    ]
    kept = [
        data.draw(
            st.none()
            | st.lists(st.booleans(), min_size=len(run), max_size=len(run)).map(
                lambda flags: np.array(flags, dtype=bool)
            )
        )
        for run in runs
    ]
    total = sum(len(run) for run in runs)
    keys, ids = np.full(total, 9, dtype=np.uint32), np.full(total, 9, dtype=np.uint32)
    cuts, written = stretch_cuts([run.keys for run in runs], chunk), 0
    for stretch in range(stretch_count(cuts)):
        written += band_stretch_into(runs, kept, cuts, stretch, keys, ids, written)
    expected = sorted(
        {
            pair
            for run, keep in zip(drawn, kept, strict=True)
            for pair, flag in zip(run, [True] * len(run) if keep is None else keep.tolist(), strict=True)
            if flag
        }
    )
    assert list(zip(keys[:written].tolist(), ids[:written].tolist(), strict=True)) == expected


def test_bare_fingerprints_take_no_more_room_in_a_band_table_store(tmp_path: Path) -> None:
    # The file holds real blocks for all of the map, so the room reserved for
    # band keys that bare fingerprints never have stayed on the disk.
    rng = np.random.default_rng(2)
    batches = [rng.integers(0, 2**64, 100_000, dtype=np.uint64) for _ in range(4)]
    sizes = {}
    for bands in (False, True):
        with simstore.open(tmp_path / f"{bands}.simstore", "n", sync=False, bands=bands) as store:
            for number, fingerprints in enumerate(batches):
                store.add_many(range(number * 100_000, (number + 1) * 100_000), fingerprints)
            assert len(store._engine.tableset.catalog.runs) == 1  # (a join came)
            sizes[bands] = store.stats().bytes_on_disk
    assert sizes[True] <= 1.05 * sizes[False]
