"""The trading day's schedule (shared/schedule.py, pure), its driver (services/gateway/phasedriver.py)
with a hand-made clock, and the intake routing its SetPhase commands to the right shard."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from services.gateway.inbound import Inbound
from services.gateway.intake import Publisher
from services.gateway.phasedriver import PhaseDriver
from services.gateway.resp import RespConnection
from shared import streams
from shared.config import ConfigError, Instrument
from shared.schedule import parse_schedule
from shared.schema import (
    PHASE_CLOSED,
    PHASE_CONTINUOUS,
    PHASE_HALTED,
    PHASE_PRE_CLOSE,
    PHASE_PRE_OPEN,
    SetPhase,
    as_wire,
)

SYMBOLS = ("ACORN.LAB", "BIRCH.LAB")


def at(text: str, zone: str = "UTC") -> int:
    """ns since the epoch of a wall-clock time ("2026-06-01 07:59:59") in ``zone``."""
    from zoneinfo import ZoneInfo

    when = dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone))
    return int(when.timestamp()) * 1_000_000_000


@pytest.mark.parametrize("text", [None, "", "  ", "continuous", "CONTINUOUS"])
def test_no_schedule_is_continuous_all_day_as_before(text: str | None) -> None:
    assert parse_schedule(text, SYMBOLS) is None


def test_a_day_in_the_exchanges_time_zone_with_an_instruments_own_item() -> None:
    s = parse_schedule("tz=Europe/London; 07:50 pre_open; 08:00 continuous; 16:30 pre_close; 16:35 closed; "
                       "BIRCH.LAB 08:10 continuous; BIRCH.LAB 08:00 pre_open", SYMBOLS)
    assert s is not None
    # Summer time: London is UTC+1, and the schedule follows the local clock.
    assert s.phase_at("ACORN.LAB", at("2026-06-01 07:49:59", "Europe/London")) == PHASE_CLOSED  # wraps
    assert s.phase_at("ACORN.LAB", at("2026-06-01 07:50:00", "Europe/London")) == PHASE_PRE_OPEN
    assert s.phase_at("ACORN.LAB", at("2026-06-01 07:00:00")) == PHASE_CONTINUOUS  # 08:00 in London
    assert s.phase_at("ACORN.LAB", at("2026-01-05 08:00:00")) == PHASE_CONTINUOUS  # winter: UTC+0
    assert s.phase_at("ACORN.LAB", at("2026-01-05 07:59:59")) == PHASE_PRE_OPEN
    # BIRCH's own 08:00 wins over the common one; it opens at 08:10.
    assert s.phase_at("BIRCH.LAB", at("2026-01-05 08:05:00")) == PHASE_PRE_OPEN
    assert s.phase_at("BIRCH.LAB", at("2026-01-05 08:10:00")) == PHASE_CONTINUOUS
    assert s.phase_at("BIRCH.LAB", at("2026-01-05 16:33:00")) == PHASE_PRE_CLOSE
    assert s.phase_at("BIRCH.LAB", at("2026-01-05 23:59:59")) == PHASE_CLOSED


def test_the_demo_day_repeats_every_cycle_from_the_epoch() -> None:
    s = parse_schedule("demo:100", SYMBOLS)
    assert s is not None and s.name == "demo:100"
    second = 1_000_000_000
    seen = [s.phase_at("ACORN.LAB", (1_000 * 100 + t) * second) for t in (0, 19, 20, 49, 50, 60, 80, 95, 99)]
    assert seen == [PHASE_PRE_OPEN, PHASE_PRE_OPEN, PHASE_CONTINUOUS, PHASE_CONTINUOUS, PHASE_HALTED,
                    PHASE_CONTINUOUS, PHASE_PRE_CLOSE, PHASE_CLOSED, PHASE_CLOSED]
    halted = {"ACORN.LAB": PHASE_HALTED, "BIRCH.LAB": PHASE_HALTED}
    assert s.phases_at(7 * 100 * second + 55 * second) == halted
    default = parse_schedule("demo", SYMBOLS)
    assert default is not None and default.cycle_s == 300


def test_the_next_change_counts_down_to_it_and_wraps_round_the_cycle() -> None:
    s = parse_schedule("demo:100", SYMBOLS)
    assert s is not None
    second = 1_000_000_000
    base = 1_000 * 100 * second  # a cycle's start
    assert s.next_change("ACORN.LAB", base + 5 * second + second // 2) == (14.5, PHASE_CONTINUOUS)
    assert s.next_change("ACORN.LAB", base + 85 * second) == (10.0, PHASE_CLOSED)
    assert s.next_change("ACORN.LAB", base + 97 * second) == (3.0, PHASE_PRE_OPEN)  # the next cycle's
    assert s.next_change("ELM.LAB", base) is None
    day = parse_schedule("tz=Europe/London; 07:50 pre_open; 08:00 continuous", SYMBOLS)
    assert day is not None
    assert day.next_change("ACORN.LAB", at("2026-01-05 07:55:00", "Europe/London")) == (300.0,
                                                                                         PHASE_CONTINUOUS)
    assert day.next_change("ACORN.LAB", at("2026-01-05 09:00:00", "Europe/London")) == (
        (24 - 9) * 3600 + 7 * 3600 + 50 * 60, PHASE_PRE_OPEN)


@pytest.mark.parametrize(("text", "message"), [
    ("demo:10", "a demo day lasts at least 60 s"),
    ("demo5", "a demo day is 'demo' or 'demo:SECONDS'"),
    ("tz=Mars/Olympus; 08:00 continuous", "unknown time zone 'Mars/Olympus'"),
    ("08:00 lunch", "unknown phase 'lunch'"),
    ("25:00 continuous", "no such time of day"),
    ("ELM.LAB 08:00 continuous", "unknown symbol 'ELM.LAB'"),
    ("at eight continuous", "is not '[SYMBOL ]HH:MM[:SS] PHASE'"),
    ("ACORN.LAB 08:00 continuous", "no item for BIRCH.LAB"),
])
def test_a_schedule_it_cannot_read_fails_with_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="FIXLAB_SCHEDULE") as info:
        parse_schedule(text, SYMBOLS)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_driver_sends_each_scheduled_change_once_and_leaves_the_operators_alone() -> None:
    s = parse_schedule("08:00 pre_open; 08:05 continuous; 16:30 closed", SYMBOLS)
    assert s is not None
    now = [at("2026-03-02 07:00:00")]
    sent: list[SetPhase] = []
    driver = PhaseDriver(s, sent.append, clock=lambda: now[0])
    first = [(c.symbol, c.phase) for c in driver.tick()]
    assert first == [("ACORN.LAB", PHASE_CLOSED), ("BIRCH.LAB", PHASE_CLOSED)]
    assert driver.tick() == []  # nothing new: nothing sent (an operator's halt stands meanwhile)
    now[0] = at("2026-03-02 08:00:00")
    assert [c.phase for c in driver.tick()] == [PHASE_PRE_OPEN, PHASE_PRE_OPEN]
    now[0] = at("2026-03-02 08:05:01")
    cmds = driver.tick()
    assert [c.phase for c in cmds] == [PHASE_CONTINUOUS] * 2 and cmds[0].reason == "schedule day"
    assert cmds[0].ts == now[0] and len(sent) == 6


def test_the_intake_sends_a_setphase_to_its_symbols_shard_and_a_star_to_every_shard() -> None:
    insts = [Instrument("ACORN.LAB", 10_000, Decimal("0.01"), shard="a"),
             Instrument("BIRCH.LAB", 2_500, Decimal("0.01"), shard="b")]
    pub = Publisher(RespConnection("redis://127.0.0.1:1/0"), Inbound(insts, "gw1"), insts, 1000, "")
    one = as_wire(SetPhase("BIRCH.LAB", PHASE_HALTED, "news", 5))
    every = as_wire(SetPhase("*", PHASE_CLOSED, "end", 6))
    grouped, count = pub.group([one, every])
    assert count == 2
    assert grouped == {streams.orders_stream("b"): [one, every], streams.orders_stream("a"): [every]}
