"""simstore.dask on a distributed.LocalCluster (two worker processes with
small memory limits): every result equals the single-machine one on the same
data, and a worker killed mid-run does not change it."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _oracles import planted

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")

import cloudpickle  # noqa: E402  (installed with distributed)
import dask  # noqa: E402
import dask.bag as db  # noqa: E402

import simstore  # noqa: E402
import simstore.dask as sd  # noqa: E402

# The workers must unpickle this module's helpers (the poisoned partition)
# without importing it: send them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit="768MiB",
            dashboard_address=":0",
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as opened,
    ):
        yield opened


def corpus(seed: int, n_singles: int = 1500) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """Keys, fingerprints (random, plus chains of near-duplicates and exact
    copies) and lengths; keys mix str and int as a store allows."""
    fingerprints = planted(seed, singles=n_singles, clusters=60, size=5, k=3)
    keys: list[Any] = [f"doc-{i}" if i % 4 else i for i in range(len(fingerprints))]
    lengths = np.random.default_rng(seed).integers(1, 50, len(fingerprints))
    return keys, fingerprints, lengths


def one_store(
    tmp_path: Path, keys: list[Any], fingerprints: np.ndarray, lengths: np.ndarray
) -> simstore.Store:
    store = simstore.open(str(tmp_path / "one.simstore"), "n", k=3)
    store.add_many(keys, fingerprints, metas=[{"length": int(length)} for length in lengths])
    return store


def frame(keys: list[Any], fingerprints: np.ndarray, lengths: np.ndarray, partitions: int = 5) -> Any:
    table = pd.DataFrame(
        {"key": pd.Series(keys, dtype=object), "fingerprint": fingerprints, "length": lengths}
    )
    # Dask turns object columns into Arrow strings by default, which would
    # make the int keys str; keep them as the store keeps them.
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_pandas(table, npartitions=partitions)


def cluster_sets(clusters: list[simstore.Cluster]) -> set[tuple[Any, tuple[Any, ...]]]:
    return {(cluster.representative, tuple(cluster.members)) for cluster in clusters}


def dask_cluster_sets(result: Any) -> set[tuple[Any, tuple[Any, ...]]]:
    found = set()
    for _, members in result.groupby("cluster_id"):
        members = members.sort_values("position")
        assert members.representative.nunique() == 1
        found.add((members.representative.iloc[0], tuple(members.key)))
    return found


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.soak)])
def test_pairs_and_clusters_equal_one_store(client: Any, tmp_path: Path, seed: int) -> None:
    keys, fingerprints, lengths = corpus(seed)
    ddf = frame(keys, fingerprints, lengths)
    with one_store(tmp_path, keys, fingerprints, lengths) as store:
        for k in (0, 2, 3):
            expected = {tuple(pair)[:3] for pair in store.near_duplicate_pairs(k)}
            got = sd.near_duplicate_pairs(ddf, k=3 if k else 0, layout=None).compute()
            if k:
                got = got[got.distance <= k]
            pairs = list(zip(got.key_a, got.key_b, got.distance.astype(int), strict=True))
            assert len(pairs) == len(set(pairs))
            assert set(pairs) == expected
        assert len(expected) > 100  # the planted chains and copies were found
        for keep in ("first", "longest", lambda records: records[-1].key):
            expected_clusters = cluster_sets(store.clusters(3, keep=keep))
            result = sd.clusters(ddf, k=3, keep=keep, length_column="length").compute()
            assert dask_cluster_sets(result) == expected_clusters


def test_two_level_layout_pairs(client: Any, tmp_path: Path) -> None:
    keys, fingerprints, lengths = corpus(3, n_singles=800)
    layout = simstore.layout.planner.two_level(3, 4, 3, 4)
    with one_store(tmp_path, keys, fingerprints, lengths) as store:
        expected = {tuple(pair)[:3] for pair in store.near_duplicate_pairs()}
    got = sd.near_duplicate_pairs(frame(keys, fingerprints, lengths), k=3, layout=layout).compute()
    assert set(zip(got.key_a, got.key_b, got.distance.astype(int), strict=True)) == expected


def poisoned(part: Any, marker: str, partition_info: dict[str, Any] | None = None) -> Any:
    """Kill this worker process the first time partition 2 is computed."""
    if partition_info is not None and partition_info["number"] == 2 and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return part


def test_worker_killed_mid_run_changes_nothing(client: Any, tmp_path: Path) -> None:
    keys, fingerprints, lengths = corpus(4)
    ddf = frame(keys, fingerprints, lengths, partitions=6)
    expected = sd.near_duplicate_pairs(ddf, k=3).compute()
    marker = str(tmp_path / "killed")
    doomed = ddf.map_partitions(poisoned, marker, meta=ddf._meta)
    got = sd.near_duplicate_pairs(doomed, k=3).compute()
    assert os.path.exists(marker)  # a worker really died
    assert set(zip(got.key_a, got.key_b, got.distance, strict=True)) == set(
        zip(expected.key_a, expected.key_b, expected.distance, strict=True)
    )
    client.wait_for_workers(2, timeout=60)


def test_build_stores_sharded_store_and_against(client: Any, tmp_path: Path) -> None:
    keys, fingerprints, lengths = corpus(5)
    ddf = frame(keys, fingerprints, lengths)
    template = str(tmp_path / "crawl-{shard:02d}.simstore")
    paths = sd.build_stores(ddf, template, 3, meta_columns=["length"], k=3)
    assert paths == [template.format(shard=number) for number in range(3)]
    # A second run (as a retried task would) replaces the same keys: nothing changes.
    assert sd.build_stores(ddf, template, 3, meta_columns=["length"]) == paths
    rng = np.random.default_rng(5)
    batch_fps = np.concatenate(
        [fingerprints[:300] ^ np.uint64(1 << 7), rng.integers(0, 2**64, 200, dtype=np.uint64)]
    )
    batch_keys = [f"new-{i}" for i in range(len(batch_fps))]
    with one_store(tmp_path, keys, fingerprints, lengths) as store, simstore.ShardedStore(paths) as sharded:
        assert len(sharded) == len(store)
        assert sharded.query_many(batch_fps) == store.query_many(batch_fps)
        assert sharded.get(keys[7]) == store.get(keys[7])
        batch = dd.from_pandas(pd.DataFrame({"key": batch_keys, "fingerprint": batch_fps}), npartitions=3)
        got = sd.against(batch, paths).compute()
        expected = {
            (key, match.key, match.distance)
            for key, matches in zip(batch_keys, store.query_many(batch_fps), strict=True)
            for match in matches
        }
        assert set(zip(got.key, got.match_key, got.distance.astype(int), strict=True)) == expected
        assert len(expected) >= 300


def test_fingerprints_equal_fingerprint_many(client: Any) -> None:
    texts = [f"桥 {i} bridge over the river number {i} 在北京 with many more words" for i in range(40)]
    fingerprinter = simstore.Fingerprinter(ngrams=(1,))
    expected = fingerprinter.fingerprint_many(texts).tolist()
    texts_frame = dd.from_pandas(pd.DataFrame({"text": texts}), npartitions=3)
    assert sd.fingerprint(texts_frame, "text", fingerprinter).compute().tolist() == expected
    assert sd.fingerprint(texts_frame["text"], fingerprinter=fingerprinter).compute().tolist() == expected
    bag = db.from_sequence([{"body": text} for text in texts], npartitions=4)
    assert sd.fingerprint(bag, "body", fingerprinter).compute().tolist() == expected
    assert sd.fingerprint(db.from_sequence(texts, npartitions=2)).compute().tolist() == (
        simstore.Fingerprinter().fingerprint_many(texts).tolist()
    )


def test_bad_arguments_fail_before_any_work(tmp_path: Path) -> None:
    keys, fingerprints, lengths = corpus(6, n_singles=10)
    ddf = frame(keys, fingerprints, lengths)
    with pytest.raises(simstore.InvalidValueError, match="no column 'url'"):
        sd.near_duplicate_pairs(ddf, key_column="url")
    with pytest.raises(simstore.InvalidValueError, match="k must be"):
        sd.near_duplicate_pairs(ddf, k=99)
    with pytest.raises(simstore.InvalidValueError, match="keep"):
        sd.clusters(ddf, keep="shortest")
    with pytest.raises(simstore.InvalidValueError, match="length_column"):
        sd.clusters(ddf, keep="longest")
    with pytest.raises(simstore.InvalidTypeError, match="Dask DataFrame"):
        sd.near_duplicate_pairs(pd.DataFrame({"key": [], "fingerprint": []}))
    with pytest.raises(simstore.InvalidValueError, match="shard"):
        sd.build_stores(ddf, str(tmp_path / "same.simstore"), 2)
    with pytest.raises(simstore.InvalidValueError, match="mode"):
        sd.build_stores(ddf, str(tmp_path / "s{shard}.simstore"), 2, mode="r")
    with pytest.raises(simstore.InvalidValueError, match="shards"):
        sd.build_stores(ddf, str(tmp_path / "s{shard}.simstore"), 0)
    assert list(tmp_path.iterdir()) == []  # nothing was written


def test_bad_fingerprints_name_the_column(tmp_path: Path) -> None:
    bad = dd.from_pandas(pd.DataFrame({"key": ["a", "b"], "fingerprint": [-1, 5]}), npartitions=1)
    with pytest.raises(ValueError, match="column 'fingerprint'"):
        sd.near_duplicate_pairs(bad).compute(scheduler="sync")


def _texts(seed: int, bases: int = 40, variants: int = 4) -> tuple[list[str], list[str]]:
    """Keys and texts: base texts and edited copies of each, at many distances."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"word{i}" for i in range(400)]
    keys: list[str] = []
    texts: list[str] = []
    for base in range(bases):
        words = list(rng.choice(vocabulary, size=int(rng.integers(30, 120))))
        for variant in range(variants + 1):
            edited = list(words)
            for _ in range(variant * 2):
                edited[int(rng.integers(0, len(edited)))] = str(rng.choice(vocabulary))
            keys.append(f"b{base}v{variant}")
            texts.append(" ".join(edited))
    return keys, texts


