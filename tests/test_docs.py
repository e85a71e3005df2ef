"""The docs a newcomer reads are true to the code: the reference pages (settings, commands, worksheet
functions) are what ``docs/generate.py`` writes from it, the README stays short and links each user's
and door's page, and every page it links exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_README_BYTES = 12 * 1024


def test_the_reference_pages_match_the_code():
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "generate.py"), "--check"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_readme_is_short_and_every_page_it_links_exists():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= MAX_README_BYTES
    links = re.findall(r"\]\(((?:docs/|DESIGN|BENCH)[^)#]*)", readme)
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).is_file(), link
    for page in sorted((ROOT / "docs").glob("*.md")):  # and the pages' own links to each other
        for link in re.findall(r"\]\(([\w./-]+\.md)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).resolve().is_file(), (page.name, link)


def test_design_links_a_page_per_layer_and_each_page_names_modules_that_exist():
    """DESIGN.md's picture links one page per layer (docs/design/); a module a page heads a section with
    is a file or folder of the package (a page about a module gone is caught here)."""
    design = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    pages = re.findall(r"\]\((docs/design/[\w-]+\.md)\)", design)
    assert len(pages) == len(list((ROOT / "docs" / "design").glob("*.md"))) == 8
    package = ROOT / "xladdin"
    for page in pages:
        text = (ROOT / page).read_text(encoding="utf-8")
        assert "](../../DESIGN.md)" in text, page
        for heading in re.findall(r"^## (.+)$", text, re.M):
            for name in re.findall(r"[a-z_]+(?:\.py|/)?", heading):
                found = [p for p in package.rglob(name.rstrip("/") + ("" if name.endswith((".py", "/")) else ".py"))]
                found += [p for p in (ROOT / name.rstrip("/"),) if name.endswith("/") and p.is_dir()]
                assert found, (page, heading, name)
