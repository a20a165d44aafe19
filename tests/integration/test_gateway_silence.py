"""A silent session: the exchange sends a TestRequest, then its own Logout saying why, then ends it.

Raw sockets (tests.gateway_stack.FixClient) against the real gateway process; session level only, so
no matcher. HeartBtInt 3 s: the TestRequest comes at ~3.6-4.6 s, the Logout 2.1 s after it (see
SilenceTimers.grace_s), the engine's own heartbeat timeout would be at 7.2 s.
"""

from __future__ import annotations

import select
from collections.abc import Iterator

import pytest

from tests.gateway_stack import SOH, FixClient, Stack, gateway_stack, parse

pytestmark = pytest.mark.integration

HB = 3


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None, matcher=False) as s:
        yield s


def listen_silently(c: FixClient, timeout_s: float) -> tuple[list[dict[int, str]], bool]:
    """Every message the exchange sends, answering nothing; True when it closed the connection."""
    got: list[dict[int, str]] = []
    buf = c.buf
    while True:
        while (end := buf.find(SOH + b"10=")) >= 0 and (stop := buf.find(SOH, end + 1)) >= 0:
            got.append(parse(buf[:stop + 1]))
            buf = buf[stop + 1:]
        ready, _, _ = select.select([c.sock], [], [], timeout_s)
        if not ready:
            return got, False
        try:
            chunk = c.sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            return got, True
        buf += chunk


def test_silent_session_gets_a_test_request_then_the_exchanges_logout(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT05", heartbeat_s=HB) as c:
        got, closed = listen_silently(c, timeout_s=HB * 3)
        types = [m[35] for m in got]
        assert closed, f"the exchange did not end the session; it sent {types}"
        assert "1" in types and "5" in types, types
        test_request = got[types.index("1")]
        logout = got[types.index("5")]
        assert types.index("1") < types.index("5") == len(types) - 1  # the Logout is the last word
        assert logout[58] == f"no answer to TestRequest {test_request[112]}"
        assert int(logout[34]) == int(test_request[34]) + types.index("5") - types.index("1")
    # The engine ended the session, and the CompID may log on again at once.
    with FixClient(stack.fix_port, "CLIENT05", heartbeat_s=30) as again:
        again.send("1", [(112, "back")])
        assert again.expect("0", lambda m: m.get(112) == "back")[112] == "back"
        again.logout()
    assert stack.gateway.poll() is None


def test_a_session_that_answers_is_not_logged_out(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT06", heartbeat_s=2) as c:
        # FixClient answers each TestRequest with a Heartbeat; wait through three of them, each
        # long past the watchdog's grace (0.8 x 2 s) had it gone unanswered.
        for _ in range(3):
            c.expect("1", timeout_s=10)
        c.send("1", [(112, "still-here")])
        assert c.expect("0", lambda m: m.get(112) == "still-here")[112] == "still-here"
        assert all(m.get(35) != "5" for m in c.received)
        c.logout()


def test_other_sessions_keep_their_session_while_one_goes_silent(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT07", heartbeat_s=HB) as silent, \
            FixClient(stack.fix_port, "CLIENT08", heartbeat_s=30) as talking:
        got, closed = listen_silently(silent, timeout_s=HB * 3)
        assert closed and got[-1][35] == "5"
        talking.send("1", [(112, "fine")])
        assert talking.expect("0", lambda m: m.get(112) == "fine")[112] == "fine"
        assert all(m.get(35) != "5" for m in talking.received)
        talking.logout()
