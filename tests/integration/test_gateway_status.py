"""Trading status over FIX from strict stock clients of FIX 4.4, 4.2 and 5.0 SP2: SecurityStatusRequest
(35=e) and TradingSessionStatusRequest (35=g) with SubscriptionRequestType 1 get their snapshot (f, h),
then a SecurityStatus at each phase change the matcher publishes (a SetPhase on its orders stream: a
halt, then the resume), and no client sends a session Reject."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import streams
from shared.bus import connect, publish
from shared.config import parse_instruments
from shared.schema import PHASE_CONTINUOUS, PHASE_HALTED, SetPhase
from tests.gateway_stack import Stack, gateway_stack, matcher_available
from tests.integration.test_gateway_marketdata import MDClient, send_v, v
from tests.stock_client import StockSession, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


def set_phase(stack: Stack, phase: int, reason: str) -> None:
    shard = next(i.shard for i in parse_instruments({}) if i.symbol == "ACORN.LAB")
    publish(connect(stack.redis_url), streams.orders_stream(shard),
            [SetPhase("ACORN.LAB", phase, reason, time.time_ns())], 10_000)


def test_security_and_session_status_in_each_version(stack: Stack, tmp_path: Path) -> None:
    comps, versions = ["CLIENT12", "CLIENT42-04", "CLIENT50-05"], ["4.4", "4.2", "5.0SP2"]
    with stock_sessions(tmp_path, stack.fix_port, comps, app=MDClient, fix_version=versions) as sessions:
        for s in sessions:
            s.send("e", [(324, "ss1"), (55, "ACORN.LAB"), (263, 1)])
            s.send("g", [(335, "ts1"), (263, 1)])
        for s in sessions:
            f = s.client.wait("f", lambda m: m.get(324) == "ss1")
            assert (f[55], f[325], f[326]) == ("ACORN.LAB", "N", "17")  # ready to trade
            h = s.client.wait("h", lambda m: m.get(335) == "ts1")
            assert (h[340], h[325], h[336]) == ("2", "N", "1")  # open
        # The market-data thread follows the market streams once a W has come (it started reading).
        ready: StockSession = sessions[0]
        send_v(ready, v("md1", symbols=("ACORN.LAB",)))
        assert isinstance(ready.client, MDClient)
        ready.client.wait("W", lambda m: m.get(262) == "md1")
        set_phase(stack, PHASE_HALTED, "news pending")
        for s in sessions:
            halt = s.client.wait("f", lambda m: m.get(325) == "Y" and m.get(326) == "2")
            assert halt[324] == "ss1"
            if s.begin != "FIX.4.2":  # 4.2 has no TradingSessionSubID, nor Text in SecurityStatus
                assert (halt[625], halt[58]) == ("9", "news pending")
        set_phase(stack, PHASE_CONTINUOUS, "resume")
        for s in sessions:
            s.client.wait("f", lambda m: m.get(325) == "Y" and m.get(326) == "3")  # resume
        for s in sessions:
            assert s.client.errors == []
            assert s.client.session_rejects() == [], "a stock client rejected what the exchange sent"
