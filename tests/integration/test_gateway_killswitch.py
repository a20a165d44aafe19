"""The kill switch and risk limits end to end: a real redis-server, matcher and gateway, strict stock
QuickFIX clients, and ``fixlab admin`` run as a user runs it (a child process).

- ``fixlab admin kill`` cancels every open order of the session (each told with an ExecutionReport
  Canceled), refuses its new orders with an ExecutionReport Rejected and a Text until ``unkill``;
- without the token, with a wrong one, or a command written to the bus by hand: refused, non-zero
  exit, nothing happens;
- the sessions file's limits: each breach an ExecutionReport Rejected, 103=3, a Text naming the
  limit; sessions without limits trade as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from shared import streams
from shared.bus import publish
from shared.operator import TOKEN_ENV, TOKEN_FILE_ENV, Token, sign
from shared.schema import AdminAnswer, decode_batch
from tests.gateway_stack import ROOT, Stack, gateway_stack, matcher_available
from tests.helpers import eventually
from tests.stock_client import StockClient, StockSession, nos, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

TOKEN = "kill-switch-test-operator-token-0123456789"
SESSIONS = """
[FIRM]
Name=RISKY
Sessions=RISK02
MaxOpenValue=3000
[SESSION]
TargetCompID=RISK01
MaxOrderQty=100
MaxOrderValue=5000
MaxOpenValue=8000
MaxPosition=60
PriceCollar=5%
[SESSION]
TargetCompID=RISK02
Firm=RISKY
[SESSION]
TargetCompID=RISK03
Firm=RISKY
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path = tmp_path_factory.mktemp("kill") / "sessions.cfg"
    path.write_text(SESSIONS)
    env = {TOKEN_ENV: TOKEN, "FIXLAB_FIX_SESSIONS_FILE": str(path), "FIXLAB_MATCHER_BLOCK_MS": "100",
           "FIXLAB_HEALTH_SECONDS": "0.5"}
    with gateway_stack(None, env=env, gateway_id="gwkill") as s:
        r = redis.Redis.from_url(s.redis_url)
        eventually(lambda: r.exists(streams.health_key("gateway", "gwkill")), timeout=30,
                   what="the gateway reporting health")
        yield s


