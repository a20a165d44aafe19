"""Every shipped scenario (scenarios/*.scenario) played by ``python -m services.client.scenario``
against a fresh stack started as ``make run`` starts it, with scenarios/stack.env's settings; and
what the runner says when a scenario fails or the exchange refuses a Logon."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.redis_server import free_port
from tests.e2e.runner_process import Runner, runner
from tests.gateway_stack import ROOT
from tools.course import stack_env

pytestmark = pytest.mark.e2e

SCENARIOS = ROOT / "scenarios"


@dataclass
class Exchange:
    run: Runner
    fix_port: int
    redis_url: str  # phase steps go through the bus, as fixlab admin phase does


@pytest.fixture(scope="module")
def exchange(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exchange]:
    fix_port = free_port()
    env = {**stack_env(), "FIXLAB_RUN_DIR": str(tmp_path_factory.mktemp("run")),
           "FIXLAB_FIX_PORT": str(fix_port), "FIXLAB_WEB_PORT": str(free_port())}
    with runner(env) as run:
        redis_url = run.wait_line(r"private redis-server on (redis://\S+)", timeout=90).group(1)
        run.wait_line(rf"gateway \S+ ready on port {fix_port}", timeout=90)
        yield Exchange(run, fix_port, redis_url)


def play(exchange: Exchange, *files: str | Path, timeout: float = 150,
         fixlab: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m services.client.scenario``, or the ``fixlab scenario`` console script."""
    command = ([str(Path(sys.executable).parent / "fixlab"), "scenario"] if fixlab
               else [sys.executable, "-m", "services.client.scenario"])
    env = {**os.environ, **stack_env()}  # the stack's instruments: the shard a phase step writes to
    return subprocess.run([*command, "--port", str(exchange.fix_port), "--redis-url", exchange.redis_url,
                           *map(str, files)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_every_shipped_scenario_passes(exchange: Exchange) -> None:
    files = sorted(SCENARIOS.glob("*.scenario"))
    assert len(files) >= 10
    started = time.monotonic()
    done = play(exchange, *files)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    passed = [x for x in done.stdout.splitlines() if x.startswith("PASS ")]
    assert len(passed) == len(files), done.stdout
    sys.stderr.write(f"{len(files)} scenarios in {time.monotonic() - started:.1f} s\n")


def test_a_failing_scenario_names_its_step_and_shows_the_last_messages(exchange: Exchange,
                                                                       tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.scenario"
    wrong.write_text("logon A CLIENT16\n"
                     "send A 35=D 11=$run-1 55=ACORN.LAB 54=1 38=5 40=2 44=86.00 60=$now\n"
                     "expect A 35=8 11=$run-1 150=F timeout=1\n")
    done = play(exchange, wrong, timeout=30, fixlab=True)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert f"FAIL {wrong} (step 3 of 3" in out
    assert f"FAILED at {wrong}:3: expect A 35=8 11=$run-1 150=F timeout=1" in out
    assert "-> 150=0, expected F" in out  # the New came instead, and why it is not it
    assert "last messages of A" in out and "> 35=D|34=2|49=CLIENT16" in out


def test_a_refused_logon_and_an_unreachable_exchange(exchange: Exchange, tmp_path: Path) -> None:
    nobody = tmp_path / "nobody.scenario"
    nobody.write_text("logon A NOBODY01 timeout=5\n")
    started = time.monotonic()
    done = play(exchange, nobody, timeout=30)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "A (NOBODY01) did not log on: " in done.stdout
    assert time.monotonic() - started < 20
    closed = subprocess.run([sys.executable, "-m", "services.client.scenario", "--port", str(free_port()),
                             str(nobody)], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    assert closed.returncode == 3 and "cannot reach 127.0.0.1:" in closed.stderr
