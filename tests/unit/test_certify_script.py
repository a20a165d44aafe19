"""Certification scripts (the scenario format, roles reversed, a few more steps), the frames the
runner injects, and the report: pure code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.client.certify.report import as_html, as_json, as_markdown
from services.client.certify.run import Outcome, checksum, frame, names_in
from services.client.certify.script import (
    Check,
    Inject,
    Instruct,
    Logout,
    SequenceReset,
    SkipSeq,
    Unique,
    parse,
)
from services.client.scenario.syntax import Expect, Logon, ScenarioSyntaxError, Send

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_script_parses_into_named_checks() -> None:
    script = parse((ROOT / "scripts/certify/default.scenario").read_text(), "default")
    checks = [s.name for s in script.steps if isinstance(s, Check)]
    assert checks[:2] == ["test-request", "resend-request"] and checks[-1] == "logout"
    assert len(checks) == len(set(checks)) == 15
    assert isinstance(script.steps[0], Logon)


def _checks_and_sends(name: str) -> tuple[list[str], list[dict[int, str]]]:
    script = parse((ROOT / "scripts/certify" / name).read_text(), name)
    sends = [{tag: "".join(p if isinstance(p, str) else f"${p.name}" for p in t.parts) for tag, t in s.fields}
             for s in script.steps if isinstance(s, Send)]
    return [s.name for s in script.steps if isinstance(s, Check)], sends


def test_the_fix42_and_fix50sp2_scripts_parse_into_the_default_scripts_checks_in_their_versions_terms(
        ) -> None:
    default, _ = _checks_and_sends("default.scenario")
    checks42, sends42 = _checks_and_sends("fix42.scenario")
    checks50, sends50 = _checks_and_sends("fix50sp2.scenario")
    assert checks42 == checks50 == default
    reports42 = [m for m in sends42 if m[35] == "8"]
    reports50 = [m for m in sends50 if m[35] == "8"]
    # FIX 4.2: ExecTransType on every ExecutionReport, fills said by their OrdStatus (no 150=F), the
    # match id in Text; FIX 5.0 SP2: fills 150=F with TrdMatchID (880).
    assert reports42 and all(m.get(20) == "0" for m in reports42)
    assert [m[150] for m in reports42 if 32 in m] == ["1", "2"] and not any(m[150] == "F" for m in reports42)
    assert all(m[58].startswith("TrdMatchID=") for m in reports42 if 32 in m)
    assert [m[150] for m in reports50 if 32 in m] == ["F", "F"]
    assert all(880 in m and 20 not in m for m in reports50 if 32 in m)


def test_each_version_plays_its_own_script_and_injects_with_its_begin_string() -> None:
    from services.client.certify.__main__ import SCRIPTS, script_label

    assert {v: script_label(str(p)) for v, p in SCRIPTS.items()} == {
        "4.2": "scripts/certify/fix42.scenario", "4.4": "scripts/certify/default.scenario",
        "5.0SP2": "scripts/certify/fix50sp2.scenario"}
    assert frame("35=0\x01", begin="FIXT.1.1").startswith(b"8=FIXT.1.1\x019=5\x0135=0")


def test_the_acceptor_settings_per_version() -> None:
    from services.client.certify.acceptor import settings_text
    from shared.fix.versions import VERSIONS

    fix44 = settings_text("CERT01", 1, 30)
    assert "BeginString=FIX.4.4\n" in fix44 and "DataDictionary=" in fix44 and "FIX44.xml" in fix44
    assert "BeginString=FIX.4.2\n" in settings_text("CERT01", 1, 30, VERSIONS["4.2"])
    fixt = settings_text("CERT01", 1, 30, VERSIONS["5.0SP2"])
    assert "BeginString=FIXT.1.1\n" in fixt and "DefaultApplVerID=FIX.5.0SP2\n" in fixt
    assert "TransportDataDictionary=" in fixt and "FIXT11.xml" in fixt
    # FIX 5.0 SP2's dictionary cut to what a run carries (News for the instructions among it).
    app = fixt.split("AppDataDictionary=", 1)[1].split("\n", 1)[0]
    assert "FIXLAB-client-FIX50SP2" in app and "msgtype=\"B\"" in Path(app).read_text()


def test_each_new_step() -> None:
    text = """logon C CERT01
