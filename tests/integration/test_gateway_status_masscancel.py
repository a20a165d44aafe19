"""OrderStatusRequest (H), OrderMassCancelRequest (q) and SecurityListRequest (x) over real QuickFIX
sessions: a strict stock FIX 4.4 client (tests/stock_client.py), the gateway, a real redis-server and two
matcher shards (ACORN.LAB on shard 0, BIRCH.LAB on shard b, pro-rata). Every answer reaches the client's
application and its engine never answers one with a session Reject.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from shared import streams
from tests.gateway_stack import ROOT, Stack, gateway_stack, matcher_available, stop_process
from tests.helpers import eventually
from tests.stock_client import StockClient, StockSession, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

SHARDS = {"FIXLAB_SHARDS": "BIRCH.LAB:b", "FIXLAB_PRO_RATA": "BIRCH.LAB", "FIXLAB_MATCHER_BLOCK_MS": "100",
          "FIXLAB_MATCHER_HEALTH_SECONDS": "0.2"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The gateway and shard 0's matcher (gateway_stack), and shard b's matcher beside them."""
    with gateway_stack(None, env=SHARDS, gateway_id="gwstatus") as s:
        run = tmp_path_factory.mktemp("shard-b")
        log = run / "matcher-b.log"
        env = {**os.environ, **SHARDS, "REDIS_URL": s.redis_url, "FIXLAB_MATCHER_SHARD": "b",
               "FIXLAB_RUN_DIR": str(run), "PYTHONUNBUFFERED": "1"}
        with log.open("ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "services.matcher"], env=env, cwd=ROOT,
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        try:
            r = redis.Redis.from_url(s.redis_url)
            eventually(lambda: all(r.exists(streams.health_key("matcher", shard)) for shard in ("0", "b")),
                       timeout=30, what="both matcher shards reporting health")
            yield s
        except BaseException:
            sys.stderr.write(f"----- matcher b log -----\n{log.read_text()[-4000:]}\n")
            raise
        finally:
            stop_process(proc)


def now() -> str:
    return time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())


def order(clordid: str, symbol: str, side: int, qty: int, price: str) -> list[tuple[int, object]]:
    return [(11, clordid), (55, symbol), (54, side), (60, now()), (38, qty), (40, 2), (44, price)]


def place(s: StockSession, clordid: str, symbol: str, side: int, qty: int, price: str) -> dict[int, str]:
    s.send("D", order(clordid, symbol, side, qty, price))
    return s.client.wait("8", lambda m: m.get(11) == clordid and m.get(150) == "0")


def status(s: StockSession, clordid: str, symbol: str = "ACORN.LAB", side: int = 1,
           extra: list[tuple[int, object]] | None = None) -> dict[int, str]:
    s.send("H", [(11, clordid), (55, symbol), (54, side), *(extra or [])])
    return s.client.wait("8", lambda m: m.get(11) == clordid and m.get(150) == "I")


def clean(*clients: StockClient) -> None:
    for client in clients:
        assert client.errors == []
        assert client.session_rejects() == [], "the stock client rejected what the exchange sent"


