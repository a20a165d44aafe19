"""Indicative market data of a call (issue 31) to strict stock clients of FIX 4.4, 4.2 and 5.0 SP2,
and a gateway whose market-data thread starts in the middle of a call.

In ACORN.LAB's opening call (a SetPhase on the matcher's orders stream, as ``fixlab admin phase``
sends it) a bid of 10 at 101.00 and an offer of 4 at 100.00 cross: the book would uncross at 101.00
(both prices execute 4 and leave 6 bought: buy pressure, the higher), 4 executing, 6 more buyers.
Each subscriber sees that in its own version's entries, then the entries deleted at the open; no
client sends a session Reject (QuickFIX with the stock dictionary and every validation switch on).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import streams
from shared.bus import connect, publish
from shared.config import parse_instruments
from shared.schema import PHASE_CONTINUOUS, PHASE_PRE_OPEN, SetPhase
from tests.gateway_stack import Stack, gateway_stack, matcher_available, order
from tests.helpers import eventually
from tests.integration.test_gateway_marketdata import MDClient, entries, head, send_v, v
from tests.stock_client import StockSession, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

INDICATIVE = frozenset("45AQ")
Entries = dict[str, dict[int, str]]


@pytest.fixture
def stack() -> Iterator[Stack]:
    """A stack of its own per test: the second test needs a gateway whose market-data thread has not
    started before the call."""
    with gateway_stack(None) as s:
        yield s


def set_phase(stack: Stack, phase: int, reason: str) -> None:
    shard = next(i.shard for i in parse_instruments({}) if i.symbol == "ACORN.LAB")
    publish(connect(stack.redis_url), streams.orders_stream(shard),
            [SetPhase("ACORN.LAB", phase, reason, time.time_ns())], 10_000)


def shown(client: MDClient, req_id: str) -> Entries:
    """The indicative entries of ``req_id`` a client holds after its W and every X since, by type."""
    held: Entries = {}
    for text in client.messages():
        h = head(text)
        if h.get(262) != req_id:
            continue
        if h[35] == "W":
            held = {e[269]: e for e in entries(text, 269) if e[269] in INDICATIVE}
        elif h[35] == "X":
            for e in entries(text, 279):
                if e.get(269) not in INDICATIVE:
                    continue
                if e[279] == "2":
                    assert e[269] in held, f"a delete of an entry not held: {e}"
                    del held[e[269]]
                else:
                    assert (e[279] == "0") == (e[269] not in held), f"new/change out of step: {e}"
                    held[e[269]] = e
    return held


def view(held: Entries) -> dict[str, tuple[str | None, ...]]:
    """Each entry's price, size, TradingSessionSubID and TradeCondition."""
    return {kind: (e.get(270), e.get(271), e.get(625), e.get(277)) for kind, e in held.items()}


def cross(trader: StockSession) -> None:
    """A bid of 10 at 101.00 and an offer of 4 at 100.00, taken in the call."""
    trader.send("D", order("ind-b", 1, 10, "101.00"))
    trader.send("D", order("ind-s", 2, 4, "100.00"))
    for clordid in ("ind-b", "ind-s"):
        trader.client.wait("8", lambda m, c=clordid: m.get(11) == c and m.get(150) == "0")


# Each version's view of the call's uncross (101.00, 4 executing, 6 more buyers), by what it asked for.
WANTED = {
    "4.4": ("4A", {"4": ("101.00", "4", "2", None), "A": ("101.00", "6", "2", "P")}),
    "4.2": ("4", {"4": ("101.00", "4", None, None)}),  # no Imbalance (A) nor 625 in FIX 4.2
    "5.0SP2": ("QA", {"Q": ("101.00", "4", "2", None), "A": ("101.00", "6", "2", "P")}),
}


def test_each_version_reads_the_indicative_of_the_opening_call(stack: Stack, tmp_path: Path) -> None:
    comps, versions = ["CLIENT12", "CLIENT42-04", "CLIENT50-05", "CLIENT13"], ["4.4", "4.2", "5.0SP2", "4.4"]
    with stock_sessions(tmp_path, stack.fix_port, comps, app=MDClient, fix_version=versions) as sessions:
        *watchers, trader = sessions
        for s, version in zip(watchers, versions, strict=False):
            send_v(s, v(f"ind{version}", types="01" + WANTED[version][0], symbols=("ACORN.LAB",)))
        for s, version in zip(watchers, versions, strict=False):
            assert isinstance(s.client, MDClient)
            s.client.wait("W", lambda m, r=f"ind{version}": m.get(262) == r)
        set_phase(stack, PHASE_PRE_OPEN, "opening call")
        cross(trader)
        for s, version in zip(watchers, versions, strict=False):
            assert isinstance(s.client, MDClient)
            c, want = s.client, WANTED[version][1]
            eventually(lambda c=c, r=f"ind{version}", want=want: view(shown(c, r)) == want,
                       what=f"the indicative entries of the call for FIX {version}")
        set_phase(stack, PHASE_CONTINUOUS, "the open")
        fill = trader.client.wait("8", lambda m: m.get(11) == "ind-b" and m.get(150) == "F")
        assert (fill[31], fill[32]) == ("101.00", "4")  # at the indicative price, its volume
        for s, version in zip(watchers, versions, strict=False):
            assert isinstance(s.client, MDClient)
            eventually(lambda c=s.client, r=f"ind{version}": shown(c, r) == {},
                       what=f"the indicative entries deleted at the open for FIX {version}")
        for s in sessions:
            assert s.client.errors == []
            assert s.client.session_rejects() == [], f"{s.comp} rejected what the exchange sent"


def test_a_gateway_whose_feed_starts_mid_call_learns_the_phase_and_the_indicative(
        stack: Stack, tmp_path: Path) -> None:
    """The gateway's market-data thread starts at the first request, reading the market stream from
    its end: the call began, and the book crossed, before that. Its first answers say the call (a
    SecurityStatus 326=21 Pre-open, 625=2 opening auction, not 17) and the indicative in the W."""
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT13"]) as (trader,):
        set_phase(stack, PHASE_PRE_OPEN, "opening call")
        cross(trader)  # the trader stays logged on: a logout would cancel its orders
        with stock_sessions(tmp_path, stack.fix_port, ["CLIENT12"], app=MDClient) as (watcher,):
            c = watcher.client
            assert isinstance(c, MDClient)
            watcher.send("e", [(324, "late-ss"), (55, "ACORN.LAB"), (263, 1)])
            send_v(watcher, v("late", types="4A", symbols=("ACORN.LAB",)))
            status = c.wait("f", lambda m: m.get(324) == "late-ss")
            assert (status[325], status[326], status[625]) == ("N", "21", "2")
            w = c.wait("W", lambda m: m.get(262) == "late")
            assert w[268] == "2"  # in the W itself, not in an X after it
            assert view(shown(c, "late")) == WANTED["4.4"][1]
            assert c.errors == [] and c.session_rejects() == []
