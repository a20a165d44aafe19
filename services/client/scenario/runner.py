"""Play a parsed scenario over real FIX sessions: the thin adapter between the steps and the engines.

Each ``logon`` makes a session through a factory (``services.client.session.ClientSession`` in real
use, a fake in tests) whose tap calls ``on_record`` for every message it sees, both ways. The
runner keeps those per session and walks them with one cursor per direction: an ``expect`` takes
the first message after the cursor that matches and moves the cursor past it; the messages before
it are passed over (shown when a later expect fails). So expects follow the order of arrival.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from services.client.scenario.groups import GroupError, GroupShape, nest
from services.client.scenario.match import Exact, Fields, closeness, decode, match, mismatches, show
from services.client.scenario.syntax import (
    Control,
    Expect,
    ExpectNothing,
    Logon,
    Phase,
    Scenario,
    Send,
    Step,
    Wait,
)

HEARTBEAT = "0"
SHOWN_LAST = 12  # the session's last messages printed with a failure
SHOWN_PASSED = 6  # messages passed over, nearest miss first
STOP_WAIT_S = 15.0  # a session's stop is bounded by its engine's LogoutTimeout; this is a backstop


class RecordLike(Protocol):
    """What a session's tap reports for each message (``services.client.session.Record``)."""

    @property
    def source(self) -> str: ...  # "client" or "exchange"
    @property
    def raw(self) -> bytes: ...
    @property
    def withheld(self) -> bool: ...
    @property
    def ns(self) -> int: ...


class SessionLike(Protocol):
    """The part of ``ClientSession`` the runner drives."""

    def start(self) -> object: ...
    def wait_logon(self, timeout: float) -> None: ...
    def send(self, fields: Sequence[tuple[int, Any]]) -> None: ...
    def drop_next(self) -> None: ...
    def go_silent(self) -> None: ...
    def talk(self) -> None: ...
    def disconnect(self) -> None: ...
    def reconnect(self) -> None: ...
    def stop(self) -> None: ...


# comp_id, heartbeat_s, port (None: the run's), on_record, BeginString -> a session not yet started
SessionFactory = Callable[[str, int, "int | None", Callable[[RecordLike], None], str], SessionLike]
# symbol, phase, reason, timeout_s -> what changed ("ACORN.LAB: CONTINUOUS -> PRE_OPEN"); raises
# PhaseNotChanged (or any error, with its reason) when the matcher did not say so in time.
SetPhaseFn = Callable[[str, int, str, float], str]


class PhaseNotChanged(Exception):
    """A phase step's change did not come: the reason in one line."""


class StepFailed(Exception):
    """A step whose expectation did not hold; ``lines`` say what was expected and what came."""

    def __init__(self, step: Step, lines: list[str], *, logon: bool = False) -> None:
        super().__init__(lines[0] if lines else "failed")
        self.step, self.lines, self.logon = step, lines, logon


@dataclass(slots=True)
class Seen:
    source: str
    fields: Fields
    withheld: bool
    ns: int
    raw: bytes

    def text(self) -> str:
        """The message on one line; bytes that are not FIX fields as Python shows bytes."""
        return show(self.fields) if self.fields else repr(self.raw[:200])


@dataclass
class Inbox:
    """Every message one session's tap saw, in order, and the two cursors."""

    seen: list[Seen] = field(default_factory=list)
    cursor: dict[str, int] = field(default_factory=lambda: {"exchange": 0, "client": 0})
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add(self, record: RecordLike) -> None:
        with self.changed:
            self.seen.append(Seen(record.source, decode(record.raw), record.withheld, record.ns, record.raw))
            self.changed.notify_all()

    def after(self, source: str) -> list[tuple[int, Seen]]:
        with self.changed:
            start = self.cursor[source]
            return [(i, s) for i, s in enumerate(self.seen) if i >= start and s.source == source]

    def wait(self, count: int, timeout: float) -> None:
        """Until more than ``count`` messages have been seen, or ``timeout`` s."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.seen) > count, timeout)

    def __len__(self) -> int:
        with self.changed:
            return len(self.seen)


def new_run_id() -> str:
    """A short id unique per run (base 36 of the ms clock and the pid) for ClOrdIDs: ``$run``."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    n = (time.time_ns() // 1_000_000) * 1000 + os.getpid() % 1000 + next(_RUNS)
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out