def test_status_of_a_live_a_filled_a_cancelled_and_an_unknown_order(stack: Stack, tmp_path: Path) -> None:
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT11", "CLIENT12"]) as (a, b):
        live = place(a, "h-live", "ACORN.LAB", 1, 10, "99.00")
        er = status(a, "h-live", extra=[(790, "req-1")])
        assert (er[39], er[37], er[17], er[38], er[44], er[151], er[14], er[6], er[790]) == (
            "0", live[37], "0", "10", "99.00", "10", "0", "0", "req-1")
        assert (er[55], er[54]) == ("ACORN.LAB", "1") and 58 not in er

        place(a, "h-fill", "ACORN.LAB", 1, 5, "99.50")
        b.send("D", order("h-sell", "ACORN.LAB", 2, 5, "99.50"))
        a.client.wait("8", lambda m: m.get(11) == "h-fill" and m.get(39) == "2")
        er = status(a, "h-fill")
        assert (er[39], er[14], er[151], er[6], er[38]) == ("2", "5", "0", "99.50", "5")

        place(a, "h-cxl", "ACORN.LAB", 1, 3, "98.00")
        a.send("F", [(41, "h-cxl"), (11, "h-cxl-c"), (55, "ACORN.LAB"), (54, 1), (60, now())])
        a.client.wait("8", lambda m: m.get(11) == "h-cxl-c" and m.get(150) == "4")
        er = status(a, "h-cxl")
        assert (er[39], er[14], er[151]) == ("4", "0", "0")

        # On the other shard (BIRCH.LAB): the request goes where the order is.
        birch = place(a, "h-birch", "BIRCH.LAB", 2, 4, "26.00")
        er = status(a, "h-birch", "BIRCH.LAB", 2)
        assert (er[39], er[37], er[44]) == ("0", birch[37], "26.00")

        # Unknown order: rejected (39=8) with why, as FIX 4.4 prescribes; unknown symbol: the gateway says so.
        er = status(a, "h-nope")
        assert (er[39], er[37], er[103]) == ("8", "NONE", "5") and "unknown" in er[58]
        er = status(a, "h-sym", "NOPE.LAB")
        assert (er[39], er[103]) == ("8", "1") and "unknown symbol" in er[58]
        assert "unknown order" not in er[58]
        # Another session's order is not this session's to ask about.
        er = status(b, "h-live")
        assert er[39] == "8"

        # No Symbol (stock FIX 4.4 does not require it in H): the gateway says what is missing.
        a.send("H", [(11, "h-nosym"), (54, 1)])
        er = a.client.wait("8", lambda m: m.get(11) == "h-nosym" and m.get(150) == "I")
        assert (er[39], er[55]) == ("8", "NONE") and "needs a Symbol (55)" in er[58]
        # A request without a Side (54): the exchange's QuickFIX answers with a session Reject.
        a.send("H", [(11, "h-noside"), (55, "ACORN.LAB")])
        rej = a.client.wait("3", lambda m: m.get(371) == "54")
        assert rej[373] == "1"  # Required tag missing
        clean(a.client, b.client)


def position(client: StockClient, where: object) -> int:
    with client.lock:
        return next(i for i, m in enumerate(client.received) if where(m))  # type: ignore[operator]


def reports(client: StockClient, clordid: str) -> list[dict[int, str]]:
    with client.lock:
        return [m for m in client.received if m.get(35) == "r" and m.get(11) == clordid]


def mass(s: StockSession, clordid: str, kind: int, extra: list[tuple[int, object]] | None = None
         ) -> dict[int, str]:
    s.send("q", [(11, clordid), (530, kind), *(extra or []), (60, now())])
    return s.client.wait("r", lambda m: m.get(11) == clordid)


def cancelled(s: StockSession, clordids: list[str]) -> list[dict[int, str]]:
    return [s.client.wait("8", lambda m, c=c: m.get(11) == c and m.get(150) == "4")  # type: ignore[misc]
            for c in clordids]


