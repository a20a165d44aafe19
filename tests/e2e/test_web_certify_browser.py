"""The certification page in a real browser: pick a CompID, press Start, point a client (QuickFIX with
three known defects, tests/certify_client.py --broken) where the page says, and read the report:
pass, fail and the wire of every failed check, named."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shared.redis_server import free_port
from tests.e2e.webstack import CHROMIUM, CHROMIUM_ARGS, ROOT, web_process

pytestmark = [pytest.mark.xdist_group("serial"), pytest.mark.e2e, pytest.mark.timeout(180)]

if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make browser installs it)", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402


def test_start_a_run_on_the_page_and_read_its_report(redis_url: str) -> None:
    env = {"FIXLAB_CERTIFY_PORTS": str(free_port()), "FIXLAB_CERTIFY_LOGON_TIMEOUT": "60"}
    with web_process(redis_url, env=env) as web, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        client: subprocess.Popen[bytes] | None = None
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{web.url}/certify")
            expect(page.locator("#comp option")).to_have_count(8)
            # The FIX version: 4.4 unless another is chosen (the run's is the one chosen at its start).
            expect(page.locator("#version option")).to_have_count(3)
            expect(page.locator("#version")).to_have_value("4.4")
            page.select_option("#comp", "CERT02")
            page.click("#start")
            message = page.locator("#message")
            expect(message).to_contain_text("Point your FIX client at 127.0.0.1:", timeout=30_000)
            expect(message).to_contain_text("as SenderCompID CERT02, TargetCompID FIXLAB")
            found = re.search(r"127\.0\.0\.1:(\d+)", message.inner_text())
            assert found
            expect(page.locator("#comp option[value=CERT02]")).to_be_disabled()
            client = subprocess.Popen([sys.executable, "-m", "tests.certify_client", "--comp", "CERT02",
                                       "--port", found.group(1), "--broken"], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # The script's instructions show as they come.
            expect(page.locator("#lines")).to_contain_text("instruction to the client: order buy",
                                                           timeout=60_000)
            expect(page.locator("#summary")).to_contain_text("FIX 4.4: 12 passed, 3 failed, 0 skipped",
                                                             timeout=120_000)
            expect(page.locator("#title")).to_have_text("CERT02: failed")
            expect(page.locator("#check-partial-fill td").first).to_have_text("PASS")
            failed = page.locator("#check-test-request")
            expect(failed.locator("td").first).to_have_text("FAIL")
            expect(failed.locator("pre.wire")).to_contain_text("Heartbeat 35=0")
            expect(page.locator("#check-cancel-reject pre.wire")).to_contain_text("OrigClOrdID(41)=")
            expect(page.locator("#html")).to_have_attribute("href", "/api/certify/CERT02/report.html")
            expect(page.locator("#comp option[value=CERT02]")).to_be_enabled()
            assert errors == []
        finally:
            if client is not None:
                client.kill()
                client.wait(10)
            browser.close()
