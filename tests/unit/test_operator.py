"""The operator's token: signing, the receiving service's check, and ``fixlab admin`` without a token."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from services.admin.__main__ import EXIT_NO_TOKEN, main
from shared.config import ConfigError
from shared.operator import TOKEN_ENV, TOKEN_FILE_ENV, Token, Verifier, ensure_token_file, load_token, sign

TOKEN = Token(b"0123456789abcdef-operator", "test")


def test_a_signed_command_passes_once() -> None:
    v = Verifier(TOKEN)
    cmd = sign(TOKEN, "kill", "CLIENT01")
    assert v.check(cmd) is None
    assert v.check(cmd) == "command seen before (a replay)"


@pytest.mark.parametrize("change", [{"op": "unkill"}, {"target": "CLIENT02"}, {"args": "x"}, {"ts": 1},
                                    {"req_id": "other"}, {"mac": "0" * 64}])
def test_any_changed_field_breaks_the_signature(change: dict[str, object]) -> None:
    cmd = dataclasses.replace(sign(TOKEN, "kill", "CLIENT01"), **change)  # type: ignore[arg-type]
    assert Verifier(TOKEN).check(cmd) == "bad operator token"


def test_another_token_or_none_is_refused() -> None:
    cmd = sign(Token(b"another-token-of-16+chars", "x"), "kill", "CLIENT01")
    assert Verifier(TOKEN).check(cmd) == "bad operator token"
    assert Verifier(None).check(sign(TOKEN, "kill", "CLIENT01")) == "no operator token configured here"


def test_a_stale_command_is_refused() -> None:
    cmd = sign(TOKEN, "kill", "CLIENT01", ts=1_000_000_000_000)
    assert Verifier(TOKEN).check(cmd, now_ns=1_000_000_000_000 + 61 * 10**9) is not None
    assert Verifier(TOKEN).check(cmd, now_ns=1_000_000_000_000 + 59 * 10**9) is None


def test_the_token_from_env_or_file(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "token"
    assert load_token({TOKEN_FILE_ENV: str(path)}) is None
    assert ensure_token_file(path) and not ensure_token_file(path)
    assert path.stat().st_mode & 0o777 == 0o600
    token = load_token({TOKEN_FILE_ENV: str(path)})
    assert token is not None and token.secret == path.read_text().strip().encode()
    assert "secret" not in repr(token) and token.secret.decode() not in repr(token)
    assert load_token({TOKEN_ENV: "x" * 16, TOKEN_FILE_ENV: str(path)}) == Token(b"x" * 16, TOKEN_ENV)
    with pytest.raises(ConfigError):
        load_token({TOKEN_ENV: "short"})


def test_admin_without_a_token_sends_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.setenv(TOKEN_FILE_ENV, str(tmp_path / "none"))
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens: it must not be tried
    out, err = io.StringIO(), io.StringIO()
    assert main(["kill", "CLIENT01"], out=out, err=err) == EXIT_NO_TOKEN
    assert "refused: no operator token" in err.getvalue() and out.getvalue() == ""
