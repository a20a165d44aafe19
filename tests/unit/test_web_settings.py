"""The web service's and the bots' settings: defaults, and one clear error for a bad value."""

from __future__ import annotations

import pytest

from services.bots.config import bot_settings
from services.web.settings import web_settings
from shared.config import ConfigError

BASE = {"REDIS_URL": "redis://127.0.0.1:1/0"}


def test_defaults_are_the_labs_limits() -> None:
    s = web_settings(BASE)
    assert (s.host, s.port) == ("127.0.0.1", 8000)
    limits = (s.pages_per_address, s.pages_total, s.order_burst, s.order_rate, s.open_orders)
    assert limits == (2, 20, 5, 2.0, 20)
    assert s.session_minutes == 10
    b = bot_settings(BASE)
    assert (b.bots, b.fix_port, b.max_open) == (2, 9878, 20)


@pytest.mark.parametrize(("name", "value", "needle"), [
    ("FIXLAB_WEB_PORT", "http", "not a whole number"),
    ("FIXLAB_WEB_PORT", "70000", "above its maximum"),
    ("FIXLAB_ORDER_RATE", "0", "below its minimum"),
    ("FIXLAB_PAGES_PER_ADDRESS", "0", "below its minimum"),
    ("FIXLAB_WS_QUEUE", "many", "not a whole number"),
])
def test_bad_values_fail_with_one_line(name: str, value: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        web_settings({**BASE, name: value})


def test_bots_limits() -> None:
    with pytest.raises(ConfigError, match="FIXLAB_BOTS=9 is above its maximum 8"):
        bot_settings({**BASE, "FIXLAB_BOTS": "9"})
    assert bot_settings({**BASE, "FIXLAB_BOTS": "0"}).bots == 0


def test_secrets_stay_out_of_the_repr() -> None:
    s = web_settings({"REDIS_URL": "redis://user:hunter2@127.0.0.1:1/0"})
    assert "hunter2" not in repr(s)