@pytest.mark.parametrize("threshold", [None, 0.8])
def test_verified_pairs_clusters_and_against_equal_one_store(
    client: Any, tmp_path: Path, threshold: float | None
) -> None:
    keys, texts = _texts(7)
    table = pd.DataFrame({"key": pd.Series(keys, dtype=object), "text": texts})
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.from_pandas(table, npartitions=4)
    sketched = sd.fingerprint_and_sketch(ddf, "text")
    fingerprints, sketches = simstore.Fingerprinter().fingerprints_and_sketches(texts)
    computed = sketched.compute()
    assert computed.fingerprint.tolist() == fingerprints.tolist()
    assert computed.sketch.tolist() == [row.tobytes() for row in sketches]
    ddf = ddf.assign(fingerprint=sketched.fingerprint, sketch=sketched.sketch)
    with simstore.open(str(tmp_path / "one.simstore"), "n", k=5, min_similarity=0.0) as store:
        store.add_many(keys, texts=texts)
        # Without a threshold Dask pairs by fingerprint alone; the store's own (0.0) would band.
        expected_pairs = set(
            store.near_duplicate_pairs(min_similarity=threshold, bands=threshold is not None)
        )
        got = sd.near_duplicate_pairs(ddf, k=5, sketch_column="sketch", min_similarity=threshold).compute()
        found = set(zip(got.key_a, got.key_b, got.distance.astype(int), got.similarity, strict=True))
        assert found == {tuple(pair) for pair in expected_pairs}
        assert len(found) > 20
        if threshold is not None:
            clusters = sd.clusters(ddf, k=5, sketch_column="sketch", min_similarity=threshold).compute()
            one = store.clusters(min_similarity=threshold)
            assert dask_cluster_sets(clusters) == cluster_sets(one)
            # Each member's distance and similarity to its representative, as dedup --annotate gives them.
            found = simstore.io.tables.provenance_of(
                store, one, {key: row for row, key in enumerate(keys)}, len(keys), "first"
            )
            expected_rows = {
                (keys[row], found.distance[row], found.similarity[row])
                for row in range(len(keys))
                if found.cluster_id[row] is not None
            }
            assert (
                set(zip(clusters.key, clusters.distance, clusters.similarity, strict=True)) == expected_rows
            )
        batch = ddf.assign(key=ddf.key.map(lambda key: f"new-{key}", meta=("key", object)))
        got = sd.against(batch, [store.path], sketch_column="sketch", min_similarity=threshold)
        store.close()
        answers = got.compute()
    with simstore.open(str(tmp_path / "one.simstore"), "r") as store:
        expected = {
            (f"new-{key}", match.key, match.distance, match.similarity)
            for key, matches in zip(
                keys, store.query_many(fingerprints, sketches=sketches, min_similarity=threshold), strict=True
            )
            for match in matches
        }
    assert (
        set(
            zip(answers.key, answers.match_key, answers.distance.astype(int), answers.similarity, strict=True)
        )
        == expected
    )
    with pytest.raises(simstore.InvalidValueError, match="sketch_column"):
        sd.near_duplicate_pairs(ddf, min_similarity=0.5)


