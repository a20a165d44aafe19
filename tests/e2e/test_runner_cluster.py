"""`python -m services --cluster` (what `make run-cluster` starts): a private three-master Redis Cluster
under the run folder, two matcher shards, two gateways, web and bots; the page's address and each
gateway's FIX address printed; SIGTERM stops every service and then the cluster's nodes, leaving no
process behind and every port free.

Whether the services trade on the cluster is not asserted here: that is the services' side of issue
16 (each of them on the cluster client); this is the runner's.
"""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

import pytest
import redis

from shared.compids import gateway_comp_ids
from shared.redis_server import free_port
from tests.e2e.runner_process import alive, runner, two_free_ports
from tests.helpers import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("faults")]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)


def _port_free(port: int) -> bool:
    """Nothing listens on ``port``: a server could bind it again (with SO_REUSEADDR, as redis-server
    and QuickFIX do; connections of the run may linger in TIME_WAIT)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_info(port: int) -> dict[str, str]:
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
    try:
        info = r.execute_command("CLUSTER", "INFO").decode()
    finally:
        r.close()
    return dict(line.split(":", 1) for line in info.split() if ":" in line)


def _redis_pids(ports: list[int]) -> list[int]:
    out = []
    for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if title.split(b" ")[0].endswith(b"redis-server") and any(f":{p}".encode() in title for p in ports):
            out.append(pid)
    return out


def test_the_cluster_runner_starts_the_cluster_and_the_stack_and_stops_it_all(tmp_path: Path) -> None:
    fix_port, web_port = two_free_ports(), free_port()
    run_dir = tmp_path / "run"
    env = {"FIXLAB_RUN_DIR": str(run_dir), "FIXLAB_WEB_PORT": str(web_port), "FIXLAB_FIX_PORT": str(fix_port)}
    with runner(env, "--cluster") as run:
        started = run.wait_line(
            r"run +\| started a private Redis Cluster: 3 masters on (.*) \(data in (.*), AOF with "
            r"appendfsync always\)", timeout=60)
        ports = [int(a.rsplit(":", 1)[1]) for a in started.group(1).split(", ")]
        assert len(ports) == 3 and Path(started.group(2)) == run_dir / "cluster"
        run.wait_line(rf"the lab page: http://127\.0\.0\.1:{web_port}/")
        services = run.wait_line(r"run +\| services: (.*)").group(1).split(", ")
        assert services == ["matcher-a", "matcher-b", "gateway-1", "gateway-2", "web", "bots"]
        for k in (1, 2):
            m = run.wait_line(rf"FIX acceptor gateway-{k}: 127\.0\.0\.1:(\d+) \(SenderCompID FIXLAB; (.*)\)")
            assert (int(m.group(1)), m.group(2)) == (fix_port + k - 1, gateway_comp_ids(k, 2).summary())
        # A real cluster: every node ok, three masters holding all 16384 slots, its data in the run folder.
        for port in ports:
            info = _cluster_info(port)
            assert (info["cluster_state"], info["cluster_slots_assigned"], info["cluster_size"],
                    info["cluster_known_nodes"]) == ("ok", "16384", "3", "3")
            assert (run_dir / "cluster" / f"node-{port}" / "nodes.conf").is_file()
            r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
            try:  # make run's durability: an acknowledged order is on disk
                got = r.config_get("append*")
                assert (got["appendonly"], got["appendfsync"]) == ("yes", "always")
            finally:
                r.close()
        node_pids = _redis_pids(ports)
        assert len(node_pids) == 3
        pids = run.started_pids()
        assert set(pids) == set(services)
        assert run.stop() == 0
        assert any(re.match(r"run +\| stopped the Redis Cluster's nodes", x) for x in run.lines)
        # The services stopped before the nodes did.
        stopped_services = next(i for i, x in enumerate(run.lines) if re.match(r"run +\| stopped$", x))
        stopped_nodes = next(i for i, x in enumerate(run.lines) if "stopped the Redis Cluster's nodes" in x)
        assert stopped_services < stopped_nodes
        for pid in [*node_pids, *(p for ps in run.started_pids().values() for p in ps)]:
            eventually(lambda pid=pid: not alive(pid), timeout=10, what=f"pid {pid} gone")
        for port in [*ports, *(p + 10000 for p in ports), fix_port, fix_port + 1, web_port]:
            eventually(lambda port=port: _port_free(port), timeout=10, what=f"port {port} free")
