"""shared/tls.py: the TLS port's settings, stunnel's configuration, the self-signed pair and the
clients' contexts (pure, or the openssl command line: no stunnel runs here)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from shared.config import ConfigError
from shared.tls import (
    Listener,
    client_config,
    client_context,
    default_ca_file,
    ensure_self_signed,
    listeners,
    server_config,
    tls_port,
    tls_settings,
)

CERT = Path("/c.pem")
KEY = Path("/k.pem")


def test_no_tls_port_unless_one_is_set() -> None:
    assert tls_port({}) == 0
    assert tls_port({"FIXLAB_FIX_TLS_PORT": "9879"}) == 9879
    with pytest.raises(ConfigError, match="FIXLAB_FIX_TLS_PORT"):
        tls_port({"FIXLAB_FIX_TLS_PORT": "70000"})


@pytest.mark.parametrize(("env", "says"), [
    ({"FIXLAB_TLS_CERT": "/etc/hostname"}, "go together"),
    ({"FIXLAB_TLS_CERT": "/nonexistent.pem", "FIXLAB_TLS_KEY": "/nonexistent.key"}, "not a readable file"),
    ({"FIXLAB_FIX_TLS_SOURCE": "10.0.0.3"}, "loopback"),
    ({"FIXLAB_FIX_TLS_SOURCE": "127.0.0.1"}, "other than the exchange's own"),
    ({"FIXLAB_FIX_TLS_PORT": "9879", "FIXLAB_STUNNEL": "no-such-stunnel"}, "needs stunnel4"),
])
def test_bad_settings_fail_with_one_line(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        tls_settings(env)


def test_one_tls_port_per_gateway_in_a_row() -> None:
    env = {"FIXLAB_FIX_PORT": "9878", "FIXLAB_GATEWAYS": "2"}
    assert listeners(env, 9900) == [Listener("fix-tls-gw1", 9900, 9878), Listener("fix-tls-gw2", 9901, 9879)]
    with pytest.raises(ConfigError, match="overlaps"):
        listeners(env, 9879)  # the second gateway's plain port


def test_stunnel_server_config_is_tls_1_2_plus_from_its_own_loopback_address() -> None:
    text = server_config([Listener("fix-tls-gw1", 9879, 9878)], host="127.0.0.1", cert=CERT, key=KEY,
                         source="127.0.0.3")
    lines = [line.strip() for line in text.splitlines()]
    for line in ("foreground = yes", "[fix-tls-gw1]", "accept = 127.0.0.1:9879", "connect = 127.0.0.1:9878",
                 "local = 127.0.0.3", "cert = /c.pem", "key = /k.pem", "sslVersionMin = TLSv1.2"):
        assert line in lines, line
    assert "client = yes" not in lines


def test_stunnel_client_config_verifies_unless_told_not_to() -> None:
    verified = client_config(accept_port=5000, host="127.0.0.1", port=9879, ca_file=CERT, insecure=False)
    assert {"client = yes", "verifyChain = yes", "checkIP = 127.0.0.1", "CAfile = /c.pem",
            "sslVersionMin = TLSv1.2"} <= set(verified.splitlines())
    named = client_config(accept_port=5000, host="fix.example", port=9879, ca_file=None, insecure=False)
    assert "checkHost = fix.example" in named.splitlines()
    loose = client_config(accept_port=5000, host="127.0.0.1", port=9879, ca_file=None, insecure=True)
    assert "verifyChain = yes" not in loose


def test_client_contexts_are_tls_1_2_plus_and_verify_by_default() -> None:
    strict = client_context(None)
    assert strict.minimum_version == ssl.TLSVersion.TLSv1_2
    assert strict.verify_mode == ssl.CERT_REQUIRED and strict.check_hostname
    loose = client_context(None, insecure=True)
    assert loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname
    assert loose.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigError, match="CA file"):
        client_context(Path("/nonexistent-ca.pem"))


def test_the_self_signed_pair_is_made_once_and_verifies_for_localhost(tmp_path: Path) -> None:
    cert, key = ensure_self_signed(tmp_path / "tls")
    assert (key.stat().st_mode & 0o777) == 0o600
    text = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-text"], capture_output=True,
                          text=True, check=True).stdout
    assert "DNS:localhost" in text and "IP Address:127.0.0.1" in text
    first = cert.read_bytes()
    assert ensure_self_signed(tmp_path / "tls") == (cert, key) and cert.read_bytes() == first  # reused
    ctx = client_context(cert)  # the certificate is its own CA: loads as one
    assert ctx.cert_store_stats()["x509_ca"] == 1


def test_the_default_ca_is_the_named_file_else_a_local_runs_certificate(tmp_path: Path) -> None:
    assert default_ca_file({"FIXLAB_TLS_CA": "/x.pem"}) == Path("/x.pem")
    assert default_ca_file({"FIXLAB_RUN_DIR": str(tmp_path)}) is None
    ensure_self_signed(tmp_path / "tls")
    assert default_ca_file({"FIXLAB_RUN_DIR": str(tmp_path)}) == (tmp_path / "tls" / "cert.pem").resolve()
