"""``fixlab certify`` as a user runs it (a process hosting its own acceptor and tap) against clients,
each a process of its own: stock QuickFIX (Python) clients of FIX 4.4, 4.2 and 5.0 SP2 (every validation
switch on), fixcore-engine, and a broken QuickFIX client with three known defects. Each run's JSON
report is compared check by check."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared.redis_server import free_port
from tests.gateway_stack import ROOT
from tests.helpers import eventually

pytestmark = [pytest.mark.xdist_group("serial"), pytest.mark.integration, pytest.mark.timeout(240)]

SESSION = ["test-request", "resend-request", "seq-too-high", "gap-fill", "reset"]
ORDERS = ["partial-fill", "unsolicited-cancel", "order-rejected", "replace-accepted", "replace-rejected",
          "cancel-reject", "fresh-clordids"]
BYTES = ["bad-checksum", "garbled"]
CHECKS = [*SESSION, *ORDERS, *BYTES, "logout"]
QUICKFIX_CLIENT = [sys.executable, "-m", "tests.certify_client"]
FIXCORE_CLIENT = [sys.executable, "-m", "tests.certify_fixcore_client"]
PASSWORD = re.compile(r"one-time password, for the Logon's (Password \(554\)|RawData \(96\), with "
                      r"RawDataLength \(95\)): (\S+)")


class Run:
    """One certification process and its client process."""

    def __init__(self, tmp: Path, name: str, comp: str, client: list[str], fix_version: str = "4.4",
                 listen: str = "127.0.0.1") -> None:
        """``fix_version``: the run's and its client's; ``listen`` beyond loopback: the client logs on with
        the run's one-time password."""
        self.fix_version, self.listen = fix_version, listen
        self.port = free_port()
        self.out = tmp / f"{name}.out"
        self.client_out = tmp / f"{name}.client.out"
        self.json = tmp / f"{name}.json"
        self.md = tmp / f"{name}.md"
        self.html = tmp / f"{name}.html"
        self.comp, self.client_cmd = comp, client
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0.0

    def start(self) -> None:
        with self.out.open("wb") as out:
            self.procs.append(subprocess.Popen(
                [sys.executable, "-X", "faulthandler", "-m", "services.client.certify", "--comp", self.comp,
                 "--port", str(self.port),
                 "--json", str(self.json), "--report", str(self.md), "--html", str(self.html),
                 "--logon-timeout", "30", "--fix-version", self.fix_version, "--listen", self.listen],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT))
        eventually(lambda: b"point your client" in self.out.read_bytes(), timeout=30,
                   what="certify listening")
        # The fixcore client speaks FIX 4.4 on loopback only: it takes neither flag.
        extra = ["--fix-version", self.fix_version] if self.fix_version != "4.4" else []
        if self.listen != "127.0.0.1":
            extra += ["--host", self.listen]
            password = eventually(lambda: PASSWORD.search(self.out.read_text()), timeout=10,
                                  what="the run's one-time password")
            extra += ["--password", password.group(2)]
        self.started = time.monotonic()
        # The client's own output is kept (a run whose client never logged on says why there).
        with self.client_out.open("wb") as client_out:
            self.procs.append(subprocess.Popen([*self.client_cmd, "--comp", self.comp, "--port",
                                                str(self.port), *extra],
                                               cwd=ROOT, stdout=client_out, stderr=subprocess.STDOUT))

    def finish(self) -> tuple[int, dict[str, str], dict[str, object], float]:
        code = self.procs[0].wait(timeout=150)
        seconds = time.monotonic() - self.started
        self.procs[1].wait(timeout=30)
        report = json.loads(self.json.read_text())
        if report["summary"].get("skip"):  # say what the run and its client printed
            report["run_output"] = self.out.read_text(errors="replace")[-3000:]
            report["client_output"] = self.client_out.read_text(errors="replace")[-3000:]
        return code, {c["name"]: c["status"] for c in report["checks"]}, report, seconds

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)


@contextlib.contextmanager
def runs(*made: Run) -> Iterator[tuple[Run, ...]]:
    try:
        for r in made:
            r.start()
        yield made
    finally:
        for r in made:
            r.stop()


def test_a_default_quickfix_client_passes_every_check_within_two_minutes(tmp_path: Path) -> None:
    with runs(Run(tmp_path, "qf", "CERT01", QUICKFIX_CLIENT)) as (qf,):
        code, status, report, seconds = qf.finish()
    assert list(status) == CHECKS
    assert status == dict.fromkeys(CHECKS, "pass"), report
    assert code == 0
    assert seconds < 120 and float(report["seconds"]) < 120  # type: ignore[arg-type]
    assert "15 passed, 0 failed, 0 skipped" in qf.md.read_text()