_RUNS = itertools.count()


def fix_now() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]


@dataclass
class Result:
    scenario: Scenario
    ok: bool
    seconds: float
    steps_done: int
    failure: StepFailed | None = None
    report: list[str] = field(default_factory=list)  # what to print on a failure

    @property
    def exit_code(self) -> int:
        if self.ok:
            return 0
        return 3 if self.failure is not None and self.failure.logon else 1


class Runner:
    """Play one scenario; ``log`` gets a line per step when verbose."""

    def __init__(self, factory: SessionFactory, *, log: Callable[[str], None] | None = None,
                 groups: Callable[[str], Mapping[int, GroupShape]] | None = None,
                 names: Callable[[int, str], str] | None = None,
                 engine_started: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 set_phase: SetPhaseFn | None = None) -> None:
        self.factory = factory
        self.set_phase = set_phase  # phase steps: through the bus (None: a phase step fails, saying so)
        self.groups = groups  # a MsgType's repeating groups (the data dictionary's); None: sent flat
        self.names = names  # (tag, value) -> "ExecType=Trade", for failure reports; None: tags only
        self.engine_started = engine_started or (lambda: None)  # after each start and reconnect
        self.log = log
        self.clock = clock
        self.sessions: dict[str, SessionLike] = {}
        self.inboxes: dict[str, Inbox] = {}
        self.variables: dict[str, str] = {}

    def run(self, scenario: Scenario) -> Result:
        started = self.clock()
        self.variables = {"run": new_run_id()}
        done = 0
        try:
            for step in scenario.steps:
                if self.log:
                    self.log(f"  {step.where.line:>3}  {step.where.text}")
                self.step(step)
                done += 1
        except StepFailed as failure:
            return Result(scenario, False, self.clock() - started, done, failure, self.report(failure))
        finally:
            self.stop()
        return Result(scenario, True, self.clock() - started, done)

    def stop(self) -> None:
        """Log every session out, side by side (each engine's stop takes about a second)."""
        def stop_one(session: SessionLike) -> None:
            with contextlib.suppress(Exception):  # already gone: nothing to stop
                session.stop()
        threads = [threading.Thread(target=stop_one, args=(s,), daemon=True) for s in self.sessions.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(STOP_WAIT_S)
        self.sessions.clear()

    # ------------------------------------------------------------------ steps

    def step(self, step: Step) -> None:
        if isinstance(step, Logon):
            self.logon(step)
        elif isinstance(step, Send):
            self.send(step)
        elif isinstance(step, Expect):
            self.expect(step)
        elif isinstance(step, ExpectNothing):
            self.expect_nothing(step)
        elif isinstance(step, Wait):
            time.sleep(step.seconds)
        elif isinstance(step, Phase):
            self.phase(step)
        else:
            self.control(step)

    def logon(self, step: Logon) -> None:
        inbox = Inbox()
        self.inboxes[step.session] = inbox
        try:
            session = self.factory(step.comp_id, step.heartbeat_s, step.port, inbox.add, step.begin_string)
            self.sessions[step.session] = session
            session.start()
            self.engine_started()
            session.wait_logon(step.timeout_s)
        except Exception as exc:  # the session's own one-line reason: refused, unreachable, timed out
            raise StepFailed(step, [f"{step.session} ({step.comp_id}) did not log on: {one_line(exc)}"],
                             logon=True) from None

    def phase(self, step: Phase) -> None:
        if self.set_phase is None:
            raise StepFailed(step, ["a phase step needs the bus: give --redis-url or set REDIS_URL"])
        try:
            said = self.set_phase(step.symbol, step.phase, step.reason, step.timeout_s)
        except Exception as exc:  # not changed in time, unknown symbol, Redis unreachable: one line
            raise StepFailed(step, [f"phase {step.symbol}: {one_line(exc)}"]) from None
        if self.log:
            self.log(f"       {said}")

    def control(self, step: Control) -> None:
        session = self.sessions[step.session]
        try:
            if step.action == "drop-next":
                session.drop_next()
            elif step.action == "go-silent":
                session.go_silent()
            elif step.action == "talk":
                session.talk()
            elif step.action == "disconnect":
                session.disconnect()
            else:
                session.reconnect()
                self.engine_started()
                session.wait_logon(step.timeout_s)
        except Exception as exc:
            raise StepFailed(step, [f"{step.action} {step.session}: {one_line(exc)}"]) from None

    def render(self, step: Send) -> list[tuple[int, str]]:
        values = {**self.variables, "now": fix_now()}
        return [(tag, template.render(values)) for tag, template in step.fields]

    def send(self, step: Send) -> None:
        flat = self.render(step)
        try:
            message = nest(flat, self.groups(flat[0][1])) if self.groups is not None else flat
            self.sessions[step.session].send(message)
        except GroupError as exc:
            raise StepFailed(step, [f"cannot send: {exc}"]) from None
        except Exception as exc:  # the session's own one line: not logged on, engine refused
            raise StepFailed(step, [f"cannot send on {step.session}: {one_line(exc)}"]) from None

    def expect(self, step: Expect) -> None:
        inbox = self.inboxes[step.session]
        deadline = self.clock() + step.timeout_s
        while True:
            count = len(inbox)
            for index, seen in inbox.after(step.source):
                bound = match(step.specs, seen.fields, self.variables)
                if bound is not None:
                    self.variables.update(bound)
                    with inbox.changed:
                        inbox.cursor[step.source] = index + 1
                    return
            left = deadline - self.clock()
            if left <= 0:
                break
            inbox.wait(count, left)
        expected = " ".join(str(s) for s in step.specs)
        lines = [f"expected from {'the exchange' if step.source == 'exchange' else 'the client engine'} on "
                 f"{step.session} within {step.timeout_s:g} s: {expected}"]
        if self.names is not None:
            named = [self.names(s.tag, s.value.render(self.variables) if isinstance(s, Exact) else "")
                     for s in step.specs]
            lines.append("  (" + ", ".join(f"{s.tag} {n}" for s, n in zip(step.specs, named, strict=True)
                                           if n) + ")")
        passed = inbox.after(step.source)
        if not passed:
            lines.append(f"nothing came from the {step.source} after the previous expect")
        else:
            lines.append(f"{len(passed)} message(s) came instead; the nearest:")
            nearest = sorted(passed, key=lambda p: -closeness(step.specs, p[1].fields, self.variables))
            for _, seen in nearest[:SHOWN_PASSED]:
                why = "; ".join(mismatches(step.specs, seen.fields, self.variables))
                lines.append(f"    {seen.text()}")
                lines.append(f"      -> {why}")
        raise StepFailed(step, lines)

    def expect_nothing(self, step: ExpectNothing) -> None:
        inbox = self.inboxes[step.session]
        deadline = self.clock() + step.for_s
        start = len(inbox)  # from now on: what came before is for expects to take
        while True:
            count = len(inbox)
            for index, seen in inbox.after("exchange"):
                if index < start:
                    continue
                if not step.specs and seen.fields and dict(seen.fields).get(35) == HEARTBEAT:
                    continue
                if match(step.specs, seen.fields, self.variables) is not None:
                    what = " matching " + " ".join(str(s) for s in step.specs) if step.specs else ""
                    raise StepFailed(step, [f"expected nothing{what} from the exchange on {step.session} "
                                            f"for {step.for_s:g} s; got:", f"    {seen.text()}"])
            left = deadline - self.clock()
            if left <= 0:
                return
            inbox.wait(count, left)

    # ------------------------------------------------------------------ failure report

    def report(self, failure: StepFailed) -> list[str]:
        step = failure.step
        lines = [f"FAILED at {step.where}: {step.where.text}", *(f"  {x}" for x in failure.lines)]
        for name, inbox in self.inboxes.items():
            if getattr(step, "session", name) != name:
                continue
            with inbox.changed:
                last = inbox.seen[-SHOWN_LAST:]
            lines.append(f"  last messages of {name} (< from the exchange, > from the client engine, "
                         f"x withheld by the tap):")
            if not last:
                lines.append("    (none)")
            for seen in last:
                mark = "x" if seen.withheld else ("<" if seen.source == "exchange" else ">")
                lines.append(f"    {mark} {seen.text()}")
        return lines


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def reachable(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """None if something accepts on host:port, else why not (one line)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"cannot reach {host}:{port}: {exc.strerror or exc}"
