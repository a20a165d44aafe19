"""Play a certification script at one client session and judge each check: the thin adapter between
the script's steps, the certification acceptor and the tap.

Every message both ways goes through the tap (``shared.fix.tap``), which records it; the client's
messages are what ``expect`` looks at, with one cursor, as in the scenario runner. A check passes when
all its steps hold, fails at the first that does not (what was expected, what came, and the wire of
the check so far), and is skipped when it cannot be played: the client's session has ended, or a
variable it needs was not bound because an earlier check failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from services.client.certify.acceptor import SENDER, CertAcceptor
from services.client.certify.script import Check, Inject, Instruct, Logout, SequenceReset, SkipSeq, Unique
from services.client.scenario.match import (
    Capture,
    Exact,
    Fields,
    FieldSpec,
    Template,
    closeness,
    match,
    mismatches,
    values_of,
)
from services.client.scenario.runner import Inbox, Seen, fix_now
from services.client.scenario.syntax import Expect, ExpectNothing, Logon, Scenario, Send, Wait
from shared.fix.dictionary import Dictionary
from shared.fix.versions import FIX44
from shared.fix.wire import line, parse

CLIENT = "client"  # the tap's name for the side the client under test writes
HEARTBEAT = "0"
SHOWN_PASSED = 6
SOH = "\x01"

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class Outcome:
    name: str
    title: str
    status: str
    where: str = ""  # file:line of the failing step
    step: str = ""  # the failing step as written
    lines: list[str] = field(default_factory=list)  # what was expected and what came, or why skipped
    wire: list[str] = field(default_factory=list)  # the check's messages, named, on a failure
    seconds: float = 0.0


class Failed(Exception):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[0] if lines else "failed")
        self.lines = lines


def checksum(data: bytes) -> int:
    return sum(data) % 256


def frame(body: str, *, begin: str = FIX44, bad_checksum: bool = False) -> bytes:
    """A whole message from ``body`` (35 onwards): BeginString ``begin``, BodyLength and a CheckSum,
    right or one off."""
    head = f"8={begin}{SOH}9={len(body.encode('latin-1'))}{SOH}".encode("latin-1")
    raw = head + body.encode("latin-1")
    total = (checksum(raw) + (1 if bad_checksum else 0)) % 256
    return raw + f"10={total:03d}{SOH}".encode("ascii")


class Certifier:
    """Plays ``script`` through ``acceptor``; ``inject`` writes raw bytes toward the client (the tap's)."""

    def __init__(self, script: Scenario, acceptor: CertAcceptor, inbox: Inbox,
                 inject: Callable[[bytes], None],
                 dictionary: Dictionary, *, run_id: str, say: Callable[[str], None] = lambda _: None,
                 clock: Callable[[], float] = time.monotonic, logon_timeout_s: float | None = None) -> None:
        self.script = script
        self.acceptor = acceptor
        self.inbox = inbox
        self.inject_raw = inject
        self.dictionary = dictionary
        self.say = say
        self.clock = clock
        self.logon_timeout_s = logon_timeout_s
        self.variables: dict[str, str] = {"run": run_id, "comp": acceptor.comp_id}
        self.cursor = 0  # index in inbox.seen after the last client message an expect took
        self.ended = ""  # why the client's session is over, once it is

    # ------------------------------------------------------------------ the run

    def run(self) -> list[Outcome]:
        outcomes: list[Outcome] = []
        sections = self.sections()
        setup = sections[0][1]
        try:
            for step in setup:
                self.step(step)
        except Failed as exc:
            self.ended = exc.lines[0]
        for check, steps in sections[1:]:
            assert check is not None
            outcomes.append(self.play(check, steps))
            self.say(f"{outcomes[-1].status.upper():4} {check.name}  {check.title}")
        return outcomes

    def sections(self) -> list[tuple[Check | None, list[object]]]:
        out: list[tuple[Check | None, list[object]]] = [(None, [])]
        for step in self.script.steps:
            if isinstance(step, Check):
                out.append((step, []))
            else:
                out[-1][1].append(step)
        return out

    def play(self, check: Check, steps: list[object]) -> Outcome:
        outcome = Outcome(check.name, check.title, PASS)
        if not self.ended and not self.acceptor.logged_on:
            self.ended = "the client's session is not logged on"
        offline = all(isinstance(s, Unique) for s in steps)  # judges what was recorded: no session needed
        if self.ended and not offline:
            outcome.status, outcome.lines = SKIP, [f"not played: {self.ended}"]
            return outcome
        missing = [n for n in names_in(steps) if n not in self.variables and n != "now"]
        if missing:
            outcome.status = SKIP
            outcome.lines = [f"not played: ${missing[0]} was not bound (the expect that binds it failed)"]
            return outcome
        start_index, started = len(self.inbox), self.clock()
        self.cursor = start_index  # a check is judged on what comes after it starts
        for step in steps:
            try:
                self.step(step)
            except Failed as exc:
                outcome.status, outcome.lines = FAIL, exc.lines
                where = getattr(step, "where", None)
                outcome.where, outcome.step = (str(where), where.text) if where is not None else ("", "")
                self.settle()
                outcome.wire = self.wire(start_index)
                break
        outcome.seconds = self.clock() - started
        return outcome

    def settle(self, quiet_s: float = 1.0, most_s: float = 3.0) -> None:
        """After a failure, let the client's reaction arrive (a Logout, a ResendRequest) before the next
        check starts: until nothing has come for ``quiet_s``, at most ``most_s``."""
        deadline = self.clock() + most_s
        while self.clock() < deadline:
            count = len(self.inbox)
            self.inbox.wait(count, min(quiet_s, deadline - self.clock()))
            if len(self.inbox) == count:
                return

    def wire(self, start: int) -> list[str]:
        with self.inbox.changed:
            seen = self.inbox.seen[start:]
        return [self.named(s) for s in seen]

    def named(self, seen: Seen) -> str:
        """One message on one line, every field named as the page names it."""
        text = line(parse(seen.raw, self.dictionary), seen.source, seen.withheld)
        if seen.source == CLIENT:
            return text.replace("->", "client ->", 1)
        return text.replace("<-", "exchange <-", 1)

    # ------------------------------------------------------------------ steps

    def step(self, step: object) -> None:
        if isinstance(step, Logon):
            timeout = self.logon_timeout_s if self.logon_timeout_s is not None else step.timeout_s
            if not self.acceptor.wait_logon(timeout):
                raise Failed([f"the client did not log on as {self.acceptor.comp_id} within {timeout:g} s"])
        elif isinstance(step, Send):
            self.send(self.render(step.fields))
        elif isinstance(step, Expect):
            self.expect(step.specs, step.timeout_s)
        elif isinstance(step, ExpectNothing):
            self.expect_nothing(step.specs, step.for_s)
        elif isinstance(step, Wait):
            time.sleep(step.seconds)
        elif isinstance(step, Instruct):
            text = step.text.render(self.variables)
            self.say(f"     instruction to the client: {text}")
            self.send([(35, "B"), (148, text), (33, "1"), (58, text)])
        elif isinstance(step, Inject):
            self.inject(step)
        elif isinstance(step, SkipSeq):
            self.guard(lambda: self.acceptor.skip_seq(step.count))
        elif isinstance(step, SequenceReset):
            self.guard(lambda: self.acceptor.sequence_reset(step.gap_fill, step.count))
        elif isinstance(step, Logout):
            self.guard(lambda: self.acceptor.logout(step.text))
        elif isinstance(step, Unique):
            self.unique(step)
        else:
            raise Failed([f"a step the certification runner does not play: {step!r}"])

    def guard(self, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as exc:
            raise Failed([f"the exchange could not do it: {exc}"]) from None

    def render(self, fields: Iterable[tuple[int, Template]]) -> list[tuple[int, str]]:
        values = {**self.variables, "now": fix_now()}
        return [(tag, template.render(values)) for tag, template in fields]

    def send(self, fields: list[tuple[int, str]]) -> None:
        self.guard(lambda: self.acceptor.send(fields))

    def inject(self, step: Inject) -> None:
        if step.kind == "raw":
            raw = step.raw.replace("|", SOH).encode("latin-1")
        else:
            def build() -> bytes:
                head = f"49={SENDER}{SOH}56={self.acceptor.comp_id}{SOH}34={self.acceptor.next_seq}{SOH}" \
                       f"52={fix_now()}{SOH}"
                begin = self.acceptor.begin_string
                if step.kind == "garbled":
                    return frame(f"35=0{SOH}{head}this is not a tag=value field{SOH}\x02\x03garbage{SOH}",
                                 begin=begin)
                fields = self.render(step.fields)
                body = "".join(f"{t}={v}{SOH}" for t, v in fields[1:])
                return frame(f"35={fields[0][1]}{SOH}{head}{body}", begin=begin, bad_checksum=True)
            try:
                raw = build()
            except Exception as exc:
                raise Failed([f"the exchange could not build the message: {exc}"]) from None
        self.guard(lambda: self.inject_raw(raw))

    def client_after(self, start: int) -> list[tuple[int, Seen]]:
        with self.inbox.changed:
            return [(i, s) for i, s in enumerate(self.inbox.seen) if i >= start and s.source == CLIENT]

    def expect(self, specs: tuple[FieldSpec, ...], timeout_s: float) -> None:
        deadline = self.clock() + timeout_s
        while True:
            count = len(self.inbox)
            for index, seen in self.client_after(self.cursor):
                bound = match(specs, seen.fields, self.variables)
                if bound is not None:
                    self.variables.update(bound)
                    self.cursor = index + 1
                    return
            left = deadline - self.clock()
            if left <= 0:
                break
            self.inbox.wait(count, left)
        lines = [f"expected from the client within {timeout_s:g} s: {' '.join(str(s) for s in specs)}"]
        name = self.dictionary.field_name
        named = [f"{s.tag} {name(s.tag)}" for s in specs if name(s.tag)]
        if named:
            lines.append(f"  ({', '.join(named)})")
        passed = self.client_after(self.cursor)
        if not passed:
            lines.append("nothing came from the client")
        else:
            lines.append(f"{len(passed)} message(s) came instead; the nearest:")
            nearest = sorted(passed, key=lambda p: -closeness(specs, p[1].fields, self.variables))
            for _, seen in nearest[:SHOWN_PASSED]:
                lines.append(f"    {seen.text()}")
                lines.append(f"      -> {'; '.join(mismatches(specs, seen.fields, self.variables))}")
        raise Failed(lines)

    def expect_nothing(self, specs: tuple[FieldSpec, ...], for_s: float) -> None:
        deadline = self.clock() + for_s
        start = len(self.inbox)
        while True:
            count = len(self.inbox)
            for _, seen in self.client_after(start):
                if not specs and seen.fields and dict(seen.fields).get(35) == HEARTBEAT:
                    continue
                if match(specs, seen.fields, self.variables) is not None:
                    what = " matching " + " ".join(str(s) for s in specs) if specs else ""
                    raise Failed([f"expected nothing{what} from the client for {for_s:g} s; got:",
                                  f"    {seen.text()}"])
            left = deadline - self.clock()
            if left <= 0:
                return
            self.inbox.wait(count, left)

    def unique(self, step: Unique) -> None:
        first: dict[str, Seen] = {}
        lines: list[str] = []
        for _, seen in self.client_after(0):
            if values_of(seen.fields, 43) == ["Y"] or match(step.specs, seen.fields, self.variables) is None:
                continue
            for value in values_of(seen.fields, step.tag)[:1]:
                if value in first:
                    lines += [f"{step.tag}={value} used again:", f"    {self.named(first[value])}",
                              f"    {self.named(seen)}"]
                else:
                    first[value] = seen
        if lines:
            what = " ".join(str(s) for s in step.specs)
            raise Failed([f"expected every {step.tag} of the client's messages{' ' + what if what else ''} "
                          f"(resends with 43=Y aside) to be new", *lines])


def names_in(steps: Iterable[object]) -> list[str]:
    """The variables the steps use (not those their expects bind), in order."""
    out: list[str] = []
    binds: set[str] = set()

    def use(template: Template) -> None:
        out.extend(n for n in template.names if n not in binds and n not in out)

    for step in steps:
        if isinstance(step, Send | Inject):
            for _, template in step.fields:
                use(template)
        elif isinstance(step, Instruct):
            use(step.text)
        elif isinstance(step, Expect | ExpectNothing | Unique):
            for spec in step.specs:
                if isinstance(spec, Exact):
                    use(spec.value)
                elif isinstance(spec, Capture):
                    binds.add(spec.name)
    return out


def fields_text(fields: Fields) -> str:
    return "|".join(f"{t}={v}" for t, v in fields)
