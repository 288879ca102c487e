"""The README and the guides: their links resolve, they stay short where the issue says so, and they say
what is true today rather than number the sessions or rounds that got it there."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
NUMBERED = re.compile(
    r"\b(rounds?|sessions?)\s+(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty)\b"
    r"|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
    r"fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth)(?:'s)?\s+(session|round)s?\b",
    re.IGNORECASE,
)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    found = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_every_link_between_the_documents_resolves() -> None:
    broken = []
    for doc in documents():
        text = doc.read_text()
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # http(s), mailto: not ours to check
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_checks_see_links_and_headings() -> None:
    # A changed pattern would make the check above pass on nothing.
    readme = (ROOT / "README.md").read_text()
    assert "docs/guide/deployment.md" in LINK.findall(readme)
    assert "live-pages-conditional-polling" in anchors((ROOT / "docs" / "guide" / "speed.md").read_text())


def test_the_readme_and_the_speed_note_stay_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
    assert len((ROOT / "docs" / "guide" / "speed.md").read_text().splitlines()) <= 300


def test_no_document_numbers_sessions_or_rounds() -> None:
    found = [
        f"{doc.relative_to(ROOT)}: {m.group(0)}"
        for doc in documents()
        for m in NUMBERED.finditer(doc.read_text())
    ]
    assert found == []
    assert NUMBERED.search("as the eleventh session measured") and NUMBERED.search("Round sixteen")
