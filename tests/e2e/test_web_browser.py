"""The lab page in a real browser (Debian's chromium, driven by Playwright) against the whole stack.

Redis, matcher and gateway (short heartbeats), the liquidity bots and the web service all run as
processes; the browser logs on, reads the Logon's named tags, buys, loses a message, trips the rate
limit, types markup, goes silent and watches the exchange give up (TestRequest, then its Logout).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.webstack import CHROMIUM, CHROMIUM_ARGS, WebProcess, bots_process, web_process
from tests.gateway_stack import gateway_stack, matcher_available
from tests.helpers import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]


if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make browser installs it)", allow_module_level=True)
if not matcher_available():
    pytest.skip("services.matcher is not in this checkout yet", allow_module_level=True)

from playwright.sync_api import Locator, Page, expect, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def web() -> Iterator[WebProcess]:
    with gateway_stack(None, labs=True, env={"FIXLAB_LAB_HEARTBEAT_S": "2"}, gateway_id="gwe2e") as st, \
            bots_process(st.redis_url, st.fix_port), web_process(st.redis_url) as w:
        yield w


@pytest.fixture
def page(web: WebProcess) -> Iterator[Page]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            pg = browser.new_page(viewport={"width": 1440, "height": 1000})
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("dialog", lambda d: errors.append(f"a dialog opened: {d.message}"))
            pg.goto(web.url)
            yield pg
            assert errors == []
        finally:
            browser.close()


def test_a_visitors_session(page: Page, test_output: Path) -> None:
    expect(page.locator("#conn")).to_have_text("connected")
    page.click("#b-logon")
    expect(page.locator("#status")).to_have_text("logged on", timeout=20_000)
    ours = page.locator(".msg.client.session", has_text="Logon").first
    theirs = page.locator(".msg.exchange.session", has_text="Logon").first
    expect(ours).to_be_visible()
    expect(theirs).to_be_visible()
    theirs.locator(".card").click()
    details = theirs.locator(".details")
    expect(details).to_contain_text("HeartBtInt")
    expect(details).to_contain_text("SenderCompID")
    expect(details.locator("tr", has_text="MsgType")).to_contain_text("Logon")
    expect(details).to_contain_text("trailer")
    details.get_by_text("show raw").click()
    expect(details.locator("pre.raw")).to_contain_text("8=FIX.4.4|9=")

    # Buy at the bots' best ask (a click on the ladder fills the price): New, then the fill.
    best_ask = page.locator(".book").first.locator("tr.ask td.px").last
    expect(best_ask).to_be_visible(timeout=20_000)
    best_ask.click()
    page.click("#b-send")
    expect(page.locator(".msg.exchange.app", has_text="ExecType New").first).to_be_visible()
    expect(page.locator(".msg.exchange.app", has_text="ExecType Trade").first).to_be_visible()
    expect(page.locator("#fills")).to_contain_text("bought")
    expect(page.locator("#tape li").first).to_be_visible()
    page.screenshot(path=str(test_output / "web-lab-session.png"))

    # Lose the next message: the exchange sees the gap and asks for it again.
    page.click("#b-drop")
    page.fill("#o-price", "95.00")
    page.click("#b-send")
    expect(page.locator(".msg.client.withheld").first).to_be_visible(timeout=15_000)
    page.fill("#o-price", "95.01")
    page.click("#b-send")
    expect(page.locator(".msg.exchange", has_text="ResendRequest").first).to_be_visible(timeout=15_000)

    # A flood of orders: the rate limit says so.
    for _ in range(8):
        page.click("#b-send")
    expect(page.locator(".notice.error", has_text="Slow down").first).to_be_visible()

    # Markup typed by a visitor comes back as text, never as HTML.
    page.fill("#o-price", "<img src=x onerror=alert(1)>")
    page.click("#b-send")
    shown = page.locator(".notice.error", has_text="<img src=x onerror=alert(1)>").first
    expect(shown).to_be_visible(timeout=10_000)
    assert page.locator("#notices img").count() == 0

    # Go silent: a countdown, the exchange's TestRequest, then it gives up on the session.
    page.click("#b-silent")
    expect(page.locator("#silence")).to_contain_text("gives up in about")
    expect(page.locator(".msg.exchange", has_text="TestRequest").first).to_be_visible(timeout=20_000)
    # The exchange's own Logout, with its reason, on the page's wire.
    logout = page.locator(".msg.exchange", has_text="Logout").filter(has_text="no answer to TestRequest")
    expect(logout.first).to_be_visible(timeout=20_000)
    expect(page.locator("#status")).to_have_text("ended", timeout=20_000)
    expect(page.locator("#b-logon")).to_be_enabled()
    page.screenshot(path=str(test_output / "web-lab-ended.png"))


def test_a_fix42_session_chosen_on_the_page(page: Page, test_output: Path) -> None:
    expect(page.locator("#conn")).to_have_text("connected")
    page.select_option("#fix-version", "4.2")
    page.click("#b-logon")
    expect(page.locator("#status")).to_have_text("logged on", timeout=20_000)
    expect(page.locator("#fix-version")).to_be_disabled()  # fixed for the session's life
    theirs = page.locator(".msg.exchange.session", has_text="Logon").first
    theirs.locator(".card").click()
    theirs.locator(".details").get_by_text("show raw").click()
    expect(theirs.locator(".details pre.raw")).to_contain_text("8=FIX.4.2|9=")
    best_ask = page.locator(".book").first.locator("tr.ask td.px").last
    expect(best_ask).to_be_visible(timeout=20_000)
    best_ask.click()
    page.fill("#o-qty", "1")
    page.click("#b-send")
    # FIX42.xml's names: a whole fill is ExecType Fill, with ExecTransType.
    fill = page.locator(".msg.exchange.app", has_text="ExecType Fill").first
    expect(fill).to_be_visible(timeout=15_000)
    fill.locator(".card").click()
    expect(fill.locator(".details")).to_contain_text("ExecTransType")
    expect(page.locator("#fills")).to_contain_text("bought")
    page.screenshot(path=str(test_output / "web-lab-fix42.png"))
    page.click("#b-logout")
    expect(page.locator("#status")).to_have_text("ended", timeout=20_000)
    expect(page.locator("#fix-version")).to_be_enabled()


def test_third_page_from_one_address_is_told_why(web: WebProcess) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            pages = [browser.new_page() for _ in range(3)]
            for pg in pages[:2]:
                pg.goto(web.url)
                expect(pg.locator("#conn")).to_have_text("connected")
            pages[2].goto(web.url)
            expect(pages[2].locator("#banner")).to_contain_text("2 lab pages open from your address")
            expect(pages[2].locator("#conn")).to_have_text("refused")
        finally:
            browser.close()


def book(pg: Page, symbol: str) -> Locator:
    return pg.locator(f'.book-pair[data-symbol="{symbol}"]')


def ladder_rows(pg: Page, symbol: str, which: str) -> list[str]:
    """The rows a ladder shows ("matcher" or "md"), as text, top to bottom."""
    box = ".book.matcher" if which == "matcher" else ".mdbook"
    return book(pg, symbol).locator(f"{box} tbody.asks tr, {box} tbody.bids tr").all_inner_texts()


def test_market_data_status_and_ioc_from_the_page(web: WebProcess, page: Page, test_output: Path) -> None:
    """Issue 14's page: subscribe, see W then X (groups shown as groups) as another session trades,
    the two books agree; an IOC gets its remainder Cancelled; the status action gets ExecType I."""
    expect(page.locator("#conn")).to_have_text("connected")
    page.click("#b-logon")
    expect(page.locator("#status")).to_have_text("logged on", timeout=20_000)
    acorn = book(page, "ACORN.LAB")
    expect(acorn.locator(".book.matcher tr.ask td.px").first).to_be_visible(timeout=20_000)
    acorn.locator(".md-toggle").click()
    expect(page.locator('.msg.client.app[data-type="V"]').first).to_be_visible()
    expect(page.locator('.msg.exchange.app[data-type="W"]').first).to_be_visible(timeout=15_000)
    expect(acorn.locator(".md-note")).to_contain_text("price level", timeout=15_000)
    expect(acorn.locator(".md-toggle")).to_have_text("unsubscribe")

    # Another session (a second page, its own FIX session) buys at the best ask: a trade.
    browser = page.context.browser
    assert browser is not None
    other = browser.new_page()
    other.goto(web.url)
    other.click("#b-logon")
    expect(other.locator("#status")).to_have_text("logged on", timeout=20_000)
    other_ask = book(other, "ACORN.LAB").locator(".book.matcher tr.ask td.px").last
    expect(other_ask).to_be_visible(timeout=20_000)
    other_ask.click()
    other.fill("#o-qty", "1")
    other.click("#b-send")
    expect(other.locator("#fills")).to_contain_text("bought", timeout=15_000)

    # The visitor's wire: the W, then X messages (the trade, the level it took).
    x = page.locator('.msg.exchange.app[data-type="X"]').filter(has_text="Trade").first
    expect(x).to_be_visible(timeout=15_000)
    kinds = page.locator('#wire .msg.exchange.app').evaluate_all("rs => rs.map(r => r.dataset.type)")
    assert "W" in kinds and kinds.index("W") < kinds.index("X")
    x.locator(".card").click()
    group = x.locator('.details .group[data-tag="268"]')
    expect(group).to_be_visible()
    expect(group.locator(".entry").first).to_contain_text("MDUpdateAction")
    expect(group.locator(".entry").first).to_contain_text("MDEntryType")
    expect(x.locator(".details tr.group-count")).to_contain_text("NoMDEntries")
    # The W's entries too, each a box of its own.
    w = page.locator('.msg.exchange.app[data-type="W"]').first
    w.locator(".card").click()
    w_entries = w.locator('.details .group[data-tag="268"] > .entry')
    expect(w_entries.first).to_contain_text("MDEntryPx")
    assert w_entries.count() >= 2  # the bots quote both sides

    # The two books agree: the page's own check over every level, and the ladders as shown.
    expect(acorn.locator(".agree")).to_have_text("the two books agree", timeout=15_000)

    def same_ladders() -> bool:
        return ladder_rows(page, "ACORN.LAB", "matcher") == ladder_rows(page, "ACORN.LAB", "md")

    eventually(same_ladders, 15, what="the matcher's ladder and the market data ladder show the same rows")
    assert ladder_rows(page, "ACORN.LAB", "md")
    page.screenshot(path=str(test_output / "web-market-data.png"))

    # IOC below the best ask: nothing trades, the remainder is Cancelled with the reason.
    bid = acorn.locator(".book.matcher tr.bid td.px").first
    bid.click()
    page.select_option("#o-tif", "ioc")
    page.click("#b-send")
    ioc = page.locator(".msg.exchange.app", has_text="IOC: remainder cancelled").first
    expect(ioc).to_be_visible(timeout=15_000)
    expect(ioc).to_contain_text("ExecType Canceled")
    expect(page.locator('.msg.client.app[data-type="D"]', has_text="TimeInForce Immediate or cancel").first) \
        .to_be_visible()

    # A Day order that rests alone at the best bid (inside the bots' spread), then its status:
    # ExecType I (order status).
    page.select_option("#o-tif", "day")
    inside = f"{Decimal(bid.inner_text()) + Decimal('0.05'):.2f}"
    page.fill("#o-price", inside)
    page.click("#b-send")
    row = page.locator("#orders tr", has_text="New").first
    expect(row).to_be_visible(timeout=15_000)
    row.locator(".status-btn").click()
    expect(page.locator('.msg.client.app[data-type="H"]').first).to_be_visible(timeout=15_000)
    status = page.locator(".msg.exchange.app", has_text="ExecType Order status").first
    expect(status).to_be_visible(timeout=15_000)

    # Self-trade prevention from the session panel: selling into that bid, the aggressor is
    # cancelled with the reason and the resting buy stays.
    page.select_option("#stp-mode", "cancel_aggressor")
    expect(page.locator(".notice", has_text="cancel aggressor").first).to_be_visible(timeout=10_000)
    page.click("label.side-sell")
    page.fill("#o-price", inside)
    page.fill("#o-qty", "1")
    page.click("#b-send")
    stp = page.locator(".msg.exchange.app", has_text="self-trade prevention").first
    expect(stp).to_be_visible(timeout=15_000)
    expect(stp).to_contain_text("ExecType Canceled")
    expect(page.locator("#orders tr", has_text="New").first).to_contain_text(inside)

    # No session-level Reject either way: every message validated against the dictionary.
    assert page.locator('#wire .msg[data-type="3"]').count() == 0
    assert other.locator('#wire .msg[data-type="3"]').count() == 0
    acorn.locator(".md-toggle").click()
    expect(page.locator('.msg.client.app[data-type="V"]', has_text="Disable previous snapshot").first) \
        .to_be_visible()
    expect(acorn.locator(".md-note")).to_have_text("not subscribed")
    other.close()
