"""The documentation site: mkdocs-material builds docs/ in strict mode (a broken link, a missing page
or an unrecognised link fails), and the built pages fetch nothing from the internet at view time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTERNAL_ASSET = re.compile(
    r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//", re.IGNORECASE
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_every_page_of_docs_is_built(site: Path) -> None:
    pages = sorted(p.relative_to(ROOT / "docs").with_suffix(".html") for p in (ROOT / "docs").rglob("*.md"))
    assert pages, "docs/ has no pages"
    pages += [Path("reference/settings.html"), Path("reference/commands.html"),
              Path("reference/messages.html"), Path("benchmark-plots.html")]  # tools/docs/hooks.py
    missing = [str(p) for p in pages if not (site / p).is_file()]
    assert not missing, missing


def test_built_pages_fetch_nothing_from_the_internet(site: Path) -> None:
    offenders = {
        str(page.relative_to(site)): EXTERNAL_ASSET.findall(page.read_text(encoding="utf-8"))
        for page in site.rglob("*.html")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, offenders
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, page


def test_readme_is_a_door_not_a_manual() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 200, len(readme)


def test_the_benchmark_plots_page_draws_the_committed_numbers(site: Path) -> None:
    import json

    from tools.docs import plots

    page = (site / "benchmark-plots.html").read_text(encoding="utf-8")
    suite = json.loads(plots.SUITE.read_text(encoding="utf-8"))
    for run in suite["runs"]:
        for stack in ("baseline", "exchange", "full"):
            assert f'data-value="{run[stack]["orders_per_s"]:g}"' in page, (run["name"], stack)
    hops = json.loads(plots.HOPS.read_text(encoding="utf-8"))
    stacks = sum(1 for run in suite["runs"] for v in run.values()
                 if isinstance(v, dict) and "orders_per_s" in v)
    assert page.count("<rect ") == stacks + len(hops["hops"])


def test_a_bar_is_as_long_as_its_value_over_the_largest() -> None:
    import re

    from tools.docs import plots

    svg = plots.bars("t", "u", [("a", 50.0), ("b", 100.0), ("c", 25.0)])
    widths = [float(w) for w in re.findall(r'<rect [^>]*width="([\d.]+)"', svg)]
    assert widths == [plots.BAR_W / 2, plots.BAR_W, plots.BAR_W / 4]
    assert ">50.0 u<" in svg and "<title>t</title>" in svg
