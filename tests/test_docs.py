"""The docs a newcomer reads are true to the code: the reference pages (settings, commands, worksheet
functions) are what ``docs/generate.py`` writes from it, every code name the design pages give exists,
the README stays short and links each user's and door's page, and every page it links exists."""

from __future__ import annotations

import importlib.util
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


def _generate():
    spec = importlib.util.spec_from_file_location("generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_design_page_naming_code_that_is_not_there_is_caught():
    generate = _generate()
    text = ("The entry is sealed (`cache.seal`), a fate (`Batcher.load`), a `reading.document.Document`,\n"
            "`xladdin.screen(df)`, a server (`conftest.MockServer`); not names: `config.toml`, `cache.db`,\n"
            "`batcher.py`, `xladdin screen`, `max_tokens`, `0.5`, `bench/common.write_run`, `模型.未作答`.\n"
            "Gone: `cache.no_such_name`, `Batcher.no_such_method`, `no_such_module.seal`,\n"
            "`reading.no_such_module.Document`, `conftest.NoSuchServer`.\n"
            "```\n`cache.inside_a_fence`\n```\n")
    assert generate.unresolved_references(text, "page.md") == [
        "page.md:4: `cache.no_such_name`: no_such_name is not in xladdin.core.cache",
        "page.md:4: `Batcher.no_such_method`: no_such_method is not in Batcher",
        "page.md:4: `no_such_module.seal`: no_such_module is no module or class of xladdin",
        "page.md:5: `reading.no_such_module.Document`: no_such_module is not in xladdin.reading",
        "page.md:5: `conftest.NoSuchServer`: NoSuchServer is not in conftest"]
    fence = "```text\n" + "line\n" * generate.MAX_FENCE_LINES + "```\n"
    assert generate.long_fences("# page\n\n" + fence, "page.md") == []
    assert generate.long_fences("# page\n\n" + fence.replace("```\n", "line\n```\n"), "page.md") == [
        f"page.md:3: a fenced block of {generate.MAX_FENCE_LINES + 1} lines (at most {generate.MAX_FENCE_LINES})"]


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


def test_the_suite_s_count_and_time_are_said_in_one_place():
    """The README and docs/testing.md give no count of tests nor a time for the suite: they point to the one
    section ``python -m bench tests`` writes, which reads pytest's own summary line."""
    from bench.tests import summary

    for page in ("README.md", "docs/testing.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        said = re.findall(r"\d[\d,]* tests\b|\d+ min(?:utes)?\b[^.]*?(?:suite|tests)|tests?[^.]{0,40}\b\d+ min", text)
        assert said == [], (page, said)
        assert "§18" in text or "section 18" in text, page
    line = "===== 969 passed, 3 skipped, 13 warnings in 779.31s (0:12:59) ====="
    assert summary("...\n" + line) == {"passed": 969, "skipped": 3, "failed": 0, "seconds": 779, "tests": 972}
    assert summary("1 failed, 10 passed in 2.00s")["failed"] == 1
