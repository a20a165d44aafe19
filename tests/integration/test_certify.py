"""``fixlab certify`` as a user runs it (a process hosting its own acceptor and tap) against three
clients, each a process of its own: QuickFIX (Python) with default settings, fixcore-engine, and a
broken QuickFIX client with three known defects. Each run's JSON report is compared check by check."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
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


class Run:
    """One certification process and its client process."""

    def __init__(self, tmp: Path, name: str, comp: str, client: list[str]) -> None:
        self.port = free_port()
        self.out = tmp / f"{name}.out"
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
                 "--logon-timeout", "30"],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT))
        eventually(lambda: b"point your client" in self.out.read_bytes(), timeout=30,
                   what="certify listening")
        self.started = time.monotonic()
        self.procs.append(subprocess.Popen([*self.client_cmd, "--comp", self.comp, "--port", str(self.port)],
                                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def finish(self) -> tuple[int, dict[str, str], dict[str, object], float]:
        code = self.procs[0].wait(timeout=150)
        seconds = time.monotonic() - self.started
        self.procs[1].wait(timeout=30)
        report = json.loads(self.json.read_text())
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
    page = bad.html.read_text()
    assert "12 passed, 3 failed, 0 skipped" in page and "<section id='cancel-reject'>" in page
