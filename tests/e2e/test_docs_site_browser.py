"""The documentation site in a real browser: built with ``mkdocs build --strict``, served over HTTP on
a free loopback port, every page opened in Debian's chromium. No page logs a console error or throws,
every internal link resolves (the page and its anchor), and nothing is fetched from anywhere but the
site itself: the site works offline (mkdocs.yml: `font: false`, no CDN)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

from tests.e2e.webstack import CHROMIUM, CHROMIUM_ARGS
from tests.gateway_stack import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]  # a browser: one at a time

if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make browser installs it)", allow_module_level=True)

from playwright.sync_api import Request, sync_playwright  # noqa: E402


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-d", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=180,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stdout + built.stderr
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def anchors_of(html: str) -> set[str]:
    import re

    return set(re.findall(r"\bid=\"([^\"]+)\"", html))


def test_every_page_opens_without_errors_and_every_internal_link_resolves(site: Path, served: str) -> None:
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    assert "index.html" in pages and "course/index.html" in pages, pages
    errors: list[str] = []
    outside: list[str] = []
    broken: list[str] = []
    links_checked = 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()

            def offline(route: object, request: Request) -> None:
                if request.url.startswith(served):
                    route.continue_()  # type: ignore[attr-defined]
                else:  # the site must not need it: refused, and counted
                    outside.append(request.url)
                    route.abort()  # type: ignore[attr-defined]
            context.route("**/*", offline)
            page = context.new_page()
            page.on("console", lambda m: errors.append(f"{page.url}: console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
            for name in pages:
                response = page.goto(f"{served}/{name}", wait_until="load")
                assert response is not None and response.status == 200, name
                hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
                for href in hrefs:
                    url, fragment = urldefrag(href)
                    if not url.startswith(served):
                        continue  # a link out (GitHub, a spec) is the reader's to follow, not a fetch
                    links_checked += 1
                    path = unquote(urlparse(url).path).lstrip("/") or "index.html"
                    target = site / path
                    if target.is_dir():
                        target = target / "index.html"
                    if not target.is_file():
                        broken.append(f"{name}: {href}")
                    elif fragment and target.suffix == ".html" and \
                            unquote(fragment) not in anchors_of(target.read_text(encoding="utf-8")):
                        broken.append(f"{name}: {href} (no such anchor)")
        finally:
            browser.close()
    assert not errors, errors
    assert not outside, sorted(set(outside))
    assert not broken, broken
    assert links_checked > len(pages), links_checked  # every page links at least the navigation
