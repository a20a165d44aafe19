"""``fixlab client --plain`` as a user runs it (a process), against a real exchange, and its bad inputs:
each ends or answers with one clear line, a non-zero exit where it ends, nothing hangs."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services import cli
from shared.redis_server import free_port
from tests.gateway_stack import ROOT, Stack, gateway_stack

pytestmark = pytest.mark.integration

CLIENT = [sys.executable, "-m", "services.client", "--plain"]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


def run(args: list[str], stdin: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLIENT, *args], input=stdin, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_plain_mode_orders_and_a_bad_command(stack: Stack) -> None:
    done = run(["--port", str(stack.fix_port), "--linger", "2"],
               "buy ACORN.LAB 99.80 5\nbogus\nsell ACORN.LAB 99.80 2 ioc\nseq\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("-> Logon 35=A #1" in x and "ResetSeqNumFlag(141)=Y (Yes)" in x for x in lines)
    assert any("<- ExecutionReport 35=8" in x and "ExecType(150)=0 (New)" in x for x in lines)
    assert any("<- ExecutionReport 35=8" in x and "ExecType(150)=F (Trade)" in x for x in lines)
    assert "error: unknown command 'bogus': type help for the list" in lines
    assert any(x.startswith("= client: next to send") for x in lines)
    assert done.stderr == ""


def test_unreachable_host_is_one_line_and_exit_1() -> None:
    start = time.monotonic()
    done = run(["--port", str(free_port())], "")
    assert time.monotonic() - start < 10
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "unreachable" in done.stderr
    assert done.stderr.startswith("fixlab client: ")


def test_refused_logon_is_one_line_and_exit_1(stack: Stack) -> None:
    done = run(["--port", str(stack.fix_port), "--comp-id", "NOSUCH"], "")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "refused NOSUCH" in done.stderr


def test_a_dropped_connection_ends_with_one_line() -> None:
    with gateway_stack(None, matcher=False) as own:
        proc = subprocess.Popen([*CLIENT, "--port", str(own.fix_port)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert "-> Logon 35=A" in first
            assert "<- Logon 35=A" in proc.stdout.readline()
            own.gateway.kill()  # the exchange vanishes: no Logout, the connection drops
            assert proc.wait(15) == 1
            assert proc.stderr is not None
            err = proc.stderr.read()
            assert err.count("\n") == 1 and "connection" in err, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


def test_fixlab_dispatches_client_and_keeps_the_inspector(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "fixlab client" in out and "pending" in out
    assert cli.main(["client", "--help"]) == 0
    assert "--plain" in capsys.readouterr().out
    script = Path(sys.executable).parent / "fixlab"
    if script.is_file():
        done = subprocess.run([str(script), "client", "--port", str(free_port())], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 1 and "unreachable" in done.stderr
