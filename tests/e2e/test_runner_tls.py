"""``make run``'s TLS port: ``python -m services`` with FIXLAB_FIX_TLS_PORT runs stunnel as its "tls"
service, says where, restarts it when it dies, and stops it with the rest; ``fixlab client --tls``
trades through it, verifying the self-signed certificate the run made."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shared.redis_server import free_port
from tests.e2e.runner_process import alive, runner
from tests.gateway_stack import ROOT
from tests.helpers import eventually

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not shutil.which("stunnel4") or not shutil.which("openssl"),
                       reason="needs stunnel4 and openssl (make install's system-deps installs them)"),
]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def client_buys(run_dir: Path, tls_port: int, comp_id: str) -> None:
    env = {**os.environ, "FIXLAB_RUN_DIR": str(run_dir), "FIXLAB_FIX_TLS_PORT": str(tls_port)}
    done = subprocess.run([sys.executable, "-m", "services.client", "--tls", "--plain", "--comp-id", comp_id,
                           "--linger", "2"], input="buy ACORN.LAB 90.00 1\n", capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    new = [x for x in lines if "<- ExecutionReport 35=8" in x and "ExecType(150)=0 (New)" in x]
    assert new, done.stdout[-3000:]


def test_make_run_serves_tls_restarts_it_and_stops_it(tmp_path: Path) -> None:
    tls_port = free_port()
    run_dir = tmp_path / "run"
    env = {"FIXLAB_FIX_PORT": str(free_port()), "FIXLAB_FIX_TLS_PORT": str(tls_port),
           "FIXLAB_WEB_PORT": str(free_port()), "FIXLAB_RUN_DIR": str(run_dir), "FIXLAB_BOTS": "0"}
    with runner(env) as run:
        run.wait_line(rf"FIX over TLS: 127\.0\.0\.1:{tls_port} -> 127\.0\.0\.1:{env['FIXLAB_FIX_PORT']}", 120)
        eventually(lambda: listening(tls_port), timeout=60, what="the TLS port")
        # The runner starts services in turn without waiting: stunnel may listen before the gateway.
        eventually(lambda: listening(int(env["FIXLAB_FIX_PORT"])), timeout=90, what="the plain FIX port")
        assert (run_dir / "tls" / "cert.pem").is_file() and (run_dir / "tls" / "stunnel.conf").is_file()
        client_buys(run_dir, tls_port, "CLIENT01")
        # stunnel killed: the runner starts it again, on the same port, with the same certificate.
        (pid,) = run.started_pids()["tls"]
        cert = (run_dir / "tls" / "cert.pem").read_bytes()
        os.kill(pid, signal.SIGKILL)
        eventually(lambda: len(run.started_pids().get("tls", [])) == 2, timeout=30, what="tls restarted")
        eventually(lambda: listening(tls_port), timeout=60, what="the TLS port again")
        assert (run_dir / "tls" / "cert.pem").read_bytes() == cert
        client_buys(run_dir, tls_port, "CLIENT02")
        pids = run.started_pids()["tls"]
        assert run.stop() == 0
    assert not any(alive(p) for p in pids)
    assert not listening(tls_port)