def test_mass_cancel_by_side_by_symbol_and_all_over_two_shards(stack: Stack, tmp_path: Path) -> None:
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT13", "CLIENT14"]) as (a, other):
        mine = (("m-a1", "ACORN.LAB", 1, "98.00"), ("m-a2", "ACORN.LAB", 1, "97.00"),
                ("m-a3", "ACORN.LAB", 2, "101.00"), ("m-b1", "BIRCH.LAB", 1, "24.00"),
                ("m-b2", "BIRCH.LAB", 1, "23.50"), ("m-b3", "BIRCH.LAB", 2, "26.50"))
        for clordid, symbol, side, price in mine:
            place(a, clordid, symbol, side, 2, price)
        theirs = place(other, "m-other", "ACORN.LAB", 2, 1, "102.00")

        # By side, every symbol (530=7 with 54=2): both shards answer, the client gets one r with the sum,
        # before the Cancelled reports it announces.
        r = mass(a, "mc-sells", 7, [(54, 2)])
        assert (r[530], r[531], r[533], r[54]) == ("7", "7", "2", "2") and 532 not in r
        sells = cancelled(a, ["m-a3", "m-b3"])
        assert all(er[39] == "4" for er in sells)
        first = position(a.client, lambda m: m.get(35) == "r" and m.get(11) == "mc-sells")
        assert all(first < position(a.client, lambda m, c=c: m.get(11) == c and m.get(150) == "4")
                   for c in ("m-a3", "m-b3"))

        # By symbol (530=1): one shard.
        r = mass(a, "mc-birch", 1, [(55, "BIRCH.LAB")])
        assert (r[530], r[531], r[533], r[55]) == ("1", "1", "2", "BIRCH.LAB")
        cancelled(a, ["m-b1", "m-b2"])

        # All (530=7): what is left, on shard 0; shard b answers with nothing to cancel.
        r = mass(a, "mc-all", 7)
        assert (r[531], r[533]) == ("7", "2") and 54 not in r
        cancelled(a, ["m-a1", "m-a2"])
        # And again, with no order left: an r saying 0.
        r = mass(a, "mc-none", 7)
        assert (r[531], r[533]) == ("7", "0")
        # Each request was answered once: both shards wrote their answer to the earlier requests
        # before their answer to this last one, which the gateway sent only once both arrived.
        answered = [len(reports(a.client, c)) for c in ("mc-sells", "mc-birch", "mc-all", "mc-none")]
        assert answered == [1, 1, 1, 1]

        # Another session's order is untouched.
        er = status(other, "m-other", side=2)
        assert (er[39], er[37]) == ("0", theirs[37])

        # What the exchange does not take: the gateway answers with a rejected r.
        r = mass(a, "mc-product", 3, [(55, "ACORN.LAB")])
        assert (r[530], r[531], r[532]) == ("3", "0", "99") and "not supported" in r[58]
        r = mass(a, "mc-unknown", 1, [(55, "NOPE.LAB")])
        assert (r[531], r[532], r[533]) == ("0", "1", "0") and "unknown symbol" in r[58]
        r = mass(a, "mc-nosym", 1)
        assert (r[531], r[532]) == ("0", "1") and "needs a Symbol" in r[58]
        clean(a.client, other.client)


def test_security_list_of_all_one_and_an_unknown_instrument(stack: Stack, tmp_path: Path) -> None:
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT15"]) as (a,):
        def security_list(req_id: str, body: list[tuple[int, object]]) -> dict[int, str]:
            a.send("x", [(320, req_id), *body])
            return a.client.wait("y", lambda m: m.get(320) == req_id)

        y = security_list("sl-all", [(559, 4)])
        assert (y[560], y[393], y[146], y[893]) == ("0", "2", "2", "Y")
        assert y[55] == "BIRCH.LAB" and y[107] == "pro-rata"  # the last entry (the client's dict keeps it)
        y = security_list("sl-one", [(559, 0), (55, "ACORN.LAB")])
        assert (y[560], y[146], y[55], y[107], y[561], y[562]) == (
            "0", "1", "ACORN.LAB", "price-time", "1", "1")
        assert y[58] == ("tick=0.01 reference=100.00 band=80.00-120.00 min_qty=1 max_qty=1000 "
                         "matching=price-time")
        assert y[322] and y[322] != security_list("sl-again", [(559, 4)])[322]
        y = security_list("sl-unknown", [(559, 0), (55, "NOPE.LAB")])
        assert y[560] == "2" and 146 not in y
        y = security_list("sl-type", [(559, 1), (167, "CS")])
        assert y[560] == "1" and 146 not in y
        clean(a.client)
