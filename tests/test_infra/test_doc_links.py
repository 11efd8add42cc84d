"""Every relative link of README.md and docs/*.md resolves (issue 44: the README is the front
door and the rest lives in docs/, so a link that breaks loses a reader): the file or folder
it names exists, and its ``#anchor`` is a heading of that Markdown file (GitHub's slugs:
lower case, punctuation dropped but ``-`` and ``_``, each space a ``-``). Links to web
addresses are not followed. And the README stays a front door: at most 200 lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: ``[text](target)`` and ``![alt](target)``, outside code blocks and code spans
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: ``## Both cores: `--instances N` `` -> ``both-cores---instances-n``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of the headings of the Markdown file ``path`` (a repeated heading gets
    ``-1``, ``-2``... as on GitHub)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(path: Path) -> list[str]:
    """The relative links of ``path`` that do not resolve, each with the reason."""
    bad = []
    for target in _LINK.findall(_prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no {_shown(dest)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {_shown(dest)}")
    return bad


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_check_finds_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Both cores: `--instances N`\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#both-cores---instances-n) [self](#page) [web](https://example.com)\n"
                    "[gone](missing.md) [no anchor](other.md#nope) `[code](missing.md)`\n"
                    "```\n[fenced](missing.md)\n```\n![img](img/none.png)\n")
    assert broken_links(page) == [f"missing.md: no {tmp_path / 'missing.md'}",
                                  f"other.md#nope: no heading #nope in {tmp_path / 'other.md'}",
                                  f"img/none.png: no {tmp_path / 'img' / 'none.png'}"]


def test_every_doc_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in DOCS[1:] if f"(docs/{p.name})" not in readme]
    assert unlinked == [], f"docs/ pages the README's table does not list: {unlinked}"


def test_the_readme_is_a_front_door() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 200, f"README.md has {lines} lines: move the details to docs/ and link them"
