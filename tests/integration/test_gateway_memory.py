"""The gateway's memory (issue 12): its sessions validate with a trimmed dictionary, its health reports
its resident memory, and a FIX 4.4 message it does not handle still gets a BusinessMessageReject.

The 200 MiB target itself is measured by benchmarks/gateway_memory.py, never asserted here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from shared import streams
from shared.fix.dictionary import load
from tests.gateway_stack import FixClient, Stack, gateway_stack
from tests.helpers import eventually


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None, matcher=False, gateway_id="gwmem") as s:
        yield s


def health(stack: Stack) -> dict[str, str]:
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    return r.hgetall(streams.health_key("gateway", stack.gateway_id))  # type: ignore[return-value]


def test_health_reports_resident_memory_with_every_session_configured(stack: Stack) -> None:
    h = eventually(lambda: health(stack) or None, timeout=20, what="a health report")
    assert int(h["sessions_configured"]) >= 344
    assert int(h["rss_mib"]) > 0


def test_the_acceptor_validates_with_a_trimmed_copy_and_publishes_the_whole(stack: Stack) -> None:
    run = stack.log_dir / "run" / "gateway" / stack.gateway_id
    published = load(str(run / "FIXLAB-FIX44.xml"))
    acceptor = load(str(run / "FIXLAB-FIX44-acceptor.xml"))
    assert len(published.messages) == 93
    # The session level (with XMLnonFIX, n), the orders it handles and the reports it sends; issue 14's
    # status, mass cancel, security list and market data.
    assert set(acceptor.messages) == {"0", "1", "2", "3", "4", "5", "A", "n", "D", "F", "G", "8", "9", "j",
                                      "H", "q", "r", "x", "y", "V", "W", "X", "Y", "e", "f", "g", "h"}


def test_a_message_with_groups_the_acceptor_does_not_know_gets_a_business_reject(stack: Stack) -> None:
    # QuoteRequest (R) with two NoRelatedSym entries: a group the trimmed dictionary does not define.
    with FixClient(stack.fix_port, "CLIENT01") as c:
        c.send("R", [(131, "qr-1"), (146, 2), (55, "ACORN.LAB"), (54, 1), (55, "BIRCH.LAB"), (54, 2)])
        rej = c.expect("j")
        assert (rej[45], rej[372], rej[380], rej[58]) == ("2", "R", "3", "Unsupported Message Type")
        assert 373 not in rej
        c.send("AF", [(584, "ms-1"), (585, 7)])
        assert c.expect("j")[372] == "AF"


def test_the_other_versions_validate_with_their_own_trimmed_dictionaries(stack: Stack) -> None:
    # Issue 25: FIX 4.2 and FIXT.1.1 / FIX 5.0 SP2 sessions beside FIX 4.4, each version's installed
    # dictionary trimmed as FIX 4.4's; FIX 4.2 has no q, r, x, y; the FIXT transport keeps ApplVerID 9.
    run = stack.log_dir / "run" / "gateway" / stack.gateway_id
    d42 = load(str(run / "FIXLAB-4.2-acceptor.xml"))
    assert d42.begin_string == "FIX.4.2"
    assert set(d42.messages) == {"0", "1", "2", "3", "4", "5", "A", "D", "F", "G", "8", "9", "j", "H", "V",
                                 "W", "X", "Y", "e", "f", "g", "h"}
    assert 20 in d42.bodies["8"] and 527 not in d42.bodies["8"]
    app50 = load(str(run / "FIXLAB-5.0SP2-acceptor.xml"))
    assert {"D", "8", "r", "y", "W"} <= set(app50.messages) and 880 in app50.bodies["8"]
    transport = load(str(run / "FIXLAB-5.0SP2-transport.xml"))
    assert set(transport.fields[1128].enums) == {"9"}
    cfg = (run / "acceptor.cfg").read_text()
    assert "BeginString=FIX.4.2\nSenderCompID=FIXLAB\nTargetCompID=CLIENT42-01" in cfg
    assert "DefaultApplVerID=FIX.5.0SP2" in cfg
