"""docker-compose.yml run without Docker: every service's own command and environment, started in
depends_on order, each waited for with its own compose healthcheck, against a real redis-server.

This is what stays of `docker compose up` once the containers are taken away (it needs no Docker;
tests/e2e/test_compose_docker.py runs the real containers where an engine can run). It proves the
compose file's commands, variables, healthchecks and start order work with the real services: the
bots (on the gateway's loopback, as in compose) quote both books through the gateway and the
matcher, and the page answers on its published port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared import bus, streams
from shared.redis_server import free_port
from shared.schema import Depth, decode_batch
from shared.streams import inspect
from tests.helpers import eventually
from tests.unit.test_deploy_compose import COMPOSE, load, service_env

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def start_order(services: dict[str, Any]) -> list[str]:
    """Services in an order where each comes after everything it depends on."""
    done: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for dep in services[name].get("depends_on", {}):
            visit(dep, (*path, name))
        done.append(name)

    for name in services:
        visit(name, ())
    return done


def _argv(cmd: list[str]) -> list[str]:
    assert cmd[0] == "python", cmd  # the image's python is this interpreter here
    return [sys.executable, *cmd[1:]]


class Stack:
    def __init__(self, redis_url: str, run_dir: Path, env: dict[str, str]) -> None:
        self.shell_env = env
        self.doc = load(COMPOSE, env=env)
        self.lab = {n: s for n, s in self.doc["services"].items() if not s.get("profiles")}
        self.redis_url = redis_url
        self.run_dir = run_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def env_of(self, name: str) -> dict[str, str]:
        env = {**os.environ, **service_env(self.lab[name])}
        # What differs from the containers: the redis address and a writable run folder.
        env["REDIS_URL"] = self.redis_url
        env["FIXLAB_RUN_DIR"] = str(self.run_dir / name)
        if "FIXLAB_FIX_TLS_HOST" in env:  # the container's 0.0.0.0 is this machine's: loopback here
            env["FIXLAB_FIX_TLS_HOST"] = "127.0.0.1"
        # A file the service mounts (the gateway's credentials): the host's path stands for the
        # container's wherever a variable names it.
        for volume in self.lab[name].get("volumes", []):
            if isinstance(volume, str) and volume.count(":") >= 1 and volume.startswith("/"):
                host, container = volume.split(":")[:2]
                env.update({k: host for k, v in env.items() if v == container})
        return env

    def healthy(self, name: str) -> bool:
        test = self.lab[name]["healthcheck"]["test"]
        assert test[0] == "CMD", test
        proc = self.procs[name]
        assert proc.poll() is None, f"{name} exited with {proc.returncode}:\n{self.log(name)}"
        return subprocess.run(_argv(test[1:]), env=self.env_of(name), cwd=self.run_dir,
                              capture_output=True, timeout=30).returncode == 0

    def log(self, name: str) -> str:
        return (self.run_dir / f"{name}.log").read_text(errors="replace")[-4000:]

    def up(self) -> None:
        for name in start_order(self.lab):
            if name == "redis":
                continue  # the fixture's redis-server plays it
            with (self.run_dir / f"{name}.log").open("wb") as log:
                # cwd is not the repository: the code must run from its package, as in the image.
                self.procs[name] = subprocess.Popen(
                    _argv(self.lab[name]["command"]), env={**self.env_of(name), "PYTHONPATH": str(ROOT)},
                    cwd=self.run_dir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            eventually(lambda name=name: self.healthy(name), timeout=60, interval=0.2,
                       what=f"{name}'s compose healthcheck")

    def down(self) -> list[str]:
        """Stop in reverse order; return the services that did not stop on SIGTERM."""
        stuck = []
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                stuck.append(name)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return stuck


@pytest.fixture
def stack(redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    ports = {"FIXLAB_FIX_PORT": str(free_port()), "FIXLAB_WEB_PORT": str(free_port()),
             "FIXLAB_FIX_TLS_PORT": str(free_port())}
    s = Stack(redis_url, tmp_path, ports)
    for name in s.lab:
        (tmp_path / name).mkdir()
    try:
        s.up()
        yield s
    finally:
        stuck = s.down()
        assert not stuck, f"did not stop on SIGTERM: {stuck}"


def run_bench_profile(stack: Stack, out_dir: Path, scale: int) -> list[dict[str, Any]]:
    """`docker compose --profile bench up --scale bench=N`: N copies of the bench service's command."""
    run_id = f"compose-test-{os.getpid()}"
    env = {**stack.shell_env, "FIXLAB_BENCH_RUN_ID": run_id, "FIXLAB_BENCH_INSTANCES": str(scale),
           "FIXLAB_BENCH_SESSIONS": str(scale), "FIXLAB_BENCH_WINDOW": "4", "FIXLAB_BENCH_ORDERS": "400",
           "FIXLAB_BENCH_WARMUP": "10"}
    bench = load(COMPOSE, env=env)["services"]["bench"]
    fix_port = env["FIXLAB_FIX_PORT"]
    # Compose's names and volumes, mapped onto this machine: the gateway is on loopback, and the
    # bench-results volume is a folder.
    argv = [a.replace(f"gateway:{fix_port}", f"127.0.0.1:{fix_port}").replace("/data/bench", str(out_dir))
            for a in _argv(bench["command"])]
    assert f"127.0.0.1:{fix_port}" in argv and str(out_dir / f"{run_id}.json") in argv
    proc_env = {**os.environ, **service_env(bench), "REDIS_URL": stack.redis_url, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(argv, env=proc_env, cwd=out_dir, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for _ in range(scale)]
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=150)
            outputs.append(out.decode(errors="replace"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [p.returncode for p in procs] == [0] * scale, "\n".join(o[-2000:] for o in outputs)
    return [json.loads((out_dir / f"{run_id}.json").read_text())]


@pytest.mark.timeout(300)  # the whole stack, then a bench run, on a contended 2-core machine
def test_the_compose_services_start_in_order_and_trade(stack: Stack, redis_url: str, tmp_path: Path) -> None:
    assert [n for n in stack.procs] == ["matcher", "gateway", "web", "bots", "tls"]
    web_port = service_env(stack.lab["web"])["FIXLAB_WEB_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/", timeout=10) as page:
        assert page.status == 200
    r = bus.connect(redis_url)
    try:
        def both_books_quoted() -> bool:
            rows: Any = r.xrange(streams.shard_market_stream("0"))
            symbols = {m.symbol for _, f in rows for m in decode_batch(f[streams.BATCH_FIELD])
                       if isinstance(m, Depth) and m.bids and m.asks}
            return symbols == {"ACORN.LAB", "BIRCH.LAB"}

        eventually(both_books_quoted, timeout=60, interval=0.2, what="the bots' ladders in both books")
        orders = {s["stream"]: s for s in inspect.list_streams(r)}[streams.orders_stream("0")]
        assert [g["name"] for g in orders["groups"]] == [streams.MATCHER_GROUP]
    finally:
        r.close()
    # The published TLS port: a QuickFIX session logs on through the tls service's stunnel, verifying
    # the certificate it made.
    from services.client.session import ClientSession
    from shared.tls import client_context

    tls_env = service_env(stack.lab["tls"])
    ca = Path(stack.env_of("tls")["FIXLAB_RUN_DIR"]) / "tls" / "cert.pem"
    with ClientSession("CLIENT01", port=int(tls_env["FIXLAB_FIX_TLS_PORT"]), tls=client_context(ca)) as s:
        s.wait_logon(15)
    # The bench profile, scaled to 4: four instances of one run, one merged report, nothing lost.
    out_dir = tmp_path / "bench-results"
    out_dir.mkdir()
    (report,) = run_bench_profile(stack, out_dir, scale=4)
    assert (report["sessions"], report["orders"], report["lost"]) == (4, 400, 0)
    assert report["acknowledged"] + report["rejected"] == 400
    # Each healthcheck fails once its service is gone (it can fail, so passing meant something): at
    # once when the service removed its report on the way out, else when the report's TTL runs out.
    stack.down()
    for name in ("matcher", "gateway", "bots", "tls"):
        test = stack.lab[name]["healthcheck"]["test"]

        def failing(test: list[str] = test, name: str = name) -> bool:
            done = subprocess.run(_argv(test[1:]), env=stack.env_of(name), capture_output=True, timeout=30)
            return done.returncode != 0

        eventually(failing, timeout=20, interval=0.5, what=f"{name}'s healthcheck failing once it stopped")


def test_start_order_follows_depends_on() -> None:
    services = {"web": {"depends_on": {"gateway": {}}}, "gateway": {"depends_on": {"redis": {}}},
                "redis": {}, "bots": {"depends_on": {"gateway": {}}}}
    order = start_order(services)
    assert order.index("redis") < order.index("gateway") < order.index("web")
    assert order.index("gateway") < order.index("bots")
    with pytest.raises(AssertionError, match="cycle"):
        start_order({"a": {"depends_on": {"b": {}}}, "b": {"depends_on": {"a": {}}}})
