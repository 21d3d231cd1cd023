"""The documentation: a README that stays a landing page, and a docs site that builds.

Issue 24: the README is at most 200 lines; everything else is a page of the MkDocs site
(``mkdocs.yml``), and ``mkdocs build --strict`` passes, so a broken link, a page missing
from the navigation or a bad anchor fails here. The commands of every page are run by
``tests/test_docs_commands.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

README_MAX_LINES = 200


def _nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_the_readme_is_a_landing_page_of_at_most_200_lines() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_every_page_of_docs_is_in_the_site_navigation_and_every_readme_link_resolves() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = set(_nav_pages(config["nav"]))
    on_disk = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert on_disk == pages, (f"not in nav: {sorted(on_disk - pages)}; "
                              f"missing: {sorted(pages - on_disk)}")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).is_file(), f"README links to {target}, which does not exist"


def test_the_site_lists_each_page_once_and_stands_on_its_own() -> None:
    """Issue 40 item 7: "The model gateway" was listed twice; the home page sent readers to
    the README, which is not on the site; the example agent cited a SPEC file the
    repository does not have."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = _nav_pages(config["nav"])
    assert len(pages) == len(set(pages)), sorted(p for p in pages if pages.count(p) > 1)
    home = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    assert "README" not in home and "make demo" in home
    agent = (REPO / "docs" / "examples" / "my_agent.py").read_text(encoding="utf-8")
    assert "SPEC" not in agent


@pytest.mark.slow
def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists() and shutil.which("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip package mkdocs-material, in the test extra)")
    command = [str(mkdocs) if mkdocs.exists() else "mkdocs", "build", "--strict",
               "--site-dir", str(tmp_path / "site")]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Science Prediction Universe" in index
    assert (tmp_path / "site" / "security" / "index.html").is_file()


def test_every_output_file_of_stats_and_analyze_is_listed_in_the_docs() -> None:
    """The docs' tables of outputs (docs/statistics.md, docs/trajectories.md "Every file")
    name each file the registered analyses declare, so a new analysis cannot land
    unlisted (issue 26: the table of outputs lists them)."""
    import spu.analysis.builtin  # noqa: F401 - registers the trajectory analyses
    from spu.analysis.trajectory_analysis import BUILT_IN_RULES, TRAJECTORY_ANALYSES
    from spu.stats.analysis import files
    from spu.stats.registry import discover

    discover()

    def listed(page: str) -> str:
        text = (REPO / "docs" / page).read_text(encoding="utf-8")
        return text.split("\n## Every file\n", 1)[1]

    stats = listed("statistics.md")
    missing = [f for f in files() if f"`{f}`" not in stats]
    assert not missing, f"docs/statistics.md's Every file lacks {missing}"
    analyze = listed("trajectories.md")
    declared = {f for entry in TRAJECTORY_ANALYSES for f in entry.files} | set(BUILT_IN_RULES)
    missing = sorted(f for f in declared | {"calls.csv"} if f"`{f}`" not in analyze)
    assert not missing, f"docs/trajectories.md's Every file lacks {missing}"
