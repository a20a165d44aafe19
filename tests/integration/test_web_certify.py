"""The page's certification (/certify, /api/certify) against the web as a process: a run started over
HTTP is the ``fixlab certify`` command as a child of the web; a real QuickFIX client (tests/certify_client.py)
follows its instructions. Bad starts (unknown, running, all busy, an unknown FIX version), a run
nobody logs on to, and runs of FIX 4.2 and FIX 5.0 SP2 chosen at the start."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.web.certify import Certifications, Refused, Run, certify_settings
from shared.redis_server import free_port
from tests.e2e.webstack import ROOT, WebProcess, web_process
from tests.helpers import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHECKS = 15  # scripts/certify/default.scenario


def status(web: WebProcess, comp: str) -> dict[str, Any]:
    r = httpx.get(f"{web.url}/api/certify/{comp}", timeout=5)
    assert r.status_code == 200, r.text
    return dict(r.json())


def ended(web: WebProcess, comp: str, timeout: float) -> dict[str, Any]:
    return eventually(lambda: (s := status(web, comp))["state"] not in ("starting", "waiting") and s,
                      timeout=timeout, interval=0.2, what=f"{comp}'s run ended")


def listening(web: WebProcess, comp: str) -> dict[str, Any]:
    return eventually(lambda: (s := status(web, comp))["state"] == "waiting" and s, timeout=30,
                      interval=0.2, what=f"{comp}'s run listening")


@pytest.fixture
def web(redis_url: str) -> Iterator[WebProcess]:
    # Two runs at a time, so that a third CompID finds every run busy.
    with web_process(redis_url, env={"FIXLAB_CERTIFY_PORTS": f"{free_port()},{free_port()}",
                                     "FIXLAB_CERTIFY_RUNS": "2", "FIXLAB_CERTIFY_LOGON_TIMEOUT": "30"}) as w:
        yield w


def client(comp: str, port: int, *flags: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.certify_client", "--comp", comp,
                             "--port", str(port), *flags], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def test_two_runs_started_over_http_judge_two_clients_apart(web: WebProcess) -> None:
    assert "certify your FIX client" in httpx.get(f"{web.url}/certify", timeout=5).text
    good = httpx.post(f"{web.url}/api/certify/CERT03", timeout=10)
    assert good.status_code == 201, good.text
    bad = httpx.post(f"{web.url}/api/certify/CERT04", timeout=10)
    assert bad.status_code == 201, bad.text
    run, bad_run = good.json(), bad.json()
    assert (run["comp_id"], run["target_comp_id"], run["host"]) == ("CERT03", "FIXLAB", "127.0.0.1")
    assert (run["fix_version"], run["begin_string"]) == ("4.4", "FIX.4.4")  # the default
    assert run["port"] != bad_run["port"]
    # Bad starts, each with its own answer, while the runs live.
    again = httpx.post(f"{web.url}/api/certify/CERT03", timeout=5)
    assert again.status_code == 409 and "already" in again.json()["error"]
    busy = httpx.post(f"{web.url}/api/certify/CERT05", timeout=5)
    assert busy.status_code == 503 and "busy" in busy.json()["error"]
    unknown = httpx.post(f"{web.url}/api/certify/CLIENT01", timeout=5)
    assert unknown.status_code == 404 and "CERT01..CERT08" in unknown.json()["error"]
    foreign = httpx.post(f"{web.url}/api/certify/CERT05", headers={"Origin": "https://evil.example"},
                         timeout=5)
    assert foreign.status_code == 403
    overview = httpx.get(f"{web.url}/api/certify", timeout=5).json()
    assert [c["comp_id"] for c in overview["comps"] if c["busy"]] == ["CERT03", "CERT04"]

    for comp in ("CERT03", "CERT04"):
        waiting = listening(web, comp)
        where = f"127.0.0.1:{waiting['port']} as SenderCompID {comp}, TargetCompID FIXLAB"
        assert where in waiting["message"]
    t0 = time.monotonic()
    clients = [client("CERT03", run["port"]), client("CERT04", bad_run["port"], "--broken")]
    try:
        done = ended(web, "CERT03", timeout=120)
        bad_done = ended(web, "CERT04", timeout=120)
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
            c.wait(10)
    assert time.monotonic() - t0 < 120
    assert done["state"] == "passed", done
    assert done["report"]["summary"] == {"pass": CHECKS, "fail": 0, "skip": 0}
    # The script's instructions were shown as they came.
    assert any("instruction to the client: order buy" in line for line in done["lines"])
    page = httpx.get(f"{web.url}{done['report_html']}", timeout=5)
    assert page.status_code == 200 and f"{CHECKS} passed, 0 failed, 0 skipped" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    # The broken client, at the same time, fails exactly its three defects, each with its wire.
    assert bad_done["state"] == "failed" and bad_done["exit_code"] == 1
    failed = {c["name"]: c for c in bad_done["report"]["checks"] if c["status"] == "fail"}
    assert set(failed) == {"test-request", "cancel-reject", "fresh-clordids"}
    assert any("Heartbeat 35=0" in w for w in failed["test-request"]["wire"])
    # The CompIDs and the runs are free again.
    assert not any(c["busy"] for c in httpx.get(f"{web.url}/api/certify", timeout=5).json()["comps"])


def test_the_fix_version_chosen_at_the_start_is_the_runs_and_its_reports(web: WebProcess) -> None:
    overview = httpx.get(f"{web.url}/api/certify", timeout=5).json()
    assert [v["name"] for v in overview["fix_versions"]] == ["4.2", "4.4", "5.0SP2"]
    assert overview["default_fix_version"] == "4.4"
    bogus = httpx.post(f"{web.url}/api/certify/CERT05?fix_version=4.3", timeout=5)
    assert bogus.status_code == 400 and "4.2, 4.4, 5.0SP2" in bogus.json()["error"]
    assert httpx.get(f"{web.url}/api/certify/CERT05", timeout=5).status_code == 404  # no run was made
    runs = {}
    for comp, version in (("CERT05", "4.2"), ("CERT06", "5.0SP2")):
        r = httpx.post(f"{web.url}/api/certify/{comp}?fix_version={version}", timeout=10)
        assert r.status_code == 201, r.text
        runs[comp] = r.json()
    assert (runs["CERT05"]["fix_version"], runs["CERT05"]["begin_string"]) == ("4.2", "FIX.4.2")
    assert (runs["CERT06"]["fix_version"], runs["CERT06"]["begin_string"]) == ("5.0SP2", "FIXT.1.1")
    assert "TargetCompID FIXLAB, FIX.4.2" in listening(web, "CERT05")["message"]
    assert "TargetCompID FIXLAB, FIXT.1.1 with DefaultApplVerID 9" in listening(web, "CERT06")["message"]
    clients = [client("CERT05", runs["CERT05"]["port"], "--fix-version", "4.2"),
               client("CERT06", runs["CERT06"]["port"], "--fix-version", "5.0SP2")]
    try:
        done = {comp: ended(web, comp, timeout=120) for comp in runs}
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
            c.wait(10)
    for comp, version, script in (("CERT05", "4.2", "fix42"), ("CERT06", "5.0SP2", "fix50sp2")):
        assert done[comp]["state"] == "passed", done[comp]
        report = done[comp]["report"]
        assert report["summary"] == {"pass": CHECKS, "fail": 0, "skip": 0}
        assert (report["fix_version"], report["script"]) == (version, f"scripts/certify/{script}.scenario")
        page = httpx.get(f"{web.url}{done[comp]['report_html']}", timeout=5).text
        assert f"FIX {version} (" in page


def test_a_run_nobody_logs_on_to_ends_with_a_clear_report(redis_url: str) -> None:
    with web_process(redis_url, env={"FIXLAB_CERTIFY_PORTS": str(free_port()),
                                     "FIXLAB_CERTIFY_LOGON_TIMEOUT": "2"}) as web:
        assert httpx.post(f"{web.url}/api/certify/CERT08", timeout=10).status_code == 201
        done = ended(web, "CERT08", timeout=60)
        assert done["state"] == "no_logon", done
        assert "No Logon came as CERT08 within 2 s" in done["message"]
        assert done["exit_code"] == 3
        missing = httpx.get(f"{web.url}/api/certify/CERT07", timeout=5)
        assert missing.status_code == 404


def test_a_run_past_its_bound_is_killed_and_the_web_kills_live_runs_when_it_stops(redis_url: str) -> None:
    ports = [free_port(), free_port()]
    with web_process(redis_url, env={"FIXLAB_CERTIFY_PORTS": ",".join(map(str, ports)),
                                     "FIXLAB_CERTIFY_LOGON_TIMEOUT": "4",
                                     "FIXLAB_CERTIFY_MAX_SECONDS": "6"}) as web:
        slow = httpx.post(f"{web.url}/api/certify/CERT01", timeout=10).json()
        listening(web, "CERT01")
        # A client that logs on and follows the script: the script takes longer than the bound (6 s).
        follower = client("CERT01", slow["port"])
        try:
            done = ended(web, "CERT01", timeout=30)
        finally:
            follower.kill()
            follower.wait(10)
        assert done["state"] == "killed" and "took too long" in done["message"], done
        # A live run when the web stops: killed with it, its port closed.
        live = httpx.post(f"{web.url}/api/certify/CERT02", timeout=10).json()
        listening(web, "CERT02")
        socket.create_connection(("127.0.0.1", live["port"]), timeout=2).close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", live["port"]), timeout=2).close()


def test_starts_at_once_for_one_comp_id_make_one_run() -> None:
    async def go() -> tuple[list[object], str]:
        certs = Certifications(certify_settings({"FIXLAB_CERTIFY_PORTS": f"{free_port()},{free_port()}",
                                                 "FIXLAB_CERTIFY_LOGON_TIMEOUT": "1"}))
        try:
            got = await asyncio.gather(*(certs.start("CERT06") for _ in range(3)), return_exceptions=True)
            run = certs.runs["CERT06"]
            assert run.task is not None
            await asyncio.wait_for(run.task, 30)
            return list(got), run.state
        finally:
            await certs.close()

    got, state = asyncio.run(go())
    assert sum(isinstance(g, Run) for g in got) == 1
    assert [g.status for g in got if isinstance(g, Refused)] == [409, 409]
    assert state == "no_logon"


def _logon(comp: str, password: str) -> bytes:
    from datetime import UTC, datetime

    soh = b"\x01"
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]
    body = soh.join(f"{t}={v}".encode() for t, v in [
        (35, "A"), (34, 1), (49, comp), (52, stamp), (56, "FIXLAB"), (98, 0), (108, 30), (141, "Y"),
        (554, password)]) + soh
    head = b"8=FIX.4.4" + soh + b"9=%d" % len(body) + soh
    return head + body + b"10=%03d" % (sum(head + body) % 256) + soh


def test_a_run_beyond_loopback_has_a_one_time_password_only_its_starter_gets(redis_url: str) -> None:
    # 127.0.0.2 stands for another machine's reach: the runs listen there, each with its own password.
    env = {"FIXLAB_CERTIFY_PORTS": f"{free_port()},{free_port()}", "FIXLAB_CERTIFY_LISTEN": "127.0.0.2",
           "FIXLAB_CERTIFY_LOGON_TIMEOUT": "30"}
    with web_process(redis_url, env=env) as web:
        first = httpx.post(f"{web.url}/api/certify/CERT06", timeout=10)
        second = httpx.post(f"{web.url}/api/certify/CERT07", timeout=10)
        assert (first.status_code, second.status_code) == (201, 201), first.text
        run, other = first.json(), second.json()
        assert run["host"] == "127.0.0.2" and run["password_required"]
        assert run["password"] and other["password"] and run["password"] != other["password"]
        assert first.headers["cache-control"] == "no-store"
        waiting = listening(web, "CERT06")
        # Anyone may read a run: its view and its output never hold the password.
        assert "password" not in waiting and run["password"] not in str(waiting)
        assert "Password (554)" in waiting["message"]
        # A wrong password (the other run's): the engine's Logout says why and the run goes on waiting.
        with socket.create_connection(("127.0.0.2", run["port"]), timeout=10) as s:
            s.sendall(_logon("CERT06", other["password"]))
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        assert b"\x0135=5\x01" in got and b"\x0135=A\x01" not in got
        assert b"58=Rejected Logon Attempt: certification: wrong or missing password\x01" in got
        assert status(web, "CERT06")["state"] == "waiting"
        c = client("CERT06", run["port"], "--host", "127.0.0.2", "--password", run["password"])
        try:
            done = ended(web, "CERT06", timeout=120)
        finally:
            if c.poll() is None:
                c.kill()
            c.wait(10)
        assert done["state"] == "passed", done
        assert done["report"]["summary"] == {"pass": CHECKS, "fail": 0, "skip": 0}
        assert run["password"] not in str(done)
        assert done["report"]["script"] == "scripts/certify/default.scenario"
