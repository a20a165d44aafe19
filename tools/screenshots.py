"""The screenshots of the README and the site, taken from a running stack so they cannot go stale.

    python -m tools.screenshots --out docs/images      # `make screenshots`; `make test` runs it

Starts a fresh stack (`make run`'s, bots on), then:

- ``lab-page.png``: the lab page in Debian's chromium (Playwright): logged on, one order bought at
  the bots' best offer, its New and Trade on the wire;
- ``terminal-client.svg``: ``fixlab client``'s full screen (Textual's own ``save_screenshot``),
  logged on, ACORN.LAB's book subscribed, one order resting.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tools.stack import Stack, fresh_stack

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PAGE_FILE = "lab-page.png"
TERMINAL_FILE = "terminal-client.svg"
TERMINAL_COMP_ID = "CLIENT16"
# What the terminal client's screenshot shows (its session, the order sent, its instrument).
TERMINAL_SHOWS = (TERMINAL_COMP_ID, "NewOrderSingle", "ACORN.LAB")
WAIT_S = 30.0


def page_screenshot(stack: Stack, out: Path) -> Path:
    from playwright.sync_api import expect, sync_playwright

    target = out / PAGE_FILE
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(stack.web_url)
            expect(page.locator("#conn")).to_have_text("connected", timeout=WAIT_S * 1000)
            page.click("#b-logon")
            expect(page.locator("#status")).to_have_text("logged on", timeout=WAIT_S * 1000)
            best_ask = page.locator(".book").first.locator("tr.ask td.px").last
            expect(best_ask).to_be_visible(timeout=WAIT_S * 1000)
            best_ask.click()
            page.click("#b-send")
            expect(page.locator(".msg.exchange.app", has_text="ExecType Trade").first).to_be_visible(
                timeout=WAIT_S * 1000)
            page.screenshot(path=str(target), full_page=False)
        finally:
            browser.close()
    return target


def terminal_screenshot(stack: Stack, out: Path) -> Path:
    from textual.widgets import DataTable, Input

    from services.client.core import Client
    from services.client.session import ClientSession
    from services.client.tui import ClientApp, WireView
    from shared.fix import dictionary

    session = ClientSession(TERMINAL_COMP_ID, port=stack.fix_port, heartbeat_s=30)
    client = Client(session, dictionary.load())
    session.on_record = client.on_record
    session.start()
    app = ClientApp(client)

    async def drive() -> None:
        async with app.run_test(size=(160, 46)) as pilot:
            def wire() -> str:
                return app.query_one("#wire", WireView).text()

            async def until(check: Callable[[], bool], what: str) -> None:
                deadline = time.monotonic() + WAIT_S
                while not check():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the terminal client: {what} not seen in {WAIT_S:g} s")
                    await pilot.pause(0.05)

            async def command(line: str) -> None:
                prompt = app.query_one("#prompt", Input)
                prompt.focus()
                prompt.value = line
                await pilot.press("enter")

            await until(lambda: "Logon 35=A" in wire(), "the Logon")
            await command("book ACORN.LAB")
            await until(lambda: "MarketDataSnapshotFullRefresh 35=W" in wire(), "the book's snapshot")
            await command("buy ACORN.LAB 95.00 10")
            await until(lambda: "ExecType(150)=0 (New)" in wire(), "the order's New")
            orders = app.query_one("#orders", DataTable)
            await until(lambda: orders.row_count == 1, "the open order listed")
            # The widgets' state is there before the screen is drawn from it (a busy machine draws
            # late): what is saved is a drawing that shows it.
            svg = ""

            def drawn() -> bool:
                nonlocal svg
                svg = app.export_screenshot()
                return all(text in svg.replace("&#160;", " ") for text in TERMINAL_SHOWS)

            try:
                await until(drawn, "a screen showing the session, the order and its instrument")
            except RuntimeError as exc:
                shown = svg.replace("&#160;", " ")
                missing = [text for text in TERMINAL_SHOWS if text not in shown]
                (out / f"unfinished-{TERMINAL_FILE}").write_text(svg, encoding="utf-8")
                raise RuntimeError(f"{exc}: {missing} not on it (saved as unfinished-{TERMINAL_FILE})"
                                   ) from None
            (out / TERMINAL_FILE).write_text(svg, encoding="utf-8")
            await command("quit")

    try:
        session.wait_logon(WAIT_S)
        asyncio.run(drive())
    finally:
        session.stop()
    return out / TERMINAL_FILE


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.screenshots", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("docs/images"), help="where to write them")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fixlab-shots-") as tmp, fresh_stack(Path(tmp) / "run") as stack:
        for shot in (page_screenshot, terminal_screenshot):
            print(f"wrote {shot(stack, args.out)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