def _short_texts(seed: int, bases: int = 40) -> tuple[list[str], list[str]]:
    """Keys and texts of 8 to 120 words, each with one-word edits and an
    exact copy: short texts whose edits move fingerprints past a small k."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(2000)]
    keys: list[str] = []
    texts: list[str] = []
    for base in range(bases):
        words = [str(w) for w in rng.choice(vocabulary, size=int(rng.integers(8, 120)))]
        variants = [words, list(words), [*words, "appended"], words[1:]]
        variants[1][int(rng.integers(0, len(words)))] = str(rng.choice(vocabulary))
        for number, variant in enumerate([*variants, words]):  # the last an exact copy
            keys.append(f"b{base}v{number}")
            texts.append(" ".join(variant))
    return keys, texts


@pytest.mark.parametrize(("k", "threshold"), [(2, 0.8), (5, 0.6)])
def test_pairs_and_clusters_with_bands_equal_one_store(
    client: Any, tmp_path: Path, k: int, threshold: float
) -> None:
    keys, texts = _short_texts(k)
    fingerprints, sketches = simstore.Fingerprinter().fingerprints_and_sketches(texts)
    table = pd.DataFrame(
        {
            "key": pd.Series(keys, dtype=object),
            "fingerprint": fingerprints,
            "sketch": pd.Series([row.tobytes() for row in sketches], dtype=object),
        }
    )
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.from_pandas(table, npartitions=5)
    with simstore.open(str(tmp_path / "one.simstore"), "n", k=5) as store:
        store.add_many(keys, fingerprints, sketches=sketches)
        expected = {
            tuple(pair) for pair in store.near_duplicate_pairs(k=k, min_similarity=threshold, bands=True)
        }
        one = store.clusters(k=k, min_similarity=threshold, bands=True)
        plain = {
            tuple(pair) for pair in store.near_duplicate_pairs(k=k, min_similarity=threshold, bands=False)
        }
        queries = texts[::3]
        query_fingerprints, query_sketches = simstore.Fingerprinter().fingerprints_and_sketches(
            [text + " new" for text in queries]
        )
        answers = store.query_many(
            query_fingerprints, sketches=query_sketches, k=k, min_similarity=threshold, bands=True
        )
        matched = {
            (f"q{row}", match.key, match.distance, match.similarity)
            for row, matches in enumerate(answers)
            for match in matches
        }
    assert any(pair[2] > k for pair in expected)  # the bands found pairs beyond k
    assert any(match[2] > k for match in matched)
    batch = pd.DataFrame(
        {
            "key": pd.Series([f"q{row}" for row in range(len(queries))], dtype=object),
            "fingerprint": query_fingerprints,
            "sketch": pd.Series([row.tobytes() for row in query_sketches], dtype=object),
        }
    )
    with dask.config.set({"dataframe.convert-string": False}):
        batch_ddf = dd.from_pandas(batch, npartitions=3)
    against = sd.against(
        batch_ddf,
        [str(tmp_path / "one.simstore")],
        k=k,
        sketch_column="sketch",
        min_similarity=threshold,
        bands=True,
    ).compute()
    assert (
        set(
            zip(against.key, against.match_key, against.distance.astype(int), against.similarity, strict=True)
        )
        == matched
    )
    assert plain < expected
    got = sd.near_duplicate_pairs(
        ddf, k=k, sketch_column="sketch", min_similarity=threshold, bands=True, npartitions=3
    ).compute()
    assert len(got) == len(expected)
    assert set(zip(got.key_a, got.key_b, got.distance.astype(int), got.similarity, strict=True)) == expected
    clusters = sd.clusters(ddf, k=k, sketch_column="sketch", min_similarity=threshold, bands=True).compute()
    assert dask_cluster_sets(clusters) == cluster_sets(one)
    with pytest.raises(simstore.InvalidValueError, match="min_similarity"):
        sd.near_duplicate_pairs(ddf, sketch_column="sketch", bands=True)
    with pytest.raises(simstore.InvalidTypeError):
        sd.clusters(ddf, sketch_column="sketch", min_similarity=0.8, bands="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [0, 2])
def test_tiny_and_empty_frames(client: Any, rows: int) -> None:
    """A frame too small to fill every shuffled partition (or empty): pairs and clusters
    of what it holds, not an IndexError from an empty partition."""
    frame = pd.DataFrame({"id": ["a", "b"][:rows], "fingerprint": np.array([1, 3], dtype=np.uint64)[:rows]})
    pairs = sd.near_duplicate_pairs(dd.from_pandas(frame, npartitions=1), "id", "fingerprint").compute()
    clusters = sd.clusters(dd.from_pandas(frame, npartitions=1), "id", "fingerprint").compute()
    assert [tuple(row) for row in pairs[["key_a", "key_b", "distance"]].itertuples(index=False)] == (
        [("a", "b", 1)] if rows else []
    )
    assert sorted(clusters["key"].tolist()) == (["a", "b"] if rows else [])


def test_a_sketch_column_that_holds_no_sketches_is_refused(client: Any) -> None:
    """A text column given as sketch_column= (or bytes dask turned into text) is refused,
    instead of every pair coming back unjudged with min_similarity silently off."""
    frame = pd.DataFrame(
        {"id": ["a", "b"], "fingerprint": np.array([1, 3], dtype=np.uint64), "text": ["x y", "x z"]}
    )
    with pytest.raises(simstore.InvalidTypeError, match="must be bytes"):
        sd.near_duplicate_pairs(
            dd.from_pandas(frame, npartitions=1),
            "id",
            "fingerprint",
            sketch_column="text",
            min_similarity=0.8,
        ).compute()


def test_build_stores_keeps_the_sketches_it_is_given(client: Any, tmp_path: Path) -> None:
    """Shards built with sketch_column= keep each document's sketch: a sharded text query
    is judged by the threshold as one store holding the same documents is (without the
    sketches, every stored document was kept unjudged)."""
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(400)]
    texts = [" ".join(rng.choice(words, 60)) for _ in range(60)]
    texts += [text + " " + " ".join(rng.choice(words, 25)) for text in texts[:30]]  # looser copies
    keys = [f"d{i}" for i in range(len(texts))]
    fingerprints, sketches = simstore.Fingerprinter().fingerprints_and_sketches(texts)
    ddf = dd.from_pandas(pd.DataFrame({"key": keys, "text": texts}), npartitions=2)
    sketched = sd.fingerprint_and_sketch(ddf, "text")
    ddf = ddf.assign(fingerprint=sketched.fingerprint, sketch=sketched.sketch)
    paths = sd.build_stores(ddf, str(tmp_path / "s-{shard}.simstore"), 3, sketch_column="sketch")
    sketched_docs = 0
    for path in paths:
        with simstore.open(path, "r") as shard:
            sketched_docs += shard.stats().sketched_docs
    assert sketched_docs == len(keys)
    with simstore.open(tmp_path / "one.simstore", "n") as one, simstore.ShardedStore(paths) as sharded:
        one.add_many(keys, fingerprints, sketches=sketches)
        queries = texts[:40]
        assert sharded.query_many(texts=queries) == one.query_many(texts=queries)


def repeated_corpus(seed: int) -> tuple[list[Any], np.ndarray]:
    """Keys and fingerprints with near-duplicates and with exact copies
    spread over the whole input (so across partitions)."""
    fingerprints = planted(seed, singles=900, clusters=40, size=4, k=3)
    rng = np.random.default_rng(seed)
    copies = fingerprints[rng.integers(0, len(fingerprints), 150)]
    fingerprints = np.concatenate([fingerprints, copies, copies[:20]])
    rng.shuffle(fingerprints)
    keys: list[Any] = [f"doc-{i}" if i % 3 else i for i in range(len(fingerprints))]
    return keys, fingerprints


@pytest.mark.parametrize(("partitions", "buckets"), [(1, None), (2, None), (5, 3), (8, None), (8, 1)])
def test_answers_equal_one_store_over_partitions_and_repeats(
    client: Any, tmp_path: Path, partitions: int, buckets: int | None
) -> None:
    keys, fingerprints = repeated_corpus(partitions)
    lengths = np.ones(len(keys), dtype=np.int64)
    ddf = frame(keys, fingerprints, lengths, partitions=partitions)
    assert ddf.npartitions == partitions
    with one_store(tmp_path, keys, fingerprints, lengths) as store:
        expected = {tuple(pair)[:3] for pair in store.near_duplicate_pairs()}
        expected_clusters = cluster_sets(store.clusters(3))
    got = sd.near_duplicate_pairs(ddf, k=3, npartitions=buckets).compute()
    pairs = list(zip(got.key_a, got.key_b, got.distance.astype(int), strict=True))
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == expected
    assert sum(distance == 0 for _, _, distance in pairs) > 150  # the copies were paired
    result = sd.clusters(ddf, k=3, npartitions=buckets).compute()
    assert dask_cluster_sets(result) == expected_clusters
    assert len(result) == len(set(result.position))  # every member once


def test_no_task_receives_the_whole_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bucket of the pair search and of the labelling receives only its
    share of the fingerprints: a step that gathered the corpus in one task
    (as a fan-in to one bucket would) fails here."""
    import simstore.dask.partitioned as steps
    from simstore.index import prefix_shuffle

    keys, fingerprints = repeated_corpus(9)
    ddf = frame(keys, fingerprints, np.ones(len(keys), dtype=np.int64), partitions=12)
    received: dict[str, list[int]] = {"entries": [], "documents": []}
    bucket_edges, label_documents = prefix_shuffle.bucket_edges, steps.label_documents

    def counted_edges(parts: Any, tables: Any, k: int) -> Any:
        received["entries"].append(sum(len(part) - len(tables) for part in parts))
        return bucket_edges(parts, tables, k)

    def counted_labels(forest: Any, parts: Any) -> Any:
        received["documents"].append(sum(len(part[0]) for part in parts))
        return label_documents(forest, parts)

    monkeypatch.setattr(
        prefix_shuffle, "bucket_edges", counted_edges
    )  # routed_edges and bucket_forest call it
    monkeypatch.setattr(steps, "label_documents", counted_labels)
    pairs = sd.near_duplicate_pairs(ddf, k=3)
    graph = dict(pairs.__dask_graph__())
    assert sum(dask.utils.key_split(key) == "routed_edges" for key in graph) == 3  # 4 partitions a bucket
    pairs.compute(scheduler="sync")
    sd.clusters(ddf, k=3).compute(scheduler="sync")
    distinct = len(np.unique(fingerprints))
    assert len(received["entries"]) == 6
    assert len(received["documents"]) == 3
    assert sum(received["entries"][:3]) >= distinct  # every distinct fingerprint, once per table
    assert max(received["entries"]) < sum(received["entries"][:3]) / 2
    assert sum(received["documents"]) == len(keys)
    assert max(received["documents"]) < len(keys) / 2
