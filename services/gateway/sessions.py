"""The acceptor's sessions: the CompID pools of shared.compids plus a user's own settings file.

QuickFIX C++ accepts only the (BeginString, SenderCompID, TargetCompID) triples in its settings, so
every session is written out in advance. Policy (see README "Connect your own FIX client"):

- BENCH, BOT and LAB sessions reset sequence numbers on every Logon, Logout and disconnect: each run
  or visitor starts clean, and nothing is kept past the session (seed 000: everything in memory).
- CLIENT sessions, and sessions from the user's file unless it says otherwise, keep their sequence
  numbers across reconnects for the life of the gateway, as an exchange does: a client that drops
  and comes back gets the reports it missed through the engines' own ResendRequest. A client that
  wants a clean start sends ResetSeqNumFlag (141=Y) on its Logon.

The store is one factory for the whole acceptor (a QuickFIX limit): memory by default; with
FIXLAB_FIX_STORE=file, the CLIENT sessions' sequence numbers and messages also survive a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shared.compids import (
    BEGIN_STRING,
    BENCH_COMP_IDS,
    BOT_COMP_IDS,
    CLIENT_COMP_IDS,
    EXCHANGE_COMP_ID,
    LAB_COMP_IDS,
)
from shared.config import ConfigError

RESET_ALWAYS = {"ResetOnLogon": "Y", "ResetOnLogout": "Y", "ResetOnDisconnect": "Y"}
KEEP_SEQUENCES = {"ResetOnLogon": "N", "ResetOnLogout": "N", "ResetOnDisconnect": "N"}

# Settings a user's file may not set: they belong to the whole acceptor.
_ACCEPTOR_ONLY = {"ConnectionType", "SocketAcceptPort", "SocketAcceptAddress", "DataDictionary",
                  "FileStorePath", "FileLogPath"}


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """One accepted session: ``target`` is the client's CompID (its SenderCompID)."""

    target: str
    sender: str = EXCHANGE_COMP_ID
    begin: str = BEGIN_STRING
    options: dict[str, str] = field(default_factory=dict)


def pool_sessions() -> list[SessionSpec]:
    """The sessions every gateway accepts out of the box."""
    out = [SessionSpec(c, options=dict(KEEP_SEQUENCES)) for c in CLIENT_COMP_IDS]
    for pool in (BENCH_COMP_IDS, BOT_COMP_IDS, LAB_COMP_IDS):
        out += [SessionSpec(c, options=dict(RESET_ALWAYS)) for c in pool]
    return out


def parse_sessions_text(text: str, origin: str = "sessions file") -> list[SessionSpec]:
    """Read [SESSION] sections in QuickFIX's settings format; [DEFAULT] applies to each of them."""
    defaults: dict[str, str] = {}
    sections: list[tuple[int, dict[str, str]]] = []
    current: dict[str, str] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if stripped.startswith("["):
            name = stripped.strip("[]").strip().upper()
            if name == "DEFAULT":
                current = defaults
            elif name == "SESSION":
                current = {}
                sections.append((lineno, current))
            else:
                raise ConfigError(f"{origin} line {lineno}: unknown section {stripped!r} "
                                  "(use [DEFAULT] or [SESSION])")
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{origin} line {lineno}: {stripped!r} is not Key=Value")
        if current is None:
            raise ConfigError(f"{origin} line {lineno}: {key.strip()} comes before any [SESSION]")
        if key.strip() in _ACCEPTOR_ONLY:
            raise ConfigError(f"{origin} line {lineno}: {key.strip()} belongs to the whole acceptor "
                              "and cannot be set here")
        current[key.strip()] = value.strip()
    out = []
    for lineno, values in sections:
        merged = {**KEEP_SEQUENCES, **defaults, **values}
        begin = merged.pop("BeginString", BEGIN_STRING)
        sender = merged.pop("SenderCompID", EXCHANGE_COMP_ID)
        target = merged.pop("TargetCompID", "")
        if begin != BEGIN_STRING:
            raise ConfigError(f"{origin} [SESSION] at line {lineno}: BeginString={begin} "
                              f"(this exchange speaks {BEGIN_STRING} only)")
        if not target:
            raise ConfigError(f"{origin} [SESSION] at line {lineno}: TargetCompID (your client's "
                              "SenderCompID) is required")
        if not sender:
            raise ConfigError(f"{origin} [SESSION] at line {lineno}: SenderCompID is empty")
        out.append(SessionSpec(target, sender, begin, merged))
    return out


def load_sessions(path: Path | None) -> list[SessionSpec]:
    """The pools plus the sessions in ``path``; a client CompID may appear only once."""
    specs = pool_sessions()
    if path is not None:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read sessions file {path}: {exc.strerror}") from None
        specs += parse_sessions_text(text, str(path))
    check_unique(specs)
    return specs


def check_unique(specs: Sequence[SessionSpec]) -> None:
    # Events are routed by the client's CompID (the bus's ``session``), so it must name one session.
    seen: set[str] = set()
    for spec in specs:
        if spec.target in seen:
            raise ConfigError(f"client CompID {spec.target} is configured twice")
        seen.add(spec.target)


def settings_text(specs: Iterable[SessionSpec], *, port: int, host: str, data_dictionary: Path,
                  store_dir: Path | None = None) -> str:
    """A whole QuickFIX acceptor settings file for ``specs``."""
    lines = [
        "[DEFAULT]",
        "ConnectionType=acceptor",
        f"SocketAcceptPort={port}",
        # Sessions never end on a schedule (no daily reset at a StartTime): the lab runs around the
        # clock, and CLIENT sessions keep their sequence numbers for the gateway's life. It also
        # spares the engine a session-time check on every message (~5% of its time here).
        "NonStopSession=Y",
        "UseDataDictionary=Y",
        f"DataDictionary={data_dictionary}",
        "SocketNodelay=Y",
        "PersistMessages=Y",
    ]
    if host not in ("", "0.0.0.0"):
        lines.append(f"SocketAcceptAddress={host}")
    if store_dir is not None:
        lines.append(f"FileStorePath={store_dir}")
    for spec in specs:
        lines += ["", "[SESSION]", f"BeginString={spec.begin}", f"SenderCompID={spec.sender}",
                  f"TargetCompID={spec.target}"]
        lines += [f"{k}={v}" for k, v in spec.options.items()]
    return "\n".join(lines) + "\n"
