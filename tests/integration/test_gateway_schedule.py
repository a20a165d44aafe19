"""FIXLAB_SCHEDULE on a running gateway and matcher: at start every instrument goes into the phase the
schedule says, and at the next scheduled time into the next one (the matcher's PhaseChanged on its
market stream tells it)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

from shared import streams
from shared.bus import connect
from shared.config import parse_instruments
from shared.schema import PHASE_CONTINUOUS, PHASE_PRE_OPEN, PhaseChanged, decode_batch
from tests.gateway_stack import gateway_stack, matcher_available
from tests.helpers import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


def changes(r: Any) -> list[PhaseChanged]:
    out: list[PhaseChanged] = []
    for shard in sorted({i.shard for i in parse_instruments({})}):
        for _id, fields in r.xrange(streams.shard_market_stream(shard)):
            out += [m for m in decode_batch(fields[streams.BATCH_FIELD]) if isinstance(m, PhaseChanged)]
    return out


def test_the_schedule_puts_each_instrument_in_its_phase_then_opens_it() -> None:
    now = dt.datetime.now(dt.UTC)
    if now.time() > dt.time(23, 59, 0):
        pytest.skip("too close to midnight for a schedule with a change a few seconds ahead")
    opens = (now + dt.timedelta(seconds=6)).strftime("%H:%M:%S")
    schedule = f"tz=UTC; 00:00 pre_open; {opens} continuous; 23:59:30 closed"
    with gateway_stack(None, env={"FIXLAB_SCHEDULE": schedule}) as stack:
        r = connect(stack.redis_url)
        pre_open = eventually(lambda: {c.symbol for c in changes(r) if c.phase == PHASE_PRE_OPEN},
                              what="both instruments in the opening call")
        assert pre_open == {"ACORN.LAB", "BIRCH.LAB"}
        opened = eventually(lambda: {c.symbol for c in changes(r) if c.phase == PHASE_CONTINUOUS}
                            == {"ACORN.LAB", "BIRCH.LAB"}, timeout=30.0, what="both opened")
        assert opened
        seen = changes(r)
        assert all(c.reason == "schedule day" for c in seen)
        assert len(seen) == 4  # each change once, though the gateway looks twice a second
        assert time.time() >= dt.datetime.combine(now.date(), dt.time.fromisoformat(opens),
                                                  tzinfo=dt.UTC).timestamp()
