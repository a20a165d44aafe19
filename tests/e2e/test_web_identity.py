"""Two visitors' pages in a real browser (Debian's chromium): one cannot act on the other's session or
orders, and nothing of one visitor (CompID, ClOrdIDs, Text) reaches the other's wire view.

A rests a buy and gets an order rejected (an exchange Text of its own); B sells into A's buy, so the
exchange's fill to B is the message most likely to carry something of A's. Then B tries A's lab_id
and A's ClOrdIDs over its own socket. Every WebSocket frame B's page received is kept (Playwright's
frame events) and searched, and so is B's rendered wire.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.webstack import CHROMIUM, CHROMIUM_ARGS, WebProcess, web_process
from tests.gateway_stack import gateway_stack, matcher_available
from tests.helpers import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("serial")]


if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
    pytest.skip("Debian's chromium is not installed (make browser installs it)", allow_module_level=True)
if not matcher_available():
    pytest.skip("services.matcher is not in this checkout yet", allow_module_level=True)

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def web() -> Iterator[WebProcess]:
    with gateway_stack(None, labs=True, gateway_id="gwident") as st, web_process(st.redis_url) as w:
        yield w


class Visitor:
    """One browser context (its own visitor) with the lab page open; keeps every frame received."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.frames: list[dict[str, Any]] = []
        page.on("websocket", lambda ws: ws.on("framereceived", self._keep))

    def _keep(self, payload: str | bytes) -> None:
        self.frames.append(json.loads(payload))

    def send(self, cmd: dict[str, Any]) -> None:
        """Over the page's own socket, as a visitor typing in the console would."""
        self.page.evaluate("cmd => S.ws.send(JSON.stringify(cmd))", cmd)

    def order(self, side: str, price: str, qty: int) -> None:
        """Through the page's own send(), as its order form does."""
        self.page.evaluate("o => send(o)", {"op": "order", "symbol": "ACORN.LAB", "side": side,
                                            "price": price, "qty": qty})

    def clordid(self, price: str) -> str | None:
        """The ClOrdID of the NewOrderSingle this page's engine sent at ``price``."""
        for w in self.wires("client"):
            tags = {f[0]: f[2] for f in w["fields"]}
            if w["msg_type"] == "D" and tags.get(44) == price:
                return tags[11]
        return None

    def state(self) -> dict[str, Any]:
        return self.page.evaluate("() => S.state")  # type: ignore[no-any-return]

    def wires(self, source: str) -> list[dict[str, Any]]:
        self.page.wait_for_timeout(10)  # Playwright's sync API hands over events only inside its calls
        return [f for f in self.frames if f.get("type") == "wire" and f.get("source") == source]

    def errors(self) -> list[dict[str, Any]]:
        self.page.wait_for_timeout(10)
        return [f for f in self.frames if f.get("type") == "error"]


def ack_of(v: Visitor, clordid: str, exec_type: str) -> dict[str, Any] | None:
    for w in v.wires("exchange"):
        tags = {f[0]: f[2] for f in w["fields"]}
        if tags.get(11) == clordid and tags.get(150) == exec_type:
            return w
    return None


