"""The README and docs/: the options page is the settings record's, every page is linked from the
README, every relative link lands on a file, and the README stays one page."""

from __future__ import annotations

import re
from pathlib import Path

from localspec.config.options_page import page
from localspec.config.settings import FIELDS

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_options_page_is_generated_from_the_settings_record():
    written = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert written == page(), (
        "docs/options.md is stale: python -m localspec.config.options_page > docs/options.md"
    )
    for about in FIELDS.values():
        assert f"`{about.flag}`" in written


def test_the_readme_is_one_page_that_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 160
    linked = {Path(target).name for target in LINK.findall(readme)}
    assert {p.name for p in (ROOT / "docs").glob("*.md")} <= linked


def test_every_relative_link_lands_on_a_file():
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which is not there"
