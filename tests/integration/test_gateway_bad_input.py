"""Bad bytes on the FIX port: each gets the engine's Reject, a Logout or a closed socket; the gateway
stays up, other sessions keep trading and no valid order is lost."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from shared import streams
from shared.schema import NewOrder, decode_batch
from tests.gateway_stack import FixClient, Stack, fix_now, frame, gateway_stack, matcher_available, order

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


@pytest.fixture(autouse=True)
def still_up_and_trading(stack: Stack) -> Iterator[None]:
    """After every case: the gateway process lives and a fresh pair of sessions still trades."""
    yield
    assert stack.gateway.poll() is None, "the gateway process died"
    with FixClient(stack.fix_port, "CLIENT15") as a, FixClient(stack.fix_port, "CLIENT16") as b:
        a.send("D", order("ok-b", 1, 1, "110.00"))
        a.expect("8", lambda m: m.get(11) == "ok-b" and m.get(150) == "0")
        b.send("D", order("ok-s", 2, 1, "110.00"))
        fill = b.expect("8", lambda m: m.get(11) == "ok-s" and m.get(150) == "F")
        assert a.expect("8", lambda m: m.get(11) == "ok-b" and m.get(150) == "F")[527] == fill[527]


def acked(c: FixClient, clordid: str) -> dict[int, str]:
    return c.expect("8", lambda m: m.get(11) == clordid and m.get(150) == "0")


def test_garbage_before_logon_closes_the_socket(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT01", logon=False) as c:
        c.send_raw(b"GET / HTTP/1.1\r\nHost: fixlab\r\n\r\n" * 10)
        assert c.closed()


def test_a_megabyte_of_garbage_closes_the_socket(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT01", logon=False) as c:
        c.send_raw(b"\x00\xff garbage " * 100_000)
        assert c.closed()


def test_logon_with_unknown_compid_closes_the_socket(stack: Stack) -> None:
    with FixClient(stack.fix_port, "NOSUCH01", logon=False) as c:
        c.send("A", [(98, 0), (108, 30), (141, "Y")])
        assert c.closed()
        assert not any(m.get(35) == "A" for m in c.received)


def test_garbled_logon_closes_the_socket(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT01", logon=False) as c:
        c.send_raw(b"8=FIX.4.4\x019=5\x0135=A\x0110=000\x01")
        assert c.closed()


@pytest.mark.parametrize("damage", ["checksum", "body_length"])
def test_garbled_message_is_ignored_and_the_next_one_goes_through(stack: Stack, damage: str) -> None:
    with FixClient(stack.fix_port, "CLIENT02") as c:
        raw = c.message("D", order("garbled", 1, 1, "100.00"))
        if damage == "checksum":
            raw = raw[:-4] + (b"000" if not raw.endswith(b"000\x01") else b"001") + b"\x01"
        else:
            # Too short (a too long one makes the parser wait for the declared bytes, swallowing
            # what follows until then, which is what QuickFIX's acceptance test 2m expects).
            length = raw.split(b"\x019=", 1)[1].split(b"\x01", 1)[0]
            shorter = str(int(length) - 20).encode()
            raw = raw.replace(b"\x019=" + length + b"\x01", b"\x019=" + shorter + b"\x01", 1)
        c.send_raw(raw)
        # The same sequence number again, correct this time: QuickFIX dropped the garbled one.
        c.send("D", order("clean", 1, 1, "100.00"))
        acked(c, "clean")
        assert not any(m.get(11) == "garbled" for m in c.received)


@pytest.mark.parametrize(("fields", "tag", "reason"), [
    ([(11, "m1"), (55, "ACORN.LAB"), (60, "<now>"), (38, 1), (40, 2), (44, "100.00")], "54", "1"),
    (None, "44", "6"),  # 44=abc: incorrect data format
])
def test_invalid_message_gets_the_engines_reject(stack: Stack, fields: list[tuple[int, object]] | None,
                                                 tag: str, reason: str) -> None:
    with FixClient(stack.fix_port, "CLIENT03") as c:
        if fields is None:
            body = order("m2", 1, 1, "abc")
        else:
            body = [(t, fix_now() if v == "<now>" else v) for t, v in fields]
        c.send("D", body)
        rej = c.expect("3")
        assert (rej[371], rej[372], rej[373]) == (tag, "D", reason)
        c.send("D", order("after", 1, 1, "100.00"))
        acked(c, "after")


def test_unknown_msgtype_gets_a_reject(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT04") as c:
        c.send("ZZ", [(58, "what is this")])
        rej = c.expect("3")
        assert (rej[372], rej[373]) == ("ZZ", "11")


def test_negative_quantity_gets_a_rejected_execution_report(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT05") as c:
        c.send("D", order("neg", 1, -5, "100.00"))
        rej = c.expect("8", lambda m: m.get(11) == "neg")
        assert (rej[150], rej[103]) == ("8", "13")


def test_a_one_megabyte_message_is_handled_and_the_session_goes_on(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT06") as c:
        c.send("D", [*order("big", 1, 1, "100.00"), (58, "x" * 1_000_000)])
        acked(c, "big")
        c.send("D", order("after-big", 1, 1, "100.00"))
        acked(c, "after-big")


def test_no_valid_order_is_lost_among_bad_input(stack: Stack) -> None:
    """Interleave valid orders with garbled and invalid ones: every valid one is on the bus and acked."""
    with FixClient(stack.fix_port, "CLIENT07") as c:
        sent = []
        for i in range(20):
            c.send("D", order(f"v{i}", 1, 1, "85.00"))
            sent.append(f"v{i}")
            if i % 3 == 0:
                c.send("D", order(f"bad{i}", 1, 1, "abc"))  # engine Reject, consumes a sequence number
            if i % 4 == 0:
                garbled = c.message("D", order(f"g{i}", 1, 1, "85.00"))
                c.send_raw(garbled.replace(b"\x0110=", b"\x0110=9", 1))  # not counted: same seq next
            if i % 5 == 0:
                c.send_raw(frame([(35, "D")]))  # no header at all: garbled
        for clordid in sent:
            acked(c, clordid)
        r = redis.Redis.from_url(stack.redis_url)
        on_bus = {m.clordid for _id, f in r.xrange(streams.orders_stream("0"))
                  for m in decode_batch(f[streams.BATCH_FIELD])
                  if isinstance(m, NewOrder) and m.session == "CLIENT07"}
        assert on_bus == set(sent)
        r.close()
