"""Fault 5 of issue 13: the web service is killed (-9) and started again on the same port, in a real
browser (Debian's chromium). The page reconnects by itself and follows its FIX session again (what
happened meanwhile arrives on its wire, nothing twice), or is told clearly that the session ended
while it was away. A FIX client trading directly with the gateway never notices.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from shared import streams
from shared.bus import publish
from shared.clock import now_ns
from shared.redis_server import free_port
from shared.schema import LabCommand, LabState, decode_batch
from tests.e2e.webstack import CHROMIUM, CHROMIUM_ARGS
from tests.gateway_stack import FixClient, Stack, gateway_stack, matcher_available, order, stop_process
from tests.helpers import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]

ROOT = Path(__file__).resolve().parent.parent.parent

if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make browser installs it)", allow_module_level=True)
if not matcher_available():
    pytest.skip("services.matcher is not in this checkout yet", allow_module_level=True)

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402


@dataclass
class Web:
    """``python -m services.web`` on a fixed port, killed and started again at will."""

    redis_url: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "REDIS_URL": self.redis_url, "FIXLAB_WEB_PORT": str(self.port),
               "FIXLAB_WEB_HOST": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "services.web"], env=env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            # As everywhere in tests/: a web that outlives its SIGTERM is killed, its stacks logged.
            stop_process(self.proc, timeout_s=20)


@dataclass
class Site:
    stack: Stack
    web: Web


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with gateway_stack(None, labs=True, gateway_id="gwrestart") as stack:
        web = Web(stack.redis_url, free_port(), tmp_path_factory.mktemp("web") / "web.log")
        web.start()
        try:
            yield Site(stack, web)
        except BaseException:
            sys.stderr.write(f"----- web log -----\n{web.log.read_text()[-6000:]}\n")
            raise
        finally:
            web.stop()


def logged_on_page(pg: Page, url: str) -> str:
    pg.goto(url)
    expect(pg.locator("#conn")).to_have_text("connected")
    pg.click("#b-logon")
    expect(pg.locator("#status")).to_have_text("logged on", timeout=20_000)
    return str(pg.evaluate("() => S.state.lab_id"))


def send_order(pg: Page, price: str) -> None:
    pg.evaluate("p => send({op: 'order', symbol: 'ACORN.LAB', side: 'buy', price: p, qty: 1})", price)


def test_pages_reconnect_and_resume_and_fix_sessions_never_notice(site: Site, test_output: Path) -> None:
    with sync_playwright() as p, FixClient(site.stack.fix_port, "CLIENT03") as fixc:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            pg = browser.new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            lab_id = logged_on_page(pg, site.web.url)
            send_order(pg, "95.00")
            expect(pg.locator(".msg.exchange.app", has_text="ExecType New")).to_have_count(1, timeout=15_000)
            fixc.send("D", order("before", 1, 1, "96.00"))
            fixc.expect("8", lambda m: m.get(11) == "before" and m.get(150) == "0")

            site.web.kill()
            expect(pg.locator("#conn")).to_have_text("reconnecting", timeout=10_000)
            expect(pg.locator("#banner")).to_contain_text("Reconnecting")
            # The exchange and its FIX sessions carry on without the web.
            fixc.send("D", order("during", 1, 1, "96.00"))
            fixc.expect("8", lambda m: m.get(11) == "during" and m.get(150) == "0")

            site.web.start()
            expect(pg.locator("#conn")).to_have_text("connected", timeout=30_000)
            expect(pg.locator("#notices")).to_contain_text("following your FIX session again", timeout=15_000)
            expect(pg.locator("#status")).to_have_text("logged on")
            assert pg.evaluate("() => S.state.lab_id") == lab_id
            # The page trades on: a second order's New, and the first one's shown once, not twice.
            send_order(pg, "95.01")
            expect(pg.locator(".msg.exchange.app", has_text="ExecType New")).to_have_count(2, timeout=15_000)
            fixc.send("D", order("after", 1, 1, "96.00"))
            fixc.expect("8", lambda m: m.get(11) == "after" and m.get(150) == "0")
            assert not any(m.get(35) == "5" for m in fixc.received), "the FIX client was logged out"
            pg.screenshot(path=str(test_output / "web-restart-resumed.png"))
            assert errors == []
        finally:
            browser.close()


def test_a_session_that_ended_meanwhile_is_told_so(site: Site) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            pg = browser.new_page()
            lab_id = logged_on_page(pg, site.web.url)
            site.web.kill()
            expect(pg.locator("#conn")).to_have_text("reconnecting", timeout=10_000)
            # While the web is down the session ends (an operator logs it out, as the gateway's
            # own 10 minutes would).
            r = redis.Redis.from_url(site.stack.redis_url)
            publish(r, streams.lab_commands_stream("gwrestart"), [LabCommand(lab_id, "logout", ts=now_ns())],
                    1000)

            def ended() -> bool:
                return any(isinstance(m, LabState) and m.status == "ended"
                           for _id, f in r.xrange(streams.lab_stream(lab_id))
                           for m in decode_batch(f[streams.BATCH_FIELD]))
            eventually(ended, 20, what="the lab session ended at the gateway")
            r.close()
            site.web.start()
            expect(pg.locator("#conn")).to_have_text("connected", timeout=30_000)
            expect(pg.locator("#status")).to_have_text("ended", timeout=15_000)
            expect(pg.locator("#notices")).to_contain_text("Your FIX session ended")
            expect(pg.locator("#b-logon")).to_be_enabled()
        finally:
            browser.close()
