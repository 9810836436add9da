"""The command line, every verb through simstore.cli.main(argv): stats, check, merge,
add, query, dedup, remove, export, import; exit statuses, progress, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import simstore
from simstore.cli import main


@pytest.fixture
def good_store(store_path: str) -> str:
    """A closed k=3 store with 3 documents, 2 of them still in the delta."""
    with simstore.open(store_path, k=3, merge_on_close=False) as store:
        store.add("a", fingerprint=1)
        store.merge()
        store.add_many(["b", "c"], [2, 3])
    return store_path


def test_stats_prints_the_summary(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`stats` exits 0 and prints docs, delta, k, the layout and tables, one per line."""
    assert main(["stats", good_store]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["docs"] == "3"
    assert lines["delta_docs"] == "2"
    assert lines["k"] == "3"
    assert lines["layout"] == "multi-index [32, 32] r[1, 1]"
    assert lines["blocks"] == "None"  # (Manku's tables only)
    assert lines["tables"] == "2"
    assert lines["path"] == good_store


def test_stats_json(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`stats --json` prints one JSON object with the same numbers."""
    assert main(["stats", "--json", good_store]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["docs"] == 3
    assert summary["delta_docs"] == 2
    assert summary["tables"] == 2
    assert summary["prefix_bits"] == [32, 32]
    assert summary["blocks"] is None


def test_stats_and_check_do_not_modify_the_store(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The read-only verbs leave the delta where it was."""
    assert main(["stats", good_store]) == 0
    assert main(["check", good_store]) == 0
    capsys.readouterr()
    with simstore.open(good_store, "r") as store:
        assert store.stats().delta_docs == 2


def test_check_ok(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` on a sound store exits 0 and prints ok."""
    assert main(["check", good_store]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "ok"
    assert err == ""


def test_merge_folds_the_delta(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`merge` exits 0, says how many documents it merged, and empties the delta."""
    assert main(["merge", good_store]) == 0
    out, _ = capsys.readouterr()
    assert "merged 2" in out
    with simstore.open(good_store, "r") as store:
        assert store.stats().delta_docs == 0
        assert len(store) == 3
        assert store.check() == []
    assert main(["merge", good_store]) == 0
    assert "merged 0" in capsys.readouterr().out


@pytest.mark.parametrize("verb", ["stats", "check", "merge"])
def test_missing_store_exits_1_with_a_message(
    store_path: str, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing store: exit 1, a one-line message on stderr, no traceback, nothing created."""
    assert main([verb, store_path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "simstore: error:" in err
    assert store_path in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not os.path.exists(store_path)


@pytest.mark.parametrize("verb", ["stats", "check", "merge"])
def test_foreign_file_exits_1(store_path: str, verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that is not a store: exit 1 with a message, file untouched."""
    with open(store_path, "wb") as handle:
        handle.write(b"hello" * 2000)
    assert main([verb, store_path]) == 1
    _, err = capsys.readouterr()
    assert "simstore: error:" in err
    assert "Traceback" not in err
    with open(store_path, "rb") as handle:
        assert handle.read() == b"hello" * 2000


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate", "x"],
        ["stats"],
        ["check"],
        ["merge"],
        ["stats", "a", "b"],
        ["check", "--nope", "x"],
        ["dedup", "in.jsonl"],
        ["query"],
        ["remove", "x"],
        ["add", "x"],
        ["dedup", "a", "-o", "b", "--store", "s", "--against", "t"],
        ["dedup", "a", "-o", "b", "--pairs", "--clusters"],
        ["add", "s", "f", "--on-error", "ignore"],
        ["query", "s", "--fingerprint", "xyz"],
        ["stats", "--nope", "x"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Bad command lines are usage errors: SystemExit(2) with usage on stderr."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    _, err = capsys.readouterr()
    assert "usage:" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the package version and exits 0."""
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert simstore.__version__ in capsys.readouterr().out


def test_module_entry_point(good_store: str) -> None:
    """`python -m simstore.cli check` runs main and exits with its status."""
    completed = subprocess.run(
        [sys.executable, "-m", "simstore.cli", "check", good_store],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"
    missing = subprocess.run(
        [sys.executable, "-m", "simstore.cli", "stats", good_store + ".missing"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1
    assert "Traceback" not in missing.stderr


def test_check_reports_problems_and_exits_1(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` on a damaged store (a table entry deleted behind simstore's back) prints the
    problem and exits 1."""
    import lmdb

    with simstore.open(good_store) as store:
        store.merge()
    env = lmdb.open(good_store, subdir=False, max_dbs=600)
    table = env.open_db(b"table:000", dupsort=True, dupfixed=True, create=False)
    with env.begin(write=True) as txn:
        cursor = txn.cursor(table)
        assert cursor.first()
        cursor.delete()
    env.close()
    assert main(["check", good_store]) == 1
    out, err = capsys.readouterr()
    assert "table 0" in out
    assert "problem" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------- new verbs

CORPUS = os.path.join(
    os.path.dirname(__file__), os.pardir, os.pardir, "examples", "corpus", "kjv_near_duplicates.jsonl"
)

BASE = (
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
    "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters."
)
OTHER = (
    "Blessed is the man that walketh not in the counsel of the ungodly, nor standeth in the way of sinners, "
    "nor sitteth in the seat of the scornful. But his delight is in the law of the LORD."
)
THIRD = (
    "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures: "
    "he leadeth me beside the still waters. He restoreth my soul."
)


def write_jsonl(path: str, records: list[dict[str, object]]) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return path


@pytest.fixture
def corpus_file(tmp_path: object) -> str:
    """Five documents: a base, a case-only copy, a copy with extra spaces, and two others."""
    return write_jsonl(
        os.path.join(str(tmp_path), "in.jsonl"),
        [
            {"id": "a", "text": BASE, "url": "https://a"},
            {"id": "b", "text": OTHER},
            {"id": "a2", "text": BASE.upper()},
            {"id": "c", "text": THIRD},
            {"id": "a3", "text": BASE.replace(" ", "   ") + " !!"},
        ],
    )


def read_jsonl(path: str) -> list[dict[str, object]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_add_then_query_text_file_and_fingerprint(
    store_path: str, corpus_file: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """`add` stores JSONL with meta fields and lengths; `query` by text, --file and
    --fingerprint, plain and --json."""
    assert main(["add", store_path, corpus_file, "--meta-field", "url", "-q"]) == 0
    assert "added 5 documents" in capsys.readouterr().out
    with simstore.open(store_path, "r") as store:
        assert len(store) == 5
        record = store.get("a")
        assert record is not None
        assert record.meta == {"url": "https://a", "length": len(BASE)}
        fingerprint = record.fingerprint
    assert main(["query", store_path, BASE, "-k", "0"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == ["0\ta", "0\ta2"]
    query_file = os.path.join(str(tmp_path), "q.txt")
    with open(query_file, "w", encoding="utf-8") as handle:
        handle.write(OTHER)
    assert main(["query", store_path, "--file", query_file, "--json", "--meta"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [match["key"] for match in result["matches"]] == ["b"]
    assert result["matches"][0]["meta"] == {"length": len(OTHER)}
    assert main(["query", store_path, "--fingerprint", f"{fingerprint:x}", "--json"]) == 0
    keys = [match["key"] for match in json.loads(capsys.readouterr().out)["matches"]]
    assert keys[:2] == ["a", "a2"]
    assert main(["query", store_path, "--fingerprint", "0x1"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "no document" in err


def test_query_needs_exactly_one_source(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with simstore.open(store_path):
        pass
    for argv in (["query", store_path], ["query", store_path, "x", "--fingerprint", "1"]):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
    assert "exactly one" in capsys.readouterr().err


def test_add_reads_every_format(
    store_path: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """CSV, TSV, plain text (one document a line), a directory and stdin."""
    folder = str(tmp_path)
    with open(os.path.join(folder, "d.csv"), "w", encoding="utf-8", newline="") as handle:
        handle.write('id,text\nc1,"' + BASE.replace('"', "") + '"\nc2,' + OTHER.replace(",", "") + "\n")
    with open(os.path.join(folder, "d.tsv"), "w", encoding="utf-8") as handle:
        handle.write("key\tbody\nt1\t" + THIRD + "\n")
    with open(os.path.join(folder, "lines.txt"), "w", encoding="utf-8") as handle:
        handle.write(BASE + "\n\n" + OTHER + "\n")
    pages = os.path.join(folder, "pages")
    os.makedirs(os.path.join(pages, "sub"))
    with open(os.path.join(pages, "sub", "p.txt"), "w", encoding="utf-8") as handle:
        handle.write(THIRD)
    assert main(["add", store_path, os.path.join(folder, "d.csv"), "-q"]) == 0
    argv = [
        "add",
        store_path,
        os.path.join(folder, "d.tsv"),
        "--id-field",
        "key",
        "--text-field",
        "body",
        "-q",
    ]
    assert main(argv) == 0
    assert main(["add", store_path, os.path.join(folder, "lines.txt"), pages, "-q"]) == 0
    capsys.readouterr()
    with simstore.open(store_path, "r") as store:
        keys = set(store.keys())
    lines = os.path.join(folder, "lines.txt")
    assert keys == {"c1", "c2", "t1", f"{lines}:1", f"{lines}:3", "sub/p.txt"}


def test_add_from_stdin(
    store_path: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    data = json.dumps({"id": 7, "text": BASE}) + "\n" + json.dumps({"id": 8, "text": OTHER}) + "\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert main(["add", store_path, "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == 2
    with simstore.open(store_path, "r") as store:
        assert sorted(store.keys()) == [7, 8]  # JSON integer ids stay ints


def test_bad_lines_fail_before_anything_is_written(
    store_path: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """--on-error fail (the default): exit 1 naming FILE:LINE, and the store is untouched;
    --on-error skip: each bad line reported, the good ones added."""
    bad = os.path.join(str(tmp_path), "bad.jsonl")
    with open(bad, "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "ok", "text": BASE}) + "\n")
        handle.write("{not json\n")
        handle.write(json.dumps({"id": "empty", "text": "   "}) + "\n")
        handle.write(json.dumps({"id": [1], "text": OTHER}) + "\n")
        handle.write(json.dumps({"id": "punct", "text": "!!! ???"}) + "\n")
        handle.write(json.dumps({"id": "fine", "text": OTHER}) + "\n")
    assert main(["add", store_path, bad]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("simstore: error: ")
    assert f"{bad}:2: not valid JSON" in err
    assert "Traceback" not in err
    assert not os.path.exists(store_path) or len(simstore.open(store_path, "r")) == 0
    assert main(["add", store_path, bad, "--on-error", "skip"]) == 0
    out, err = capsys.readouterr()
    for line in (2, 3, 4, 5):
        assert f"{bad}:{line}:" in err
    assert "skipped 4 bad lines" in out
    with simstore.open(store_path, "r") as store:
        assert sorted(store.keys()) == ["fine", "ok"]


def test_add_batches_report_what_was_committed(
    store_path: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """--batch-size commits earlier batches; a later bad line says how many were committed."""
    path = os.path.join(str(tmp_path), "many.jsonl")
    records: list[dict[str, object]] = [{"id": f"d{i}", "text": f"{BASE} {i}"} for i in range(5)]
    write_jsonl(path, records)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("oops\n")
    import simstore.cli.documents as cli

    original = cli.FINGERPRINT_CHUNK_DOCS
    cli.FINGERPRINT_CHUNK_DOCS = 2
    try:
        assert main(["add", store_path, path, "--batch-size", "2", "-q"]) == 1
    finally:
        cli.FINGERPRINT_CHUNK_DOCS = original
    err = capsys.readouterr().err
    assert "4 documents of earlier batches were committed" in err
    with simstore.open(store_path, "r") as store:
        assert len(store) == 4


def test_add_to_missing_input_file(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["add", store_path, "/nonexistent/in.jsonl"]) == 1
    assert "no such file" in capsys.readouterr().err


def test_dedup_keeps_one_per_cluster(
    corpus_file: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --store: a temporary store, the kept documents in the input's format, a summary."""
    out_path = os.path.join(str(tmp_path), "kept.jsonl")
    assert main(["dedup", corpus_file, "--output", out_path, "-q"]) == 0
    summary = dict(
        line.split(None, 1)
        for line in capsys.readouterr().out.replace("largest cluster", "largest_cluster").splitlines()
    )
    kept = read_jsonl(out_path)
    assert [record["id"] for record in kept] == ["a", "b", "c"]
    assert kept[0] == {"id": "a", "text": BASE, "url": "https://a"}
    assert summary["documents"] == "5"
    assert summary["duplicates"] == "2"
    assert summary["clusters"] == "1"
    assert summary["largest_cluster"] == "3"
    assert summary["kept"] == "3"
    assert not [name for name in os.listdir(str(tmp_path)) if name.startswith(".simstore-")]


def test_dedup_keep_longest_pairs_clusters_json(
    corpus_file: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path)
    kept_path = os.path.join(folder, "kept.jsonl")
    assert main(["dedup", corpus_file, "-o", kept_path, "--keep", "longest", "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 3
    assert [record["id"] for record in read_jsonl(kept_path)] == ["b", "c", "a3"]
    pairs_path = os.path.join(folder, "pairs.jsonl")
    assert main(["dedup", corpus_file, "-o", pairs_path, "--pairs", "--json", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "kept" not in summary
    pairs = {(p["a"], p["b"]) for p in read_jsonl(pairs_path)}
    assert ("a", "a2") in pairs
    assert all(isinstance(p["distance"], int) for p in read_jsonl(pairs_path))
    clusters_path = os.path.join(folder, "clusters.jsonl")
    assert main(["dedup", corpus_file, "-o", clusters_path, "--clusters", "-q"]) == 0
    capsys.readouterr()
    (cluster,) = read_jsonl(clusters_path)
    assert cluster["representative"] == "a"
    assert cluster["members"] == ["a", "a2", "a3"]
    assert cluster["size"] == 3
    assert cluster["cluster"] == 0


def test_dedup_into_a_store_then_against_it(
    corpus_file: str, tmp_path: object, store_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--store keeps the documents; --against matches new ones without inserting."""
    folder = str(tmp_path)
    assert (
        main(["dedup", corpus_file, "-o", os.path.join(folder, "k.jsonl"), "--store", store_path, "-q"]) == 0
    )
    capsys.readouterr()
    with simstore.open(store_path, "r") as store:
        assert len(store) == 5
    new = write_jsonl(
        os.path.join(folder, "new.jsonl"),
        [{"id": "n1", "text": BASE.lower()}, {"id": "n2", "text": "A new thing under the sun " * 4}],
    )
    matches_path = os.path.join(folder, "m.jsonl")
    assert main(["dedup", new, "--against", store_path, "-o", matches_path, "--pairs", "--json", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["duplicates"] == 1
    assert "clusters" not in summary
    matches = read_jsonl(matches_path)
    assert {(m["key"], m["match"]) for m in matches} == {("n1", "a"), ("n1", "a2"), ("n1", "a3")}
    kept_path = os.path.join(folder, "new_kept.jsonl")
    assert main(["dedup", new, "--against", store_path, "-o", kept_path, "-q"]) == 0
    assert [record["id"] for record in read_jsonl(kept_path)] == ["n2"]
    with simstore.open(store_path, "r") as store:
        assert len(store) == 5  # nothing inserted


def test_dedup_text_from_stdin_to_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plain text on stdin, kept lines on stdout, the summary on stderr."""
    import io

    data = "\n".join([BASE, OTHER, BASE.upper(), THIRD]) + "\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert main(["dedup", "-", "-o", "-", "-q"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [BASE, OTHER, THIRD]
    assert "duplicates       1" in err


def test_dedup_repeated_keys_are_bad_lines(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(
        os.path.join(str(tmp_path), "r.jsonl"), [{"id": "x", "text": BASE}, {"id": "x", "text": OTHER}]
    )
    assert main(["dedup", path, "-o", os.path.join(str(tmp_path), "o.jsonl")]) == 1
    assert f"{path}:2: key 'x' repeats (first at {path}:1)" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(str(tmp_path), "o.jsonl"))


def test_dedup_the_shipped_corpus(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command: a base passage and its cosmetic variants (identical
    once normalised) keep at most one document between them; every family keeps one."""
    out_path = os.path.join(str(tmp_path), "kept.jsonl")
    assert main(["dedup", CORPUS, "--output", out_path, "--json", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    records = read_jsonl(CORPUS)
    kept_ids = {record["id"] for record in read_jsonl(out_path)}
    assert summary["documents"] == len(records)
    assert summary["kept"] == len(kept_ids) == len(records) - summary["duplicates"]
    for base in (record["id"] for record in records if record["variant_of"] is None):
        family = [r for r in records if r["variant_of"] == base]
        cosmetic = {base} | {r["id"] for r in family if r["edit"] == "cosmetic"}
        assert len(cosmetic & kept_ids) <= 1
        assert len(({base} | {r["id"] for r in family}) & kept_ids) >= 1


def test_remove_export_import_round_trip(
    store_path: str, corpus_file: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path)
    with simstore.open(store_path, k=3) as store:
        store.add(b"\x00raw", fingerprint=5, meta={"blob": b"\x01\x02", "n": [1, 2]})
        store.add(42, fingerprint=6)
    assert main(["add", store_path, corpus_file, "-q"]) == 0
    assert main(["remove", store_path, "b", "42"]) == 0  # "42" finds the int key
    assert "removed 2" in capsys.readouterr().out
    assert main(["remove", store_path, "a", "nope"]) == 1
    assert "'nope'" in capsys.readouterr().err
    with simstore.open(store_path, "r") as store:
        assert "a" in store  # nothing removed when a key is missing
    assert main(["remove", store_path, "nope", "--missing-ok"]) == 0
    exported = os.path.join(folder, "export.jsonl")
    assert main(["export", store_path, "-o", exported, "-q"]) == 0
    header, *lines = read_jsonl(exported)
    assert header["simstore_export"] == 1
    assert header["k"] == 3
    assert lines[0] == {
        "key": {"$bytes": "AHJhdw=="},
        "fingerprint": "0000000000000005",
        "meta": {"blob": {"$bytes": "AQI="}, "n": [1, 2]},
    }
    copy = os.path.join(folder, "copy.simstore")
    assert main(["import", copy, exported, "-q"]) == 0
    assert "imported 5" in capsys.readouterr().out
    with simstore.open(store_path, "r") as original, simstore.open(copy, "r") as imported:
        assert list(original.items()) == list(imported.items())
        assert original.get(b"\x00raw") == imported.get(b"\x00raw")
        assert original.get("a") == imported.get("a")
    assert main(["export", store_path]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 + 5  # the settings line, then the documents


def test_import_bad_line(store_path: str, tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(str(tmp_path), "e.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write('{"key": "a", "fingerprint": "ff"}\n{"key": "b", "fingerprint": 255}\n')
    assert main(["import", store_path, path]) == 1
    assert f"{path}:2: the fingerprint must be a hexadecimal string" in capsys.readouterr().err
    assert not os.path.exists(store_path)
    assert main(["import", store_path, path, "--on-error", "skip", "-q"]) == 0
    with simstore.open(store_path, "r") as store:
        assert list(store.items()) == [("a", 255)]


def test_check_json(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", good_store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True, "problems": []}


def test_parameter_mismatch_is_exit_1(
    good_store: str, corpus_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["add", good_store, corpus_file, "-k", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("simstore: error:")
    assert "Traceback" not in err


def test_progress_bars_only_on_a_terminal(
    corpus_file: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """stderr not a terminal: no bar; a terminal: bars on stderr; -q: none."""
    out_path = os.path.join(str(tmp_path), "k.jsonl")
    assert main(["dedup", corpus_file, "-o", out_path]) == 0
    assert "reading" not in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["dedup", corpus_file, "-o", out_path]) == 0
    assert "clustering" in capsys.readouterr().err
    assert main(["dedup", corpus_file, "-o", out_path, "-q"]) == 0
    assert "clustering" not in capsys.readouterr().err


# ------------------------------------------------------- issue 18.4: edges


def test_dedup_json_summary_stays_off_the_data_stream(
    corpus_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dedup --json -o -`: the documents on stdout, the JSON summary on stderr."""
    assert main(["dedup", corpus_file, "-o", "-", "--json", "-q"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["a", "b", "c"]
    assert json.loads(err)["kept"] == 3


@pytest.mark.parametrize("against", [False, True])
def test_dedup_skip_leaves_skipped_documents_out(
    corpus_file: str, tmp_path: object, store_path: str, against: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """--on-error skip: a document skipped for having no words is reported, counted and
    not written to the kept output (it was, as reading alone accepts it)."""
    folder = str(tmp_path)
    path = write_jsonl(
        os.path.join(folder, "p.jsonl"),
        [{"id": "a", "text": BASE}, {"id": "dots", "text": "... !!! ???"}, {"id": "b", "text": OTHER}],
    )
    argv = ["dedup", path, "-o", os.path.join(folder, "kept.jsonl"), "--on-error", "skip", "--json"]
    if against:
        assert main(["add", store_path, corpus_file, "-q"]) == 0
        capsys.readouterr()
        argv += ["--against", store_path]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert f"{path}:2:" in err
    summary = json.loads(out)
    assert summary["skipped"] == 1
    kept = [record["id"] for record in read_jsonl(os.path.join(folder, "kept.jsonl"))]
    assert kept == ([] if against else ["a", "b"])
    assert summary["kept"] == len(kept)


def _spy_on_add_many(monkeypatch: pytest.MonkeyPatch, interrupt_at: int | None = None) -> list[int]:
    """Record the size of every add_many call; raise KeyboardInterrupt at call ``interrupt_at``."""
    original = simstore.Store.add_many
    sizes: list[int] = []

    def add_many(self: simstore.Store, keys: object, *args: object, **kwargs: object) -> object:
        if interrupt_at is not None and len(sizes) + 1 == interrupt_at:
            raise KeyboardInterrupt
        sizes.append(len(keys))  # type: ignore[arg-type]
        return original(self, keys, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(simstore.Store, "add_many", add_many)
    return sizes


def _numbered_corpus(path: str, count: int) -> str:
    return write_jsonl(path, [{"id": f"d{i:02d}", "text": f"{BASE} number {i:02d}"} for i in range(count)])


def test_add_batch_size_commits_at_exact_multiples(
    store_path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--batch-size 5 commits 5, 5, 5, 5, 3, whatever the fingerprinting chunks (here 3
    documents each, cut by characters); it committed 6, 6, 6, 5 (3000 gave 4483, 8986...)."""
    import simstore.cli.documents as cli

    path = _numbered_corpus(os.path.join(str(tmp_path), "n.jsonl"), 23)
    monkeypatch.setattr(cli, "FINGERPRINT_CHUNK_CHARS", 3 * len(f"{BASE} number 00"))
    sizes = _spy_on_add_many(monkeypatch)
    assert main(["add", store_path, path, "--batch-size", "5", "-q"]) == 0
    assert sizes == [5, 5, 5, 5, 3]
    assert "added 23 documents" in capsys.readouterr().out


def test_add_interrupted_between_batches_exits_130(
    store_path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C after two batches: exit 130 and `interrupted; 10 documents of earlier
    batches were committed` (it was `error: ; 10 documents ...` and exit 1)."""
    path = _numbered_corpus(os.path.join(str(tmp_path), "n.jsonl"), 23)
    _spy_on_add_many(monkeypatch, interrupt_at=3)
    assert main(["add", store_path, path, "--batch-size", "5", "-q"]) == 130
    err = capsys.readouterr().err
    assert err.startswith("simstore: interrupted; 10 documents of earlier batches were committed")
    assert "error" not in err
    assert len(err.splitlines()) == 1
    with simstore.open(store_path, "r") as store:
        assert sorted(store.keys()) == [f"d{i:02d}" for i in range(10)]


def _sigint_as_at_a_terminal() -> None:
    """In a child before exec: SIGINT handled by default, even where the tests run
    with it ignored (started in the background), as the CLI leaves it ignored then."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_add_ctrl_c_while_reading_stdin(store_path: str) -> None:
    """A real SIGINT while `add --batch-size 5 -` waits for more input, after two batches
    were committed (they were not: documents were fingerprinted 20,000 at a time, so
    nothing was committed before that many arrived): exit 130, one line, no traceback."""
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "simstore.cli", "add", store_path, "-", "--batch-size", "5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_at_a_terminal,
    )
    try:
        assert process.stdin is not None
        for i in range(12):
            process.stdin.write(json.dumps({"id": f"d{i:02d}", "text": f"{BASE} number {i:02d}"}) + "\n")
        process.stdin.flush()
        deadline = time.monotonic() + 60
        committed = 0
        while committed < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
            try:
                with simstore.open(store_path, "r") as store:
                    committed = len(store)
            except simstore.SimstoreError:
                pass
        assert committed == 10, "the first two batches were not committed while the input stayed open"
        # A commit is visible before its add_many returns: the group commit's
        # flush follows it. Let that finish, so the signal meets the read of stdin.
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert err == (
        "simstore: interrupted; 10 documents of earlier batches were committed "
        "(re-running the same input is safe: an existing key is replaced)\n"
    )
    assert out == ""


@pytest.mark.parametrize("verb", ["add", "dedup"])
def test_binary_input_is_refused(
    verb: str, store_path: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .parquet file was read as text: with --on-error skip, exit 0 and lines of binary
    garbage kept. Now it is refused as a whole, whatever --on-error says, and so is any
    file with a NUL byte."""
    folder = str(tmp_path)
    parquet = os.path.join(folder, "part-0.parquet")
    with open(parquet, "wb") as handle:
        handle.write(b"PAR1\x15\x04\x15\x00" + b"binary\ncolumn chunk\n" * 50 + b"\x00\x00PAR1")
    nul = os.path.join(folder, "dump.txt")
    with open(nul, "wb") as handle:
        handle.write(f"{BASE}\n{OTHER}\n".encode() + b"half a record\x00\x01\x02\n" + THIRD.encode() + b"\n")
    out = os.path.join(folder, "kept.txt")
    target = [store_path] if verb == "add" else []
    where = [] if verb == "add" else ["-o", out]
    for path, expected in [
        (parquet, f"{parquet}: not a readable parquet file"),
        (nul, f"{nul}:3: a NUL byte: this is a binary file, not text"),
    ]:
        assert main([verb, *target, path, *where, "--on-error", "skip"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"simstore: error: {expected}"), err
        assert len(err.splitlines()) == 1
        assert not os.path.exists(out)
    assert not os.path.exists(store_path) or len(simstore.open(store_path, "r")) == 0


def test_text_that_starts_like_a_binary_format_is_text(
    store_path: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """Magic numbers only name a file whose first bytes are binary already: text that
    begins with "ORC" or "PAR1" is read as text."""
    path = os.path.join(str(tmp_path), "notes.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"ORCA {BASE}\nPAR1 {OTHER}\nBZh91AY&SY {THIRD}\n")
    assert main(["add", store_path, path, "-q"]) == 0
    assert "added 3 documents" in capsys.readouterr().out


def test_damaged_gzip_says_how_far_it_got(
    store_path: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """Truncated gzip is one message at the line after the last one read (line 1 when
    nothing could be read), as every bad input is FILE:LINE; it was a line-less message,
    and a traceback before that."""
    import gzip

    records = [{"id": f"d{i}", "text": f"{BASE} {i}"} for i in range(200)]
    data = gzip.compress("".join(json.dumps(record) + "\n" for record in records).encode())
    truncated = os.path.join(str(tmp_path), "cut.jsonl.gz")
    with open(truncated, "wb") as handle:
        handle.write(data[: len(data) // 2])
    assert main(["add", store_path, truncated, "--on-error", "skip"]) == 1
    err = capsys.readouterr().err
    found = re.fullmatch(rf"simstore: error: {re.escape(truncated)}:(\d+): damaged gzip data \(.*\)\n", err)
    assert found is not None, err
    assert 1 < int(found.group(1)) <= 200
    magic_only = os.path.join(str(tmp_path), "m.jsonl")
    with open(magic_only, "wb") as handle:
        handle.write(b"\x1f\x8b")
    assert main(["add", store_path, magic_only]) == 1
    assert capsys.readouterr().err.startswith(f"simstore: error: {magic_only}:1: damaged gzip data")


def test_gzip_on_stdin_is_decompressed(
    store_path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simstore add STORE - < dump.jsonl.gz` and `dedup -` recognise gzip by its magic bytes
    (so does a file whose name does not end in .gz)."""
    import gzip
    import io

    records = [{"id": "a", "text": BASE}, {"id": "b", "text": OTHER}, {"id": "a2", "text": BASE.upper()}]
    compressed = gzip.compress("".join(json.dumps(record) + "\n" for record in records).encode())

    def stdin() -> io.TextIOWrapper:
        return io.TextIOWrapper(io.BufferedReader(io.BytesIO(compressed)))  # type: ignore[arg-type]

    monkeypatch.setattr(sys, "stdin", stdin())
    assert main(["add", store_path, "-", "-q"]) == 0
    with simstore.open(store_path, "r") as store:
        assert sorted(store.keys()) == ["a", "a2", "b"]
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", stdin())
    assert main(["dedup", "-", "-o", "-", "-q"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ["a", "b"]
    unnamed = os.path.join(str(tmp_path), "dump.jsonl")
    with open(unnamed, "wb") as handle:
        handle.write(compressed)
    assert main(["dedup", unnamed, "-o", "-", "-q"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ["a", "b"]


def test_messages_speak_the_command_line(
    good_store: str, corpus_file: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """Errors name flags and verbs, not Python's `use mode 'c'`, `pass None` or `[Errno 2]`."""
    missing = os.path.join(str(tmp_path), "nope.simstore")
    for argv in (
        ["stats", missing],
        ["query", missing, "--fingerprint", "0"],
        ["remove", missing, "a"],
        ["dedup", corpus_file, "--against", missing, "-o", "-"],
    ):
        assert main(argv) == 1
        assert capsys.readouterr().err == (
            f"simstore: error: no simstore store at {missing} "
            f"(`simstore add {missing} FILE...` or `simstore import` creates one)\n"
        )
    assert main(["add", good_store, corpus_file, "-k", "4"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"simstore: error: {good_store} has k=3, not 4: leave out -k")
    assert main(["query", good_store, "--fingerprint", "0", "-k", "9"]) == 1
    assert capsys.readouterr().err.startswith(f"simstore: error: -k 9 is larger than the k=3 of {good_store}")
    with pytest.raises(SystemExit):
        main(["relayout", good_store, "--docs", "0"])
    assert "--docs: must be at least 1 document, got 0" in capsys.readouterr().err
    assert main(["query", good_store, "--file", os.path.join(str(tmp_path), "q.txt")]) == 1
    err = capsys.readouterr().err
    assert err == f"simstore: error: {tmp_path}/q.txt: No such file or directory\n"


def test_reading_bar_has_a_total_where_the_size_is_known(
    store_path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reading bar counts the input's bytes against its size (a total and an ETA),
    gzip by its compressed bytes; it had no total. From a pipe it counts documents."""
    import gzip
    import re

    from tqdm import tqdm

    folder = str(tmp_path)
    path = _numbered_corpus(os.path.join(folder, "n.jsonl"), 40)
    packed = os.path.join(folder, "n.jsonl.gz")
    with open(path, "rb") as source, gzip.open(packed, "wb") as target:
        target.write(source.read())
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)

    def reading_bar(err: str) -> str:
        return [part for part in err.replace("\r", "\n").splitlines() if part.startswith("reading")][-1]

    for verb in (["add", store_path], ["dedup", "-o", os.path.join(folder, "kept.jsonl")]):
        for source in (path, packed):
            assert main([*verb, source]) == 0
            bar = reading_bar(capsys.readouterr().err)
            assert bar.startswith("reading: 100%"), bar
            done = re.search(r"\| (\S+)/(\S+) \[", bar)
            assert done is not None, bar
            assert done.group(1) == done.group(2) == tqdm.format_sizeof(os.path.getsize(source), divisor=1024)
            assert "B/s, 40 docs]" in bar, bar


def test_import_reads_like_the_other_inputs(
    store_path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simstore export | gzip | simstore import STORE -` works; a line that is not UTF-8 is a
    bad line (it was a UnicodeDecodeError traceback); a binary file is refused."""
    import gzip
    import io

    exported = b'{"key": "a", "fingerprint": "ff"}\n{"key": "b", "fingerprint": "0f"}\n'
    monkeypatch.setattr(
        sys,
        "stdin",
        io.TextIOWrapper(io.BufferedReader(io.BytesIO(gzip.compress(exported)))),  # type: ignore[arg-type]
    )
    assert main(["import", store_path, "-", "-q"]) == 0
    assert "imported 2 documents" in capsys.readouterr().out
    latin = os.path.join(str(tmp_path), "latin.jsonl")
    with open(latin, "wb") as handle:
        handle.write(b'{"key": "caf\xe9", "fingerprint": "1"}\n{"key": "c", "fingerprint": "2"}\n')
    assert main(["import", store_path, latin]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"simstore: error: {latin}:1: not UTF-8")
    assert main(["import", store_path, latin, "--on-error", "skip", "-q"]) == 0
    with simstore.open(store_path, "r") as store:
        assert sorted(store.keys()) == ["a", "b", "c"]
    binary = os.path.join(str(tmp_path), "x.parquet")
    with open(binary, "wb") as handle:
        handle.write(b"PAR1\x00\x01" * 10)
    assert main(["import", store_path, binary, "--on-error", "skip"]) == 1
    assert "is a Parquet file" in capsys.readouterr().err


def test_interrupts_after_a_commit_say_what_was_committed(
    store_path: str,
    corpus_file: str,
    tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C in add's final merge, or in dedup --store's clustering or merge, comes after
    the documents were committed: exit 130 saying so (not `nothing ... was written`), and
    no merge is started on the way out."""
    merges: list[int] = []

    def interrupted(*args: object, **kwargs: object) -> object:
        merges.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(simstore.Store, "merge", interrupted)
    assert main(["add", store_path, corpus_file, "-q"]) == 130
    assert capsys.readouterr().err.startswith(
        "simstore: interrupted while merging; all 5 documents were committed"
    )
    assert merges == [1]  # close() did not start another
    monkeypatch.undo()
    other = os.path.join(str(tmp_path), "other.simstore")
    out = os.path.join(str(tmp_path), "kept.jsonl")
    monkeypatch.setattr(simstore.Store, "clusters", interrupted)
    assert main(["dedup", corpus_file, "--store", other, "-o", out, "-q"]) == 130
    assert capsys.readouterr().err.startswith(
        f"simstore: interrupted; the 5 documents read were added to {other}"
    )
    assert not os.path.exists(out)
    monkeypatch.undo()
    for path in (store_path, other):
        with simstore.open(path, "r") as store:
            assert len(store) == 5


def test_a_second_ctrl_c_exits_at_once(tmp_path: object) -> None:
    """A Ctrl-C while the first one's clean-up runs exits 130 at once, with one line and
    no traceback (it printed tracebacks)."""
    script = (
        "import os, signal, sys\n"
        "import simstore.cli as cli\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # even if the tests ignore it\n"
        "def run(args):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    finally:\n"
        "        os.kill(os.getpid(), signal.SIGINT)  # during the clean-up\n"
        "        print('clean-up went on', file=sys.stderr)\n"
        "    return 0\n"
        "cli.VERBS['stats'] = cli.Verb('', cli.configure_store_only, run)\n"
        "sys.exit(cli.main(['stats', 'x']))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 130
    assert completed.stderr == "simstore: interrupted again; exiting at once\n"


def test_dedup_reads_a_pipe_twice(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    """`dedup <(zcat dump.jsonl.gz) -o kept.jsonl`: dedup reads its inputs twice, and a pipe
    can be read once, so it kept nothing. A pipe is now copied aside first, like stdin, and
    sniffed like stdin (it was read as text for want of an extension)."""
    import contextlib
    import threading

    fifo = os.path.join(str(tmp_path), "pipe")
    os.mkfifo(fifo)
    records = [{"id": "a", "text": BASE}, {"id": "b", "text": OTHER}, {"id": "a2", "text": BASE.upper()}]

    done = threading.Event()

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as stream:
            stream.write("".join(json.dumps(record) + "\n" for record in records))
        # A second reader (the old code's second pass) gets an empty pipe, not a hang.
        while not done.wait(0.1):
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    out = os.path.join(str(tmp_path), "kept.jsonl")
    try:
        assert main(["dedup", fifo, "-o", out, "--json", "-q"]) == 0
    finally:
        done.set()
        if writer.is_alive():
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(10)
    summary = json.loads(capsys.readouterr().out)
    assert (summary["documents"], summary["kept"]) == (3, 2)
    assert read_jsonl(out) == records[:2]


def test_dedup_format_beats_the_stdin_sniff(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dedup - --format csv` read stdin as text (the sniff won), header line included."""
    import io

    data = f'id,text\n1,"{OTHER}"\n2,"{THIRD}"\n3,"{OTHER.upper()}"\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert main(["dedup", "-", "--format", "csv", "-o", "-", "--json", "-q"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(err)["documents"] == 3
    assert out == f'id,text\n1,"{OTHER}"\n2,{THIRD}\n'


def test_options_and_positionals_in_any_order(good_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`query STORE -k 2 TEXT` said `unrecognized arguments: TEXT` (STORE alone had filled
    both positionals before the option)."""
    assert main(["query", good_store, "-k", "2", "--json", BASE]) == 0
    assert json.loads(capsys.readouterr().out)["matches"] == []
    assert main(["query", good_store, "--fingerprint", "2", "-k", "1", "--json"]) == 0
    keys = [match["key"] for match in json.loads(capsys.readouterr().out)["matches"]]
    assert keys == ["b", "c"]  # fingerprints 2 and 3; 1 is 2 bits away


def test_an_ignored_sigint_stays_ignored() -> None:
    """A command started with SIGINT ignored (a background job of a script) keeps it
    ignored: the Ctrl-C handler of the command line is not installed over it."""
    script = (
        "import os, signal, sys\n"
        "import simstore.cli as cli\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "def run(args):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return 0\n"
        "cli.VERBS['stats'] = cli.Verb('', cli.configure_store_only, run)\n"
        "sys.exit(cli.main(['stats', 'x']))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (completed.returncode, completed.stderr) == (0, "")
