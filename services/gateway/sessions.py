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

Three settings of the exchange's own, per session (in a user's file like any other key; never passed
to QuickFIX):

- ``SendTrdMatchID=Y``: fills carry TrdMatchID (880), which stock FIX 4.4 does not list in
  ExecutionReport (a client validating with the stock FIX44.xml would Reject it), besides the
  SecondaryExecID (527) every session gets. Such a client uses FIXLAB-FIX44.xml. On for the lab's
  and the bots' sessions, off by default.
- ``CancelOnDisconnect=N``: the session's resting orders outlive its Logout, a disconnect and a
  restart of the gateway (GTC until cancelled, Day until the end of day). On by default, as at most
  venues: a session's orders end with it, however it ended.
- ``SelfTradePrevention=N|CancelResting|CancelAggressor|CancelBoth``: what the matcher does when an
  order of this session would trade with a resting order of the same session. Off (N) by default.
  The gateway puts the mode on each of the session's orders (NewOrder.stp).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.gateway.risk import LIMIT_KEYS, NO_LIMITS, Limits, parse_limits
from shared.compids import BEGIN_STRING, EXCHANGE_COMP_ID, GatewayCompIds, gateway_comp_ids
from shared.config import ConfigError
from shared.fix.versions import APPL_VER_ID_50SP2, APPL_VER_ID_NAME_50SP2, BY_BEGIN_STRING, FIXT11
from shared.schema import STP_CANCEL_AGGRESSOR, STP_CANCEL_BOTH, STP_CANCEL_RESTING, STP_OFF

RESET_ALWAYS = {"ResetOnLogon": "Y", "ResetOnLogout": "Y", "ResetOnDisconnect": "Y"}
KEEP_SEQUENCES = {"ResetOnLogon": "N", "ResetOnLogout": "N", "ResetOnDisconnect": "N"}

# Settings a user's file may not set: they belong to the whole acceptor.
_ACCEPTOR_ONLY = {"ConnectionType", "SocketAcceptPort", "SocketAcceptAddress", "DataDictionary",
                  "TransportDataDictionary", "AppDataDictionary", "FileStorePath", "FileLogPath"}
DEFAULT_APPL_VER_ID = "DefaultApplVerID"
# The exchange's own per-session settings (see above), with their defaults.
SEND_TRD_MATCH_ID = "SendTrdMatchID"
CANCEL_ON_DISCONNECT = "CancelOnDisconnect"
SELF_TRADE_PREVENTION = "SelfTradePrevention"
FIRM = "Firm"
DROP_COPY_FOR = "DropCopyFor"
STP_MODES = {"N": STP_OFF, "CancelResting": STP_CANCEL_RESTING, "CancelAggressor": STP_CANCEL_AGGRESSOR,
             "CancelBoth": STP_CANCEL_BOTH}


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """One accepted session: ``target`` is the client's CompID (its SenderCompID)."""

    target: str
    sender: str = EXCHANGE_COMP_ID
    begin: str = BEGIN_STRING
    options: dict[str, str] = field(default_factory=dict)  # QuickFIX's own session settings
    trd_match_id: bool = False  # fills also carry TrdMatchID (880)
    cancel_on_disconnect: bool = True  # resting orders end with the session
    stp: int = STP_OFF  # self-trade prevention (shared.schema STP_*)
    firm: str = ""  # Firm=: the [FIRM] whose limits and drop copy it has
    drop_copy_for: str = ""  # DropCopyFor=: this session gets copies of that firm's ExecutionReports
    limits: Limits = NO_LIMITS  # the session's own risk limits (risk.py); none by default


def pool_sessions(comp_ids: GatewayCompIds | None = None) -> list[SessionSpec]:
    """The sessions a gateway accepts out of the box: its range of every pool (by default, the
    whole pools: the one gateway of ``make run``)."""
    ids = comp_ids or gateway_comp_ids()
    out = [SessionSpec(c, options=dict(KEEP_SEQUENCES)) for c in ids.clients]
    out += [SessionSpec(c, options=dict(RESET_ALWAYS)) for c in ids.bench]
    # The bots and the lab's sessions validate with FIXLAB-FIX44.xml and show 880 on the page.
    for pool in (ids.bots, ids.labs):
        out += [SessionSpec(c, options=dict(RESET_ALWAYS), trd_match_id=True) for c in pool]
    # FIX 4.2 and FIXT.1.1 / FIX 5.0 SP2 (shared.fix.versions): clients keep their sequence numbers,
    # the bench resets; 5.0 SP2 lists TrdMatchID (880) in ExecutionReport: its fills carry it.
    # The lab's sessions of those versions (the page's choice) reset as the FIX 4.4 ones do.
    for pool, options in ((ids.clients42, KEEP_SEQUENCES), (ids.clients50, KEEP_SEQUENCES),
                          (ids.bench42, RESET_ALWAYS), (ids.bench50, RESET_ALWAYS),
                          (ids.labs42, RESET_ALWAYS), (ids.labs50, RESET_ALWAYS)):
        for c in pool:
            version = BY_BEGIN_STRING[ids.begin_string(c)]
            out.append(SessionSpec(c, begin=version.begin_string, options=dict(options),
                                   trd_match_id=version.trd_match_id))
    return out


