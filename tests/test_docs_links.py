"""The docs hold together: every relative link in README.md and docs/*.md leads to a file that
exists and, with an #anchor, to a heading of that page (GitHub's slugs); the README stays short
and keeps the test command CI runs. Reads text only: no model, no import of the package."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
TEST_LINE = "pip install -e '.[test]' && python3 -m pytest -q     # set up and pass the tests"
README_MAX_LINES = 300

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1)(?:[^\n]|\n(?!\n)))+?\1")  # within a paragraph
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(text: str):
    """(line number, line) for each line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield number, line
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not line.strip()[len(m.group(1)):].strip():  # a closing fence carries no info string
            fence = None


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lowercased, every character but letters, digits,
    spaces, '-' and '_' dropped (backticks and other punctuation included), spaces made '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page's headings give, with '-1', '-2', ... for repeated headings."""
    seen: Counter[str] = Counter()
    out = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        out.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return out


def links(page: Path):
    """(line number, target) of each markdown link outside code (fenced blocks, inline spans);
    a link's text may run over a line break, as a wrapped paragraph has it."""
    text = page.read_text(encoding="utf-8")
    prose = [""] * len(text.splitlines())
    for number, line in prose_lines(text):
        prose[number - 1] = line
    prose_text = "\n".join(prose)  # fenced blocks blanked, line numbers kept
    spans = [m.span() for m in CODE_SPAN.finditer(prose_text)]
    for m in LINK.finditer(prose_text):
        if any(a <= m.start() < b for a, b in spans):
            continue
        yield prose_text.count("\n", 0, m.start()) + 1, m.group(2)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for number, target in links(page):
        where = f"{page.relative_to(root)}:{number}: ({target})"
        if not target:
            problems.append(f"{where} an empty link")
            continue
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            problems.append(f"{where} no such file: {dest}")
            continue
        if anchor:
            if dest.suffix != ".md":
                problems.append(f"{where} an anchor into a file that is not markdown")
            elif anchor not in anchors(dest):
                problems.append(f"{where} no heading of {dest.name} has the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_lead_somewhere(page):
    problems = broken_links(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES[1:], ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_page_starts_with_a_title_and_is_linked_from_the_readme(page):
    first = page.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# "), f"{page.name} does not start with a '# Title' line"
    assert f"docs/{page.name}" in {target.partition("#")[0] for _, target in links(README)}, \
        f"README.md does not link docs/{page.name}"


def test_readme_is_short_and_keeps_the_test_command():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, more than {README_MAX_LINES}"
    assert TEST_LINE in lines


def test_slugs_follow_github():
    assert slug("Many prompts at once: `run --batch`") == "many-prompts-at-once-run---batch"
    assert slug("Losslessness, and what llama.cpp really gives") == "losslessness-and-what-llamacpp-really-gives"
    assert slug("The registry: `pairs.toml`") == "the-registry-pairstoml"
    assert slug("snake_case and CAPS") == "snake_case-and-caps"


def test_the_check_finds_a_broken_link(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Same\n\n## Same\n\n[ok](b.md#b-title) [ok](#same-1)\n"
                                   "```sh\n[skipped](nowhere.md)\n```\n`[skipped](nowhere.md)` [bad](#same-2)\n"
                                   "[gone](missing.md) [ext](https://example.com/x.md) [two\nlines](#nowhere)\n")
    (tmp_path / "b.md").write_text("# B title\n")
    problems = broken_links(tmp_path / "a.md", root=tmp_path)
    assert len(problems) == 3, problems
    assert "#same-2" in problems[0] and "missing.md" in problems[1] and "#nowhere" in problems[2]


if __name__ == "__main__":  # python3 tests/test_docs_links.py: the same checks without pytest
    found = [p for page in PAGES for p in broken_links(page)]
    n = len(README.read_text(encoding="utf-8").splitlines())
    if n > README_MAX_LINES:
        found.append(f"README.md: {n} lines, more than {README_MAX_LINES}")
    if TEST_LINE not in README.read_text(encoding="utf-8").splitlines():
        found.append("README.md: the test command line is missing")
    print("\n".join(found) or f"ok: {len(PAGES)} pages")
    sys.exit(1 if found else 0)
