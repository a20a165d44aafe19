"""``fixlab admin phase|halt|resume`` against a running matcher (real Redis, real matcher): each sends a
SetPhase on the shard's orders stream and says the PhaseChanged it saw; an unknown symbol or phase is
one line and a non-zero exit with nothing sent; a SetPhase to the phase already held says so."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from services.admin.__main__ import main
from shared import streams
from shared.bus import connect
from tests.gateway_stack import Stack, gateway_stack, matcher_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIXLAB_OPERATOR_TOKEN", "a-test-operator-token-0123456789")


def admin(stack: Stack, *argv: str, timeout: float = 10.0) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--url", stack.redis_url, "--timeout", str(timeout), *argv], out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def test_halt_resume_and_phase_say_what_happened(stack: Stack) -> None:
    code, text = admin(stack, "halt", "ACORN.LAB", "news", "pending")
    assert (code, text) == (0, "ACORN.LAB: CONTINUOUS -> HALTED (news pending)\n")
    code, text = admin(stack, "halt", "ACORN.LAB", timeout=1.0)  # already halted: nothing changes
    assert code == 1 and "no phase change within 1 s: it may be HALTED already" in text
    code, text = admin(stack, "resume", "ACORN.LAB")
    assert (code, text) == (0, "ACORN.LAB: HALTED -> CONTINUOUS (by the operator)\n")
    code, text = admin(stack, "phase", "BIRCH.LAB", "Pre-Close")
    assert (code, text) == (0, "BIRCH.LAB: CONTINUOUS -> PRE_CLOSE (pre_close by the operator)\n")
    # Every instrument: the one that changes says so, the one already there is named as unchanged.
    code, text = admin(stack, "phase", "*", "continuous", "back", timeout=2.0)
    assert code == 0
    assert text == "BIRCH.LAB: PRE_CLOSE -> CONTINUOUS (back)\nunchanged within 2 s: ACORN.LAB\n"


@pytest.mark.parametrize(("argv", "line"), [
    (("phase", "NOPE.LAB", "halted"), "unknown symbol 'NOPE.LAB': this exchange trades ACORN.LAB, BIRCH.LAB"),
    (("phase", "ACORN.LAB", "lunch"), "unknown phase 'lunch': one of closed, pre_open, continuous"),
    (("halt", "NOPE.LAB"), "unknown symbol 'NOPE.LAB'"),
])
def test_an_unknown_symbol_or_phase_is_one_line_and_nothing_is_sent(stack: Stack, argv: tuple[str, ...],
                                                                      line: str) -> None:
    r = connect(stack.redis_url)
    before = {s: r.xlen(streams.orders_stream(s)) for s in ("0", "a", "b")}
    code, text = admin(stack, *argv)
    assert code == 1 and text.count("\n") == 1 and line in text and "nothing was sent" in text
    assert {s: r.xlen(streams.orders_stream(s)) for s in ("0", "a", "b")} == before
