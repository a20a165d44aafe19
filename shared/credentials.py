"""Logon passwords: the credentials file, its salted scrypt hashes, and a lockout after failures.

The file (path in FIXLAB_CREDENTIALS) holds one line per CompID, ``COMPID scrypt$N$r$p$SALT$HASH``
(salt and hash in base64), ``#`` comments and blank lines allowed. It is written by
``fixlab passwd COMPID``, which prompts for the password (getpass) or reads one line from stdin,
never from an argument, so a password never sits in a shell history or a process list.

Verification recomputes scrypt with the line's own parameters and compares with
``hmac.compare_digest``; a CompID that has no line is checked against a dummy hash all the same, so
the time taken does not tell a stranger which CompIDs exist. The lockout is a pure class (time comes
in from outside): after ``failures`` refusals within ``window`` seconds, that CompID and that peer
address are each refused for ``duration`` seconds, whatever the password.

This module imports no service, and never logs or prints a password or a hash.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import os
import secrets
import sys
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from shared import compids

ENV_FILE = "FIXLAB_CREDENTIALS"
# scrypt cost: N=2**14, r=8, p=1 (16 MiB, ~40 ms on this machine): the parameters RFC 7914 and the
# Python docs suggest for interactive logons. They are stored in each line, so raising them later
# leaves old lines valid.
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
MAX_PASSWORD = 128  # FIX's Password (554) has no limit; a bound keeps scrypt's input sane


class CredentialsError(ValueError):
    """A credentials file or a password that cannot be used: the message is one line, with no secret."""


SESSIONS_FILE_ENV = "FIXLAB_FIX_SESSIONS_FILE"


def known_comp_ids(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """Every CompID of every pool (the whole pool, whichever gateway accepts it), and the sessions
    of the user's own file (FIXLAB_FIX_SESSIONS_FILE: a firm's sessions, its drop copy)."""
    ids = gateway_pools()
    return frozenset(comp_id for pool in ids for comp_id in pool) | sessions_file_comp_ids(env)


def sessions_file_comp_ids(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The TargetCompIDs of the sessions file FIXLAB_FIX_SESSIONS_FILE names (none when it is unset
    or unreadable: the gateway says so itself when it starts)."""
    value = (os.environ if env is None else env).get(SESSIONS_FILE_ENV, "").strip()
    if not value:
        return frozenset()
    try:
        text = Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return frozenset()
    out: set[str] = set()
    for line in text.splitlines():
        key, sep, comp_id = line.strip().partition("=")
        if sep and key.strip() == "TargetCompID" and comp_id.strip():
            out.add(comp_id.strip())
    return frozenset(out)


def gateway_pools() -> tuple[tuple[str, ...], ...]:
    return compids.gateway_comp_ids(1, 1).pools()


def hash_password(password: str, salt: bytes | None = None,
                  n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """``scrypt$N$r$p$SALT$HASH`` of ``password`` with a fresh random salt unless one is given."""
    check_password(password)
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = _scrypt(password, salt, n, r, p)
    b64 = base64.b64encode
    return f"scrypt${n}${r}${p}${b64(salt).decode()}${b64(digest).decode()}"


def check_password(password: str) -> None:
    if not password:
        raise CredentialsError("the password is empty")
    if len(password) > MAX_PASSWORD:
        raise CredentialsError(f"the password is longer than {MAX_PASSWORD} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in password):
        raise CredentialsError("the password holds a control character (a FIX field cannot carry SOH)")


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p,
                          maxmem=256 * 1024 * 1024, dklen=HASH_BYTES)


@dataclass(frozen=True, slots=True)
class Hashed:
    """One line's parsed hash (repr hides the salt and the digest)."""

    n: int
    r: int
    p: int
    salt: bytes = field(repr=False)
    digest: bytes = field(repr=False)

    @classmethod
    def parse(cls, text: str) -> Hashed:
        parts = text.split("$")
        if len(parts) != 6 or parts[0] != "scrypt":
            raise CredentialsError("a hash is not scrypt$N$r$p$SALT$HASH")
        try:
            n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
            salt = base64.b64decode(parts[4], validate=True)
            digest = base64.b64decode(parts[5], validate=True)
        except ValueError:
            raise CredentialsError("a hash has a malformed number or base64 part") from None
        if n < 2 or n & (n - 1) or r < 1 or p < 1 or not salt or len(digest) != HASH_BYTES:
            raise CredentialsError("a hash has invalid scrypt parameters")
        return cls(n, r, p, salt, digest)

    def matches(self, password: str) -> bool:
        try:
            check_password(password)
        except CredentialsError:
            return False
        return hmac.compare_digest(_scrypt(password, self.salt, self.n, self.r, self.p), self.digest)


# Checked when a CompID has no line, so an unknown CompID costs the same time as a wrong password.
_DUMMY = Hashed.parse(hash_password("fixlab-dummy", salt=b"\0" * SALT_BYTES))


@dataclass(frozen=True, slots=True)
class Credentials:
    """The credentials file, read once: CompID -> hash."""

    hashes: dict[str, Hashed] = field(repr=False)
    path: Path | None = None

    def __contains__(self, comp_id: object) -> bool:
        return comp_id in self.hashes

    def verify(self, comp_id: str, password: str) -> bool:
        """Whether ``password`` is ``comp_id``'s; False for a CompID with no line (same cost)."""
        hashed = self.hashes.get(comp_id)
        ok = (hashed or _DUMMY).matches(password)
        return ok and hashed is not None


def parse(lines: Iterable[str], source: str = "credentials") -> dict[str, Hashed]:
    hashes: dict[str, Hashed] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if len(words) != 2:
            raise CredentialsError(f"{source} line {number}: expected 'COMPID HASH'")
        try:
            hashes[words[0]] = Hashed.parse(words[1])
        except CredentialsError as exc:
            raise CredentialsError(f"{source} line {number}: {exc}") from None
    return hashes


def load(path: Path) -> Credentials:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialsError(f"cannot read the credentials file {path}: {exc.strerror}") from None
    return Credentials(parse(text.splitlines(), str(path)), path)


def from_env(env: dict[str, str] | None = None) -> Credentials | None:
    """The file FIXLAB_CREDENTIALS names, or None when it is unset or empty."""
    value = (os.environ if env is None else env).get(ENV_FILE, "").strip()
    return load(Path(value)) if value else None


def set_password(path: Path, comp_id: str, password: str) -> None:
    """Add or replace ``comp_id``'s line; the file is written whole (mode 0600) and renamed into place."""
    if comp_id not in known_comp_ids():
        raise CredentialsError(f"{comp_id!r} is not a CompID of any pool (shared/compids.py) nor of "
                               f"the sessions file (${SESSIONS_FILE_ENV})")
    line = f"{comp_id} {hash_password(password)}"
    kept: list[str] = []
    if path.exists():
        old = path.read_text(encoding="utf-8").splitlines()
        parse(old, str(path))  # refuse to rewrite a file we cannot read back
        kept = [raw for raw in old if raw.split()[:1] != [comp_id]]
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join([*kept, line]) + "\n")
    os.replace(tmp, path)


