"""The command line's verified answers: ``--min-similarity`` and ``--linkage``
on ``dedup`` and ``query``, over the bundled example corpus."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

import simstore
from simstore.cli import main
from simstore.fingerprinting.sketch import estimate_jaccard

CORPUS = Path(__file__).parents[2] / "examples" / "corpus" / "kjv_near_duplicates.jsonl"


def _json_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _summary(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def _pair_estimated_between(low: float, high: float) -> tuple[str, str]:
    """Two texts whose sketches estimate their similarity at ``low`` or more
    but below ``high``: a text of random words and a copy with some replaced."""
    rng = random.Random(7)
    words = [f"w{rng.randrange(5000)}" for _ in range(300)]
    fingerprinter = simstore.Fingerprinter()
    for replaced in range(1, 60):
        copy = list(words)
        for place in rng.sample(range(len(words)), replaced):
            copy[place] = f"x{rng.randrange(5000)}"
        texts = [" ".join(words), " ".join(copy)]
        _, rows = fingerprinter.fingerprints_and_sketches(texts)
        if low <= float(estimate_jaccard(rows[:1], rows[1:])[0]) < high:
            return texts[0], texts[1]
    raise AssertionError("no copy estimated in the range")


def _corpus_with_a_pair_between(tmp_path: Path, low: float, high: float) -> Path:
    """The bundled corpus and a pair estimated from ``low`` to below ``high``."""
    first, second = _pair_estimated_between(low, high)
    lines = CORPUS.read_text().splitlines()
    extra = [json.dumps({"id": f"between-{n}", "text": text}) for n, text in enumerate((first, second))]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join([*lines, *extra]) + "\n")
    return path


def test_dedup_pairs_carry_similarity_and_respect_the_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _corpus_with_a_pair_between(tmp_path, 0.75, 0.8)
    everything = tmp_path / "all.jsonl"
    command = ["dedup", str(corpus), "--pairs", "-k", "5", "--min-similarity", "0", "-o", str(everything)]
    assert main([*command, "--json"]) == 0
    capsys.readouterr()
    pairs = _json_lines(everything)
    assert pairs
    assert all(0.0 <= float(pair["similarity"]) <= 1.0 for pair in pairs)  # type: ignore[arg-type]
    # The temporary store is made to find the pairs at J >= 0.8: it verifies
    # from two standard errors of the estimate below, 0.75 (the presets').
    similar = tmp_path / "similar.jsonl"
    code = main(["dedup", str(corpus), "--pairs", "-k", "5", "--min-similarity", "0.8", "-o", str(similar)])
    assert code == 0
    expected = [pair for pair in pairs if float(pair["similarity"]) >= 0.75]  # type: ignore[arg-type]
    assert any(float(pair["similarity"]) < 0.8 for pair in expected)  # type: ignore[arg-type]
    assert sorted(map(json.dumps, _json_lines(similar))) == sorted(map(json.dumps, expected))


def test_star_linkage_bounds_every_cluster_and_is_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    star = tmp_path / "star.jsonl"
    # Without bands every member is within k of its representative (with them, the
    # default, it may share a band instead: test_dedup_bands_adds_pairs_beyond_k...).
    command = ["dedup", str(CORPUS), "--clusters", "-k", "6", "--no-bands", "-o", str(star), "--json"]
    assert main(command) == 0
    summary = _summary(capsys)
    clusters = _json_lines(star)
    assert all(int(cluster["worst_distance"]) <= 6 for cluster in clusters)  # type: ignore[call-overload]
    assert summary["worst_distance"] == max(int(c["worst_distance"]) for c in clusters)  # type: ignore[call-overload]
    assert summary["largest_cluster"] == max(int(c["size"]) for c in clusters)  # type: ignore[call-overload]
    worst = min(float(c["worst_similarity"]) for c in clusters)  # type: ignore[arg-type]
    assert summary["worst_similarity"] == pytest.approx(worst, abs=1e-4)
    chained = tmp_path / "components.jsonl"
    code = main(
        [
            "dedup",
            str(CORPUS),
            "--clusters",
            "-k",
            "6",
            "--linkage",
            "components",
            "-o",
            str(chained),
            "--json",
        ]
    )
    assert code == 0
    components = _summary(capsys)
    # Chains only ever join: no fewer duplicates, clusters at least as large.
    assert components["duplicates"] >= summary["duplicates"]  # type: ignore[operator]
    assert components["largest_cluster"] >= summary["largest_cluster"]  # type: ignore[operator]


def test_dedup_against_a_store_with_a_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(CORPUS), "-k", "5"]) == 0
    matches = tmp_path / "matches.jsonl"
    code = main(
        [
            "dedup",
            str(CORPUS),
            "--against",
            str(store),
            "--pairs",
            "--min-similarity",
            "0.9",
            "-o",
            str(matches),
        ]
    )
    assert code == 0
    found = _json_lines(matches)
    assert found
    assert all(float(match["similarity"]) >= 0.9 for match in found)  # type: ignore[arg-type]
    capsys.readouterr()


def test_query_min_similarity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(CORPUS), "-k", "5"]) == 0
    text = json.loads(CORPUS.read_text().splitlines()[0])["text"]
    capsys.readouterr()
    assert main(["query", str(store), text, "--json", "--min-similarity", "0.5"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["matches"]
    assert all(match["similarity"] >= 0.5 for match in answer["matches"])
    with simstore.open(store, "r") as opened:
        expected = opened.query(text=text, min_similarity=0.5)
    assert [match["key"] for match in answer["matches"]] == [match.key for match in expected]
    with pytest.raises(SystemExit) as exit_info:
        main(["query", str(store), "--fingerprint", "0x1", "--min-similarity", "0.5"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        main(["query", str(store), text, "--min-similarity", "1.5"])


def test_export_and_import_keep_the_sketches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(CORPUS)]) == 0
    exported = tmp_path / "export.jsonl"
    assert main(["export", str(store), "-o", str(exported)]) == 0
    header, *lines = _json_lines(exported)
    assert header["fingerprinter"]["sketch"]["bins"] == 256
    assert all(str(line["sketch"]).startswith("256x4:") for line in lines)
    copy = tmp_path / "copy.simstore"
    assert main(["import", str(copy), str(exported)]) == 0
    text = json.loads(CORPUS.read_text().splitlines()[3])["text"]
    with simstore.open(store, "r") as original, simstore.open(copy, "r") as imported:
        assert imported.query(text=text) == original.query(text=text)
        assert all(match.similarity is not None for match in imported.query(text=text))
        key = next(iter(original))
        assert imported.sketch_of(key) == original.sketch_of(key)
    other = tmp_path / "other.simstore"
    with simstore.open(
        other, "c", fingerprinter=simstore.Fingerprinter(sketch=simstore.Sketch(bins=512, bits=2))
    ):
        pass
    capsys.readouterr()
    assert main(["import", str(other), str(exported)]) != 0
    # The export's settings line names the other sketch: refused before any line is added.
    err = capsys.readouterr().err
    assert "has other settings than the export" in err
    assert "'bins': 512" in err
    with simstore.open(other, "r") as refused:
        assert len(refused) == 0


# -- provenance ---------------------------------------------------------------


def test_annotate_and_dropped_give_every_document_its_provenance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    annotated, dropped, kept = tmp_path / "all.jsonl", tmp_path / "dropped.jsonl", tmp_path / "kept.jsonl"
    assert main(["dedup", str(CORPUS), "-o", str(kept), "--json"]) == 0
    summary = _summary(capsys)
    assert main(["dedup", str(CORPUS), "--annotate", "-o", str(annotated), "--dropped", str(dropped)]) == 0
    capsys.readouterr()
    rows = _json_lines(annotated)
    originals = _json_lines(CORPUS)
    assert [row["id"] for row in rows] == [row["id"] for row in originals]  # every document, in order
    assert [{k: v for k, v in row.items() if k in originals[0]} for row in rows] == originals
    kept_ids = {row["id"] for row in _json_lines(kept)}
    dropped_rows = _json_lines(dropped)
    assert len(dropped_rows) == summary["duplicates"]
    assert {row["id"] for row in dropped_rows} == {row["id"] for row in rows} - kept_ids
    by_id = {row["id"]: row for row in rows}
    for row in dropped_rows:
        assert row == by_id[row["id"]]
        assert row["duplicate_of"] in kept_ids  # a star: every dropped one points at a kept one
        assert row["distance"] >= 0  # within k, or sharing a band past it
        assert row["similarity"] >= 0.8
        representative = by_id[row["duplicate_of"]]
        assert representative["duplicate_of"] is None
        assert representative["cluster_id"] == row["cluster_id"]
    for row in rows:
        if row["id"] in kept_ids and row["cluster_id"] is None:
            assert row["duplicate_of"] is row["distance"] is row["similarity"] is None
    # cluster_size: the documents sharing the row's cluster_id; 1 (not null) for one in no cluster.
    cluster_ids = [row["cluster_id"] for row in rows]
    sizes = {cluster: cluster_ids.count(cluster) for cluster in set(cluster_ids) if cluster is not None}
    assert [row["cluster_size"] for row in rows] == [1 if c is None else sizes[c] for c in cluster_ids]
    assert max(sizes.values()) == summary["largest_cluster"] > 2
    assert all(row["cluster_size"] >= 2 for row in dropped_rows)  # type: ignore[operator]
    # CSV carries the same sizes, as integers.
    as_csv = tmp_path / "all.csv"
    assert main(["dedup", str(CORPUS), "--annotate", "-o", str(as_csv), "-q"]) == 0
    with as_csv.open(newline="", encoding="utf-8") as stream:
        csv_rows = list(csv.DictReader(stream))
    assert list(csv_rows[0])[-5:] == ["cluster_id", "duplicate_of", "distance", "similarity", "cluster_size"]
    assert [row["cluster_size"] for row in csv_rows] == [str(row["cluster_size"]) for row in rows]


def test_keep_none_drops_every_member(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clusters = tmp_path / "clusters.jsonl"
    assert main(["dedup", str(CORPUS), "--clusters", "-o", str(clusters)]) == 0
    capsys.readouterr()
    members = {member for cluster in _json_lines(clusters) for member in cluster["members"]}  # type: ignore[attr-defined]
    kept = tmp_path / "kept.jsonl"
    assert main(["dedup", str(CORPUS), "--keep", "none", "-o", str(kept), "--json"]) == 0
    summary = _summary(capsys)
    assert summary["duplicates"] == len(members)
    assert not {row["id"] for row in _json_lines(kept)} & members


def test_annotate_against_a_store_names_the_closest_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.simstore"
    lines = CORPUS.read_text().splitlines()
    stored, batch = tmp_path / "stored.jsonl", tmp_path / "batch.jsonl"
    stored.write_text("\n".join(lines[:200]) + "\n")
    batch.write_text("\n".join(lines[200:]) + "\n")
    assert main(["add", str(store), str(stored)]) == 0
    annotated = tmp_path / "annotated.jsonl"
    assert main(["dedup", str(batch), "--against", str(store), "--annotate", "-o", str(annotated)]) == 0
    capsys.readouterr()
    rows = _json_lines(annotated)
    assert len(rows) == len(lines) - 200
    matched = [row for row in rows if row["duplicate_of"] is not None]
    assert matched
    with simstore.open(store, "r") as opened:
        for row in matched:
            best = opened.query(text=str(row["text"]))[0]
            assert (row["duplicate_of"], row["distance"]) == (best.key, best.distance)
            assert row["cluster_id"] is None
            assert row["cluster_size"] is None  # matched, not clustered
    unmatched = [row for row in rows if row["duplicate_of"] is None]
    assert unmatched
    assert all(row["cluster_size"] == 1 for row in unmatched)


def test_annotate_refuses_pairs_and_clusters(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["dedup", str(CORPUS), "--annotate", "--pairs", "-o", str(tmp_path / "x.jsonl")])


def _reworded_pair(path: Path) -> None:
    """Two texts 3 bits apart that share only about 62 % of their word
    3-shingles (every sixth word doubled): within the default k, below the
    default threshold."""
    words = [f"w{(index * index * 7919 + index * 104729) % 3001}" for index in range(400)]
    doubled = [word for index, word in enumerate(words) for word in [word] * (2 if index % 6 == 0 else 1)]
    records = [{"id": "a", "text": " ".join(words)}, {"id": "b", "text": " ".join(doubled)}]
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def test_dedup_applies_the_store_threshold_unless_told_otherwise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dedup applied the new store's 0.8 threshold while --help and docs/cli.md
    presented --min-similarity as opt-in and --pairs as every pair within k."""
    from simstore.layout.choose import DEFAULT_MIN_SIMILARITY

    source = tmp_path / "pair.jsonl"
    _reworded_pair(source)
    assert main(["dedup", str(source), "--pairs", "-o", "-", "-q"]) == 0
    assert capsys.readouterr().out == ""  # 0.62 < the default 0.8
    assert main(["dedup", str(source), "--pairs", "-o", "-", "-q", "--min-similarity", "0"]) == 0
    [pair] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert pair["distance"] <= 5
    assert pair["similarity"] < DEFAULT_MIN_SIMILARITY
    # --against: the threshold stored in the store, not the default.
    store = tmp_path / "lenient.simstore"
    with simstore.open(store, "c", min_similarity=0.5):
        pass
    first = tmp_path / "a.jsonl"
    first.write_text(source.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    assert main(["add", str(store), str(first), "-q"]) == 0
    capsys.readouterr()
    assert main(["dedup", str(source), "--against", str(store), "--pairs", "-o", "-", "-q"]) == 0
    assert [json.loads(line)["match"] for line in capsys.readouterr().out.splitlines()] == ["a", "a"]
    # And both --help and docs/cli.md say so.
    with pytest.raises(SystemExit):
        main(["dedup", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    docs = " ".join((Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8").split())
    for text in (help_text, docs):
        plain = text.replace("`", "").replace("*", "")
        assert f"{DEFAULT_MIN_SIMILARITY} for the temporary store and a new --store" in plain
        assert "an existing --store or --against STORE uses" in plain
        assert "--min-similarity 0 turns the check off" in plain


def test_dedup_outputs_carry_the_full_similarity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI rounded similarities to 4 decimals, also in Parquet's float64
    column, where simstore.dedup_table and the Store give the full estimate."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = _json_lines(CORPUS)
    source = tmp_path / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist(rows), source)
    annotated = tmp_path / "annotated.parquet"
    assert main(["dedup", str(source), "--annotate", "-o", str(annotated), "-q"]) == 0
    _, provenance = simstore.dedup_table(pq.read_table(source), "text", "id")
    assert pq.read_table(annotated).column("similarity").to_pylist() == provenance["similarity"].to_pylist()
    assert any(
        value is not None and round(value, 4) != value for value in provenance["similarity"].to_pylist()
    )
    # JSON lines too: --pairs as the store lists them, --annotate as dedup_table.
    store, pairs = tmp_path / "s.simstore", tmp_path / "pairs.jsonl"
    assert main(["dedup", str(CORPUS), "--pairs", "--store", str(store), "-o", str(pairs), "-q"]) == 0
    with simstore.open(store, "r") as opened:
        expected = {(pair.key_a, pair.key_b): pair.similarity for pair in opened.near_duplicate_pairs()}
    assert {(pair["a"], pair["b"]): pair["similarity"] for pair in _json_lines(pairs)} == expected
    annotated_jsonl = tmp_path / "annotated.jsonl"
    assert main(["dedup", str(CORPUS), "--annotate", "-o", str(annotated_jsonl), "-q"]) == 0
    assert [record["similarity"] for record in _json_lines(annotated_jsonl)] == provenance[
        "similarity"
    ].to_pylist()


def test_keep_none_annotation_is_documented_for_the_representative(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under --keep none each cluster's representative is dropped, yet has an empty
    duplicate_of, which docs/cli.md and --help said marks the kept one."""
    annotated, dropped = tmp_path / "annotated.jsonl", tmp_path / "dropped.jsonl"
    command = [
        "dedup",
        str(CORPUS),
        "--keep",
        "none",
        "--annotate",
        "-o",
        str(annotated),
        "--dropped",
        str(dropped),
    ]
    assert main([*command, "-q"]) == 0
    records = _json_lines(annotated)
    representatives = {
        row["id"] for row in records if row["cluster_id"] is not None and row["duplicate_of"] is None
    }
    assert representatives
    assert representatives <= {row["id"] for row in _json_lines(dropped)}
    # What marks a kept document there is an empty cluster_id, and both texts say so.
    with pytest.raises(SystemExit):
        main(["dedup", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "empty for the representative itself, which --keep none drops too" in help_text
    docs = " ".join((Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8").split())
    assert "a document is kept exactly when its `cluster_id` is empty" in docs


def test_dedup_bands_adds_pairs_beyond_k_that_meet_the_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain, banded = tmp_path / "plain.jsonl", tmp_path / "banded.jsonl"
    assert main(["dedup", str(CORPUS), "--pairs", "-k", "2", "-o", str(plain)]) == 0
    assert main(["dedup", str(CORPUS), "--pairs", "-k", "2", "--bands", "-o", str(banded)]) == 0
    capsys.readouterr()
    without = {json.dumps(pair, sort_keys=True) for pair in _json_lines(plain)}
    with_bands = list(_json_lines(banded))
    assert without <= {json.dumps(pair, sort_keys=True) for pair in with_bands}
    beyond = [pair for pair in with_bands if int(pair["distance"]) > 2]  # type: ignore[call-overload]
    assert beyond
    assert all(float(pair["similarity"]) >= 0.8 for pair in beyond)


def test_dedup_against_with_bands_matches_query_many_with_bands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Half the corpus stored, the other half matched against it at k = 2:
    bands (the store's band table; --bands asks for them) add the matches
    beyond k that query_many(bands=True) gives, and --no-bands leaves them out."""
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    stored, new = tmp_path / "stored.jsonl", tmp_path / "new.jsonl"
    stored.write_text("\n".join(lines[::2]) + "\n", encoding="utf-8")
    new.write_text("\n".join(lines[1::2]) + "\n", encoding="utf-8")
    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(stored)]) == 0
    plain, banded = tmp_path / "plain.jsonl", tmp_path / "banded.jsonl"
    plain_command = ["dedup", str(new), "--against", str(store), "--pairs", "-k", "2", "--no-bands"]
    assert main([*plain_command, "-o", str(plain)]) == 0
    default = tmp_path / "default.jsonl"
    assert main(["dedup", str(new), "--against", str(store), "--pairs", "-k", "2", "-o", str(default)]) == 0
    command = ["dedup", str(new), "--against", str(store), "--pairs", "-k", "2", "--bands", "-o", str(banded)]
    assert main(command) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in lines[1::2]]
    with simstore.open(store, "r") as opened:
        results = opened.query_many(texts=[r["text"] for r in records], k=2, bands=True)
    expected = {
        (record["id"], match.key, match.distance)
        for record, matches in zip(records, results, strict=True)
        for match in matches
    }
    got = {(pair["key"], pair["match"], pair["distance"]) for pair in _json_lines(banded)}
    assert got == expected
    assert {(pair["key"], pair["match"], pair["distance"]) for pair in _json_lines(plain)} < got
    assert {(pair["key"], pair["match"], pair["distance"]) for pair in _json_lines(default)} == got
    assert any(int(distance) > 2 for _, _, distance in got)  # type: ignore[call-overload]


def test_add_min_similarity_makes_a_store_that_finds_that_similarity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simstore add --min-similarity 0.8` makes the preset store (k = 5, 16 bands
    a width, verifying from 0.75); an existing store's must name its threshold."""
    from simstore.layout.presets import verification_threshold

    store = tmp_path / "s.simstore"
    assert main(["add", str(store), str(CORPUS), "-q", "--min-similarity", "0.8"]) == 0
    with simstore.open(store, "r") as opened:
        assert (opened.k, opened.bands) == (5, 16)
        assert opened.min_similarity == verification_threshold(0.8, 256)
        count = len(opened)
    capsys.readouterr()
    assert main(["add", str(store), str(CORPUS), "-q", "--min-similarity", "0.8"]) == 0  # the same store
    assert main(["add", str(store), str(CORPUS), "-q", "--min-similarity", "0.9"]) == 1
    assert "min_similarity" in capsys.readouterr().err
    with simstore.open(store, "r") as opened:
        assert len(opened) == count


def test_plan_min_similarity_reports_the_preset_and_its_costs(capsys: pytest.CaptureFixture[str]) -> None:
    """`simstore plan --min-similarity J` says what a new store asked for J keeps
    (k = 5 and a band table, its threshold and bytes) before the layouts a
    store without a band table would need."""
    from simstore.layout.planner import k_for_similarity
    from simstore.layout.presets import similarity_preset

    for similarity, bands in ((0.9, 8), (0.8, 16)):
        preset = similarity_preset(similarity, 256)
        assert main(["plan", "--docs", "1e7", "--min-similarity", str(similarity), "--limit", "2"]) == 0
        out = capsys.readouterr().out
        assert f"asked for min_similarity={similarity:g}" in out
        assert f"+ {bands} bands a width" in out
        assert f"estimated similarity of {preset.threshold:g}" in out
        assert f"k={k_for_similarity(similarity)}: the layouts below" in out
        assert main(["plan", "--docs", "1e7", "--min-similarity", str(similarity), "--json"]) == 0
        entries = json.loads(capsys.readouterr().out)
        [chosen] = [entry for entry in entries if entry.get("chosen")]
        assert (chosen["format"], chosen["k"], chosen["bands"]) == (4, 5, bands)
        assert chosen["threshold"] == preset.threshold
        assert chosen["band_bytes_per_doc"] > 0
        assert chosen["bytes_per_doc"] > chosen["table_bytes_per_doc"] + chosen["band_bytes_per_doc"]
    # With -k the similarity only chooses nothing but the threshold: no preset.
    assert main(["plan", "-k", "5", "--docs", "1e7", "--min-similarity", "0.8"]) == 0
    assert "asked for min_similarity" not in capsys.readouterr().out


def test_dedup_min_similarity_makes_a_new_store_to_find_that_similarity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new --store is the preset store `add --min-similarity` makes; an
    existing store holds one run to another value without being changed, and
    to its own threshold where the value is the one it was made for."""
    preset = tmp_path / "preset.simstore"
    command = ["dedup", str(CORPUS), "--store", str(preset), "-q", "--pairs", "--min-similarity", "0.8"]
    assert main([*command, "-o", str(tmp_path / "new.jsonl")]) == 0
    with simstore.open(preset, "r") as store:
        assert (store.k, store.bands, store.min_similarity) == (5, 16, 0.75)
        expected = {
            tuple(sorted(map(str, (pair.key_a, pair.key_b)))) for pair in store.near_duplicate_pairs()
        }
    capsys.readouterr()
    for similarity in ("0.8", "0.75"):  # the one it was made for, its threshold: the same pairs
        out = tmp_path / f"pairs-{similarity}.jsonl"
        command = ["dedup", str(CORPUS), "--store", str(preset), "--pairs", "-o", str(out)]
        assert main([*command, "-q", "--min-similarity", similarity]) == 0
        found = {tuple(sorted(map(str, (pair["a"], pair["b"])))) for pair in _json_lines(out)}
        assert found == expected
    strict = tmp_path / "strict.jsonl"
    command = ["dedup", str(CORPUS), "--store", str(preset), "--pairs", "-o", str(strict)]
    assert main([*command, "-q", "--min-similarity", "0.9"]) == 0
    strict_pairs = _json_lines(strict)
    assert strict_pairs
    assert all(float(pair["similarity"]) >= 0.9 for pair in strict_pairs)  # type: ignore[arg-type]
    with simstore.open(preset, "r") as store:
        assert store.min_similarity == 0.75  # unchanged by the run


def test_dedup_against_a_preset_store_verifies_from_its_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = tmp_path / "preset.simstore"
    corpus = _corpus_with_a_pair_between(tmp_path, 0.75, 0.8)
    with simstore.open(preset, "c", min_similarity=0.8) as store:
        texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
        store.add_many(range(0, len(texts), 2), texts=texts[::2])
        queries = texts[1::2]
        expected = sum(bool(matches) for matches in store.query_many(texts=queries, min_similarity=0.75))
        stricter = sum(bool(matches) for matches in store.query_many(texts=queries, min_similarity=0.8))
    assert expected > stricter  # the corpus has pairs estimated from 0.75 to 0.8
    source = tmp_path / "odd.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(queries)))
    command = ["dedup", str(source), "--against", str(preset), "-o", str(tmp_path / "kept.jsonl"), "--json"]
    assert main([*command, "--min-similarity", "0.8"]) == 0
    assert _summary(capsys)["duplicates"] == expected