def test_fixcore_passes_all_but_garbled_which_it_rejects_and_then_loses_count(tmp_path: Path) -> None:
    with runs(Run(tmp_path, "fc", "CERT03", FIXCORE_CLIENT)) as (fc,):
        code, status, report, _ = fc.finish()
    # fixcore-engine answers a garbled message with a session Reject (373=6) and counts it: the
    # exchange's next MsgSeqNum is then "too low" for it and it logs out, so the Logout check cannot
    # be played. Everything else its engine does right.
    assert status == {**dict.fromkeys(CHECKS, "pass"), "garbled": "fail", "logout": "skip"}, report
    assert code == 1
    garbled = next(c for c in report["checks"] if c["name"] == "garbled")  # type: ignore[union-attr]
    assert any("Reject 35=3" in w and "SessionRejectReason(373)=6" in w for w in garbled["wire"])


def test_two_runs_at_once_the_broken_client_fails_exactly_its_three_defects(tmp_path: Path) -> None:
    good = Run(tmp_path, "good", "CERT01", QUICKFIX_CLIENT)
    bad = Run(tmp_path, "bad", "CERT02", [*QUICKFIX_CLIENT, "--broken"])
    with runs(good, bad):
        good_code, good_status, good_report, good_s = good.finish()
        bad_code, bad_status, bad_report, bad_s = bad.finish()
    assert good_status == dict.fromkeys(CHECKS, "pass"), good_report
    defects = {"test-request", "cancel-reject", "fresh-clordids"}
    assert bad_status == {c: "fail" if c in defects else "pass" for c in CHECKS}, bad_report
    assert (good_code, bad_code) == (0, 1)
    assert max(good_s, bad_s) < 120
    failed = {c["name"]: c for c in bad_report["checks"]}  # type: ignore[union-attr]
    # Each failure says what was expected and what came, with the wire named as the page names it.
    assert "112=$run-t1" in failed["test-request"]["lines"][0]
    assert any("Heartbeat 35=0" in w and "TestReqID" not in w for w in failed["test-request"]["wire"])
    assert "41=$c4r" in failed["cancel-reject"]["lines"][0]
    assert any("OrigClOrdID(41)=" in w for w in failed["cancel-reject"]["wire"])
    assert any("used again" in line for line in failed["fresh-clordids"]["lines"])
    md = bad.md.read_text()
    assert "## FAIL `test-request`" in md and "## FAIL `garbled`" not in md
    # The shipped script is named by its path in the repo, not where the repo lies on this machine.
    assert bad_report["script"] == "scripts/certify/default.scenario"
    assert "At scripts/certify/default.scenario:" in md and str(ROOT) not in md
    page = bad.html.read_text()
    assert "12 passed, 3 failed, 0 skipped" in page and "<section id='cancel-reject'>" in page


def test_a_fix42_client_and_a_fix50sp2_client_each_pass_every_check_of_their_versions_script(
        tmp_path: Path) -> None:
    # The FIX 4.2 run listens beyond loopback (127.0.0.2 stands for another machine): its client's
    # Logon carries the one-time password in RawData (96), FIX 4.2 having no Password (554).
    fix42 = Run(tmp_path, "fix42", "CERT06", QUICKFIX_CLIENT, "4.2", listen="127.0.0.2")
    fix50 = Run(tmp_path, "fix50", "CERT07", QUICKFIX_CLIENT, "5.0SP2")
    with runs(fix42, fix50):
        code42, status42, report42, s42 = fix42.finish()
        code50, status50, report50, s50 = fix50.finish()
    assert status42 == dict.fromkeys(CHECKS, "pass"), report42
    assert status50 == dict.fromkeys(CHECKS, "pass"), report50
    assert (code42, code50) == (0, 0)
    assert max(s42, s50) < 120
    assert (report42["fix_version"], report42["begin_string"]) == ("4.2", "FIX.4.2")
    assert (report50["fix_version"], report50["begin_string"]) == ("5.0SP2", "FIXT.1.1")
    assert report42["script"] == "scripts/certify/fix42.scenario"
    assert report50["script"] == "scripts/certify/fix50sp2.scenario"
    out42, out50 = fix42.out.read_text(), fix50.out.read_text()
    assert "RawData (96), with RawDataLength (95)" in out42 and "TargetCompID FIXLAB, FIX.4.2;" in out42
    assert "TargetCompID FIXLAB, FIXT.1.1 with DefaultApplVerID 9" in out50
    assert "FIX 4.2 (FIX.4.2), script `scripts/certify/fix42.scenario`" in fix42.md.read_text()
    assert "FIX 5.0SP2 (FIXT.1.1)" in fix50.html.read_text()
    assert "15 passed, 0 failed, 0 skipped" in fix50.md.read_text()


