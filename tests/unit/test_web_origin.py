"""Which pages may open a lab WebSocket: the page's own origin, configured ones, and non-browsers."""

from __future__ import annotations

import pytest

from services.web.origin import origin_allowed, parse_origins
from services.web.settings import web_settings
from shared.config import ConfigError

OWN = "127.0.0.1:8000"


@pytest.mark.parametrize(("origin", "host", "allowed", "ok"), [
    ("http://127.0.0.1:8000", OWN, frozenset(), True),  # the page this server served
    ("HTTP://127.0.0.1:8000", OWN, frozenset(), True),
    ("http://evil.example", OWN, frozenset(), False),  # another site's page, in the visitor's browser
    ("http://127.0.0.1:8001", OWN, frozenset(), False),  # another port is another origin
    ("null", OWN, frozenset(), False),  # a sandboxed frame or a file page
    ("http://lab.example.com", OWN, frozenset({"http://lab.example.com"}), True),  # configured
    ("https://lab.example.com", OWN, frozenset({"http://lab.example.com"}), False),
    (None, OWN, frozenset(), True),  # no Origin: not a browser page (a script, the bench's page)
    ("http://127.0.0.1:8000", None, frozenset(), False),
])
def test_origin_allowed(origin: str | None, host: str | None, allowed: frozenset[str], ok: bool) -> None:
    assert origin_allowed(origin, host, allowed) is ok


def test_configured_origins_are_checked_at_start_up() -> None:
    env = {"REDIS_URL": "redis://127.0.0.1:1/0"}
    assert web_settings(env).origins == frozenset()
    settings = web_settings({**env, "FIXLAB_WEB_ORIGINS": "https://Lab.Example.com, http://x:81"})
    assert settings.origins == {"https://lab.example.com", "http://x:81"}
    with pytest.raises(ConfigError, match="FIXLAB_WEB_ORIGINS"):
        web_settings({**env, "FIXLAB_WEB_ORIGINS": "lab.example.com"})
    with pytest.raises(ValueError):
        parse_origins("https://lab.example.com/page")
