"""simstore.ray on a local Ray: the same answers as the single machine."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from _oracles import fingerprint_families
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simstore
from simstore.errors import InvalidTypeError, InvalidValueError, SimstoreError
from simstore.index.permute import one_level_tables

# simstore.ray first: it imports ray.data, so a missing Ray skips this file even
# though tests/ (on sys.path) holds a folder named ray.
simstore_ray = pytest.importorskip("simstore.ray")
ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")

WORDS = [
    *("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"),
    *("nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega"),
]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    yield
    if started:
        ray.shutdown()


def corpus(seed: int, rows: int, families: int = 12) -> list[str]:
    """Texts in families of near copies (a word or two changed), some exact copies, some short."""
    rng = random.Random(seed)
    bases = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) for _ in range(families)]
    texts = []
    for _ in range(rows):
        words = rng.choice(bases).split()
        for _ in range(rng.choice([0, 0, 1, 2])):
            words[rng.randrange(len(words))] = rng.choice(WORDS)
        texts.append(" ".join(words))
    return texts


def collect(ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def in_blocks(table: pa.Table, blocks: int):
    """A Dataset of ``table``'s rows, in order, cut into ``blocks`` blocks."""
    bounds = np.linspace(0, table.num_rows, blocks + 1).astype(int)
    return ray.data.from_arrow([table.slice(start, end - start) for start, end in itertools.pairwise(bounds)])


