"""The TLS port (issue 32): real stunnel4 (``python -m services.tls``, as the stack runs it) in front of a
real gateway and matcher; real QuickFIX sessions (the terminal client's, its tap speaking TLS) trade
through it in each FIX version. A plaintext client on the TLS port, a TLS client on the plain port and
a handshake cut short are each refused, with a log line, and the exchange goes on serving the others.
TLS sessions arrive from stunnel's 127.0.0.3: the own-address rule turns a LAB CompID away over TLS."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.client.session import LOGGED_ON, LOGGED_OUT, ClientSession, Record, SessionError
from shared.redis_server import free_port
from shared.tls import client_context
from tests.gateway_stack import FixClient, Stack, fix_now, gateway_stack, stop_process, wait_port
from tests.helpers import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (shutil.which("stunnel4") or shutil.which("stunnel"))
                       or not shutil.which("openssl"),
                       reason="needs stunnel4 and openssl (make install's system-deps installs them)"),
]


@dataclass
class Tls:
    stack: Stack
    port: int
    ca: Path
    log: Path
    run_dir: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def refusals(self) -> int:
        """stunnel's line for a connection it ended before any byte passed either way."""
        return self.log_text().count("0 byte(s) sent to TLS, 0 byte(s) sent to socket")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    run_dir = tmp_path_factory.mktemp("tls-run")
    with gateway_stack(None, env={"FIXLAB_RUN_DIR": str(run_dir)}) as stack:
        port = free_port()
        log = run_dir / "stunnel.log"
        env = {**os.environ, "FIXLAB_FIX_PORT": str(stack.fix_port), "FIXLAB_FIX_TLS_PORT": str(port),
               "FIXLAB_RUN_DIR": str(run_dir), "FIXLAB_GATEWAYS": "1"}
        with log.open("ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "services.tls"], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        try:
            wait_port(port, proc, log)
            yield Tls(stack, port, run_dir / "tls" / "cert.pem", log, run_dir)
        except BaseException:
            sys.stderr.write(f"----- stunnel log -----\n{log.read_text(errors='replace')[-6000:]}\n")
            raise
        finally:
            stop_process(proc)


def tls_session(t: Tls, comp_id: str, records: list[Record], **kwargs: object) -> ClientSession:
    return ClientSession(comp_id, port=t.port, tls=client_context(t.ca), on_record=records.append,
                         **kwargs)  # type: ignore[arg-type]


def trade_over_tls(t: Tls, comp_id: str, begin: str, clordid: str) -> None:
    """Log on over TLS, send a limit order, and see its ExecutionReport New come back."""
    records: list[Record] = []
    with tls_session(t, comp_id, records, begin=begin) as session:
        session.start()
        session.wait_logon(15)
        assert session.status == LOGGED_ON
        fields: list[tuple[int, object]] = [(35, "D"), (11, clordid), (55, "ACORN.LAB"), (54, "1"),
                                            (60, fix_now()), (38, "10"), (40, "2"), (44, "90.00")]
        if begin == "FIX.4.2":
            fields.append((21, "1"))
        session.send(fields)

        def new_report() -> bool:
            mine = f"\x0111={clordid}\x01".encode()
            return any(r.source == "exchange" and b"\x0135=8\x01" in r.raw and mine in r.raw
                       and b"\x01150=0\x01" in r.raw for r in list(records))
        eventually(new_report, timeout=15)


@pytest.mark.parametrize(("comp_id", "begin"), [("CLIENT01", "FIX.4.4"), ("CLIENT42-01", "FIX.4.2"),
                                                ("CLIENT50-01", "FIXT.1.1")])
def test_a_quickfix_session_trades_over_tls_in_each_version(tls: Tls, comp_id: str, begin: str) -> None:
    trade_over_tls(tls, comp_id, begin, f"tls-{comp_id}")
    # It came through stunnel, from its own address: the acceptor saw 127.0.0.3, not the client.
    assert "connected remote server from 127.0.0.3" in tls.log_text()


def test_tls_is_1_2_or_newer_and_the_certificate_verifies(tls: Tls) -> None:
    with socket.create_connection(("127.0.0.1", tls.port), timeout=10) as raw, \
            client_context(tls.ca).wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        assert conn.version() in ("TLSv1.2", "TLSv1.3")
    # A client that does not know the certificate refuses it (the system's CAs do not list it).
    records: list[Record] = []
    session = ClientSession("CLIENT03", port=tls.port, tls=client_context(None), on_record=records.append)
    with session:
        session.start()
        with pytest.raises(SessionError) as exc:
            session.wait_logon(10)
    assert "certificate" in str(exc.value)


def test_plaintext_on_the_tls_port_is_refused_and_logged(tls: Tls) -> None:
    before = tls.refusals()
    with FixClient(tls.port, "CLIENT04", logon=False) as c:
        c.send("A", [(98, 0), (108, 30), (141, "Y")])
        assert c.closed(10)  # closed, nothing answered
        assert not c.received
    eventually(lambda: tls.refusals() > before, timeout=10)
    assert "wrong version number" in tls.log_text()  # why, in the line before it
    trade_over_tls(tls, "CLIENT05", "FIX.4.4", "after-plain")


def _answer(s: socket.socket) -> bytes:
    """Everything the TLS port sends until it closes the connection."""
    got = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            got += chunk
    return got


@pytest.mark.parametrize("how", ["cut", "stalled"])
def test_a_truncated_handshake_is_refused_and_logged(tls: Tls, how: str) -> None:
    # The first half of a real ClientHello, then the end of the connection ("cut"), or nothing more
    # while the connection stays open ("stalled": stunnel gives up after TIMEOUTbusy, 10 s).
    hello = _client_hello()
    before = tls.refusals()
    with socket.create_connection(("127.0.0.1", tls.port), timeout=60) as s:
        s.sendall(hello[: len(hello) // 2])
        if how == "cut":
            s.shutdown(socket.SHUT_WR)
        answer = _answer(s)
    # Closed without a ServerHello: nothing, or one fatal TLS alert record (content type 21, level 2).
    assert answer == b"" or (answer[0] == 0x15 and answer[5] == 2 and len(answer) == 7), answer
    eventually(lambda: tls.refusals() > before, timeout=10)
    trade_over_tls(tls, "CLIENT06", "FIX.4.4", f"after-truncated-{how}")


def test_tls_on_the_plain_port_is_refused(tls: Tls) -> None:
    ctx = client_context(tls.ca)
    with socket.create_connection(("127.0.0.1", tls.stack.fix_port), timeout=20) as raw:
        raw.settimeout(20)
        with pytest.raises((ssl.SSLError, OSError)):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1").close()
    # And the terminal client's tap says so in one line.
    session = ClientSession("CLIENT07", port=tls.stack.fix_port, tls=ctx)
    with session:
        session.start()
        with pytest.raises(SessionError) as exc:
            session.wait_logon(20)
    assert "TLS" in str(exc.value)
    trade_over_tls(tls, "CLIENT08", "FIX.4.4", "after-tls-on-plain")


def test_the_own_address_rule_treats_tls_connections_as_external(tls: Tls) -> None:
    # BENCH001 may log on from the exchange's own 127.0.0.1 only: over TLS it arrives from 127.0.0.3.
    records: list[Record] = []
    session = tls_session(tls, "BENCH001", records)
    with session:
        with contextlib.suppress(SessionError):
            session.wait_logon(10)
        eventually(lambda: session.status == LOGGED_OUT, timeout=15)
    # The same CompID straight to the plain port, from 127.0.0.1, is let in.
    with FixClient(tls.stack.fix_port, "BENCH001") as c:
        assert c.received[-1][35] == "A"
        c.logout()


ROOT = Path(__file__).resolve().parents[2]


def _run(t: Tls, argv: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    # FIXLAB_RUN_DIR: the local run's self-signed certificate is the CA the commands find by default.
    env = {**os.environ, "FIXLAB_RUN_DIR": str(t.run_dir), "FIXLAB_FIX_TLS_PORT": str(t.port)}
    return subprocess.run([sys.executable, *argv], input=stdin, capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env=env)


def test_fixlab_client_tls_trades_and_says_why_it_cannot_on_the_plain_port(tls: Tls) -> None:
    done = _run(tls, ["-m", "services.client", "--tls", "--plain", "--comp-id", "CLIENT02", "--linger", "2"],
                "buy ACORN.LAB 80.00 3\n")  # --tls: FIXLAB_FIX_TLS_PORT's port, verified with the local CA
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("<- ExecutionReport 35=8" in x and "ExecType(150)=0 (New)" in x for x in lines)
    assert done.stderr == ""
    wrong = _run(tls, ["-m", "services.client", "--tls", "--plain", "--comp-id", "CLIENT02",
                       "--port", str(tls.stack.fix_port)])
    assert wrong.returncode == 1
    (line,) = wrong.stderr.strip().splitlines()
    assert "TLS" in line, line


def test_a_scenario_logs_on_over_tls(tls: Tls, tmp_path: Path) -> None:
    scenario = tmp_path / "tls.scenario"
    scenario.write_text("# over TLS and plain in one scenario\n"
                        "logon A CLIENT03 tls\nlogon B CLIENT04\n"
                        "send A 35=D 11=$run-s 55=BIRCH.LAB 54=2 38=4 40=2 44=26.00 60=$now\n"
                        "expect A 35=8 11=$run-s 150=0\n"
                        "send B 35=D 11=$run-b 55=BIRCH.LAB 54=1 38=4 40=2 44=26.00 60=$now\n"
                        "expect B 35=8 11=$run-b 150=F 31=26.00\n"
                        "expect A 35=8 11=$run-s 150=F 31=26.00\n")
    done = _run(tls, ["-m", "services.client.scenario", str(scenario), "--port", str(tls.stack.fix_port)])
    assert done.returncode == 0, done.stdout + done.stderr


def _client_hello() -> bytes:
    """A real ClientHello, as Python's ssl module writes it (read from a memory BIO)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_context(None, insecure=True).wrap_bio(incoming, outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()