def _yes_no(values: dict[str, str], key: str, default: bool, where: str) -> bool:
    raw = values.pop(key, None)
    if raw is None:
        return default
    if raw.upper() in ("Y", "YES", "TRUE", "1"):
        return True
    if raw.upper() in ("N", "NO", "FALSE", "0"):
        return False
    raise ConfigError(f"{where}: {key}={raw!r} must be Y or N")


def _stp_mode(values: dict[str, str], where: str) -> int:
    raw = values.pop(SELF_TRADE_PREVENTION, None)
    if raw is None:
        return STP_OFF
    for name, mode in STP_MODES.items():
        if raw.lower() == name.lower():
            return mode
    raise ConfigError(f"{where}: {SELF_TRADE_PREVENTION}={raw!r} must be one of {', '.join(STP_MODES)}")


def stp_modes(specs: Iterable[SessionSpec]) -> dict[str, int]:
    """The client CompIDs with self-trade prevention on, and their modes."""
    return {s.target: s.stp for s in specs if s.stp != STP_OFF}


def trd_match_sessions(specs: Iterable[SessionSpec]) -> frozenset[str]:
    """The client CompIDs whose fills carry TrdMatchID (880)."""
    return frozenset(s.target for s in specs if s.trd_match_id)


def cancel_on_disconnect_sessions(specs: Iterable[SessionSpec]) -> frozenset[str]:
    """The client CompIDs whose resting orders end with the session."""
    return frozenset(s.target for s in specs if s.cancel_on_disconnect)


def parse_sessions_text(text: str, origin: str = "sessions file") -> list[SessionSpec]:
    """Read [SESSION] sections in QuickFIX's settings format; [DEFAULT] applies to each of them
    ([FIRM] sections are read by ``parse_firms``)."""
    defaults, sections, _firms = _read_sections(text, origin)
    return _session_specs(defaults, sections, origin)


def _read_sections(text: str, origin: str) -> tuple[dict[str, str], list[tuple[int, dict[str, str]]],
                                                    list[tuple[int, dict[str, str]]]]:
    """[DEFAULT], each [SESSION] and each [FIRM] (with its line number), as Key=Value dicts."""
    defaults: dict[str, str] = {}
    sections: list[tuple[int, dict[str, str]]] = []
    firms: list[tuple[int, dict[str, str]]] = []
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
            elif name == "FIRM":
                current = {}
                firms.append((lineno, current))
            else:
                raise ConfigError(f"{origin} line {lineno}: unknown section {stripped!r} "
                                  "(use [DEFAULT], [SESSION] or [FIRM])")
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
    return defaults, sections, firms


def _session_specs(defaults: dict[str, str], sections: list[tuple[int, dict[str, str]]],
                   origin: str) -> list[SessionSpec]:
    out = []
    for lineno, values in sections:
        merged = {**KEEP_SEQUENCES, **defaults, **values}
        begin = merged.pop("BeginString", BEGIN_STRING)
        sender = merged.pop("SenderCompID", EXCHANGE_COMP_ID)
        target = merged.pop("TargetCompID", "")
        version = BY_BEGIN_STRING.get(begin)
        if version is None:
            raise ConfigError(f"{origin} [SESSION] at line {lineno}: BeginString={begin} "
                              f"(this exchange speaks {', '.join(BY_BEGIN_STRING)})")
        appl = merged.pop(DEFAULT_APPL_VER_ID, None)
        if begin == FIXT11 and appl not in (None, APPL_VER_ID_50SP2, APPL_VER_ID_NAME_50SP2):
            raise ConfigError(f"{origin} [SESSION] at line {lineno}: {DEFAULT_APPL_VER_ID}={appl} "
                              f"(FIXT.1.1 sessions speak {APPL_VER_ID_NAME_50SP2}, ApplVerID 9)")
        if begin != FIXT11 and appl is not None:
            raise ConfigError(f"{origin} [SESSION] at line {lineno}: {DEFAULT_APPL_VER_ID} is for "
                              "FIXT.1.1 sessions only")
        if not target:
            raise ConfigError(f"{origin} [SESSION] at line {lineno}: TargetCompID (your client's "
                              "SenderCompID) is required")
        if not sender:
            raise ConfigError(f"{origin} [SESSION] at line {lineno}: SenderCompID is empty")
        where = f"{origin} [SESSION] at line {lineno}"
        trd = _yes_no(merged, SEND_TRD_MATCH_ID, version.trd_match_id, where)
        cod = _yes_no(merged, CANCEL_ON_DISCONNECT, True, where)
        stp = _stp_mode(merged, where)
        firm = merged.pop(FIRM, "")
        drop_copy_for = merged.pop(DROP_COPY_FOR, "")
        if firm and drop_copy_for:
            raise ConfigError(f"{where}: a drop copy session ({DROP_COPY_FOR}) is no member ({FIRM})")
        limits = parse_limits(merged, where)
        if drop_copy_for and limits.any:
            raise ConfigError(f"{where}: a drop copy session does not trade: no risk limits")
        out.append(SessionSpec(target, sender, begin, merged, trd_match_id=trd, cancel_on_disconnect=cod,
                               stp=stp, firm=firm, drop_copy_for=drop_copy_for, limits=limits))
    return out


