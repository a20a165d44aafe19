"""The page's certification settings: read from the environment, bad values fail with one line."""

from __future__ import annotations

import pytest

from services.web.certify import certify_settings, parse_ports
from shared.config import ConfigError


def test_defaults_eight_runs_on_their_own_ports() -> None:
    s = certify_settings({})
    assert s.ports == tuple(range(9890, 9898)) and s.runs == 8
    assert (s.logon_timeout_s, s.max_s) == (60.0, 180.0)


def test_ports_as_ranges_and_lists() -> None:
    assert parse_ports("9890-9892, 9900") == (9890, 9891, 9892, 9900)
    assert parse_ports("7000") == (7000,)


@pytest.mark.parametrize("raw", ["", "a-b", "9892-9890", "0", "70000", "9890,9890", "9890-9891,9891"])
def test_bad_ports_fail_fast(raw: str) -> None:
    with pytest.raises(ConfigError, match="FIXLAB_CERTIFY_PORTS"):
        parse_ports(raw)


def test_a_bound_shorter_than_the_logon_wait_fails_fast() -> None:
    with pytest.raises(ConfigError, match="FIXLAB_CERTIFY_MAX_SECONDS"):
        certify_settings({"FIXLAB_CERTIFY_LOGON_TIMEOUT": "60", "FIXLAB_CERTIFY_MAX_SECONDS": "30"})
    with pytest.raises(ConfigError, match="FIXLAB_CERTIFY_RUNS"):
        certify_settings({"FIXLAB_CERTIFY_RUNS": "9"})


def test_runs_listen_on_loopback_without_a_password_unless_told_otherwise() -> None:
    assert (certify_settings({}).listen, certify_settings({}).password_needed) == ("127.0.0.1", False)
    wide = certify_settings({"FIXLAB_CERTIFY_LISTEN": "0.0.0.0"})
    assert (wide.listen, wide.password_needed) == ("0.0.0.0", True)
    assert certify_settings({"FIXLAB_CERTIFY_LISTEN": "127.0.0.2"}).password_needed


@pytest.mark.parametrize("raw", ["example.org", "300.1.1.1", "0.0.0.0:9890"])
def test_a_listen_address_that_is_no_ip_address_fails_fast(raw: str) -> None:
    with pytest.raises(ConfigError, match="FIXLAB_CERTIFY_LISTEN"):
        certify_settings({"FIXLAB_CERTIFY_LISTEN": raw})
