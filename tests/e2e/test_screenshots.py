"""`make screenshots` (python -m tools.screenshots) against a fresh stack of its own: the lab page's
PNG from chromium shows a logged-on session, the terminal client's SVG from Textual its screen."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway_stack import ROOT
from tools import screenshots

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]  # a browser: one at a time

if not Path(screenshots.CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make browser installs it)", allow_module_level=True)


def test_screenshots_are_taken_from_a_running_stack(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tools.screenshots", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    png = (tmp_path / screenshots.PAGE_FILE).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk: the viewport it was taken at
    assert (width, height) == (1440, 1000)
    svg = (tmp_path / screenshots.TERMINAL_FILE).read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<svg")
    text = svg.replace("&#160;", " ")
    assert "CLIENT16" in text and "NewOrderSingle" in text and "ACORN.LAB" in text
