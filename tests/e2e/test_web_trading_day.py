"""The trading day on the lab page (issue 31), in a real browser (Debian's chromium, Playwright) against
the whole stack: redis-server, matcher, gateway and web as processes.

The operator puts ACORN.LAB in its opening call over the bus (``fixlab admin phase``); the page shows
the phase, offers only what the call takes, and the countdown to the uncross the web's schedule gives;
a second page's limit sell and the visitor's market buy make an indicative uncross price, volume and
imbalance; the visitor's market and stop orders get their reports on the wire; ``fixlab admin resume``
uncrosses and the auction's trade is on the tape, marked as one.
"""

from __future__ import annotations

import datetime as dt
import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.admin.__main__ import main as admin_main
from shared.config import common_settings
from tests.e2e.webstack import CHROMIUM, CHROMIUM_ARGS, WebProcess, web_process
from tests.gateway_stack import Stack, gateway_stack, matcher_available

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]  # a browser: one at a time

if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make browser installs it)", allow_module_level=True)
if not matcher_available():
    pytest.skip("services.matcher is not in this checkout yet", allow_module_level=True)

from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright  # noqa: E402

SYMBOL = "ACORN.LAB"
TOKEN = "a-test-operator-token-0123456789"
UNCROSS_IN_S = 600  # the web's schedule: ACORN.LAB's call ends this long after the stack starts


def day_schedule(now: dt.datetime) -> str:
    """A day (UTC) whose next change is continuous trading ``UNCROSS_IN_S`` from ``now``: only the web
    reads it (the gateway has no schedule, so the phases are the operator's alone)."""
    opens = (now + dt.timedelta(seconds=UNCROSS_IN_S)).strftime("%H:%M:%S")
    calls = (now + dt.timedelta(seconds=2 * UNCROSS_IN_S)).strftime("%H:%M:%S")
    return f"{SYMBOL} {opens} continuous; {SYMBOL} {calls} pre_open; 00:00 continuous"


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Stack, WebProcess]]:
    schedule = day_schedule(dt.datetime.now(dt.UTC))
    with gateway_stack(None, labs=True, gateway_id="gwday") as st, \
            web_process(st.redis_url, env={"FIXLAB_SCHEDULE": schedule}) as w:
        yield st, w