def assert_same_as_dedup_table(table: pa.Table, blocks: int, **options) -> None:
    want_kept, want_provenance = simstore.dedup_table(table, **options)
    kept, provenance = simstore_ray.dedup_dataset(in_blocks(table, blocks), **options)
    got_kept, got_provenance = collect(kept), collect(provenance)
    assert got_kept.to_pylist() == want_kept.to_pylist()
    assert "cluster_size" in want_provenance.column_names
    assert got_provenance.column_names == list(simstore_ray.PROVENANCE_COLUMNS)
    assert got_provenance.column_names[:-1] == want_provenance.column_names
    for name in want_provenance.column_names:
        assert got_provenance[name].to_pylist() == want_provenance[name].to_pylist(), name
    # cluster_size: how many rows share the row's cluster_id; 1 (not null) for a row in no cluster.
    ids = got_provenance["cluster_id"].to_pylist()
    sizes = {cluster: ids.count(cluster) for cluster in set(ids) if cluster is not None}
    assert got_provenance["cluster_size"].to_pylist() == [1 if c is None else sizes[c] for c in ids]
    assert got_provenance.schema.field("cluster_size").type == pa.int64()


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 120),
    blocks=st.integers(1, 6),
    keep=st.sampled_from(["first", "longest", "none"]),
    linkage=st.sampled_from(["star", "components"]),
)
def test_dedup_dataset_equals_dedup_table(seed: int, rows: int, blocks: int, keep: str, linkage: str) -> None:
    texts = corpus(seed, rows)
    table = pa.table({"doc": [f"d{i}" for i in range(rows)], "text": texts, "n": list(range(rows))})
    assert_same_as_dedup_table(table, min(blocks, rows), id_column="doc", keep=keep, linkage=linkage)


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
@pytest.mark.parametrize("blocks", [1, 4, 9])
def test_the_same_rows_are_kept_for_any_block_count(blocks: int) -> None:
    table = pa.table({"text": corpus(7, 200)})
    assert_same_as_dedup_table(table, blocks)


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
def test_a_parquet_files_order_is_kept_when_ray_splits_its_blocks(tmp_path) -> None:
    """Ray Data 2.60 gave the blocks of a map_batches over a Parquet file out of
    order (the file's second half first) once they were split by size, which
    changed which row is "first": the rows are now fingerprinted in tasks of
    simstore's own, on the blocks in their order."""
    import pyarrow.parquet as pq

    rows = 1_200
    texts = corpus(5, rows, families=30)
    path = os.fspath(tmp_path / "corpus.parquet")
    pq.write_table(pa.table({"id": list(range(rows)), "text": texts}), path, row_group_size=500)
    want_kept, want_provenance = simstore.dedup_table(pq.read_table(path), "text", "id")
    context = ray.data.DataContext.get_current()
    saved = context.target_max_block_size
    context.target_max_block_size = 32 * 1024  # blocks of about 100 rows
    try:
        kept, provenance = simstore_ray.dedup_dataset(
            ray.data.read_parquet(path), "text", "id", task_rows=300
        )
        got_kept, got_provenance = collect(kept), collect(provenance)
    finally:
        context.target_max_block_size = saved
    assert got_provenance["id"].to_pylist() == list(range(rows))
    assert got_kept["id"].to_pylist() == want_kept["id"].to_pylist()
    assert got_provenance["duplicate_of"].to_pylist() == want_provenance["duplicate_of"].to_pylist()


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
def test_order_column_ranks_rows_whatever_the_blocks_order() -> None:
    rows = 300
    table = pa.table({"id": list(range(rows)), "text": corpus(13, rows, families=10)})
    want_kept, want_provenance = simstore.dedup_table(table, "text", "id")
    bounds = [0, 70, 150, 230, rows]
    pieces = [table.slice(start, end - start) for start, end in itertools.pairwise(bounds)]
    shuffled = ray.data.from_arrow([pieces[2], pieces[0], pieces[3], pieces[1]])
    kept, provenance = simstore_ray.dedup_dataset(shuffled, "text", "id", order_column="id")
    got = collect(provenance).sort_by("id")
    assert sorted(collect(kept)["id"].to_pylist()) == want_kept["id"].to_pylist()
    assert got["duplicate_of"].to_pylist() == want_provenance["duplicate_of"].to_pylist()
    assert got["kept"].to_pylist() == want_provenance["kept"].to_pylist()


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
@pytest.mark.parametrize(("k", "min_similarity"), [(3, None), (None, 0.5), (8, 0.9)])
def test_k_and_threshold_are_the_single_machine_ones(k, min_similarity) -> None:
    table = pa.table({"text": corpus(11, 150, families=6)})
    assert_same_as_dedup_table(table, 3, k=k, min_similarity=min_similarity)


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
@pytest.mark.parametrize(("k", "linkage"), [(2, "star"), (5, "components")])
def test_pairs_by_bands_are_the_single_machine_ones(k: int, linkage: str) -> None:
    """Texts of 8 to 80 words with one-word edits, which move short texts'
    fingerprints past k: rows sharing a band must meet in one component."""
    rng = random.Random(k)
    vocabulary = [f"w{i}" for i in range(2000)]
    texts = []
    for _ in range(40):
        words = rng.choices(vocabulary, k=rng.randint(8, 80))
        texts += [" ".join(words), " ".join([*words, "appended"]), " ".join(words[1:])]
    rng.shuffle(texts)
    table = pa.table({"text": texts})
    plain, _ = simstore.dedup_table(table, k=k, linkage=linkage, bands=False)
    banded, _ = simstore.dedup_table(table, k=k, linkage=linkage)  # bands by default
    assert banded.num_rows < plain.num_rows  # the bands found copies past k
    assert_same_as_dedup_table(table, 4, k=k, linkage=linkage)
    assert_same_as_dedup_table(table, 3, k=k, linkage=linkage, bands=False)


