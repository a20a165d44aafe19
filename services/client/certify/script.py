"""Certification scripts: the scenario format (services/client/scenario/syntax.py) with the roles
reversed, plus the few steps certification needs. Pure: no I/O.

``send`` is the exchange sending to the client under test, ``expect`` / ``expect-nothing`` look at
what the client sends. ``logon C CERT01`` waits for the client's Logon (the run's ``--comp``
replaces the CompID written). The steps the scenario runner has and certification adds:

    check NAME "what it checks"          starts a named check: the steps up to the next check are its
    instruct C "order buy 100 ..."       tells the client's user what to send (printed; sent as News 35=B)
    inject C bad-checksum [35=0 ...]     a message with the engine's next MsgSeqNum and a wrong CheckSum
    inject C garbled                     a well framed message whose body is not tag=value fields
    inject C raw '8=FIX.4.4|9=5|...'     any bytes ('|' for SOH), written as they are
    skip-seq C 3                         the next MsgSeqNum the exchange sends is 3 too high
    sequence-reset C gap-fill|reset 5    a real SequenceReset, NewSeqNo 5 past the next number
    logout C "text"                      the exchange's engine logs the client out
    unique C 11 [35~'D|F|G']             the client's messages matching give distinct values of 11
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.client.scenario.match import FieldSpec, Template
from services.client.scenario.syntax import (
    CONTROLS,
    Expect,
    Scenario,
    Step,
    Where,
    _Bad,
    _Parser,
    seconds,
)

BUILTINS = frozenset({"comp"})  # the run's CompID, besides $run and $now
_CHECK_NAME = re.compile(r"[a-z][a-z0-9-]*\Z")


@dataclass(frozen=True, slots=True)
class Check:
    where: Where
    name: str
    title: str


@dataclass(frozen=True, slots=True)
class Instruct:
    where: Where
    session: str
    text: Template


@dataclass(frozen=True, slots=True)
class Inject:
    where: Where
    session: str
    kind: str  # bad-checksum, garbled, raw
    fields: tuple[tuple[int, Template], ...] = ()
    raw: str = ""


@dataclass(frozen=True, slots=True)
class SkipSeq:
    where: Where
    session: str
    count: int


@dataclass(frozen=True, slots=True)
class SequenceReset:
    where: Where
    session: str
    gap_fill: bool
    count: int


@dataclass(frozen=True, slots=True)
class Logout:
    where: Where
    session: str
    text: str


@dataclass(frozen=True, slots=True)
class Unique:
    where: Where
    session: str
    tag: int
    specs: tuple[FieldSpec, ...]


CertStep = Check | Instruct | Inject | SkipSeq | SequenceReset | Logout | Unique
VERBS = ("check", "instruct", "inject", "skip-seq", "sequence-reset", "logout", "unique")


def parse(text: str, file: str = "<script>") -> Scenario:
    """Read a certification script; ScenarioSyntaxError names the file and the line. Its steps are
    the scenario runner's (syntax.Step) and this module's (CertStep)."""
    return _CertParser(file).run(text)


class _CertParser(_Parser):
    def __init__(self, file: str) -> None:
        super().__init__(file)
        self.bound |= BUILTINS
        self.checks: set[str] = set()

    def step(self, where: Where, verb: str, args: list[str]) -> Step:
        if verb in CONTROLS:
            raise _Bad(f"{verb}: a scenario step the certification runner does not play")
        if verb == "check":
            return self.check(where, args)  # type: ignore[return-value]
        if verb not in VERBS:
            step = super().step(where, verb, args)
            if isinstance(step, Expect) and step.source != "exchange":
                raise _Bad("from=: in a certification script expect always looks at the client")
            return step
        if not args or args[0] not in self.sessions:
            raise _Bad(f"{verb} needs a session a logon step named: {verb} C ...")
        session, rest = args[0], args[1:]
        made: CertStep
        if verb == "instruct":
            if len(rest) != 1:
                raise _Bad('instruct takes one quoted text: instruct C "order buy 100 ACORN.LAB 10.00"')
            made = Instruct(where, session, self.template(rest[0]))
        elif verb == "inject":
            made = self.inject(where, session, rest)
        elif verb == "skip-seq":
            made = SkipSeq(where, session, self.count(rest, "skip-seq C 3"))
        elif verb == "sequence-reset":
            if not rest or rest[0] not in ("gap-fill", "reset"):
                raise _Bad("sequence-reset C gap-fill|reset N")
            count = self.count(rest[1:], "sequence-reset C reset 5")
            made = SequenceReset(where, session, rest[0] == "gap-fill", count)
        elif verb == "logout":
            made = Logout(where, session, rest[0] if rest else "")
        else:
            if not rest or not rest[0].isdigit():
                raise _Bad("unique C TAG [fields]: unique C 11 35~'D|F|G'")
            specs, _ = self.specs(rest[1:], allowed=set(), verb="unique")
            made = Unique(where, session, self.tag(rest[0]), tuple(specs))
        return made  # type: ignore[return-value]

    def check(self, where: Where, args: list[str]) -> Check:
        if not args or not _CHECK_NAME.match(args[0]):
            raise _Bad('check NAME "title": a name of lower-case letters, digits and -')
        if args[0] in self.checks:
            raise _Bad(f"check {args[0]} is already named")
        self.checks.add(args[0])
        return Check(where, args[0], " ".join(args[1:]))

    def inject(self, where: Where, session: str, rest: list[str]) -> Inject:
        if not rest or rest[0] not in ("bad-checksum", "garbled", "raw"):
            raise _Bad("inject C bad-checksum [fields] | garbled | raw 'bytes, | for SOH'")
        kind = rest[0]
        if kind == "raw":
            if len(rest) != 2:
                raise _Bad("inject C raw takes one quoted text")
            return Inject(where, session, kind, raw=rest[1])
        if kind == "garbled":
            if len(rest) != 1:
                raise _Bad("inject C garbled takes nothing more")
            return Inject(where, session, kind)
        send = self.send(where, session, rest[1:] or ["35=0"])
        return Inject(where, session, kind, send.fields)

    @staticmethod
    def count(rest: list[str], example: str) -> int:
        if len(rest) != 1 or not rest[0].isdigit() or not 1 <= int(rest[0]) <= 1000:
            raise _Bad(f"a count from 1 to 1000: {example}")
        return int(rest[0])


__all__ = [
    "CertStep",
    "Check",
    "Inject",
    "Instruct",
    "Logout",
    "SequenceReset",
    "SkipSeq",
    "Unique",
    "parse",
    "seconds",
]