def admin(stack: Stack, *args: str, token: str | None = TOKEN, token_file: str = "/nonexistent/token"
          ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}
    env.update({"REDIS_URL": stack.redis_url, TOKEN_FILE_ENV: token_file})
    if token is not None:
        env[TOKEN_ENV] = token
    return subprocess.run([sys.executable, "-m", "services.cli", "admin", "--timeout", "10", *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


def place(s: StockSession, clordid: str, side: int, qty: int, price: str) -> dict[int, str]:
    s.send("D", nos(clordid, side, qty, price))
    return s.client.wait("8", lambda m: m.get(11) == clordid)


def clean(*clients: StockClient) -> None:
    for client in clients:
        assert client.errors == []
        assert client.session_rejects() == [], "the stock client rejected what the exchange sent"


def test_kill_cancels_refuses_and_unkill_lets_it_trade(stack: Stack, tmp_path: Path) -> None:
    r = redis.Redis.from_url(stack.redis_url)
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT03", "CLIENT04"]) as (a, other):
        assert place(a, "k1", 1, 5, "95.00")[150] == "0"
        assert place(a, "k2", 2, 5, "105.00")[150] == "0"
        assert place(other, "o1", 1, 5, "94.00")[150] == "0"

        done = admin(stack, "kill", "CLIENT03")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "CLIENT03 killed" in done.stdout and "2 open orders cancelled" in done.stdout
        for clordid in ("k1", "k2"):
            er = a.client.wait("8", lambda m, c=clordid: m.get(11) == c and m.get(150) == "4")  # type: ignore[misc]
            assert er[39] == "4"
        with a.client.lock:
            assert not [m for m in a.client.received if m.get(35) == "r"], "the session asked for no r"
        assert r.sismember(streams.KILLED_KEY, "CLIENT03")

        er = place(a, "k3", 1, 1, "95.00")
        assert (er[150], er[39]) == ("8", "8") and "killed by the exchange's operator" in er[58]
        # A replace is refused too; another session trades on.
        assert place(other, "o2", 1, 1, "94.00")[150] == "0"

        done = admin(stack, "unkill", "CLIENT03")
        assert done.returncode == 0 and "CLIENT03 unkilled" in done.stdout, done.stdout + done.stderr
        assert place(a, "k4", 1, 1, "95.00")[150] == "0"
        assert not r.sismember(streams.KILLED_KEY, "CLIENT03")
        clean(a.client, other.client)


def test_without_the_token_nothing_happens(stack: Stack, tmp_path: Path) -> None:
    r = redis.Redis.from_url(stack.redis_url)
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT05"]) as (a,):
        assert place(a, "n1", 1, 5, "95.00")[150] == "0"

        none = admin(stack, "kill", "CLIENT05", token=None)
        assert none.returncode == 2 and "refused: no operator token" in none.stderr and none.stdout == ""

        wrong = admin(stack, "kill", "CLIENT05", token="not-the-operator-token-at-all")
        assert wrong.returncode == 1 and "refused: bad operator token" in wrong.stdout, wrong.stdout

        # Whoever writes to the bus directly (the web, say) with a made-up signature: refused too.
        forged = sign(Token(b"a-visitor-guessing-tokens-here", "x"), "kill", "CLIENT05")
        publish(r, streams.ADMIN_STREAM, [forged], 1000)
        answers = streams.admin_answers_stream(forged.req_id)
        got = eventually(lambda: r.xrange(answers), what="the gateway's answer to a forged command")
        (answer,) = decode_batch(got[0][1][streams.BATCH_FIELD])
        assert isinstance(answer, AdminAnswer) and not answer.ok and "bad operator token" in answer.text
        # A valid command replayed: refused as a replay.
        valid = sign(Token(TOKEN.encode(), "test"), "unkill", "CLIENT05")
        publish(r, streams.ADMIN_STREAM, [valid, valid], 1000)
        got = eventually(lambda: len(r.xrange(streams.admin_answers_stream(valid.req_id))) == 2 and
                         r.xrange(streams.admin_answers_stream(valid.req_id)), what="two answers")
        texts = [decode_batch(f[streams.BATCH_FIELD])[0].text for _id, f in got]  # type: ignore[attr-defined]
        assert "unkilled" in texts[0] and "replay" in texts[1]

        assert not r.sismember(streams.KILLED_KEY, "CLIENT05")
        assert place(a, "n2", 1, 5, "95.00")[150] == "0"
        a.send("H", [(11, "n1"), (55, "ACORN.LAB"), (54, 1)])
        assert a.client.wait("8", lambda m: m.get(11) == "n1" and m.get(150) == "I")[39] == "0"
        clean(a.client)


def test_risk_limits_of_a_session_and_a_firm(stack: Stack, tmp_path: Path) -> None:
    with stock_sessions(tmp_path, stack.fix_port, ["RISK01", "RISK02", "RISK03", "CLIENT06"]) as (
            a, f2, f3, free):
        def rejected(s: StockSession, clordid: str, side: int, qty: int, price: str, limit: str) -> None:
            er = place(s, clordid, side, qty, price)
            assert (er[150], er[39], er[103]) == ("8", "8", "3"), er
            assert f"risk limit {limit}" in er[58], er[58]

        rejected(a, "q1", 1, 101, "90.00", "MaxOrderQty")  # 101 > 100
        rejected(a, "v1", 1, 60, "99.00", "MaxOrderValue")  # 5940 > 5000
        assert place(a, "ok1", 1, 50, "90.00")[150] == "0"  # 4500 open
        rejected(a, "open1", 1, 45, "90.00", "MaxOpenValue")  # 4500 + 4050 > 8000
        rejected(a, "pos1", 1, 11, "90.00", "MaxPosition")  # 50 open buys + 11 > 60
        # A cancel gives the room back.
        a.send("F", [(41, "ok1"), (11, "ok1-c"), (55, "ACORN.LAB"), (54, 1), (60, "20260101-00:00:00")])
        a.client.wait("8", lambda m: m.get(11) == "ok1-c" and m.get(150) == "4")
        assert place(a, "ok2", 1, 45, "90.00")[150] == "0"

        # The price collar: after a trade at 100.00, a buy more than 5% above (105.05) is refused.
        assert place(free, "t-sell", 2, 1, "100.00")[150] == "0"
        assert place(free, "t-buy", 1, 1, "100.00")[150] == "0"
        free.client.wait("8", lambda m: m.get(11) == "t-buy" and m.get(39) == "2")
        eventually(lambda: _collar_refuses(a), what="the collar around the last trade")
        assert place(a, "c-ok", 2, 1, "105.00")[150] == "0"  # a sell above the last trade: fine

        # The firm's MaxOpenValue covers both its sessions together.
        assert place(f2, "f1", 1, 10, "100.00")[150] == "0"  # 1000
        assert place(f3, "f2", 1, 15, "100.00")[150] == "0"  # 2500
        rejected(f3, "f3", 1, 6, "100.00", "MaxOpenValue of the firm RISKY")  # 2500 + 600 > 3000
        # A session without limits: anything the band allows.
        assert place(free, "big", 1, 1000, "81.00")[150] == "0"
        clean(a.client, f2.client, f3.client, free.client)


_tried = iter(range(1_000_000))


def _collar_refuses(a: StockSession) -> bool:
    clordid = f"c{next(_tried)}"
    er = place(a, clordid, 1, 1, "105.10")
    if er[150] == "0":  # the gateway had not seen the trade yet: take the order back and try again
        a.send("F", [(41, clordid), (11, clordid + "-c"), (55, "ACORN.LAB"), (54, 1),
                     (60, "20260101-00:00:00")])
        a.client.wait("8", lambda m: m.get(11) == clordid + "-c")
        return False
    assert er[103] == "3" and "risk limit PriceCollar" in er[58], er
    return True
