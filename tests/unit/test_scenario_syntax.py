"""The scenario parser: text in, steps with file and line out; every bad line named."""

from __future__ import annotations

import pytest

from services.client.scenario.match import Absent, Capture, Exact, Regex, Template, Var
from services.client.scenario.syntax import (
    Control,
    Expect,
    ExpectNothing,
    Logon,
    ScenarioSyntaxError,
    Send,
    Wait,
    parse,
    words,
)

GOOD = """# A buy rests, a sell takes it
logon A CLIENT01
logon B CLIENT02 heartbeat=2 port=9879 timeout=3

send A 35=D 11=$run-b 55=ACORN.LAB 54=1 38=10 40=2 44=101.00 60=$now   # the buy
expect A 35=8 11=$run-b 150=0 37=$oid timeout=2.5
send B 35=F 41=$run-b 37=$oid 11=${run}x 58="two words" 44=$$5
expect B 35=8 58~'IOC: \\d+ left' !880 from=client
expect-nothing A 1.5 35=8
wait 0.5s
drop-next A
reconnect B timeout=4
"""


def test_a_whole_scenario() -> None:
    s = parse(GOOD, "good.fix")
    assert s.title == "A buy rests, a sell takes it"
    logon_a, logon_b, send, expect, cancel, regex, nothing, wait, drop, again = s.steps
    assert logon_a == Logon(logon_a.where, "A", "CLIENT01")
    assert (logon_b.heartbeat_s, logon_b.port, logon_b.timeout_s) == (2, 9879, 3.0)
    assert isinstance(send, Send) and send.where.line == 5 and send.where.file == "good.fix"
    assert send.fields[0] == (35, Template(("D",)))
    assert send.fields[1] == (11, Template((Var("run"), "-b")))
    assert isinstance(expect, Expect) and expect.timeout_s == 2.5 and expect.source == "exchange"
    assert Capture(37, "oid") in expect.specs
    assert Exact(150, Template(("0",))) in expect.specs
    assert isinstance(cancel, Send)
    assert dict(cancel.fields)[37] == Template((Var("oid"),))
    assert dict(cancel.fields)[11] == Template((Var("run"), "x"))
    assert dict(cancel.fields)[58] == Template(("two words",))
    assert dict(cancel.fields)[44] == Template(("$5",))
    assert isinstance(regex, Expect) and regex.source == "client"
    assert Regex(58, r"IOC: \d+ left") in regex.specs and Absent(880) in regex.specs
    assert isinstance(nothing, ExpectNothing) and nothing.for_s == 1.5 and len(nothing.specs) == 1
    assert isinstance(wait, Wait) and wait.seconds == 0.5
    assert isinstance(drop, Control) and drop.action == "drop-next"
    assert isinstance(again, Control) and again.action == "reconnect" and again.timeout_s == 4


def test_logon_takes_its_version_from_the_compid_pool_or_version() -> None:
    s = parse("logon A CLIENT42-01\nlogon B CLIENT50-02\nlogon C CLIENT03\nlogon D ACME01 version=5.0SP2\n"
              "logon E CLIENT04 version=4.2\n", "v.fix")
    assert [step.begin_string for step in s.steps if isinstance(step, Logon)] == [
        "FIX.4.2", "FIXT.1.1", "FIX.4.4", "FIXT.1.1", "FIX.4.2"]


def test_msgtype_goes_first_and_a_bound_variable_is_compared() -> None:
    s = parse("logon A X\nsend A 11=a 35=D\nexpect A 37=$o\nexpect A 37=$o\n")
    send, first, second = s.steps[1:]
    assert isinstance(send, Send) and send.fields[0][0] == 35
    assert isinstance(first, Expect) and first.specs == (Capture(37, "o"),)
    assert isinstance(second, Expect) and second.specs == (Exact(37, Template((Var("o"),))),)


def test_words_quotes_and_comments() -> None:
    assert words('a 58="x y" 58=\'a\\d\' b#c # gone') == ["a", "58=x y", "58=a\\d", "b#c"]
    assert words('58="say \\"hi\\""') == ['58=say "hi"']
    assert words("   # only a comment") == []


@pytest.mark.parametrize(("text", "line", "words_in_message"), [
    ("logon A CLIENT01\nfrobnicate A\n", 2, "unknown step 'frobnicate'"),
    ("logon A CLIENT01\nsend A 35=D 9=12\n", 2, "9 (BodyLength) is filled in by the engine"),
    ("logon A CLIENT01\nsend A 35=D 34=5\n", 2, "34 (MsgSeqNum)"),
    ("logon A CLIENT01\nsend A 11=x\n", 2, "exactly one 35=MsgType"),
    ("logon A CLIENT01\nsend A 35=D abc=1\n", 2, "'abc=1': send takes tag=value"),
    ("logon A CLIENT01\nsend A 35=D 0=1\n", 2, "tag 0"),
    ("logon A CLIENT01\nsend A 35=D 11=$oid\n", 2, "$oid is not bound yet"),
    ("logon A CLIENT01\nexpect A 35=8 41=x$oid\n", 2, "$oid is not bound yet"),
    ("send A 35=D\n", 1, "session 'A' has not logged on"),
    ("logon A CLIENT01\nlogon A CLIENT02\n", 2, "already logged on"),
    ("logon A CLIENT01\nlogon B CLIENT01\n", 2, "CLIENT01 is already session A"),
    ("logon A\n", 1, "logon takes a session name and a CompID"),
    ("logon A CLIENT01 heartbeat=x\n", 1, "heartbeat=x"),
    ("logon A CLIENT01 colour=red\n", 1, "'colour=red': not a field"),
    ("logon A CLIENT01 version=4.3\n", 1, "FIX version '4.3'"),
    ("logon A CLIENT01\nexpect A\n", 2, "at least one field"),
    ("logon A CLIENT01\nexpect A 35=8 timeout=soon\n", 2, "not a number of seconds"),
    ("logon A CLIENT01\nexpect A 35=8 from=nowhere\n", 2, "from=nowhere"),
    ("logon A CLIENT01\nexpect A 58~(\n", 2, "bad regular expression"),
    ("logon A CLIENT01\nexpect A 58=\"open\n", 2, "no closing \""),
    ("logon A CLIENT01\nexpect A 44=5$\n", 2, "'$' starts a variable"),
    ("logon A CLIENT01\nexpect-nothing A\n", 2, "takes a duration"),
    ("logon A CLIENT01\nexpect-nothing A 2 37=$x\n", 2, "cannot bind"),
    ("logon A CLIENT01\nwait\n", 2, "wait takes one duration"),
    ("logon A CLIENT01\nwait 9999\n", 2, "from 0 to 600"),
    ("logon A CLIENT01\ndrop-next A now\n", 2, "'now': not a field"),
    ("# nothing here\n\n", 1, "no steps"),
    ("phase ACORN.LAB\n", 1, "phase takes a symbol and a phase"),
    ("phase ACORN.LAB lunch\n", 1, "unknown phase 'lunch': one of closed, pre_open"),
    ("phase ACORN.LAB halted timeout=later\n", 1, "not a number of seconds"),
])
def test_each_bad_line_is_named(text: str, line: int, words_in_message: str) -> None:
    with pytest.raises(ScenarioSyntaxError) as err:
        parse(text, "bad.fix")
    assert (err.value.file, err.value.line) == ("bad.fix", line)
    assert words_in_message in str(err.value)
    assert str(err.value).startswith(f"bad.fix:{line}: ")