SHORT = """logon C CERT05 timeout=30

check test-request "a TestRequest is answered by a Heartbeat carrying its TestReqID (112)"
send C 35=1 112=$run-t1
expect C 35=0 112=$run-t1

check no-test-request "fails on purpose: the client sends no TestRequest of its own"
expect C 35=1 timeout=1

check logout "a Logout from the exchange is answered by a Logout"
logout C "certification: the exchange logs you out"
expect C 35=5
"""


def _logon_bytes(comp: str, password: str | None, begin: str = "FIX.4.4",
                 extra: tuple[tuple[int, str], ...] = ()) -> bytes:
    soh = b"\x01"
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]
    body = soh.join(f"{t}={v}".encode() for t, v in [
        (35, "A"), (34, 1), (49, comp), (52, stamp), (56, "FIXLAB"), (98, 0), (108, 30), (141, "Y"),
        *([(554, password)] if password is not None else []), *extra]) + soh
    head = b"8=" + begin.encode() + soh + b"9=%d" % len(body) + soh
    return head + body + b"10=%03d" % (sum(head + body) % 256) + soh


def _read_until_closed(sock: socket.socket) -> bytes:
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_a_run_beyond_loopback_takes_only_its_one_time_password_and_names_its_script_relatively(
        tmp_path: Path) -> None:
    # 127.0.0.2 stands for another machine: the run listens there, not on 127.0.0.1.
    script = tmp_path / "short.scenario"
    script.write_text(SHORT)
    port = free_port()
    out, md, js, page = (tmp_path / n for n in ("certify.out", "r.md", "r.json", "r.html"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with out.open("wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "services.client.certify", "--comp", "CERT05", "--port", str(port),
                 "--listen", "127.0.0.2", "--script", str(script), "--report", str(md), "--json", str(js),
                 "--html", str(page), "--logon-timeout", "60"],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        eventually(lambda: b"one-time password" in out.read_bytes(), timeout=30, what="certify listening")
        text = out.read_text()
        assert f"127.0.0.2:{port}" in text
        password = re.search(r"one-time password, for the Logon's Password \(554\): (\S+)", text)
        assert password is not None
        with pytest.raises(ConnectionRefusedError):  # it listens on 127.0.0.2 only
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        # A wrong password: the engine's Logout says why, then the connection closes.
        with socket.create_connection(("127.0.0.2", port), timeout=10) as s:
            s.sendall(_logon_bytes("CERT05", "not-" + password.group(1)))
            got = _read_until_closed(s)
        assert b"\x0135=5\x01" in got and b"\x0135=A\x01" not in got
        assert b"\x0158=Rejected Logon Attempt: certification: wrong or missing password\x01" in got
        # The right one: the run goes on as with any client.
        procs.append(subprocess.Popen([*QUICKFIX_CLIENT, "--comp", "CERT05", "--port", str(port), "--host",
                                       "127.0.0.2", "--password", password.group(1)], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        assert procs[0].wait(timeout=90) == 1  # one check fails on purpose
        report = json.loads(js.read_text())
        status = {c["name"]: c["status"] for c in report["checks"]}
        assert status == {"test-request": "pass", "no-test-request": "fail", "logout": "pass"}, report
        # The report names the script as the user would read it: never where it lay on this machine.
        assert report["script"] == "short.scenario"
        assert "At short.scenario:8: `expect C 35=1 timeout=1`" in md.read_text()
        for written in (md, js, page):
            assert str(tmp_path) not in written.read_text() and password.group(1) not in written.read_text()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)


def test_a_fixt_run_refuses_a_logon_of_another_appl_ver_id(tmp_path: Path) -> None:
    # QuickFIX's FIXT acceptor takes any DefaultApplVerID; the run speaks FIX 5.0 SP2 (1137=9) only,
    # as the gateway does.
    port = free_port()
    out = tmp_path / "certify.out"
    with out.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.client.certify", "--comp", "CERT08", "--port", str(port),
             "--fix-version", "5.0SP2", "--json", str(tmp_path / "r.json"), "--logon-timeout", "3"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: b"point your client" in out.read_bytes(), timeout=30, what="certify listening")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(_logon_bytes("CERT08", None, "FIXT.1.1", ((1137, "7"),)))
            got = _read_until_closed(s)
        assert b"\x0135=5\x01" in got and b"\x0135=A\x01" not in got
        assert (b"58=Rejected Logon Attempt: certification: DefaultApplVerID 1137=7: this run speaks "
                b"FIX.5.0SP2, 1137=9\x01") in got
        assert proc.wait(timeout=60) == 3  # nobody logged on
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
