"""The end of the trading day: which day ended last, sent once per day, and its setting."""

from __future__ import annotations

import datetime as dt

import pytest

from services.gateway.endofday import EndOfDayClock, day_number, latest_boundary
from shared.config import ConfigError, env_time
from shared.schema import EndOfDay

UTC = dt.UTC
AT = dt.time(21, 0)


def ns(*when: int) -> int:
    return int(dt.datetime(*when, tzinfo=UTC).timestamp()) * 1_000_000_000  # type: ignore[misc]


@pytest.mark.parametrize(("now", "day"), [
    ((2024, 3, 5, 20, 59), 20240304),  # before today's boundary: yesterday's day ended last
    ((2024, 3, 5, 21, 0), 20240305),  # at the boundary
    ((2024, 3, 5, 23, 30), 20240305),
    ((2024, 3, 1, 0, 10), 20240229),  # across a month (and a leap day)
])
def test_the_latest_day_that_ended(now: tuple[int, ...], day: int) -> None:
    assert day_number(latest_boundary(dt.datetime(*now, tzinfo=UTC), AT)) == day  # type: ignore[misc]


def test_the_clock_sends_each_day_once_with_the_time_it_was_sent() -> None:
    sent: list[EndOfDay] = []
    now = [ns(2024, 3, 5, 12, 0)]
    clock = EndOfDayClock(AT, sent.append, clock=lambda: now[0])
    assert clock.tick() and not clock.tick()
    now[0] = ns(2024, 3, 5, 20, 59)
    assert not clock.tick()
    now[0] = ns(2024, 3, 5, 21, 0)
    assert clock.tick()
    assert sent == [EndOfDay(20240304, ns(2024, 3, 5, 12, 0)), EndOfDay(20240305, ns(2024, 3, 5, 21, 0))]


def test_start_sends_at_once_and_stop_ends_the_thread() -> None:
    sent: list[EndOfDay] = []
    clock = EndOfDayClock(AT, sent.append).start()
    assert len(sent) == 1
    clock.stop()
    assert clock._thread is not None and not clock._thread.is_alive()


@pytest.mark.parametrize(("raw", "expected"), [("21:00", dt.time(21)), ("7:05", dt.time(7, 5)),
                                                ("", dt.time(21)), ("00:00", dt.time(0))])
def test_end_of_day_setting(raw: str, expected: dt.time) -> None:
    assert env_time({"FIXLAB_END_OF_DAY": raw}, "FIXLAB_END_OF_DAY", "21:00") == expected


@pytest.mark.parametrize("raw", ["24:00", "21", "9pm", "21:60", "21:00:00"])
def test_a_bad_end_of_day_fails_with_one_line(raw: str) -> None:
    with pytest.raises(ConfigError, match="FIXLAB_END_OF_DAY"):
        env_time({"FIXLAB_END_OF_DAY": raw}, "FIXLAB_END_OF_DAY", "21:00")
