"""Scenario files: text in, steps out, each step knowing its file and line. Pure: no I/O.

The format is documented in docs/scenarios.md. One step a line; ``#`` starts a comment (at the
start of a word); words are separated by blanks, and a word may be quoted (``58="IOC: remainder
cancelled"``, ``58~'\\d+ left'``: single quotes keep backslashes as they are).

Variables are resolved statically: the steps run in the order written, so the parser knows at
every line which ``$name`` has been bound (by an earlier ``expect``) and refuses a ``send`` that
uses one that has not. In an ``expect``, a field whose whole value is an unbound ``$name`` binds it
to the value received; a bound one is compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from services.client.scenario.match import Absent, Capture, Exact, FieldSpec, Regex, Template, Var
from shared.compids import gateway_comp_ids
from shared.fix.versions import version
from shared.phases import PHASES, phase_of

BUILTINS = frozenset({"run", "now"})  # $run: unique per run; $now: UTCTimestamp when sent
# Header and trailer fields the client's engine writes itself.
ENGINE_TAGS = {8: "BeginString", 9: "BodyLength", 10: "CheckSum", 34: "MsgSeqNum", 49: "SenderCompID",
               52: "SendingTime", 56: "TargetCompID"}
DEFAULT_TIMEOUT_S = 5.0
MAX_WAIT_S = 600.0

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_VAR = re.compile(r"\$(\$|[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")
_FIELD = re.compile(r"(\d+)(=|~)(.*)\Z", re.S)
_ABSENT = re.compile(r"!(\d+)\Z")
_OPTION = re.compile(r"([a-z]+)=(.*)\Z", re.S)


class ScenarioSyntaxError(ValueError):
    """A scenario file that cannot be read: names the file and the line."""

    def __init__(self, file: str, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line, self.message = file, line, message


# ----------------------------------------------------------------------------------------- steps

@dataclass(frozen=True, slots=True)
class Where:
    file: str
    line: int
    text: str  # the line as written, for messages

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class Logon:
    where: Where
    session: str
    comp_id: str
    heartbeat_s: int = 30
    port: int | None = None  # another gateway's port (FIXLAB_GATEWAYS); None: the run's --port
    timeout_s: float = 10.0
    begin_string: str = "FIX.4.4"  # the session's version: ``version=``, else its CompID's pool


@dataclass(frozen=True, slots=True)
class Send:
    where: Where
    session: str
    fields: tuple[tuple[int, Template], ...]  # 35 first


@dataclass(frozen=True, slots=True)
class Expect:
    where: Where
    session: str
    specs: tuple[FieldSpec, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S
    source: str = "exchange"  # or "client": what the session's own engine sent (a resend, 43=Y)


@dataclass(frozen=True, slots=True)
class ExpectNothing:
    """No message from the exchange (Heartbeats aside), or none matching ``specs``, for ``for_s`` from
    the moment the step starts."""

    where: Where
    session: str
    for_s: float
    specs: tuple[FieldSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Wait:
    where: Where
    seconds: float


@dataclass(frozen=True, slots=True)
class Control:
    """drop-next, go-silent, talk, disconnect, reconnect."""

    where: Where
    session: str
    action: str
    timeout_s: float = 10.0  # reconnect: how long to wait for the Logon


@dataclass(frozen=True, slots=True)
class Phase:
    """An operator's phase change: a SetPhase through the bus, as ``fixlab admin phase`` sends it, then
    wait for the matcher's PhaseChanged."""

    where: Where
    symbol: str
    phase: int  # PHASE_*
    reason: str
    timeout_s: float = DEFAULT_TIMEOUT_S


Step = Logon | Send | Expect | ExpectNothing | Wait | Control | Phase
CONTROLS = ("drop-next", "go-silent", "talk", "disconnect", "reconnect")


@dataclass(frozen=True, slots=True)
class Scenario:
    file: str
    steps: tuple[Step, ...] = field(default_factory=tuple)
    title: str = ""  # the first comment line, if the file starts with one


# ---------------------------------------------------------------------------------------- parsing

