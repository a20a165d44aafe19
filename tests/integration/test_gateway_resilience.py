"""The gateway through a Redis outage, with a full hand-off queue, and on SIGTERM."""

from __future__ import annotations

import signal

import pytest

from shared.redis_server import RedisServer
from tests.gateway_stack import FixClient, gateway_stack, matcher_available, order

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


def new(c: FixClient, clordid: str, timeout_s: float = 20) -> dict[int, str]:
    return c.expect("8", lambda m: m.get(11) == clordid and m.get(150) == "0", timeout_s=timeout_s)


def test_orders_wait_through_a_redis_outage_and_none_is_lost(fresh_redis: RedisServer) -> None:
    with gateway_stack(fresh_redis.url) as stack, FixClient(stack.fix_port, "CLIENT01") as c:
        c.send("D", order("before", 1, 1, "100.00"))
        new(c, "before")
        fresh_redis.kill()
        for i in range(5):
            c.send("D", order(f"during{i}", 1, 1, "100.00"))
        # The session stays up while Redis is down: the engine still answers a TestRequest.
        c.send("1", [(112, "still-there")])
        assert c.expect("0", lambda m: m.get(112) == "still-there")[112] == "still-there"
        assert stack.gateway.poll() is None
        fresh_redis.start()
        for i in range(5):
            new(c, f"during{i}")


def test_a_full_queue_refuses_orders_with_a_clear_text(fresh_redis: RedisServer) -> None:
    # The publisher holds at most 10 commands while Redis is down (the one it is retrying included).
    env = {"FIXLAB_GATEWAY_QUEUE": "10", "FIXLAB_GATEWAY_BATCH": "1"}
    with gateway_stack(fresh_redis.url, env=env) as stack, \
            FixClient(stack.fix_port, "CLIENT02") as c:
        c.send("D", order("warm", 1, 1, "100.00"))
        new(c, "warm")
        fresh_redis.kill()
        sent = [f"q{i}" for i in range(15)]
        for clordid in sent:
            c.send("D", order(clordid, 1, 1, "100.00"))
        # 10 wait; the rest are refused at once.
        first_refusal = c.expect("8", lambda m: m.get(150) == "8")
        assert "exchange busy" in first_refusal[58] and first_refusal[103] == "99"
        fresh_redis.start()
        answers: dict[str, str] = {first_refusal[11]: "8"}
        while len(answers) < len(sent):
            m = c.expect("8", lambda m: m.get(11) in sent and m.get(11) not in answers, timeout_s=20)
            answers[m[11]] = m[150]
        refused = {k for k, v in answers.items() if v == "8"}
        assert {v for v in answers.values()} == {"0", "8"}
        assert refused == set(sent[10:])
        # Refusals come first (at once), the waiting orders only once Redis is back.
        assert sent[-1] in refused


def test_sigterm_logs_every_session_out_and_exits_cleanly() -> None:
    with gateway_stack(None) as stack, FixClient(stack.fix_port, "CLIENT03") as a, \
            FixClient(stack.fix_port, "BENCH001") as b:
        stack.gateway.send_signal(signal.SIGTERM)
        for c in (a, b):
            c.expect("5")
            c.send("5", [])
        assert stack.gateway.wait(20) == 0
