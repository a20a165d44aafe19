"""The scenario runner against a hand-written fake session: order of arrival, timeouts, failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from services.client.scenario.__main__ import main
from services.client.scenario.runner import RecordLike, Runner
from services.client.scenario.syntax import parse


@dataclass
class Rec:
    n: int
    source: str
    raw: bytes
    withheld: bool
    ns: int


def fix(*pairs: tuple[int, object]) -> bytes:
    return b"".join(f"{t}={v}".encode() + b"\x01" for t, v in pairs)


Reply = Callable[[dict[int, str]], list[tuple[float, bytes]]]


@dataclass
class FakeSession:
    """Logs on at once; answers each send with ``reply``'s messages, each after its delay."""

    comp_id: str
    on_record: Callable[[RecordLike], None]
    reply: Reply
    refuse: str | None = None
    calls: list[str] = field(default_factory=list)
    n: int = 0

    def record(self, source: str, raw: bytes, withheld: bool = False) -> None:
        self.n += 1
        self.on_record(Rec(self.n, source, raw, withheld, time.time_ns()))

    def start(self) -> None:
        self.calls.append("start")

    def wait_logon(self, timeout: float) -> None:
        if self.refuse:
            raise RuntimeError(self.refuse)
        self.record("client", fix((35, "A")))
        self.record("exchange", fix((35, "A")))

    def send(self, fields: Sequence[tuple[int, str]]) -> None:
        self.record("client", fix(*fields))
        for delay, raw in self.reply(dict(fields)):
            if delay:
                threading.Timer(delay, self.record, ("exchange", raw)).start()
            else:
                self.record("exchange", raw)

    def drop_next(self) -> None:
        self.calls.append("drop_next")

    def go_silent(self) -> None:
        self.calls.append("go_silent")

    def talk(self) -> None:
        self.calls.append("talk")

    def disconnect(self) -> None:
        self.calls.append("disconnect")

    def reconnect(self) -> None:
        self.calls.append("reconnect")

    def stop(self) -> None:
        self.calls.append("stop")


def echo_exchange(f: dict[int, str]) -> list[tuple[float, bytes]]:
    """New at once, then (after 0.1 s) a heartbeat and a fill, for every order."""
    if f[35] != "D":
        return []
    return [(0, fix((35, "8"), (11, f[11]), (37, "OID-" + f[11]), (150, "0"))),
            (0.1, fix((35, "0"))),
            (0.15, fix((35, "8"), (11, f[11]), (150, "F"), (58, "filled at " + f.get(44, "?"))))]


def runner(reply: Reply = echo_exchange, refuse: str | None = None) -> tuple[Runner, list[FakeSession]]:
    made: list[FakeSession] = []

    def factory(comp_id: str, heartbeat_s: int, port: int | None,
                on_record: Callable[[RecordLike], None], begin: str) -> FakeSession:
        made.append(FakeSession(comp_id, on_record, reply, refuse))
        return made[-1]
    return Runner(factory), made


def test_a_passing_scenario_binds_and_reuses_variables() -> None:
    r, made = runner()
    result = r.run(parse("""
logon A CLIENT01
send A 35=D 11=$run-1 44=101.00
expect A 35=8 11=$run-1 150=0 37=$oid
expect A 35=8 150=F 58~'filled at 101\\.00'
send A 35=D 11=$oid
expect A 35=8 11=$oid 37=OID-$oid
expect A from=client 35=D 11=$oid
drop-next A
go-silent A
talk A
disconnect A
reconnect A
""", "ok.fix"))
    assert result.ok, result.report
    assert result.steps_done == 12 and result.exit_code == 0
    assert r.variables["oid"] == "OID-" + r.variables["run"] + "-1"
    assert made[0].calls == ["start", "drop_next", "go_silent", "talk", "disconnect", "reconnect", "stop"]


def test_expect_passes_over_earlier_messages_and_keeps_order() -> None:
    r, _ = runner()
    # The fill comes after the New: expecting the fill first passes the New over, for good.
    text = "logon A C\nsend A 35=D 11=a\nexpect A 150=F\nexpect A 150=0 timeout=0.3\n"
    result = r.run(parse(text, "o.fix"))
    assert not result.ok and result.failure is not None
    assert result.failure.step.where.line == 4
    assert any("nothing came from the exchange" in x for x in result.report)


def test_a_failed_expect_names_the_step_what_was_expected_and_the_last_messages() -> None:
    r, _ = runner()
    started = time.monotonic()
    result = r.run(parse("logon A C\nsend A 35=D 11=a\nexpect A 35=8 150=8 timeout=0.5\n", "f.fix"))
    assert 0.5 <= time.monotonic() - started < 3
    assert not result.ok and result.exit_code == 1
    text = "\n".join(result.report)
    assert "FAILED at f.fix:3: expect A 35=8 150=8 timeout=0.5" in text
    assert "within 0.5 s: 35=8 150=8" in text
    assert "-> 150=0, expected 8" in text
    assert "last messages of A" in text and "> 35=D|11=a" in text and "< 35=8|11=a" in text


def test_expect_nothing_ignores_heartbeats_and_fails_early_on_anything_else() -> None:
    r, _ = runner(lambda f: [(0.1, fix((35, "0")))])
    assert r.run(parse("logon A C\nsend A 35=1 112=t\nexpect-nothing A 0.4\n")).ok
    r, _ = runner()
    started = time.monotonic()
    result = r.run(parse("logon A C\nsend A 35=D 11=a\nexpect-nothing A 5 150=F\n", "n.fix"))
    assert time.monotonic() - started < 2, "should fail as soon as the fill comes"
    assert not result.ok and "expected nothing matching 150=F" in "\n".join(result.report)