def words(text: str) -> list[str]:
    """Split a line into words: blanks separate, quotes group, ``#`` at a word's start ends the line."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r":
            i += 1
        if i >= n or text[i] == "#":
            break
        word: list[str] = []
        while i < n and text[i] not in " \t\r":
            ch = text[i]
            if ch in "\"'":
                end = i + 1
                chunk: list[str] = []
                while end < n and text[end] != ch:
                    if ch == '"' and text[end] == "\\" and end + 1 < n:
                        end += 1
                    chunk.append(text[end])
                    end += 1
                if end >= n:
                    raise ValueError(f"no closing {ch} (opened at column {i + 1})")
                word.append("".join(chunk))
                i = end + 1
            else:
                word.append(ch)
                i += 1
        out.append("".join(word))
    return out


def parse(text: str, file: str = "<scenario>") -> Scenario:
    """Read a whole scenario; raise ScenarioSyntaxError naming ``file`` and the line."""
    return _Parser(file).run(text)


class _Parser:
    def __init__(self, file: str) -> None:
        self.file = file
        self.sessions: set[str] = set()
        self.comp_ids: dict[str, str] = {}
        self.bound: set[str] = set(BUILTINS)

    def run(self, text: str) -> Scenario:
        steps: list[Step] = []
        title = ""
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if not steps and not title and stripped.startswith("#"):
                title = stripped.lstrip("#").strip()
            try:
                parts = words(line)
            except ValueError as exc:
                raise ScenarioSyntaxError(self.file, number, str(exc)) from None
            if not parts:
                continue
            where = Where(self.file, number, stripped)
            try:
                steps.append(self.step(where, parts[0], parts[1:]))
            except _Bad as exc:
                raise ScenarioSyntaxError(self.file, number, str(exc)) from None
        if not steps:
            raise ScenarioSyntaxError(self.file, 1, "no steps")
        return Scenario(self.file, tuple(steps), title)

    def step(self, where: Where, verb: str, args: list[str]) -> Step:
        if verb == "logon":
            return self.logon(where, args)
        if verb == "wait":
            if len(args) != 1:
                raise _Bad("wait takes one duration: wait 1.5")
            return Wait(where, seconds(args[0], "wait"))
        if verb == "phase":
            return self.phase(where, args)
        if verb not in ("send", "expect", "expect-nothing", *CONTROLS):
            raise _Bad(f"unknown step {verb!r} (steps: logon, send, expect, expect-nothing, wait, phase, "
                       f"{', '.join(CONTROLS)})")
        if not args:
            raise _Bad(f"{verb} needs a session name (one a logon step named)")
        session, rest = args[0], args[1:]
        if session not in self.sessions:
            raise _Bad(f"session {session!r} has not logged on (add: logon {session} CLIENT01)")
        if verb == "send":
            return self.send(where, session, rest)
        if verb == "expect":
            return self.expect(where, session, rest)
        if verb == "expect-nothing":
            return self.expect_nothing(where, session, rest)
        options = self.options(rest, allowed={"timeout"} if verb == "reconnect" else set(), verb=verb)
        return Control(where, session, verb, seconds(options.get("timeout", "10"), "timeout"))

    def logon(self, where: Where, args: list[str]) -> Logon:
        if len(args) < 2:
            raise _Bad("logon takes a session name and a CompID: logon A CLIENT01")
        session, comp_id = args[0], args[1]
        if not _NAME.match(session):
            raise _Bad(f"session name {session!r}: a letter, then letters, digits or _")
        if session in self.sessions:
            raise _Bad(f"session {session!r} is already logged on (use reconnect)")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", comp_id):
            raise _Bad(f"CompID {comp_id!r}: letters, digits, '_', '.', '-'")
        if comp_id in self.comp_ids:
            raise _Bad(f"{comp_id} is already session {self.comp_ids[comp_id]} (the exchange takes one "
                       "Logon per CompID at a time)")
        options = self.options(args[2:], allowed={"heartbeat", "port", "timeout", "version"}, verb="logon")
        heartbeat = integer(options.get("heartbeat", "30"), "heartbeat", 1, 3600)
        port = integer(options["port"], "port", 1, 65535) if "port" in options else None
        self.sessions.add(session)
        self.comp_ids[comp_id] = session
        timeout = seconds(options.get("timeout", "10"), "timeout")
        if "version" in options:
            try:
                begin = version(options["version"]).begin_string
            except ValueError as exc:
                raise _Bad(str(exc)) from None
        else:  # CLIENT42-01: FIX.4.2, CLIENT50-01: FIXT.1.1, any other: FIX.4.4
            begin = gateway_comp_ids().begin_string(comp_id)
        return Logon(where, session, comp_id, heartbeat, port, timeout, begin)

    def phase(self, where: Where, args: list[str]) -> Phase:
        if len(args) < 2:
            raise _Bad(f"phase takes a symbol and a phase: phase ACORN.LAB pre_open [reason] "
                       f"(phases: {', '.join(PHASES)})")
        symbol, name = args[0], args[1]
        code = phase_of(name)
        if code is None:
            raise _Bad(f"unknown phase {name!r}: one of {', '.join(PHASES)}")
        reason = [w for w in args[2:] if not w.startswith("timeout=")]
        options = self.options([w for w in args[2:] if w.startswith("timeout=")], allowed={"timeout"},
                               verb="phase")
        timeout = seconds(options.get("timeout", str(DEFAULT_TIMEOUT_S)), "timeout")
        return Phase(where, symbol, code, " ".join(reason) or f"{name.lower()} (scenario)", timeout)

    def send(self, where: Where, session: str, args: list[str]) -> Send:
        fields: list[tuple[int, Template]] = []
        for word in args:
            m = _FIELD.match(word)
            if not m or m.group(2) != "=":
                raise _Bad(f"{word!r}: send takes tag=value fields")
            tag = self.tag(m.group(1))
            if tag in ENGINE_TAGS:
                raise _Bad(f"{tag} ({ENGINE_TAGS[tag]}) is filled in by the engine; leave it out")
            template = self.template(m.group(3))
            unbound = [n for n in template.names if n not in self.bound]
            if unbound:
                raise _Bad(f"${unbound[0]} is not bound yet (an earlier expect binds it: 37=${unbound[0]})")
            fields.append((tag, template))
        msg_types = [i for i, (tag, _) in enumerate(fields) if tag == 35]
        if len(msg_types) != 1:
            raise _Bad("send needs exactly one 35=MsgType")
        fields.insert(0, fields.pop(msg_types[0]))
        return Send(where, session, tuple(fields))

    def expect(self, where: Where, session: str, args: list[str]) -> Expect:
        specs, options = self.specs(args, allowed={"timeout", "from"}, verb="expect")
        if not specs:
            raise _Bad("expect needs at least one field: expect A 35=8 150=0")
        source = options.get("from", "exchange")
        if source not in ("exchange", "client"):
            raise _Bad(f"from={source}: exchange (the default) or client")
        timeout = seconds(options.get("timeout", str(DEFAULT_TIMEOUT_S)), "timeout")
        for spec in specs:
            if isinstance(spec, Capture):
                self.bound.add(spec.name)
        return Expect(where, session, tuple(specs), timeout, source)

    def expect_nothing(self, where: Where, session: str, args: list[str]) -> ExpectNothing:
        if not args:
            raise _Bad("expect-nothing takes a duration: expect-nothing A 2")
        duration = seconds(args[0], "expect-nothing")
        specs, _ = self.specs(args[1:], allowed=set(), verb="expect-nothing")
        if any(isinstance(s, Capture) for s in specs):
            raise _Bad("expect-nothing cannot bind a variable")
        return ExpectNothing(where, session, duration, tuple(specs))

    # ------------------------------------------------------------------ pieces

    def specs(self, args: list[str], *, allowed: set[str], verb: str
              ) -> tuple[list[FieldSpec], dict[str, str]]:
        specs: list[FieldSpec] = []
        options: list[str] = []
        fresh: set[str] = set()
        for word in args:
            if m := _ABSENT.match(word):
                specs.append(Absent(self.tag(m.group(1))))
                continue
            m = _FIELD.match(word)
            if not m:
                options.append(word)
                continue
            tag, op, value = self.tag(m.group(1)), m.group(2), m.group(3)
            if op == "~":
                try:
                    re.compile(value)
                except re.error as exc:
                    raise _Bad(f"{word!r}: bad regular expression: {exc}") from None
                specs.append(Regex(tag, value))
                continue
            template = self.template(value)
            whole = template.parts[0] if len(template.parts) == 1 else None
            if isinstance(whole, Var) and whole.name not in self.bound:
                if whole.name in fresh:
                    raise _Bad(f"${whole.name} is bound twice in one expect")
                fresh.add(whole.name)
                specs.append(Capture(tag, whole.name))
                continue
            unbound = [n for n in template.names if n not in self.bound]
            if unbound:
                raise _Bad(f"${unbound[0]} is not bound yet: a value may bind a variable only as a "
                           f"whole ({tag}=${unbound[0]})")
            specs.append(Exact(tag, template))
        return specs, self.options(options, allowed=allowed, verb=verb)

    @staticmethod
    def options(args: list[str], *, allowed: set[str], verb: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for word in args:
            m = _OPTION.match(word)
            if not m or m.group(1) not in allowed:
                what = f"options: {', '.join(sorted(allowed))}" if allowed else "no options"
                raise _Bad(f"{word!r}: not a field (tag=value, tag~regex, !tag) nor an option of "
                           f"{verb} ({what})")
            out[m.group(1)] = m.group(2)
        return out

    @staticmethod
    def tag(text: str) -> int:
        tag = int(text)
        if not 1 <= tag <= 99999 or text.startswith("0"):
            raise _Bad(f"tag {text}: a number from 1 to 99999")
        return tag

    @staticmethod
    def template(value: str) -> Template:
        parts: list[str | Var] = []
        pos = 0
        for m in _VAR.finditer(value):
            if m.start() > pos:
                parts.append(value[pos:m.start()])
            name = m.group(1)
            parts.append("$" if name == "$" else Var(name.strip("{}")))
            pos = m.end()
        if pos < len(value):
            parts.append(value[pos:])
        if "$" in "".join(p for p in parts if isinstance(p, str) and p != "$"):
            raise _Bad(f"{value!r}: '$' starts a variable ($name or ${{name}}); write $$ for a '$'")
        merged: list[str | Var] = []
        for p in parts:  # "$$" left a literal "$": join neighbouring text
            if isinstance(p, str) and merged and isinstance(merged[-1], str):
                merged[-1] += p
            else:
                merged.append(p)
        return Template(tuple(merged) or ("",))


class _Bad(Exception):
    """A problem on the current line (the parser adds the file and the line)."""


def seconds(text: str, what: str) -> float:
    raw = text[:-1] if text.endswith("s") else text
    try:
        value = float(raw)
    except ValueError:
        raise _Bad(f"{what}: {text!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_WAIT_S:
        raise _Bad(f"{what}: {text} s, from 0 to {MAX_WAIT_S:.0f}")
    return value


def integer(text: str, what: str, lo: int, hi: int) -> int:
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise _Bad(f"{what}={text}: a whole number from {lo} to {hi}")
    return int(text)
