"""The terminal client's Textual app driven by Textual's own Pilot against a real exchange."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Input, RichLog, Static

from services.client.core import Client
from services.client.session import ClientSession
from services.client.tui import ClientApp, WireView
from shared.fix import dictionary
from tests.gateway_stack import Stack, gateway_stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


def logged_on_client(stack: Stack, comp_id: str, heartbeat_s: int = 30) -> Client:
    session = ClientSession(comp_id, port=stack.fix_port, heartbeat_s=heartbeat_s)
    client = Client(session, dictionary.load())
    session.on_record = client.on_record
    session.start()
    try:
        session.wait_logon(5)
    except BaseException:
        session.stop()
        raise
    return client


def pane_text(app: ClientApp, selector: str) -> str:
    """What a pane holds, its wrapped lines joined again (spaces collapsed)."""
    if selector == "#wire":
        return app.query_one(selector, WireView).text()
    log = app.query_one(selector, RichLog)
    return " ".join(" ".join(strip.text for strip in log.lines).split())


def listed(table: DataTable) -> set[str]:
    """The ClOrdIDs the open-orders table shows."""
    return {str(table.get_row_at(i)[0]) for i in range(table.row_count)}


async def until(pilot: Pilot[int], check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            app = pilot.app
            assert isinstance(app, ClientApp)
            raise AssertionError(f"{what} not seen in {timeout} s; wire: {pane_text(app, '#wire')[-1500:]}; "
                                 f"answers: {pane_text(app, '#out')[-500:]}")
        await pilot.pause(0.05)


async def command(pilot: Pilot[int], app: ClientApp, line: str) -> None:
    prompt = app.query_one("#prompt", Input)
    prompt.focus()
    prompt.value = line
    await pilot.press("enter")


def test_order_drop_and_silence_in_the_tui(stack: Stack) -> None:
    client = logged_on_client(stack, "CLIENT11", heartbeat_s=1)
    app = ClientApp(client)

    async def drive() -> None:
        async with app.run_test(size=(220, 60)) as pilot:
            await until(pilot, lambda: "Logon 35=A" in pane_text(app, "#wire"), "the Logon on the wire")
            # An order from the prompt, its ExecutionReport decoded in the wire pane and the open orders.
            await command(pilot, app, "buy ACORN.LAB 99.50 10")
            await until(pilot, lambda: "ExecType(150)=0 (New)" in pane_text(app, "#wire"), "ER New decoded")
            wire = pane_text(app, "#wire")
            assert "NewOrderSingle 35=D" in wire and "ExecutionReport 35=8" in wire
            table = app.query_one("#orders", DataTable)
            await until(pilot, lambda: table.row_count == 1, "the open order listed")
            # The ticket sends one too; s on the selected order asks its status (35=H).
            app.query_one("#price", Input).value = "99.40"
            app.query_one("#qty", Input).value = "3"
            app.query_one("#send", Button).press()
            await until(pilot, lambda: table.row_count == 2, "the ticket's order listed")
            table.focus()
            await pilot.press("s")
            await until(pilot, lambda: "OrderStatusRequest 35=H" in pane_text(app, "#wire"), "status request")
            # r puts "replace <ClOrdID> " at the prompt; c cancels the selected order.
            before = listed(table)
            await pilot.press("r")
            prompt = app.query_one("#prompt", Input)
            assert prompt.value.startswith("replace ") and prompt.has_focus
            prompt.value += "99.45 10"
            await pilot.press("enter")
            await until(pilot, lambda: "ExecType(150)=5 (Replaced)" in pane_text(app, "#wire"), "Replaced")
            # The table shows the replacement's ClOrdID on its next refresh, not with the wire line:
            # c on the row before that would cancel the replaced ClOrdID, as a user's too-quick key would.
            await until(pilot, lambda: listed(table) != before, "the replacement listed")
            table.focus()
            await pilot.press("c")
            await until(pilot, lambda: "ExecType(150)=4 (Canceled)" in pane_text(app, "#wire"), "Canceled")
            await until(pilot, lambda: table.row_count == 1, "the cancelled order gone")
            # A bad command: one line in the answers pane.
            await command(pilot, app, "bogus")
            await until(pilot, lambda: "error: unknown command 'bogus'" in pane_text(app, "#out"), "error")
            # Drop the next message: the exchange asks for it again.
            await pilot.press("f2")
            await command(pilot, app, "buy ACORN.LAB 99.30 1")
            await until(pilot, lambda: "[withheld by the tap]" in pane_text(app, "#wire"), "the withheld one")
            await command(pilot, app, "seq")
            await until(pilot, lambda: "ResendRequest 35=2" in pane_text(app, "#wire"), "a ResendRequest")
            # Go silent: the exchange tests, then logs the session out.
            await pilot.press("f3")
            await until(pilot, lambda: "<- Logout 35=5" in pane_text(app, "#wire"), "the exchange's Logout")
            status = app.query_one("#status", Static)
            await until(pilot, lambda: "logged out" in str(status.render()), "logged out in the status line")
            assert "silent" in pane_text(app, "#out")
            await command(pilot, app, "quit")
        assert app.return_value == 0

    try:
        asyncio.run(drive())
    finally:
        client.session.stop()


def test_the_book_panel_shows_the_phase_the_operator_sets(stack: Stack,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: ``book SYMBOL`` also follows the instrument's SecurityStatus (35=e, 263=1), and the book
    panel says its phase as the operator changes it over the bus (``fixlab admin phase``)."""
    import io

    from services.admin.__main__ import main as admin_main

    def admin(*argv: str) -> None:
        out = io.StringIO()
        code = admin_main(["--url", stack.redis_url, "--timeout", "10", *argv], out=out, err=out)
        assert code == 0, out.getvalue()

    monkeypatch.setenv("FIXLAB_OPERATOR_TOKEN", "a-test-operator-token-0123456789")
    client = logged_on_client(stack, "CLIENT12")
    app = ClientApp(client)

    def market() -> str:
        return str(app.query_one("#market", Static).render())

    async def drive() -> None:
        async with app.run_test(size=(220, 60)) as pilot:
            await command(pilot, app, "book BIRCH.LAB")
            await until(pilot, lambda: "SecurityStatusRequest 35=e" in pane_text(app, "#wire"), "the 35=e")
            await until(pilot, lambda: "BIRCH.LAB [Continuous]" in market(), "the phase in the book panel")
            admin("phase", "BIRCH.LAB", "pre_open")
            await until(pilot, lambda: "BIRCH.LAB [Pre-open call: pre_open by the operator]" in market(),
                        "the opening call")
            admin("halt", "BIRCH.LAB", "news", "pending")
            await until(pilot, lambda: "BIRCH.LAB [Halted: news pending]" in market(), "the halt")
            admin("resume", "BIRCH.LAB")
            await until(pilot, lambda: "BIRCH.LAB [Continuous: by the operator]" in market(), "the resume")
            await command(pilot, app, "quit")
        assert app.return_value == 0

    try:
        asyncio.run(drive())
    finally:
        client.session.stop()


