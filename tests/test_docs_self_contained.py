"""The repository explains itself: no file cites a document that is not in it, every relative
link in README.md and docs/ resolves (file and #anchor), and every `docs/x.md, "Section"`
reference in the sources names a doc and a heading that exist.

The rules aclgate relies on used to be cited from specification files kept outside the
repository (`§` sections of them); a reader of the repository could not follow those. They
are explained in docs/ now, and this test keeps it that way.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: a path that leaves the repository through the workplace's shared folder, or a section sign
#: (how notes kept outside the repository used to be cited); a citation of either is a dead end
OUTSIDE = re.compile(r"\.\./shared/|§")
#: a Markdown document named in a file: it must be one of the repository's own
MD_MENTION = re.compile(r"(?<![\w/.-])(?:[\w.-]+/)*([\w-]+\.md)\b")
#: a section sign is fine after a public standard: "RFC 6749 §4.4"
PUBLIC_SECTION = re.compile(r"RFC ?\d+,? §")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".ini", ".txt", ".yml", ".yaml", ".sh", ".pyi"}
TEXT_NAMES = {"Makefile", "run"}
#: raw benchmark output (numbers and command lines) and fetched third-party files
SKIP_PREFIXES = (".venv/", "bench/results/", "tests/kafka/lib/", ".git/")
THIS = Path(__file__).resolve().relative_to(REPO).as_posix()


def tracked_files() -> tuple[str, ...]:
    """The tracked files this test reads (raw benchmark output and fetched files left out)."""
    return tuple(n for n in all_tracked() if not n.startswith(SKIP_PREFIXES))


@cache
def all_tracked() -> tuple[str, ...]:
    """The files git tracks (work in progress is checked once it is added); a plain walk
    where there is no git."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [p.relative_to(REPO).as_posix() for p in REPO.rglob("*") if p.is_file()]
    return tuple(sorted(names))


def text_files() -> list[str]:
    return [
        n
        for n in tracked_files()
        if (Path(n).suffix in TEXT_SUFFIXES or Path(n).name in TEXT_NAMES)
        and n != THIS
        and (REPO / n).is_file()
    ]


def read(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8", errors="replace")


def test_no_citation_of_documents_outside_the_repository():
    hits = []
    for name in text_files():
        for number, line in enumerate(read(name).splitlines(), 1):
            if OUTSIDE.search(PUBLIC_SECTION.sub("", line)):
                hits.append(f"{name}:{number}: {line.strip()}")
    assert not hits, "cite docs/ instead (explain the rule there):\n" + "\n".join(hits)


def unknown_documents(text: str, known: set[str]) -> list[str]:
    return [name for name in MD_MENTION.findall(text) if name not in known]


def test_every_markdown_document_named_is_in_the_repository():
    """A `something.md` mentioned anywhere must exist here: the notes the first version was
    built from are not part of the repository, so naming them leads nowhere."""
    known = {Path(n).name for n in all_tracked() if n.endswith(".md")}
    hits = [
        f"{name}: {doc}" for name in text_files() for doc in unknown_documents(read(name), known)
    ]
    assert not hits, "name a document of the repository (docs/):\n" + "\n".join(sorted(set(hits)))


# --------------------------------------------------------------------------- links


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@cache
def headings(path: Path) -> tuple[str, ...]:
    return tuple(m.group(1) for m in HEADING.finditer(FENCE.sub("", path.read_text())))


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(path):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def markdown_docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def broken_links(doc: Path, root: Path = REPO) -> list[str]:
    """Relative links of a Markdown file whose file or #anchor does not exist under root."""
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http(s), mailto: not checked here
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif not dest.is_relative_to(root.resolve()):
            broken.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("doc", markdown_docs(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(doc: Path):
    broken = broken_links(doc)
    assert not broken, f"{doc.relative_to(REPO)}:\n" + "\n".join(broken)


# ------------------------------------------------- `docs/x.md, "Section"` in the sources

DOC_MENTION = re.compile(r"\bdocs/([\w.-]+\.md)\b")
SECTION_MENTION = re.compile(r"\bdocs/([\w.-]+\.md)(?:'s|,)\s+\"([^\"]+)\"")
#: a line break inside a comment or docstring, with the next line's comment marker
CONTINUATION = re.compile(r"\s*\n\s*(?:#:?\s*)?")


def test_doc_and_section_references_exist():
    missing = []
    for name in text_files():
        text = CONTINUATION.sub(" ", read(name))
        for doc in set(DOC_MENTION.findall(text)):
            if not (REPO / "docs" / doc).is_file():
                missing.append(f"{name}: docs/{doc} does not exist")
        for doc, section in SECTION_MENTION.findall(text):
            path = REPO / "docs" / doc
            if path.is_file() and not any(h.startswith(section) for h in headings(path)):
                missing.append(f'{name}: docs/{doc} has no heading "{section}"')
    assert not missing, "\n".join(sorted(set(missing)))


def test_the_checks_can_fail(tmp_path: Path):
    """The patterns and the anchor rules catch what they are meant to catch."""
    assert OUTSIDE.search("see ../shared/notes/rules.md")
    assert OUTSIDE.search("(the notes, §2.9)")
    assert not OUTSIDE.search("docs/audit.md#audit-events-schema-version-1")
    assert unknown_documents("see notes/rules.md and docs/authz.md", {"authz.md"}) == ["rules.md"]
    assert not OUTSIDE.search(PUBLIC_SECTION.sub("", "a client-credentials grant (RFC 6749 §4.4)"))
    assert OUTSIDE.search(PUBLIC_SECTION.sub("", "RFC 6749 §4.4, and §3.9"))
    assert slug("The literal `*` ACL: a deliberate difference from KRaft") == (
        "the-literal--acl-a-deliberate-difference-from-kraft"
    )
    comment = '#: by version (docs/design.md, "Fetch\n#: sessions are made sessionless")'
    assert SECTION_MENTION.findall(CONTINUATION.sub(" ", comment)) == [
        ("design.md", "Fetch sessions are made sessionless")
    ]
    (tmp_path / "outside.md").write_text("# Elsewhere\n")
    doc = tmp_path / "repo" / "docs" / "x.md"
    doc.parent.mkdir(parents=True)
    doc.write_text(
        "# Title\n\n## A `b`: c\n\n```\n# not a heading\n```\n"
        "[ok](#a-b-c) [ok](x.md#title) [web](https://example.org/#x)\n"
        "[gone](y.md) [bad anchor](#not-a-heading) [outside](../../outside.md)\n"
    )
    assert anchors(doc) == {"title", "a-b-c"}
    assert broken_links(doc, root=tmp_path / "repo") == [
        "y.md: no such file",
        "#not-a-heading: no heading with anchor #not-a-heading in x.md",
        "../../outside.md: outside the repository",
    ]
