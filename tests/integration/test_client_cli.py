"""``fixlab client --plain`` as a user runs it (a process), against a real exchange, and its bad inputs:
each ends or answers with one clear line, a non-zero exit where it ends, nothing hangs."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import sys
import threading
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


def test_plain_mode_carries_out_two_lines_that_arrive_together(stack: Stack) -> None:
    """Two commands in one write, stdin left open: the second is carried out without a third line
    (select() on stdin does not see what a buffered readline already holds: it waited for more)."""
    proc = subprocess.Popen([*CLIENT, "--port", str(stack.fix_port)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    try:
        assert proc.stdin is not None and proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: [lines.put(x) for x in stdout], daemon=True).start()

        def wait_for(text: str, timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while not any(text in x for x in seen):
                left = deadline - time.monotonic()
                assert left > 0, f"no line with {text!r} in {timeout_s} s: {seen}"
                with contextlib.suppress(queue.Empty):
                    seen.append(lines.get(timeout=left))

        wait_for("<- Logon 35=A", 15)
        proc.stdin.write("drop\nbuy ACORN.LAB 95.00 2\n")
        proc.stdin.flush()
        wait_for("-> NewOrderSingle 35=D", 10)  # the heartbeat is 30 s: nothing else would wake it
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.mark.parametrize("mode", [["--plain"], []], ids=["plain", "full-screen"])
def test_unreachable_host_is_one_line_and_exit_1(mode: list[str]) -> None:
    start = time.monotonic()
    argv = [sys.executable, "-m", "services.client", *mode, "--port", str(free_port())]
    done = subprocess.run(argv, input="", capture_output=True, text=True, timeout=30, cwd=ROOT)
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