def test_one_page_cannot_act_for_or_see_another(web: WebProcess, test_output: Path) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            a = Visitor(browser.new_context().new_page())
            b = Visitor(browser.new_context().new_page())
            for v in (a, b):
                v.page.goto(web.url)
                expect(v.page.locator("#conn")).to_have_text("connected")
                v.page.click("#b-logon")
                expect(v.page.locator("#status")).to_have_text("logged on", timeout=20_000)
            sa, sb = a.state(), b.state()
            assert sa["comp_id"] != sb["comp_id"] and sa["lab_id"] != sb["lab_id"]

            # A: a resting buy, and an order the exchange rejects with a Text of A's own.
            a.order("buy", "100.00", 2)
            a.order("buy", "150.00", 1)
            resting = eventually(lambda: a.clordid("100.00"), 15, what="A's buy on its wire")
            rejected = eventually(lambda: a.clordid("150.00"), 15, what="A's second buy on its wire")
            eventually(lambda: ack_of(a, resting, "0"), 15, what="A's buy acknowledged")
            a_reject = eventually(lambda: ack_of(a, rejected, "8"), 15, what="A's order rejected")
            a_text = next(f[2] for f in a_reject["fields"] if f[0] == 58)
            assert a_text

            # B sells into A's buy: the exchange's fill to B must carry nothing of A's.
            b.order("sell", "100.00", 1)
            b_sell = eventually(lambda: b.clordid("100.00"), 15, what="B's sell on its wire")
            eventually(lambda: ack_of(b, b_sell, "F"), 15, what="B's fill")
            eventually(lambda: ack_of(a, resting, "F"), 15, what="A's fill")

            # B uses what it might have learnt of A: A's lab_id and ClOrdIDs, over B's own socket.
            before = len(b.errors())
            b.send({"op": "cancel", "clordid": resting, "lab_id": sa["lab_id"], "id": "x1"})
            b.send({"op": "logout", "lab_id": sa["lab_id"], "id": "x2"})
            b.send({"op": "logon", "lab_id": sa["lab_id"], "id": "x3"})
            # Following A's session needs the token only A's page was given (logon_sent).
            b.send({"op": "resume", "lab_id": sa["lab_id"], "token": "0" * 32, "id": "x4"})
            eventually(lambda: len(b.errors()) >= before + 4, 10, what="B's four commands refused")
            assert all(e["code"] == "bad_command" for e in b.errors()[before:]), b.errors()[before:]
            assert "cannot be resumed" in b.errors()[before + 3]["text"]
            b.send({"op": "cancel", "clordid": resting, "id": "c1"})
            b.send({"op": "replace", "clordid": resting, "price": "99.00", "qty": 5, "id": "r1"})
            # Both refused on B's own session: by B's lab engine (it never sent that order) with a
            # notice, or on the wire by the exchange's OrderCancelReject.
            def refusals() -> int:
                on_wire = [w for w in b.wires("exchange") if w["msg_type"] == "9"]
                notices = [f for f in b.frames if f.get("type") == "notice" and resting in f.get("text", "")]
                return len(on_wire) + len(notices)
            eventually(lambda: refusals() >= 2, 15, what="B's cancel and replace of A's order refused")

            # A is untouched: still logged on, its remaining buy still working (1 left of 2).
            mine = next(o for o in a.state()["orders"] if o["clordid"] == resting)
            assert (a.state()["status"], mine["leaves_qty"], mine["status"]) == ("logged_on", 1,
                                                                                 "Partially filled"), mine
            assert not any(w["msg_type"] in ("9", "5") for w in a.wires("exchange")), "A saw B's attempts"

            # Nothing of A in anything B received: A's CompID and Text nowhere; A's ClOrdIDs only in
            # B's own wire where B typed them (its own requests, and 41 echoed on the rejects).
            def b_typed(w: dict[str, Any]) -> bool:
                tags = {f[0]: f[2] for f in w["fields"]}
                return w["msg_type"] in ("F", "G", "9") and tags.get(41) == resting
            for frame in b.frames:
                text = json.dumps(frame)
                assert sa["comp_id"] not in text, frame
                assert a_text not in text, frame
                assert rejected not in text, frame
                if resting in text:  # only where B typed it: its requests, their refusals
                    kind = frame.get("type")
                    assert kind == "notice" or (kind == "wire" and b_typed(frame)), frame
            shown = b.page.locator("#wire").inner_text()
            assert sa["comp_id"] not in shown and a_text not in shown and rejected not in shown
            b.page.screenshot(path=str(test_output / "web-identity-b.png"))
        except BaseException:
            for name, v in (("A", a), ("B", b)):
                print(name, [(f.get("type"), f.get("msg_type"), f.get("code"), f.get("text"))
                             for f in v.frames if f.get("type") not in ("depth",)])
            raise
        finally:
            browser.close()