@pytest.fixture
def browser(stack: tuple[Stack, WebProcess]) -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def admin(stack: Stack, monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    monkeypatch.setenv("FIXLAB_OPERATOR_TOKEN", TOKEN)
    out = io.StringIO()
    code = admin_main(["--url", stack.redis_url, "--timeout", "10", *argv], out=out, err=out)
    assert code == 0, out.getvalue()
    return out.getvalue()


def logged_on_page(browser: Browser, web: WebProcess, errors: list[str]) -> Page:
    pg = browser.new_page(viewport={"width": 1440, "height": 1000})
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(web.url)
    expect(pg.locator("#conn")).to_have_text("connected")
    pg.click("#b-logon")
    expect(pg.locator("#status")).to_have_text("logged on", timeout=20_000)
    return pg


def offered(pg: Page, select: str) -> list[str]:
    """The values a select offers (its options neither disabled nor hidden)."""
    return pg.locator(f"{select} option").evaluate_all(
        "os => os.filter(o => !o.disabled && !o.hidden).map(o => o.value)")


def book(pg: Page) -> Locator:
    return pg.locator(f'.book-pair[data-symbol="{SYMBOL}"]')


def test_a_call_on_the_page_from_the_operator_to_the_uncross(
        stack: tuple[Stack, WebProcess], browser: Browser, monkeypatch: pytest.MonkeyPatch,
        test_output: Path) -> None:
    st, web = stack
    inst = common_settings({"REDIS_URL": st.redis_url}).instrument(SYMBOL)
    assert inst is not None
    reference = str(inst.to_price(inst.reference_ticks))
    errors: list[str] = []
    page = logged_on_page(browser, web, errors)
    seller = logged_on_page(browser, web, errors)
    expect(book(page).locator(".phase")).to_have_text("Continuous")
    assert offered(page, "#o-tif") == ["day", "gtc", "ioc", "fok"]

    # The operator opens the call over the bus: every page sees it at once.
    said = admin(st, monkeypatch, "phase", SYMBOL, "pre_open")
    assert f"{SYMBOL}: CONTINUOUS -> PRE_OPEN" in said
    for pg in (page, seller):
        expect(book(pg).locator(".phase")).to_have_text("Pre-open call")
    assert offered(page, "#o-tif") == ["day", "gtc", "opg"]  # no IOC/FOK in a call
    assert offered(page, "#o-type") == ["limit", "market", "stop", "stop_limit"]
    expect(book(page).locator(".indicative")).to_contain_text("nothing crosses")
    expect(book(page).locator(".countdown")).to_contain_text("uncross in ")

    # Another session sells 5 at the reference; the visitor buys 5 at the market: they cross.
    seller.select_option("#o-symbol", SYMBOL)
    seller.click("label.side-sell")
    seller.fill("#o-price", reference)
    seller.fill("#o-qty", "5")
    seller.click("#b-send")
    expect(seller.locator(".msg.exchange.app", has_text="ExecType New").first).to_be_visible(timeout=15_000)

    page.select_option("#o-symbol", SYMBOL)
    page.select_option("#o-type", "market")
    expect(page.locator("#o-price")).to_be_hidden()
    page.fill("#o-qty", "5")
    page.click("#b-send")
    market = page.locator(".msg.exchange.app", has_text="OrdType Market").filter(has_text="ExecType New")
    expect(market.first).to_be_visible(timeout=15_000)
    ind = book(page).locator(".indicative")
    expect(ind.locator(".ind-price")).to_have_text(reference, timeout=15_000)
    expect(ind.locator(".ind-volume")).to_have_text("5")
    expect(ind.locator(".ind-imbalance")).to_have_text("none")
    expect(book(seller).locator(".ind-price")).to_have_text(reference)

    # A stop order: a stop price field, Day or GTC only; held, its New says 40=3 and the StopPx.
    stop_px = str(inst.to_price(inst.reference_ticks * 9 // 10))
    page.click("label.side-sell")
    page.select_option("#o-type", "stop")
    expect(page.locator("#o-stop")).to_be_visible()
    assert offered(page, "#o-tif") == ["day", "gtc"]
    page.fill("#o-stop", stop_px)
    page.fill("#o-qty", "2")
    page.click("#b-send")
    stop = page.locator(".msg.exchange.app", has_text="OrdType Stop").filter(has_text="ExecType New")
    expect(stop.first).to_be_visible(timeout=15_000)
    stop.first.locator(".card").click()
    expect(stop.first.locator(".details tr", has_text="StopPx")).to_contain_text(stop_px)
    sent = page.locator(".msg.client.app", has_text="OrdType Stop").first
    sent.locator(".card").click()
    expect(sent.locator(".details tr", has_text="StopPx")).to_contain_text(stop_px)
    assert sent.locator(".details tr", has_text="Price").filter(has_text="44").count() == 0
    page.screenshot(path=str(test_output / "web-trading-day-call.png"))

    # The operator resumes: the uncross trades 5 at the reference, one auction trade on the tape.
    said = admin(st, monkeypatch, "resume", SYMBOL)
    assert f"{SYMBOL}: PRE_OPEN -> CONTINUOUS" in said
    expect(book(page).locator(".phase")).to_have_text("Continuous")
    expect(book(page).locator(".indicative")).to_be_hidden()
    auction = page.locator("#tape li.auction", has_text=f"5 @ {reference}")
    expect(auction.first).to_be_visible(timeout=15_000)
    expect(auction.first).to_contain_text("auction")
    expect(page.locator(".msg.exchange.app", has_text="ExecType Trade").first).to_be_visible(timeout=15_000)
    expect(page.locator("#fills")).to_contain_text("bought")
    expect(page.locator("#orders tr", has_text="buy")).to_have_count(0)  # the market order: filled, gone
    expect(page.locator("#orders tr", has_text="sell")).to_contain_text("New")  # the stop, still held
    assert offered(page, "#o-tif") == ["day", "gtc"]  # still a stop order in the ticket
    page.select_option("#o-type", "limit")
    assert offered(page, "#o-tif") == ["day", "gtc", "ioc", "fok"]
    page.screenshot(path=str(test_output / "web-trading-day-uncross.png"))

    # Closed: the ticket offers nothing and says why.
    admin(st, monkeypatch, "phase", SYMBOL, "closed")
    expect(book(page).locator(".phase")).to_have_text("Closed")
    expect(page.locator("#o-phase")).to_contain_text("closed")
    expect(page.locator("#b-send")).to_be_disabled()
    admin(st, monkeypatch, "phase", SYMBOL, "continuous")
    expect(page.locator("#b-send")).to_be_enabled()
    assert errors == []


def test_a_fix42_page_is_not_offered_at_the_close(
        stack: tuple[Stack, WebProcess], browser: Browser, monkeypatch: pytest.MonkeyPatch) -> None:
    st, web = stack
    errors: list[str] = []
    pg = browser.new_page()
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(web.url)
    expect(pg.locator("#conn")).to_have_text("connected")
    admin(st, monkeypatch, "phase", "BIRCH.LAB", "pre_close")
    try:
        expect(pg.locator('.book-pair[data-symbol="BIRCH.LAB"] .phase')).to_have_text("Pre-close call")
        pg.select_option("#o-symbol", "BIRCH.LAB")
        assert offered(pg, "#o-tif") == ["day", "gtc", "atc"]
        pg.select_option("#fix-version", "4.2")  # 59=7 came with FIX 4.3
        assert offered(pg, "#o-tif") == ["day", "gtc"]
        pg.select_option("#fix-version", "5.0SP2")
        assert offered(pg, "#o-tif") == ["day", "gtc", "atc"]
    finally:
        admin(st, monkeypatch, "phase", "BIRCH.LAB", "continuous")
    assert errors == []