@dataclass(slots=True)
class Lockout:
    """After ``failures`` refusals within ``window`` s, a CompID or an address is refused ``duration`` s."""

    failures: int = 5
    window: float = 60.0
    duration: float = 300.0
    _seen: dict[str, deque[float]] = field(default_factory=dict)
    _until: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Lockout:
        """FIXLAB_LOCKOUT_FAILURES (5), FIXLAB_LOCKOUT_WINDOW (60 s), FIXLAB_LOCKOUT_SECONDS (300 s)."""
        source = os.environ if env is None else env
        try:
            failures = int(source.get("FIXLAB_LOCKOUT_FAILURES", "5"))
            window = float(source.get("FIXLAB_LOCKOUT_WINDOW", "60"))
            duration = float(source.get("FIXLAB_LOCKOUT_SECONDS", "300"))
        except ValueError:
            raise CredentialsError("FIXLAB_LOCKOUT_* must be numbers") from None
        if failures < 1 or window <= 0 or duration < 0:
            raise CredentialsError("FIXLAB_LOCKOUT_FAILURES >= 1, _WINDOW > 0, _SECONDS >= 0")
        return cls(failures, window, duration)

    def locked(self, now: float, *keys: str) -> bool:
        """Whether any of ``keys`` (e.g. ``comp:CLIENT01``, ``addr:127.0.0.2``) is locked out at ``now``."""
        return any(self._until.get(key, 0.0) > now for key in keys)

    def fail(self, now: float, *keys: str) -> bool:
        """Count one failure against each key; True when one of them is now locked out."""
        for key in keys:
            seen = self._seen.setdefault(key, deque(maxlen=self.failures))
            seen.append(now)
            while seen and seen[0] <= now - self.window:
                seen.popleft()
            if len(seen) >= self.failures:
                self._until[key] = now + self.duration
                seen.clear()
        if len(self._seen) > 10_000:  # bounded: forget keys whose failures have aged out
            for key in [k for k, v in self._seen.items() if not v or v[-1] <= now - self.window]:
                del self._seen[key]
        return self.locked(now, *keys)


def read_password(stdin: TextIO | None = None) -> str:
    """A prompt (twice, on a terminal) or one line of stdin."""
    stream = sys.stdin if stdin is None else stdin
    if stream.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise CredentialsError("the two passwords differ")
        return first
    return stream.readline().rstrip("\r\n")


def main(argv: list[str] | None = None) -> int:
    """``fixlab passwd COMPID``: set COMPID's password in the FIXLAB_CREDENTIALS file."""
    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: fixlab passwd COMPID  (the password is prompted for, or read from stdin;"
             f" the file is ${ENV_FILE})\n")
    if args in (["-h"], ["--help"]):
        sys.stdout.write(usage)
        return 0
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write(usage)
        return 2
    value = os.environ.get(ENV_FILE, "").strip()
    if not value:
        sys.stderr.write(f"fixlab passwd: set {ENV_FILE} to the credentials file's path\n")
        return 2
    try:
        if args[0] not in known_comp_ids():
            raise CredentialsError(f"{args[0]!r} is not a CompID of any pool (shared/compids.py) nor "
                                   f"of the sessions file (${SESSIONS_FILE_ENV})")
        set_password(Path(value), args[0], read_password())
    except (CredentialsError, OSError) as exc:
        sys.stderr.write(f"fixlab passwd: {exc}\n")
        return 1
    sys.stdout.write(f"fixlab passwd: {args[0]}'s password set in {value}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
