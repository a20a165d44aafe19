"""Fuzz the lab's WebSocket command protocol on a live web service (with a gateway taking the lab
sessions, so commands that pass the schema go all the way to a visitor's QuickFIX initiator).

Hypothesis draws frames: random JSON, valid commands with one part broken (wrong types, unknown
ops and keys, odd values), edge values the schema accepts, raw text, non-UTF-8 and binary frames,
frames over the command limit. After every frame the fuzzing page sends a ping and reads up to its
pong: a frame ``services.web.commands.parse_command`` refuses must have drawn a ``bad_command``
error, one it accepts must not. Then a table of single cases (a frame over the WebSocket limit, a
flood that is never read, another site's Origin). Throughout, the web and the gateway live and
another page's session keeps trading. FIXLAB_WS_FUZZ_INPUTS sets the count (3,000 by default).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from services.web.commands import OPS, CommandError, parse_command
from tests.e2e.webstack import Client, WebProcess, web_process
from tests.gateway_stack import Stack, gateway_stack, matcher_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

INPUTS = int(os.environ.get("FIXLAB_WS_FUZZ_INPUTS", "3000"))
MAX_COMMAND = 2048
MAX_FRAME = 65536


@dataclass
class Site:
    stack: Stack
    web: WebProcess


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    env = {"FIXLAB_PAGES_PER_ADDRESS": "20", "FIXLAB_WS_MAX_COMMAND_BYTES": str(MAX_COMMAND),
           "FIXLAB_WS_MAX_FRAME_BYTES": str(MAX_FRAME), "FIXLAB_ORDER_RATE": "50", "FIXLAB_ORDER_BURST": "50"}
    with gateway_stack(None, labs=True, gateway_id="gwwsfuzz") as stack, \
            web_process(stack.redis_url, env=env) as web:
        yield Site(stack, web)


def logged_on(url: str) -> Client:
    c = Client(url)
    c.wait("hello")
    c.send({"op": "logon"})
    c.wait("state", lambda m: m.get("status") == "logged_on", timeout=20)
    return c


def trades(c: Client, tag: str) -> None:
    """The page's session still works: an order goes out and the exchange acknowledges it."""
    c.send({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "90.00", "qty": 1, "id": tag})
    c.wait("wire", lambda m: m.get("source") == "exchange" and m.get("msg_type") == "8"
           and any(f[0] == 150 and f[2] == "0" for f in m["fields"]), timeout=20)


def drain(c: Client) -> None:
    """Read what has arrived for a page, without waiting."""
    while True:
        try:
            c.seen.append(json.loads(c.ws.recv(timeout=0)))
        except TimeoutError:
            return


# --------------------------------------------------------------------------- frames

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)

UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
PRINTABLE = "".join(chr(c) for c in range(0x21, 0x7F))
valid_values = {
    "symbol": st.sampled_from(["ACORN.LAB", "BIRCH.LAB", "A", "ZZZZZZZZZZZZZZZZ", "A.9"])
    | st.builds(lambda a, b: a + b, st.sampled_from(UPPER), st.text(UPPER + "0123456789.", max_size=15)),
    "side": st.sampled_from(["buy", "sell"]),
    "price": st.sampled_from(["100.00", "0", "0.00000001", "999999999.99999999", "80.00", "120.01"])
    | st.integers(0, 10**9)
    | st.builds(lambda a, b: f"{a}.{b}", st.integers(0, 10**9 - 1), st.integers(0, 10**8 - 1)),
    "qty": st.integers(1, 10**9) | st.integers(1, 1000).map(str),
    "clordid": st.text(PRINTABLE, min_size=1, max_size=64),
    "id": st.integers(-(10**6), 10**6) | st.text(max_size=64),
}
KEYS = {"order": ("symbol", "side", "price", "qty"), "cancel": ("clordid",),
        "replace": ("clordid", "price", "qty")}


@st.composite
def commands(draw: st.DrawFn) -> dict[str, Any]:
    """A command the schema accepts (edge values included)."""
    op = draw(st.sampled_from(["order", "order", "cancel", "replace", "ping", "drop_next", "talk"]))
    cmd: dict[str, Any] = {"op": op}
    for key in KEYS.get(op, ()):
        cmd[key] = draw(valid_values[key])
    if draw(st.booleans()):
        cmd["id"] = draw(valid_values["id"])
    return cmd


@st.composite
def broken(draw: st.DrawFn) -> dict[str, Any]:
    """A command with one part wrong: a value of another type, a key too many or missing, an op."""
    cmd = draw(commands())
    how = draw(st.sampled_from(["value", "extra", "missing", "op", "id"]))
    keys = [k for k in cmd if k != "op"]
    if how == "value" and keys:
        cmd[draw(st.sampled_from(keys))] = draw(json_values)
    elif how == "extra":
        cmd[draw(st.text(min_size=1, max_size=12))] = draw(json_values)
    elif how == "missing" and keys:
        del cmd[draw(st.sampled_from(keys))]
    elif how == "op":
        cmd["op"] = draw(st.text(max_size=20) | json_values | st.sampled_from([o.upper() for o in OPS]))
    else:
        cmd["id"] = draw(json_values | st.text(min_size=65, max_size=80))
    return cmd


