"""docker-compose.yml in real containers: `docker compose up`, a stock client trading through the
published TLS port (stunnel on each side; the plain FIX port is not published), the page showing it,
a bench scaled to four instances, the inspector, a crashed matcher restarted by Docker, and `down`
leaving nothing behind.

tools/compose.py does what `make compose-up` does (engine, dockerd, base images without a registry,
the fixlab image); this module runs the stack under a project name of its own, on free ports, and
stops the dockerd it started (putting iptables, ip_forward and docker0 back).

Opt-in: skips unless FIXLAB_DOCKER_TESTS=1 (`FIXLAB_DOCKER_TESTS=1 make test` runs `make
docker-engine` first; .ci/run sets it). Skips, with the reason, when no engine can run here (not
root, no dockerd and none installable, dockerd does not start) or when the image would have to
compile quickfix (no wheel of this host's to seed it: 9 minutes of CI; `make compose-up` builds it
once). Bounded: every step has a timeout.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shared import credentials
from shared.redis_server import free_port
from tests.e2e.webstack import CHROMIUM, CHROMIUM_ARGS
from tests.gateway_stack import FixClient
from tests.helpers import eventually
from tools import compose as tool

pytestmark = [pytest.mark.xdist_group("serial"), pytest.mark.e2e, pytest.mark.timeout(900)]

PRICE = "100.00"  # ACORN.LAB's reference price: the bots bid below it and offer above it
QTY = 37  # not a size the bots quote: this trade is ours on the tape

if os.environ.get("FIXLAB_DOCKER_TESTS") != "1":
    pytest.skip("Docker tests are opt-in: `FIXLAB_DOCKER_TESTS=1 make test` installs the engine "
                "(`make docker-engine`) and runs them", allow_module_level=True)
if os.geteuid() != 0:
    pytest.skip("Docker's engine needs root here", allow_module_level=True)
if shutil.which("dockerd") is None or not tool.compose_works():
    pytest.skip("no Docker engine or no `docker compose` (make docker-engine installs them)",
                allow_module_level=True)
if tool.host_quickfix_wheel() is None:
    pytest.skip("no quickfix wheel of this host's (pip's cache) to seed the image: it would compile "
                "quickfix for 9 minutes; `make compose-up` builds the image", allow_module_level=True)


@dataclass
class Stack:
    env: dict[str, str]
    project: str
    fix_port: int
    web_port: int
    tls_port: int = 0

    def compose(self, *args: str, timeout: float = 120,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "compose", "-p", self.project,
                               "-f", str(tool.ROOT / "docker-compose.yml"), *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout, check=check)

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.project}-{service}-{index}"

    def inspect(self, name: str, fmt: str) -> str:
        return subprocess.run(["docker", "inspect", "-f", fmt, name], capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={self.project}"
        found = {}
        for kind, argv in (("containers", ["docker", "ps", "-a", "-q", "--filter", label]),
                           ("networks", ["docker", "network", "ls", "-q", "--filter", label]),
                           ("volumes", ["docker", "volume", "ls", "-q", "--filter", label])):
            found[kind] = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.split()
        return found


@pytest.fixture(scope="module")
def one_at_a_time() -> Iterator[None]:
    """One run of this module per machine at a time: a second would share the dockerd that the
    first stops at its end."""
    with open("/run/fixlab-compose-e2e.lock", "w") as lock:
        deadline = time.monotonic() + 600
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.skip("another run of the compose e2e test held the machine's dockerd for 10 min")
                time.sleep(2)
        yield


@pytest.fixture(scope="module")
def stack(one_at_a_time: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        started = tool.start_engine()
    except SystemExit as e:
        pytest.skip(f"no Docker engine can run here: {e}")
    try:
        images = tool.base_images()
        tool.build(images)
        creds = tmp_path_factory.mktemp("creds") / "credentials"
        credentials.set_password(creds, PASSWORD_COMP, PASSWORD)
        creds.chmod(0o644)  # the container's user (fixlab, uid 10001) reads it through the mount
        st = Stack(env={**os.environ, **images, "FIXLAB_FIX_PORT": str(free_port()),
                        "FIXLAB_WEB_PORT": str(free_port()), "FIXLAB_FIX_TLS_PORT": str(free_port()),
                        "FIXLAB_BIND": "127.0.0.1", "FIXLAB_CREDENTIALS_FILE": str(creds)},
                   project=f"fixlabe2e{os.getpid()}", fix_port=0, web_port=0)
        st.fix_port, st.web_port = int(st.env["FIXLAB_FIX_PORT"]), int(st.env["FIXLAB_WEB_PORT"])
        st.tls_port = int(st.env["FIXLAB_FIX_TLS_PORT"])
        try:
            up = st.compose("up", "-d", "--no-build", "--wait", timeout=300, check=False)
            logs = "" if up.returncode == 0 else st.compose("logs", "--tail=20", check=False).stdout
            assert up.returncode == 0, up.stdout + up.stderr + logs
            yield st
        finally:
            st.compose("--profile", "bench", "down", "-v", "--remove-orphans", "--timeout", "15",
                       timeout=180, check=False)
    finally:
        if started:
            tool.stop_engine()


def test_every_service_is_up_and_healthy(stack: Stack) -> None:
    ps = [json.loads(line) for line in stack.compose("ps", "--format", "json").stdout.splitlines() if line]
    assert {(p["Service"], p["State"], p["Health"]) for p in ps} == {
        (s, "running", "healthy") for s in ("redis", "matcher", "gateway", "web", "bots", "tls")}


PASSWORD_COMP, PASSWORD = "CLIENT01", "compose-secret"  # in the credentials file the gateway mounts


def password_client() -> Any:
    """A strict stock client whose Logon carries Username (553) and Password (554)."""
    import quickfix as fix

    from tests.stock_client import StockClient

    class PasswordClient(StockClient):
        def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
            if msg.getHeader().getField(35) == "A":
                msg.setField(fix.Username(PASSWORD_COMP))
                msg.setField(fix.Password(PASSWORD))
            super().toAdmin(msg, sid)

    return PasswordClient()


@contextlib.contextmanager
def tls_tunnel(stack: Stack, tmp_path: Path) -> Iterator[Any]:
    """A local stunnel client to the published TLS port (the only FIX port the host reaches), verifying
    the certificate the tls service made; stock clients connect to its plain side."""
    from shared.tls import ClientTunnel

    cert = tmp_path / "cert.pem"
    if not cert.exists():
        stack.compose("cp", "tls:/data/tls/cert.pem", str(cert))
    with ClientTunnel(tmp_path / "tunnel", "127.0.0.1", stack.tls_port, ca_file=cert) as tunnel:
        yield tunnel


def test_a_stock_client_trades_through_the_published_port_and_the_page_shows_it(
        stack: Stack, tmp_path: Path) -> None:
    import socket

    from tests.stock_client import nos, stock_sessions

    # Only TLS reaches the exchange from the host: the plain FIX port is not published.
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", stack.fix_port)) != 0
    with tls_tunnel(stack, tmp_path) as tunnel, \
            stock_sessions(tmp_path, tunnel.port, [PASSWORD_COMP], app=password_client) as (seller,), \
            stock_sessions(tmp_path, tunnel.port, ["CLIENT02"]) as (buyer,):
        seller.send("D", nos("s1", 2, QTY, PRICE))
        seller.client.wait("8", lambda m: m.get(11) == "s1" and m.get(150) == "0", timeout_s=20)
        buyer.send("D", nos("b1", 1, QTY, PRICE))
        for client, clordid in ((seller.client, "s1"), (buyer.client, "b1")):
            fill = client.wait("8", lambda m, c=clordid: m.get(11) == c and m.get(150) == "F", timeout_s=20)
            assert (fill[31], fill[32], fill[39]) == (PRICE, str(QTY), "2")
        assert seller.client.session_rejects() == buyer.client.session_rejects() == []
    # The same CompID without its password is turned away with a Logout, through the same port.
    with tls_tunnel(stack, tmp_path) as tunnel, \
            FixClient(tunnel.port, PASSWORD_COMP, logon=False) as stranger:
        stranger.send("A", [(98, 0), (108, 30), (141, "Y")])
        logout = stranger.expect("5")
        assert not any(m.get(35) == "A" for m in stranger.received), stranger.received
        assert logout.get(58), logout

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make browser installs it): the tape is unchecked")
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{stack.web_port}/")
            expect(page.locator("#conn")).to_have_text("connected", timeout=20_000)
            expect(page.locator("#tape li", has_text=f"{QTY} @ {PRICE}").first).to_be_visible(timeout=20_000)
        finally:
            browser.close()


def test_the_bench_scaled_to_four_instances_writes_one_merged_report(stack: Stack) -> None:
    run_id = f"e2e{int(time.time())}"
    env = {"FIXLAB_BENCH_RUN_ID": run_id, "FIXLAB_BENCH_INSTANCES": "4", "FIXLAB_BENCH_SESSIONS": "4",
           "FIXLAB_BENCH_WINDOW": "8", "FIXLAB_BENCH_ORDERS": "4000", "FIXLAB_BENCH_WARMUP": "200"}
    bench = Stack({**stack.env, **env}, stack.project, stack.fix_port, stack.web_port)
    done = bench.compose("--profile", "bench", "up", "--no-build", "--scale", "bench=4", "bench",
                         timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    codes = {bench.inspect(bench.container("bench", i), "{{.State.ExitCode}}") for i in range(1, 5)}
    assert codes == {"0"}, done.stdout
    report = json.loads(subprocess.run(
        ["docker", "run", "--rm", "-v", f"{stack.project}_bench-results:/b:ro", "fixlab:local",
         "cat", f"/b/{run_id}.json"], capture_output=True, text=True, check=True, timeout=60).stdout)
    assert (report["instances"], report["sessions"], report["orders"]) == (4, 4, 4000)
    assert report["sent"] == report["acknowledged"] == 4000
    assert (report["rejected"], report["lost"]) == (0, 0)
    bench.compose("--profile", "bench", "rm", "-f", "bench", check=False)


def test_the_inspector_reads_the_compose_redis(stack: Stack) -> None:
    out = stack.compose("exec", "-T", "web", "fixlab", "list").stdout
    orders = next(line.split() for line in out.splitlines() if line.startswith("fixlab:{shard-0}:orders"))
    assert orders[4:6] == ["matcher", "matcher-0:0"], out  # the matcher's group reads it
    assert orders[6:8] == ["0", "0"], out  # nothing pending, no lag


def test_a_crashed_matcher_is_restarted_by_docker_and_loses_nothing(stack: Stack, tmp_path: Path) -> None:
    from tests.stock_client import nos, stock_sessions

    matcher = stack.container("matcher")
    restarts = int(stack.inspect(matcher, "{{.RestartCount}}"))
    with tls_tunnel(stack, tmp_path) as tunnel, \
            stock_sessions(tmp_path, tunnel.port, ["CLIENT03"]) as (seller,), \
            stock_sessions(tmp_path, tunnel.port, ["CLIENT04"]) as (buyer,):
        seller.send("D", nos("rest1", 2, QTY, PRICE))  # rests on the book across the crash
        seller.client.wait("8", lambda m: m.get(11) == "rest1" and m.get(150) == "0", timeout_s=20)
        # SIGKILL to the container's init from the host, as a crash: `docker kill` would count as a
        # manual stop, which restart: unless-stopped leaves stopped.
        os.kill(int(stack.inspect(matcher, "{{.State.Pid}}")), 9)
        eventually(lambda: int(stack.inspect(matcher, "{{.RestartCount}}")) > restarts, timeout=60,
                   what="Docker restarting the matcher")
        eventually(lambda: stack.inspect(matcher, "{{.State.Health.Status}}") == "healthy", timeout=90,
                   interval=1, what="the restarted matcher healthy")
        buyer.send("D", nos("take1", 1, QTY, PRICE))
        for client, clordid in ((seller.client, "rest1"), (buyer.client, "take1")):
            fill = client.wait("8", lambda m, c=clordid: m.get(11) == c and m.get(150) == "F", timeout_s=30)
            assert (fill[31], fill[32]) == (PRICE, str(QTY))
    out = stack.compose("exec", "-T", "web", "fixlab", "list").stdout
    orders = next(line.split() for line in out.splitlines() if line.startswith("fixlab:{shard-0}:orders"))
    assert orders[6:8] == ["0", "0"], out


def test_down_leaves_no_container_network_or_volume(stack: Stack) -> None:
    stack.compose("--profile", "bench", "down", "-v", "--remove-orphans", "--timeout", "15", timeout=180)
    assert stack.leftovers() == {"containers": [], "networks": [], "volumes": []}


def test_the_cluster_file_comes_up_and_passes_its_cluster_check(stack: Stack) -> None:
    """deploy/compose.cluster.yml, the same way, after the single-Redis stack is down."""
    cluster = Stack({**stack.env, "FIXLAB_WEB_PORT": str(free_port())}, f"{stack.project}c", 0, 0)

    def compose(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "compose", "-p", cluster.project,
                               "-f", str(tool.ROOT / "deploy" / "compose.cluster.yml"), *args],
                              env=cluster.env, capture_output=True, text=True, timeout=timeout, check=check)

    # Two gateways on FIXLAB_FIX_PORT and the next port: two free ones in a row.
    base = next(p for p in iter(free_port, None) if p < 65535 and _free(p + 1))
    cluster.env["FIXLAB_FIX_PORT"] = str(base)
    try:
        up = compose("up", "-d", "--no-build", "--wait", timeout=300, check=False)
        assert up.returncode == 0, up.stdout + up.stderr
        check = compose("exec", "-T", "redis-1", "redis-cli", "--cluster", "check", "127.0.0.1:6379").stdout
        assert "[OK] All nodes agree about slots configuration." in check, check
        assert "[OK] All 16384 slots covered." in check, check
        assert check.count(") master") == 3, check  # three masters, no replicas
        listing = compose("exec", "-T", "web", "fixlab", "list").stdout
        for shard in ("a", "b"):
            assert f"fixlab:{{shard-{shard}}}:orders" in listing, listing
    finally:
        compose("down", "-v", "--remove-orphans", "--timeout", "15", timeout=180, check=False)
    assert cluster.leftovers() == {"containers": [], "networks": [], "volumes": []}


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
