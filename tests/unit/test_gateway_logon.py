"""services.gateway.logon: the Logon gate's decisions, with a clock the test moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.gateway.config import check_exposure, gateway_settings, own_addresses
from services.gateway.logon import LOCKED, REFUSED, LogonGate
from services.gateway.sessions import load_sessions, settings_text
from shared.compids import gateway_comp_ids
from shared.config import ConfigError
from shared.credentials import Credentials, Hashed, Lockout, hash_password


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def gate(clock: Clock) -> LogonGate:
    creds = Credentials({"CLIENT01": Hashed.parse(hash_password("pw"))})
    return LogonGate(creds, Lockout(failures=2, window=10.0, duration=30.0), clock)


def test_named_comp_id_needs_its_password_and_its_own_username() -> None:
    g = gate(Clock())
    assert g.check("CLIENT01", None, "pw") is None
    assert g.check("CLIENT01", "CLIENT01", "pw") is None
    assert g.check("CLIENT01", "", "pw") is None
    assert g.check("CLIENT01", "CLIENT02", "pw") == REFUSED
    assert g.check("CLIENT01", None, None) == REFUSED


def test_comp_id_not_in_the_file_logs_on_as_before() -> None:
    assert gate(Clock()).check("CLIENT02", None, None) is None


def test_lockout_refuses_the_right_password_until_it_expires() -> None:
    clock = Clock()
    g = gate(clock)
    assert g.check("CLIENT01", None, "x") == REFUSED
    clock.now = 1.0
    assert g.check("CLIENT01", None, "y") == REFUSED
    clock.now = 2.0
    assert g.check("CLIENT01", None, "pw") == LOCKED
    assert g.check("CLIENT02", None, None) is None  # others are not locked out
    clock.now = 40.0
    assert g.check("CLIENT01", None, "pw") is None


def test_listening_beyond_loopback_needs_a_credentials_file_or_allow_open() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        check_exposure({}, host)
    with pytest.raises(ConfigError, match="fixlab passwd"):
        check_exposure({}, "0.0.0.0")
    with pytest.raises(ConfigError, match="FIXLAB_CREDENTIALS"):
        check_exposure({"FIXLAB_ALLOW_OPEN": "0"}, "192.0.2.7")
    check_exposure({"FIXLAB_CREDENTIALS": "/some/file"}, "0.0.0.0")
    check_exposure({"FIXLAB_ALLOW_OPEN": "1"}, "0.0.0.0")


def test_the_acceptor_listens_on_loopback_by_default() -> None:
    env = {"REDIS_URL": "redis://127.0.0.1:1/0"}
    assert gateway_settings(env).fix_host == "127.0.0.1"
    with pytest.raises(ConfigError, match="beyond loopback"):
        gateway_settings({**env, "FIXLAB_FIX_HOST": "0.0.0.0"})


def test_own_comp_ids_get_allowed_remote_addresses_clients_do_not() -> None:
    specs = [s for s in load_sessions(None, gateway_comp_ids(1, 1)) if s.begin == "FIX.4.4"]
    text = settings_text(specs, port=1, host="0.0.0.0", data_dictionary=Path("FIX44.xml"),
                         own_addresses=("127.0.0.1", "10.0.0.5"))
    sections = {sec.split("TargetCompID=")[1].split("\n")[0]: sec for sec in text.split("[SESSION]")[1:]}
    for comp in ("BOT01", "BENCH001", "LAB001"):
        assert "AllowedRemoteAddresses=127.0.0.1,10.0.0.5" in sections[comp]
    assert "AllowedRemoteAddresses" not in sections["CLIENT01"]
    assert "AllowedRemoteAddresses" not in settings_text(specs, port=1, host="0.0.0.0",
                                                         data_dictionary=Path("FIX44.xml"))


def test_own_addresses_setting() -> None:
    assert own_addresses({}) == ("127.0.0.1",)
    assert own_addresses({"FIXLAB_OWN_ADDRESSES": ""}) == ()
    assert own_addresses({"FIXLAB_OWN_ADDRESSES": "127.0.0.1, ::1"}) == ("127.0.0.1", "::1")
    with pytest.raises(ConfigError, match="not an IP"):
        own_addresses({"FIXLAB_OWN_ADDRESSES": "gateway"})