@pytest.mark.filterwarnings("ignore::simstore.ShortTextWarning")
def test_against_a_store_drops_stored_matches_then_dedups_the_rest(tmp_path) -> None:
    texts = corpus(3, 160)
    stored_texts, new_texts = texts[:60], texts[60:]
    path = os.fspath(tmp_path / "old.simstore")
    with simstore.open(path, "c") as store:
        store.add_many([f"old{i}" for i in range(len(stored_texts))], texts=stored_texts)
        closest = store.query_many(texts=new_texts, limit=1)
    matched = [matches[0].key if matches else None for matches in closest]
    assert any(matched)
    assert not all(matched)
    table = pa.table({"doc": [f"new{i}" for i in range(len(new_texts))], "text": new_texts})
    survivors = table.filter(pa.array([key is None for key in matched]))
    want_kept, _ = simstore.dedup_table(survivors, id_column="doc")

    kept, provenance = simstore_ray.dedup_dataset(in_blocks(table, 4), id_column="doc", against=path)
    got = collect(provenance)
    assert collect(kept)["doc"].to_pylist() == want_kept["doc"].to_pylist()
    assert got["stored_match"].to_pylist() == matched
    assert not any(kept for kept, key in zip(got["kept"].to_pylist(), matched, strict=True) if key)
    # A stored match leaves the row out of every cluster: no cluster size (as
    # the command line's --against gives it); the others are clustered.
    sizes = got["cluster_size"].to_pylist()
    assert [size is None for size in sizes] == [key is not None for key in matched]


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(0, 300),
    blocks=st.integers(1, 5),
    buckets=st.integers(1, 6),
    k=st.integers(1, 6),
)
def test_near_duplicate_pairs_equal_the_stores(tmp_path_factory, seed, count, blocks, buckets, k) -> None:
    fingerprints = fingerprint_families(seed, count, per_family=5)
    keys = [f"key{i}" for i in range(count)]
    path = os.fspath(tmp_path_factory.mktemp("pairs") / "s.simstore")
    with simstore.open(path, "n", k=k, sync=False) as store:
        if count:
            store.add_many(keys, fingerprints)
        expected = sorted((p.key_a, p.key_b, p.distance) for p in store.near_duplicate_pairs())
    table = pa.table({"key": keys, "fingerprint": pa.array(fingerprints, pa.uint64())})
    ds = in_blocks(table, max(1, min(blocks, count)))
    found = collect(simstore_ray.near_duplicate_pairs(ds, k=k, buckets=buckets))
    columns = (found["key_a"].to_pylist(), found["key_b"].to_pylist(), found["distance"].to_pylist())
    got = sorted(zip(*columns, strict=True))
    assert got == expected


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 300),
    blocks=st.integers(1, 5),
    k=st.integers(1, 6),
    linkage=st.sampled_from(["star", "components"]),
)
def test_clusters_equal_the_stores(tmp_path_factory, seed, count, blocks, k, linkage) -> None:
    fingerprints = fingerprint_families(seed, count, per_family=5)
    keys = [f"key{i}" for i in range(count)]
    path = os.fspath(tmp_path_factory.mktemp("clusters") / "s.simstore")
    with simstore.open(path, "n", k=k, sync=False) as store:
        store.add_many(keys, fingerprints)
        expected = [
            (c.cluster_id, member, c.representative, distance)
            for c in store.clusters(linkage=linkage)
            for member, distance in zip(c.members, c.distances, strict=True)
        ]
    table = pa.table({"key": keys, "fingerprint": pa.array(fingerprints, pa.uint64())})
    found = collect(simstore_ray.clusters(in_blocks(table, min(blocks, count)), k=k, linkage=linkage))
    columns = [found[name].to_pylist() for name in ("cluster_id", "key", "representative", "distance")]
    assert sorted(zip(*columns, strict=True)) == sorted(expected)


def test_bad_input_is_refused_before_anything_runs() -> None:
    ds = ray.data.from_items([{"text": "a b c"}])
    with pytest.raises(InvalidTypeError):
        simstore_ray.dedup_dataset([{"text": "a"}])
    with pytest.raises(InvalidValueError, match="no column 'body'"):
        simstore_ray.dedup_dataset(ds, text_column="body")
    with pytest.raises(InvalidValueError, match="keep"):
        simstore_ray.dedup_dataset(ds, keep="last")
    with pytest.raises(InvalidValueError, match="buckets"):
        simstore_ray.near_duplicate_pairs(ray.data.from_items([{"key": 1, "fingerprint": 2}]), buckets=0)
    rows = ray.data.from_items([{"key": 1, "fingerprint": 2}])
    with pytest.raises(InvalidValueError, match="k must be in"):
        simstore_ray.near_duplicate_pairs(rows, k=40)
    # A layout that cannot find every pair within k (one table for k = 3)
    # would miss pairs silently: refused.
    with pytest.raises(InvalidValueError, match="do not guarantee"):
        simstore_ray.near_duplicate_pairs(rows, k=3, layout=one_level_tables(3, 4)[:1])


def test_importing_simstore_does_not_import_ray_or_start_it() -> None:
    code = (
        "import sys, simstore; assert 'ray' not in sys.modules\n"
        "import simstore.ray, ray; assert not ray.is_initialized()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_ray_the_error_is_simstores() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from simstore.errors import SimstoreError\n"
        "try:\n    import simstore.ray\nexcept SimstoreError as exc:\n"
        "    assert isinstance(exc, ImportError) and 'simstore[ray]' in str(exc), exc\n"
        "else:\n    raise SystemExit('imported')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert issubclass(simstore_ray.RayMissingError, SimstoreError)
