"""The silence timers: which TestRequests wait for an answer, and when their session is due a Logout."""

from __future__ import annotations

import pytest

from services.gateway.config import gateway_settings
from services.gateway.silence import Due, SilenceTimers
from shared.config import ConfigError


def test_unanswered_test_request_is_due_after_the_grace() -> None:
    t = SilenceTimers(grace=0.8)
    t.logon("A", 10)
    t.sent_test_request("A", "TEST", now=100.0)
    assert t.next_deadline() == pytest.approx(108.0)
    assert t.due(107.9) == []
    assert t.due(108.0) == [Due("A", "TEST")]
    assert t.due(200.0) == [] and len(t) == 0  # due once
    assert Due("A", "TEST").text == "no answer to TestRequest TEST"


def test_anything_heard_answers_it() -> None:
    t = SilenceTimers()
    t.logon("A", 5)
    t.sent_test_request("A", "TEST", now=0.0)
    t.heard("A")
    assert t.due(100.0) == [] and t.next_deadline() is None


def test_a_second_test_request_keeps_the_first_deadline() -> None:
    t = SilenceTimers(grace=0.5)
    t.logon("A", 4)
    t.sent_test_request("A", "T1", now=0.0)
    t.sent_test_request("A", "T2", now=1.5)
    assert t.due(2.0) == [Due("A", "T1")]


def test_sessions_are_independent_and_end_clears() -> None:
    t = SilenceTimers(grace=1.0)
    t.logon("A", 2)
    t.logon("B", 6)
    t.sent_test_request("A", "x", now=0.0)
    t.sent_test_request("B", "y", now=0.0)
    assert t.next_deadline() == pytest.approx(0.9)  # HeartBtInt 2: a short grace (see below)
    assert t.due(3.0) == [Due("A", "x")]
    t.ended("B")
    assert t.due(10.0) == []
    t.sent_test_request("B", "z", now=0.0)  # no Logon seen (no HeartBtInt): nothing to time
    assert len(t) == 0


def test_a_new_logon_forgets_an_old_test_request() -> None:
    t = SilenceTimers()
    t.logon("A", 2)
    t.sent_test_request("A", "x", now=0.0)
    t.logon("A", 2)
    assert t.due(10.0) == []


def test_short_heartbeats_keep_the_logout_a_tick_ahead_of_the_engines_timeout() -> None:
    t = SilenceTimers(grace=0.8)
    # The engine's own timeout comes 1.2 x HeartBtInt after a TestRequest that may be a tick late.
    assert t.grace_s(6) == pytest.approx(4.8)
    assert t.grace_s(3) == pytest.approx(1.2 * 3 - 1.5)
    assert t.grace_s(2) == pytest.approx(0.9)
    assert t.grace_s(1) == pytest.approx(0.1)  # no room left: the engine may close first
    for hb in range(3, 60):
        assert t.grace_s(hb) <= 1.2 * hb - 1.5


def test_grace_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        SilenceTimers(grace=0)


@pytest.mark.parametrize(("value", "expected"), [(None, 0.8), ("0", 0.0), ("0.5", 0.5)])
def test_gateway_setting(value: str | None, expected: float) -> None:
    env = {"REDIS_URL": "redis://127.0.0.1:1"} | ({} if value is None else {"FIXLAB_SILENT_LOGOUT": value})
    assert gateway_settings(env).silent_logout == expected


@pytest.mark.parametrize(("value", "text"), [("1.2", "must be below 1.2"), ("-1", "below its minimum"),
                                             ("soon", "FIXLAB_SILENT_LOGOUT")])
def test_bad_gateway_setting_fails_with_one_clear_line(value: str, text: str) -> None:
    with pytest.raises(ConfigError, match=text):
        gateway_settings({"REDIS_URL": "redis://127.0.0.1:1", "FIXLAB_SILENT_LOGOUT": value})