@dataclass(frozen=True, slots=True)
class Firm:
    """A [FIRM] of the sessions file: its limits (on the sum of its sessions) and its members."""

    name: str
    limits: Limits = NO_LIMITS
    sessions: tuple[str, ...] = ()  # members named here (a [SESSION] may also say Firm=NAME)


def parse_firms(text: str, origin: str = "sessions file") -> dict[str, Firm]:
    """The [FIRM] sections: ``Name``, optional ``Sessions`` (CompIDs, comma or space separated) and
    the risk limits (services.gateway.risk.LIMIT_KEYS)."""
    _defaults, _sessions, sections = _read_sections(text, origin)
    out: dict[str, Firm] = {}
    for lineno, raw in sections:
        values = dict(raw)
        where = f"{origin} [FIRM] at line {lineno}"
        name = values.pop("Name", "")
        if not name:
            raise ConfigError(f"{where}: Name is required")
        if name in out:
            raise ConfigError(f"{where}: firm {name} is configured twice")
        members = tuple(m for m in values.pop("Sessions", "").replace(",", " ").split() if m)
        limits = parse_limits(values, where)
        if values:
            raise ConfigError(f"{where}: unknown keys {', '.join(sorted(values))} (a firm has Name, Sessions "
                              f"and the limits {', '.join(LIMIT_KEYS)})")
        out[name] = Firm(name, limits, members)
    return out


def load_firms(path: Path | None) -> dict[str, Firm]:
    if path is None:
        return {}
    try:
        return parse_firms(path.read_text(), str(path))
    except OSError as exc:
        raise ConfigError(f"cannot read sessions file {path}: {exc.strerror}") from None


def firm_of(specs: Sequence[SessionSpec], firms: Mapping[str, Firm]) -> dict[str, str]:
    """Each member session's firm; fails fast on a member or a drop copy naming no known firm."""
    known = {s.target: s for s in specs}
    out: dict[str, str] = {}
    for spec in specs:
        named = spec.firm or spec.drop_copy_for
        if named and named not in firms:
            raise ConfigError(f"session {spec.target} names firm {named}, which no [FIRM] defines")
        if spec.firm:
            out[spec.target] = spec.firm
    for firm in firms.values():
        for member in firm.sessions:
            found = known.get(member)
            if found is None:
                raise ConfigError(f"firm {firm.name}: no session {member} is configured")
            if found.drop_copy_for:
                raise ConfigError(f"firm {firm.name}: {member} is a drop copy session")
            if out.get(member, firm.name) != firm.name:
                raise ConfigError(f"session {member} is a member of firms {out[member]} and {firm.name}")
            out[member] = firm.name
    return out


def drop_copy_sessions(specs: Iterable[SessionSpec]) -> dict[str, str]:
    """Each drop copy session's firm."""
    return {s.target: s.drop_copy_for for s in specs if s.drop_copy_for}


def load_sessions(path: Path | None, comp_ids: GatewayCompIds | None = None) -> list[SessionSpec]:
    """The pools (``comp_ids``: this gateway's ranges) plus the sessions in ``path``; a client
    CompID may appear only once."""
    specs = pool_sessions(comp_ids)
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


# The exchange's own CompIDs: the page's LAB sessions, its bots, the bench and certification.
OWN_PREFIXES = ("LAB", "BOT", "BENCH", "CERT")


def settings_text(specs: Iterable[SessionSpec], *, port: int, host: str, data_dictionary: Path,
                  store_dir: Path | None = None,
                  version_settings: Mapping[str, Mapping[str, str]] | None = None,
                  own_addresses: tuple[str, ...] = ()) -> str:
    """A whole QuickFIX acceptor settings file for ``specs``; ``version_settings``: per BeginString
    other than FIX.4.4's, the settings each of its sessions gets (its dictionaries);
    ``own_addresses``: the only peers the exchange's own CompIDs (LAB, BOT, BENCH, CERT) may log on
    from (QuickFIX's AllowedRemoteAddresses; none: any)."""
    per_version = version_settings or {}
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
        ours = spec.target.startswith(OWN_PREFIXES) and "AllowedRemoteAddresses" not in spec.options
        if own_addresses and ours:
            lines.append("AllowedRemoteAddresses=" + ",".join(own_addresses))
        if spec.begin != BEGIN_STRING:
            own = per_version.get(spec.begin)
            if own is None:
                raise ConfigError(f"no dictionary for {spec.begin} sessions ({spec.target})")
            lines += [f"{k}={v}" for k, v in own.items()]
    return "\n".join(lines) + "\n"
