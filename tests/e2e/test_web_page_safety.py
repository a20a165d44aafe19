"""The page renders every value from the wire as text: markup in a CompID or ClOrdID stays characters.

Redis and the web service run as processes; the test writes the session's stream itself, as the
gateway would, so it can put markup where a real engine would carry it (SenderCompID, ClOrdID, Text).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from shared import streams
from shared.bus import publish
from shared.schema import LabOrder, LabStart, LabState, WireRecord, decode_batch
from tests.e2e.webstack import CHROMIUM, CHROMIUM_ARGS, web_process
from tests.helpers import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]

XSS = "<img src=x onerror=alert(1)>"

if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make browser installs it)", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402


def fix(body: str) -> bytes:
    b = body.replace("|", "\x01").encode()
    head = b"8=FIX.4.4\x019=" + str(len(b)).encode() + b"\x01"
    return head + b + b"10=%03d\x01" % (sum(head + b) % 256)


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_markup_from_the_wire_is_shown_as_text(redis_url: str, r: redis.Redis) -> None:
    with web_process(redis_url) as web, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(web.url)
            expect(page.locator("#conn")).to_have_text("connected")
            page.click("#b-logon")

            def started() -> list[str]:
                rows = r.xrange(streams.LAB_START_STREAM)
                return [m.lab_id for _, f in rows for m in decode_batch(f[streams.BATCH_FIELD])
                        if isinstance(m, LabStart)]

            lab_id = eventually(started, what="LabStart")[0]
            now = time.time_ns()
            order = LabOrder(XSS, "ACORN.LAB", 1, "100", 1, 0, 1, "0")
            publish(r, streams.lab_stream(lab_id), [
                LabState(lab_id, "gwX", XSS, "logged_on", 2, 2, 2, 2, 6, now + 600 * 10**9, False, False,
                         (order,), "", now),
                WireRecord(lab_id, 1, "exchange", fix(f"35=8|34=2|49={XSS}|52=x|56=LAB001|11={XSS}|150=8|"
                                                      f"39=8|58={XSS}|"), False, now),
            ], 1000)
            card = page.locator(".msg.exchange .card").first
            expect(card).to_contain_text(f"ClOrdID {XSS}")
            card.click()
            expect(card.locator(".details")).to_contain_text(XSS)
            expect(page.locator("#st-comp")).to_have_text(XSS)
            expect(page.locator("#orders")).to_contain_text(XSS)
            expect(page.locator(".notice.error").first).to_contain_text(XSS)
            assert page.locator("img").count() == 0
            assert dialogs == []
        finally:
            browser.close()


def test_markup_in_a_phase_reason_is_shown_as_text(redis_url: str, r: redis.Redis) -> None:
    # An operator's reason ("fixlab admin halt ACORN.LAB <text>") reaches every page: as text only.
    from shared.schema import PHASE_CONTINUOUS, PHASE_HALTED, Indicative, PhaseChanged

    with web_process(redis_url) as web, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(web.url)
            expect(page.locator("#conn")).to_have_text("connected")
            now = time.time_ns()
            publish(r, streams.shard_market_stream("0"), [
                PhaseChanged("ACORN.LAB", PHASE_HALTED, PHASE_CONTINUOUS, XSS, now),
                Indicative("ACORN.LAB", 10000, 5, 2, 1, now)], 1000)
            pill = page.locator('.book-pair[data-symbol="ACORN.LAB"] .phase')
            expect(pill).to_have_text("Halted")
            expect(pill).to_have_attribute("title", f"Halted: {XSS}")
            expect(page.locator('.book-pair[data-symbol="ACORN.LAB"] .ind-imbalance')).to_have_text("2 buy")
            assert page.locator("img").count() == 0
            assert dialogs == []
        finally:
            browser.close()
