"""The operator's token: who may command the exchange (``fixlab admin``), checked where a command lands.

The token is a secret string read from ``FIXLAB_OPERATOR_TOKEN`` or, when that is unset, from the file
``FIXLAB_OPERATOR_TOKEN_FILE`` (default ``.run/operator-token``, made by ``make run`` with mode 0600).
The CLI never puts the token on the bus: it signs each AdminCommand with an HMAC-SHA256 of its fields
under the token (``sign``), and every service that acts on a command checks that HMAC itself
(``Verifier.check``), in constant time, refusing a stale one (older than ``MAX_AGE_S``) and one seen
before (a replay). So a process that can write to the bus but has no token (the web page, whatever a
visitor makes it write) cannot command anything, and one that can read the bus learns no token.

A service without a token refuses every command ("no operator token configured here").
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shared.config import ConfigError
from shared.schema import AdminCommand

TOKEN_ENV = "FIXLAB_OPERATOR_TOKEN"
TOKEN_FILE_ENV = "FIXLAB_OPERATOR_TOKEN_FILE"
DEFAULT_TOKEN_FILE = ".run/operator-token"
MAX_AGE_S = 60.0  # a command signed longer ago (or that far in the future) is refused
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True, slots=True)
class Token:
    """The secret, kept out of every repr."""

    secret: bytes
    source: str  # where it came from ("FIXLAB_OPERATOR_TOKEN", a file path), for messages

    def __repr__(self) -> str:
        return f"Token(source={self.source!r})"


def token_file(env: Mapping[str, str]) -> Path:
    return Path(env.get(TOKEN_FILE_ENV) or DEFAULT_TOKEN_FILE)


def load_token(env: Mapping[str, str] | None = None) -> Token | None:
    """The operator's token from the environment or its file; None when there is none.

    A token that is there but unusable (too short, an unreadable file) fails fast with ConfigError.
    """
    env = os.environ if env is None else env
    raw = env.get(TOKEN_ENV)
    source = TOKEN_ENV
    if raw is None:
        path = token_file(env)
        if not path.exists():
            return None
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{TOKEN_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
        source = str(path)
    raw = raw.strip()
    if len(raw) < MIN_TOKEN_CHARS:
        raise ConfigError(f"the operator token in {source} is shorter than {MIN_TOKEN_CHARS} characters")
    return Token(raw.encode(), source)


def ensure_token_file(path: Path) -> bool:
    """Make a random token at ``path`` (mode 0600) unless one is there; True when it made one."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return True


def _payload(req_id: str, op: str, target: str, args: str, ts: int) -> bytes:
    # Unit separators cannot occur in the fields the CLI checks; lengths would do as well.
    return "\x1f".join((req_id, op, target, args, str(ts))).encode()


def sign(token: Token, op: str, target: str, args: str = "", *, ts: int | None = None,
         req_id: str | None = None) -> AdminCommand:
    """An AdminCommand signed with ``token``."""
    ts = time.time_ns() if ts is None else ts
    req_id = secrets.token_hex(8) if req_id is None else req_id
    mac = hmac.new(token.secret, _payload(req_id, op, target, args, ts), hashlib.sha256).hexdigest()
    return AdminCommand(req_id=req_id, op=op, target=target, args=args, ts=ts, mac=mac)


class Verifier:
    """A receiving service's check of AdminCommands: the HMAC, the age, and no replay."""

    def __init__(self, token: Token | None, *, max_age_s: float = MAX_AGE_S, remember: int = 4096) -> None:
        self.token = token
        self.max_age_ns = int(max_age_s * 1e9)
        self.remember = remember
        self._seen: OrderedDict[str, None] = OrderedDict()

    def check(self, cmd: AdminCommand, now_ns: int | None = None) -> str | None:
        """None when ``cmd`` may be acted on, else the reason it is refused."""
        if self.token is None:
            return "no operator token configured here"
        expected = hmac.new(self.token.secret, _payload(cmd.req_id, cmd.op, cmd.target, cmd.args, cmd.ts),
                            hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, cmd.mac):
            return "bad operator token"
        now_ns = time.time_ns() if now_ns is None else now_ns
        if abs(now_ns - cmd.ts) > self.max_age_ns:
            return "command too old (or the clocks disagree)"
        if cmd.req_id in self._seen:
            return "command seen before (a replay)"
        self._seen[cmd.req_id] = None
        if len(self._seen) > self.remember:
            self._seen.popitem(last=False)
        return None