# Per version: the TUI's CompID, the trader's, how the book panel names the opening call.
CALL_VERSIONS = {
    "4.4": ("CLIENT14", "CLIENT13", "Pre-open call"),
    "4.2": ("CLIENT42-07", "CLIENT15", "Call"),  # FIX 4.2: no 625, 326=5 for any call
    "5.0SP2": ("CLIENT50-07", "CLIENT16", "Pre-open call"),
}
# What each version's panel shows of the call's uncross (101.00: 4 execute, 6 more buyers).
CALL_SHOWN = {
    "4.4": "indicative (opening auction): 101.00 for 4, imbalance 6 more buyers",
    "4.2": "indicative (opening auction): 101.00 for 4",  # FIX 4.2 has no Imbalance (269=A)
    "5.0SP2": "indicative (opening auction): 101.00 for 4, imbalance 6 more buyers",
}

# A halt's re-opening auction (101.00: 2 execute, 4 more buyers); FIX 4.2's 4 (no 625) says opening.
HALT_SHOWN = {
    "4.4": "indicative (re-opening auction): 101.00 for 2, imbalance 4 more buyers",
    "4.2": "indicative (opening auction): 101.00 for 2",
    "5.0SP2": "indicative (re-opening auction): 101.00 for 2, imbalance 4 more buyers",
}


