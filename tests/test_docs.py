"""The docs a user reads hold together: docs/contract.md names the failure behind every check the
registry holds, and no citation or link in the project points at a document or a section that is
not there (a cited file renamed or removed, a heading reworded, leaves none behind)."""

from __future__ import annotations

import re
from pathlib import Path

from netcheck.rules.registry import CHECKS

REPO = Path(__file__).parents[1]
CONTRACT = REPO / "docs" / "contract.md"
# What cites the docs: the package, its tests, benchmarks and scripts, and the docs themselves.
CITING = ("netcheck", "tests", "benchmarks", "scripts", "docs")


def citing_files() -> list[Path]:
    files = [REPO / "README.md", REPO / "Makefile"]
    for top in CITING:
        files += [p for p in sorted((REPO / top).rglob("*"))
                  if p.suffix in (".py", ".md", ".sh", ".yml", ".yaml") and "__pycache__" not in p.parts]
    return files


def headings(doc: Path) -> list[str]:
    return re.findall(r"^#+ (.+)$", doc.read_text(), re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_contract_names_the_failure_behind_every_check_in_the_registrys_order():
    text = CONTRACT.read_text()
    table = text[text.index("| check | the failure behind it |"):]
    table = table[:table.index("\n\n")]
    assert re.findall(r"^\| `([a-z0-9_.]+)` \|", table, re.M) == [c.id for c in CHECKS]


def test_every_docs_file_the_project_names_exists():
    named = {(p.relative_to(REPO), m) for p in citing_files()
             for m in re.findall(r"\bdocs/[\w.-]+\.md\b", p.read_text(errors="replace"))}
    assert not {(str(p), m) for p, m in named if not (REPO / m).is_file()}


def test_every_section_a_citation_names_is_a_heading_of_that_document():
    """`(docs/contract.md, "Promises")`, `(README.md, "Exit codes")`: the quoted section exists."""
    docs = {"docs/contract.md": CONTRACT, "README.md": REPO / "README.md"}
    stale = []
    for p in citing_files():
        for doc, section in re.findall(r"\b(docs/contract\.md|README\.md),\s+\"([^\"]+)\"", p.read_text()):
            if section not in headings(docs[doc]):
                stale.append((str(p.relative_to(REPO)), doc, section))
    assert not stale


def test_every_link_between_the_docs_lands_on_a_file_and_a_heading():
    broken = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target, fragment in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", doc.read_text()):
            if target.startswith(("http:", "https:", "mailto:")):
                continue
            linked = (doc.parent / target).resolve() if target else doc
            if not linked.exists():
                broken.append((doc.name, target))
            elif fragment and linked.suffix == ".md" and fragment not in map(anchor, headings(linked)):
                broken.append((doc.name, f"{target}#{fragment}"))
    assert not broken