frames = st.one_of(
    commands().map(json.dumps),
    broken().map(lambda c: json.dumps(c, allow_nan=True)),
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    st.text(max_size=200),
    st.binary(max_size=200),
    st.binary(max_size=50).map(lambda b: b'{"op": "order", "symbol": "' + b + b'"}'),
    st.integers(MAX_COMMAND - 10, MAX_FRAME - 100).map(
        lambda n: json.dumps({"op": "ping", "id": "x" * n})),
)


def refused(frame: str | bytes) -> bool:
    try:
        parse_command(frame, MAX_COMMAND)
    except CommandError:
        return True
    return False


# --------------------------------------------------------------------------- the fuzz run

@pytest.mark.timeout(600)
def test_fuzzed_frames_get_clear_errors_and_hurt_no_one(site: Site) -> None:
    other = logged_on(site.web.ws_url)
    fuzzer = logged_on(site.web.ws_url)
    seen = {"frames": 0, "refused": 0, "errors": 0, "accepted": 0}

    @settings(max_examples=INPUTS, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=True)
    @given(frames)
    def fuzz(frame: str | bytes) -> None:
        seen["frames"] += 1
        fuzzer.ws.send(frame)
        n = seen["frames"]
        fuzzer.ws.send(json.dumps({"op": "ping", "id": f"sync-{n}"}))
        pong = fuzzer.wait("pong", lambda m: m.get("id") == f"sync-{n}", timeout=20)
        assert pong
        errors = [m for m in fuzzer.got if m.get("type") == "error" and m.get("code") == "bad_command"]
        fuzzer.got.clear()
        if refused(frame):
            seen["refused"] += 1
            assert len(errors) == 1, (frame, errors)
            assert errors[0]["text"], frame
        else:
            seen["accepted"] += 1
            assert errors == [], (frame, errors)
        seen["errors"] += len(errors)
        if n % 50 == 0:  # the other page reads what it is sent (the market the fuzzer moves)
            drain(other)
        if n % 500 == 0:
            assert site.web.proc.poll() is None and site.stack.gateway.poll() is None

    fuzz()
    print(f"\nws fuzz: {seen}")
    assert site.web.proc.poll() is None, "the web service died"
    assert site.stack.gateway.poll() is None, "the gateway died"
    trades(other, "other-after-fuzz")
    # The fuzzer's own session is its own to break: fuzzed commands it accepts include silent and
    # logout, and a session silent long enough is logged out by the exchange (how soon depends on the
    # machine's speed). Its page answered a ping after every frame; a page opened now trades.
    fuzzer.close()
    again = logged_on(site.web.ws_url)
    trades(again, "after-fuzz")
    other.close()
    again.close()


# --------------------------------------------------------------------------- single cases

def test_a_frame_over_the_websocket_limit_closes_only_that_page(site: Site) -> None:
    other = logged_on(site.web.ws_url)
    c = Client(site.web.ws_url)
    c.wait("hello")
    c.ws.send(json.dumps({"op": "ping", "id": "y" * (MAX_FRAME + 10)}))
    with pytest.raises(ConnectionClosed) as closed:
        c.wait("pong")
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    trades(other, "after-huge")
    other.close()


def test_a_flood_that_is_not_read_is_answered_or_dropped_alone(site: Site) -> None:
    """5,000 bad frames sent before reading a reply: every one is answered (then the pong), or the
    page is dropped (1013) once its bounded queue is full; the web stays up, the other page trades."""
    other = logged_on(site.web.ws_url)
    c = Client(site.web.ws_url)
    c.wait("hello")
    junk = json.dumps({"op": "explode", "pad": "z" * 1500})
    errors = 0
    try:
        for _ in range(5000):
            c.ws.send(junk)
        c.ws.send(json.dumps({"op": "ping", "id": "flood"}))
        while True:
            m = json.loads(c.ws.recv(timeout=30))
            if m.get("type") == "pong" and m.get("id") == "flood":
                break
            errors += m.get("type") == "error"
        assert errors == 5000
    except ConnectionClosed as closed:
        assert closed.rcvd is not None and closed.rcvd.code == 1013, closed
    assert site.web.proc.poll() is None
    trades(other, "after-flood")
    other.close()


def test_another_sites_origin_is_refused_before_the_socket_opens(site: Site) -> None:
    with pytest.raises(InvalidStatus) as refused_:
        connect(site.web.ws_url, origin="https://evil.example", open_timeout=10, legacy=True)
    assert refused_.value.response.status_code == 403
    own = connect(site.web.ws_url, origin=f"http://127.0.0.1:{site.web.port}", open_timeout=10, legacy=True)
    assert json.loads(own.recv(timeout=10))["type"] == "hello"
    own.close()
