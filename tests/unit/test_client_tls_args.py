"""``fixlab client --tls``'s arguments: the TLS port by default, a verifying context unless told not to."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from services.client.__main__ import arguments


@pytest.fixture(autouse=True)
def _no_tls_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("FIXLAB_FIX_TLS_PORT", "FIXLAB_TLS_CA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FIXLAB_RUN_DIR", str(tmp_path))  # no local run's certificate there


def test_plain_by_default() -> None:
    args = arguments([])
    assert (args.port, args.tls_context) == (9878, None)


def test_tls_goes_to_the_tls_port_and_verifies(monkeypatch: pytest.MonkeyPatch) -> None:
    args = arguments(["--tls"])
    assert args.port == 9898
    assert args.tls_context.verify_mode == ssl.CERT_REQUIRED and args.tls_context.check_hostname
    monkeypatch.setenv("FIXLAB_FIX_TLS_PORT", "19898")
    assert arguments(["--tls"]).port == 19898
    assert arguments(["--tls", "--port", "7000"]).port == 7000


def test_insecure_is_explicit_and_only_with_tls(capsys: pytest.CaptureFixture[str]) -> None:
    assert arguments(["--tls", "--tls-insecure"]).tls_context.verify_mode == ssl.CERT_NONE
    with pytest.raises(SystemExit) as exc:
        arguments(["--tls-insecure"])
    assert exc.value.code == 2
    assert "go with --tls" in capsys.readouterr().err


def test_a_missing_ca_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        arguments(["--tls", "--tls-ca", "/nonexistent-ca.pem"])
    assert "CA file" in capsys.readouterr().err