check one "the first"
instruct C "order buy 1 X 1.00 $comp"
expect C 35=D 11=$c1
send C 35=8 11=$c1 150=0
inject C bad-checksum 35=1 112=$run-x
inject C garbled
inject C raw '8=FIX.4.4|9=5|35=0|10=000|'
skip-seq C 3
sequence-reset C gap-fill 4
sequence-reset C reset 5
logout C "bye"
unique C 11 35~'D|F|G'
"""
    steps = parse(text).steps
    kinds = [type(s) for s in steps]
    assert kinds == [Logon, Check, Instruct, Expect, Send, Inject, Inject, Inject, SkipSeq, SequenceReset,
                     SequenceReset, Logout, Unique]
    bad, garbled, raw = steps[5], steps[6], steps[7]
    assert isinstance(bad, Inject) and bad.kind == "bad-checksum" and [t for t, _ in bad.fields] == [35, 112]
    assert isinstance(garbled, Inject) and garbled.kind == "garbled"
    assert isinstance(raw, Inject) and raw.raw.startswith("8=FIX.4.4|")
    assert steps[9] == SequenceReset(steps[9].where, "C", True, 4)  # type: ignore[union-attr]
    assert names_in(steps[1:]) == ["comp", "run"]  # $c1 is bound by the expect before its use


@pytest.mark.parametrize(("text", "error"), [
    ("logon C CERT01\ngo-silent C", "does not play"),
    ("logon C CERT01\nexpect C 35=0 from=client", "always looks at the client"),
    ("logon C CERT01\ninstruct D \"x\"", "needs a session"),
    ("logon C CERT01\nskip-seq C 0", "a count from 1"),
    ("logon C CERT01\nsequence-reset C sideways 3", "gap-fill|reset"),
    ("logon C CERT01\ninject C sparkly", "bad-checksum"),
    ("logon C CERT01\ncheck One", "lower-case"),
    ("logon C CERT01\ncheck a\ncheck a", "already named"),
    ("logon C CERT01\nsend C 35=8 11=$nope", "not bound"),
])
def test_bad_scripts_name_the_line(text: str, error: str) -> None:
    with pytest.raises(ScenarioSyntaxError) as exc:
        parse(text, "s")
    assert exc.value.line == text.count("\n") + 1 and error in exc.value.message


def test_frames_carry_a_right_body_length_and_a_right_or_wrong_checksum() -> None:
    body = "35=0\x0134=7\x01"
    good, bad = frame(body), frame(body, bad_checksum=True)
    assert good.startswith(b"8=FIX.4.4\x019=10\x0135=0")
    head, _, tail = good.rpartition(b"10=")
    assert int(tail[:3]) == checksum(head)
    assert int(bad.rpartition(b"10=")[2][:3]) == (checksum(head) + 1) % 256


def test_the_report_shows_failures_with_their_wire() -> None:
    outcomes = [Outcome("a", "first", "pass"),
                Outcome("b", "second", "fail", "s:3", "expect C 35=0", ["expected x"],
                        ["client -> Heartbeat"]),
                Outcome("c", "third", "skip", lines=["not played: why"])]
    meta = {"comp_id": "CERT01", "script": "s", "started": "now", "seconds": 1.0}
    md = as_markdown(meta, outcomes)
    assert "1 passed, 1 failed, 1 skipped" in md and "## FAIL `b`" in md and "client -> Heartbeat" in md
    assert "not played: why" in md
    data = json.loads(as_json(meta, outcomes))
    assert data["summary"] == {"pass": 1, "fail": 1, "skip": 1} and data["checks"][1]["wire"]


def test_the_page_escapes_what_it_shows() -> None:
    outcomes = [Outcome("b", "second <b>", "fail", "s:3", "expect C 35=0", ["expected <x>"],
                        ["client -> Heartbeat 35=0 #3  Text(58)=<script>"])]
    page = as_html({"comp_id": "CERT01", "script": "s", "started": "now", "seconds": 1.0}, outcomes)
    assert page.startswith("<!doctype html>") and "0 passed, 1 failed, 0 skipped" in page
    assert "<script>" not in page and "Text(58)=&lt;script&gt;" in page and "id='b'" in page


def test_certification_never_loads_the_bus() -> None:
    # No Redis client, no stream: a certification cannot reach a book, so it leaves no order resting.
    code = ("import sys, services.client.certify.__main__; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('redis', 'hiredis', 'msgpack') "
            "or m.startswith('shared.streams')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_a_report_names_a_script_in_the_repo_by_its_path_there_and_another_by_its_name(
        tmp_path: Path) -> None:
    from services.client.certify.__main__ import DEFAULT_SCRIPT, script_label

    assert script_label(str(DEFAULT_SCRIPT)) == "scripts/certify/default.scenario"
    assert script_label(str(tmp_path / "mine.scenario")) == "mine.scenario"


def test_the_reports_wire_never_shows_a_logon_password() -> None:
    from services.client.certify.__main__ import masked

    raw = b"8=FIX.4.4\x019=40\x0135=A\x01554=s3cret\x0198=0\x0110=000\x01"
    assert masked(raw) == b"8=FIX.4.4\x019=40\x0135=A\x01554=***\x0198=0\x0110=000\x01"
    assert masked(b"8=FIX.4.2\x0135=A\x0195=6\x0196=s3cret\x0110=000\x01").count(b"s3cret") == 0


def test_the_password_a_logon_carries_by_version() -> None:
    from services.client.certify.acceptor import logon_password

    assert logon_password("8=FIX.4.4\x0135=A\x01554=p\x01") == "p"
    assert logon_password("8=FIXT.1.1\x0135=A\x01554=p\x01") == "p"
    assert logon_password("8=FIX.4.2\x0135=A\x0195=1\x0196=q\x01554=p\x01") == "q"
    assert logon_password("8=FIX.4.4\x0135=A\x01") is None