def test_a_refused_logon_is_its_own_exit_code() -> None:
    r, made = runner(refuse="Logon refused: unknown CompID\nmore")
    result = r.run(parse("logon A NOBODY\nsend A 35=D\n", "l.fix"))
    assert not result.ok and result.exit_code == 3
    assert "A (NOBODY) did not log on: Logon refused: unknown CompID" in "\n".join(result.report)
    assert made[0].calls == ["start", "stop"]


def test_cli_exit_codes(tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path
    base = Path(str(tmp_path))
    good = base / "good.fix"
    good.write_text("logon A C\nsend A 35=D 11=a\nexpect A 150=0\n")
    bad = base / "bad.fix"
    bad.write_text("logon A C\nsned A 35=D\n")
    failing = base / "failing.fix"
    failing.write_text("logon A C\nexpect A 35=8 timeout=0.2\n")

    def factory(comp_id: str, hb: int, port: int | None,
                on_record: Callable[[RecordLike], None], begin: str) -> FakeSession:
        return FakeSession(comp_id, on_record, echo_exchange)

    assert main([str(good)], factory) == 0
    assert "PASS" in capsys.readouterr().out
    assert main([str(good), str(bad)], factory) == 2
    assert f"{bad}:2: unknown step 'sned'" in capsys.readouterr().err
    assert main([str(base / "missing.fix")], factory) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main([str(good), str(failing)], factory) == 1
    out = capsys.readouterr().out
    assert "PASS" in out and f"FAIL {failing}" in out
    assert main(["--bogus", str(good)], factory) == 2


def test_cli_unreachable_exchange_fails_fast(tmp_path: pytest.TempPathFactory,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from shared.redis_server import free_port
    good = Path(str(tmp_path)) / "good.fix"
    good.write_text("logon A CLIENT01\n")
    started = time.monotonic()
    assert main(["--port", str(free_port()), str(good)]) == 3
    assert time.monotonic() - started < 5
    assert "cannot reach 127.0.0.1:" in capsys.readouterr().err


def test_repeating_groups_are_nested_and_their_count_checked() -> None:
    from services.client.scenario.groups import GroupError, nest
    from shared.fix.dictionary import load

    v = load().groups["V"]
    flat = [(35, "V"), (262, "m1"), (263, "1"), (264, "0"), (267, "2"), (269, "0"), (269, "1"),
            (146, "1"), (55, "ACORN.LAB")]
    assert nest(flat, v) == [(35, "V"), (262, "m1"), (263, "1"), (264, "0"),
                             (267, [[(269, "0")], [(269, "1")]]), (146, [[(55, "ACORN.LAB")]])]
    with pytest.raises(GroupError, match="267=3 but 2 entries follow"):
        nest([(35, "V"), (267, "3"), (269, "0"), (269, "1")], v)
    assert nest([(35, "D"), (11, "x")], load().groups["D"]) == [(35, "D"), (11, "x")]


def test_a_failure_report_names_the_expected_tags() -> None:
    from services.client.scenario.__main__ import dictionary_names

    made: list[FakeSession] = []

    def factory(comp_id: str, heartbeat_s: int, port: int | None,
                on_record: Callable[[RecordLike], None], begin: str) -> FakeSession:
        made.append(FakeSession(comp_id, on_record, echo_exchange))
        return made[-1]
    names = dictionary_names()
    assert names(150, "F") == "ExecType=Trade" and names(37, "") == "OrderID"
    result = Runner(factory, names=names).run(parse("logon A C\nsend A 35=D 11=a\nexpect A 35=8 150=8 "
                                                    "37=$oid timeout=0.2\n"))
    assert "(35 MsgType=ExecutionReport, 150 ExecType=Rejected, 37 OrderID)" in "\n".join(result.report)


def test_phase_steps_go_to_the_operator_and_a_missing_change_fails_the_step() -> None:
    from services.client.scenario.runner import PhaseNotChanged
    from shared.schema import PHASE_CONTINUOUS, PHASE_PRE_OPEN

    calls: list[tuple[str, int, str, float]] = []

    def set_phase(symbol: str, phase: int, reason: str, timeout_s: float) -> str:
        calls.append((symbol, phase, reason, timeout_s))
        if phase == PHASE_CONTINUOUS:
            raise PhaseNotChanged("no phase change to CONTINUOUS within 2 s")
        return f"{symbol}: CONTINUOUS -> PRE_OPEN ({reason})"

    text = ("phase ACORN.LAB pre-open the opening call\nlogon A CLIENT01\n"
            "phase ACORN.LAB continuous timeout=2\n")
    made: list[FakeSession] = []

    def factory(comp_id: str, heartbeat_s: int, port: int | None,
                on_record: Callable[[RecordLike], None], begin: str) -> FakeSession:
        made.append(FakeSession(comp_id, on_record, echo_exchange, None))
        return made[-1]
    result = Runner(factory, set_phase=set_phase).run(parse(text, "p.scenario"))
    assert not result.ok and result.steps_done == 2 and result.exit_code == 1
    assert calls == [("ACORN.LAB", PHASE_PRE_OPEN, "the opening call", 5.0),
                     ("ACORN.LAB", PHASE_CONTINUOUS, "continuous (scenario)", 2.0)]
    assert "phase ACORN.LAB: no phase change to CONTINUOUS within 2 s" in "\n".join(result.report)
    bare, _ = runner()  # no bus given: the step says what it needs
    result = bare.run(parse("phase ACORN.LAB halted\n", "p.scenario"))
    assert not result.ok and "needs the bus: give --redis-url or set REDIS_URL" in "\n".join(result.report)