@pytest.mark.parametrize("name", ["4.4", "4.2", "5.0SP2"])
def test_the_book_panel_shows_the_calls_indicative_and_the_tape_its_auction_trade(
        stack: Stack, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Issue 31: in ACORN.LAB's opening call (``fixlab admin phase``) a bid of 10 at 101.00 (from the
    TUI's prompt) and an offer of 4 at 100.00 (another session) cross; the book panel shows the
    indicative uncross from the session's own market data (its version's entries), and at the open
    the tape marks the uncross's trade as the auction's; after it the panel shows no indicative.
    Then a halt (``fixlab admin halt``), an offer of 2 at 101.00, and the resume's auction likewise."""
    import io
    import re

    from services.admin.__main__ import main as admin_main
    from services.client.commands import parse
    from shared.fix.versions import version

    def admin(*argv: str) -> int:
        out = io.StringIO()
        return admin_main(["--url", stack.redis_url, "--timeout", "10", *argv], out=out, err=out)

    monkeypatch.setenv("FIXLAB_OPERATOR_TOKEN", "a-test-operator-token-0123456789")
    comp, trader_comp, call_label = CALL_VERSIONS[name]
    v = version(name)
    session = ClientSession(comp, port=stack.fix_port, begin=v.begin_string)
    client = Client(session, dictionary.load_version(v.name), prefix="TI-")
    session.on_record = client.on_record
    trader = logged_on_client(stack, trader_comp)
    in_call = False
    try:
        session.start()
        session.wait_logon(10)
        app = ClientApp(client)

        def market() -> str:
            return str(app.query_one("#market", Static).render())

        async def drive() -> None:
            nonlocal in_call
            async with app.run_test(size=(220, 60)) as pilot:
                await command(pilot, app, "book ACORN.LAB")
                await until(pilot, lambda: "ACORN.LAB [Continuous" in market(), "the phase in the book panel")
                assert "indicative" not in market()
                in_call = True
                assert admin("phase", "ACORN.LAB", "pre_open") == 0
                await until(pilot, lambda: f"ACORN.LAB [{call_label}" in market(), "the opening call")
                await command(pilot, app, "buy ACORN.LAB 101.00 10")
                sell = parse("sell ACORN.LAB 100.00 4")
                assert sell is not None
                trader.execute(sell)
                await until(pilot, lambda: CALL_SHOWN[name] in market(), "the indicative in the panel")
                assert "tape:" not in market()  # nothing trades in a call
                assert admin("phase", "ACORN.LAB", "continuous") == 0
                in_call = False
                auction = re.compile(r"ACORN\.LAB 4 @ 101\.00 +\d\d:\d\d:\d\d +auction \(uncross\)")
                await until(pilot, lambda: auction.search(market()) is not None, "the auction trade marked")
                await until(pilot, lambda: "indicative" not in market() and "[Continuous" in market(),
                            "no indicative after the open")
                await until(pilot, lambda: [(o.price, o.leaves_qty) for o in client.open_orders()]
                            == [("101.00", 6)], "the bid's fill in the auction")
                # A halt, an offer of 2 at 101.00 against the rest of the bid, the resume's auction.
                in_call = True
                assert admin("halt", "ACORN.LAB", "news") == 0
                await until(pilot, lambda: "ACORN.LAB [Halted" in market(), "the halt")  # 4.2: no Text
                more = parse("sell ACORN.LAB 101.00 2")
                assert more is not None
                trader.execute(more)
                await until(pilot, lambda: HALT_SHOWN[name] in market(), "the resume's indicative")
                assert admin("resume", "ACORN.LAB") == 0
                in_call = False
                resumed = re.compile(r"ACORN\.LAB 2 @ 101\.00 +\d\d:\d\d:\d\d +auction \(uncross\)")
                await until(pilot, lambda: resumed.search(market()) is not None, "the resume's trade marked")
                await until(pilot, lambda: "indicative" not in market(), "no indicative after the resume")
                # The rest of the bid (4 at 101.00) rests in continuous trading: cancelled, for the next run.
                await until(pilot, lambda: [(o.price, o.leaves_qty) for o in client.open_orders()]
                            == [("101.00", 4)], "the bid's fill in the resume's auction")
                (rest,) = client.open_orders()
                await command(pilot, app, f"cancel {rest.clordid}")
                await until(pilot, lambda: "(Canceled)" in pane_text(app, "#wire"), "the rest cancelled")
                await command(pilot, app, "quit")
            assert app.return_value == 0

        asyncio.run(drive())
    finally:
        if in_call:
            admin("phase", "ACORN.LAB", "continuous")  # leave the instrument as the other tests expect
        session.stop()
        trader.session.stop()
