"""The terminal client's wire view follows what arrives, however fast, until the visitor scrolls up.

A Textual app of one WireView (Textual's own test harness, no stack): messages added in bursts, as
a busy machine delivers them, several before the screen is refreshed once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from rich.style import Style
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from services.client.tui import WireView

PLAIN = Style()


class OneWire(App[None]):
    def compose(self) -> ComposeResult:
        yield WireView(10_000, id="wire")


async def until(pilot: Pilot[None], check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not met in {timeout} s"
        await pilot.pause(0.02)


def test_a_burst_of_messages_leaves_the_view_at_its_last_one() -> None:
    async def drive() -> None:
        app = OneWire()
        async with app.run_test(size=(80, 20)) as pilot:
            wire = app.query_one("#wire", WireView)
            for burst in range(6):  # each burst: many adds with no refresh between them
                for n in range(8):
                    wire.add([(f"message {burst * 8 + n}", PLAIN)])
                await pilot.pause(0)
            await until(pilot, lambda: wire.scroll_offset.y == wire.max_scroll_y > 0,
                        "the view scrolled to its end")
            await pilot.pause(0.1)  # nothing pending may move it away again
            assert wire.scroll_offset.y == wire.max_scroll_y == len(wire.rows) - wire.size.height
            assert wire.rows[-1][0] == "message 47"

    asyncio.run(drive())


def test_a_visitor_who_scrolled_up_stays_where_they_are_until_they_come_back_down() -> None:
    async def drive() -> None:
        app = OneWire()
        async with app.run_test(size=(80, 20)) as pilot:
            wire = app.query_one("#wire", WireView)
            wire.add([(f"message {n}", PLAIN) for n in range(100)])
            await until(pilot, lambda: wire.scroll_offset.y == wire.max_scroll_y > 0, "at the end")
            wire.scroll_to(y=10, animate=False)
            await until(pilot, lambda: wire.scroll_offset.y == 10, "scrolled up")
            wire.add([(f"later {n}", PLAIN) for n in range(20)])
            await pilot.pause(0.1)
            assert wire.scroll_offset.y == 10  # reading back: not pulled down
            wire.scroll_end(animate=False)
            await until(pilot, lambda: wire.scroll_offset.y == wire.max_scroll_y, "back at the end")
            wire.add([("newest", PLAIN)])
            await until(pilot, lambda: wire.scroll_offset.y == wire.max_scroll_y == len(wire.rows)
                        - wire.size.height, "following again")

    asyncio.run(drive())


def test_the_view_follows_after_it_became_smaller_than_what_it_shows() -> None:
    """What arrived while the view still had room (or before the layout settled), then the view made
    smaller: it must still follow what arrives next (it stayed at its top row, in a loaded run)."""
    async def drive() -> None:
        app = OneWire()
        async with app.run_test(size=(80, 40)) as pilot:
            wire = app.query_one("#wire", WireView)
            wire.add([(f"message {n}", PLAIN) for n in range(30)])  # fits in 40 rows
            await pilot.pause(0.1)
            assert wire.max_scroll_y == 0
            await pilot.resize_terminal(80, 20)
            await until(pilot, lambda: wire.max_scroll_y > 0, "the view smaller than its rows")
            wire.add([("newest", PLAIN)])
            await until(pilot, lambda: wire.scroll_offset.y == wire.max_scroll_y, "the view at its end")

    asyncio.run(drive())
