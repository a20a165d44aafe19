"""``python -m services``: run the whole stack on this machine (what ``make run`` does).

``python -m services --cluster`` (``make run-cluster``) runs it on a private three-master Redis Cluster
instead of one redis-server (shared/redis_cluster.py, data under .run/cluster/), with two matcher
shards and two gateways unless FIXLAB_SHARDS and FIXLAB_GATEWAYS say otherwise (deploy/SCALING.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from services.stack import FIX_PORT_ENV, cluster_defaults, gateway_instances, stack_specs
from shared.compids import gateway_comp_ids
from shared.config import ConfigError, env_int, env_str, gateway_count
from shared.operator import TOKEN_ENV, TOKEN_FILE_ENV, ensure_token_file, load_token
from shared.redis_cluster import ClusterError, LocalCluster
from shared.redis_server import APPENDFSYNC, DEFAULT_APPENDFSYNC, RedisServer
from shared.supervisor import Supervisor
from shared.tls import listeners, tls_settings


def fix_addresses(env: dict[str, str]) -> list[str]:
    """One line per gateway: its name, FIX address and, with several, the CompIDs it accepts."""
    count = gateway_count(env)
    tls = tls_settings(env)
    lines = []
    if count == 1:
        port = env_int(env, FIX_PORT_ENV, 9878, lo=1, hi=65535)
        lines.append(f"FIX acceptor: 127.0.0.1:{port} (SenderCompID FIXLAB)")
    else:
        lines += [f"FIX acceptor {name}: 127.0.0.1:{own[FIX_PORT_ENV]} (SenderCompID FIXLAB; "
                  f"{gateway_comp_ids(k, count).summary()})"
                  for k, (name, own) in enumerate(gateway_instances(env), 1)]
    if tls.enabled:
        cert = tls.cert or tls.tls_dir / "cert.pem"
        lines += [f"FIX over TLS: {tls.host}:{x.tls_port} -> 127.0.0.1:{x.fix_port} (stunnel4; certificate "
                  f"{cert}; `fixlab client --tls`)" for x in listeners(env, tls.port)]
    return lines


def operator_token(env: dict[str, str], run_dir: Path) -> str:
    """Make the operator's token file unless there is a token (``fixlab admin``, shared/operator.py);
    the services read it from the path set in ``env``. The line that says where it is."""
    if env.get(TOKEN_ENV):
        return f"operator token: from {TOKEN_ENV} (fixlab admin needs the same)"
    path = Path(env.get(TOKEN_FILE_ENV) or run_dir / "operator-token").resolve()
    made = ensure_token_file(path)
    load_token({TOKEN_FILE_ENV: str(path)})  # a file that is there but unusable fails here
    env[TOKEN_FILE_ENV] = str(path)
    return (f"operator token: {'made ' if made else ''}{path} (fixlab admin reads it; elsewhere set "
            f"{TOKEN_FILE_ENV})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services", description="Run FIX Lab on this machine.")
    parser.add_argument("--cluster", action="store_true",
                        help="start a private 3-master Redis Cluster instead of one redis-server")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    run_dir = Path(env.get("FIXLAB_RUN_DIR", ".run")).resolve()
    try:
        if args.cluster:
            env.update(cluster_defaults(env))
        web_port = env_int(env, "FIXLAB_WEB_PORT", 8000, lo=1, hi=65535)
        specs = stack_specs(env=env)  # one matcher per shard of FIXLAB_SHARDS, one service per gateway
        addresses = fix_addresses(env)
        fsync = env_str(env, "FIXLAB_REDIS_APPENDFSYNC", DEFAULT_APPENDFSYNC)
        # --cluster: replicas per master (0 by default); with any, what is told waits for one.
        replicas = env_int(env, "FIXLAB_CLUSTER_REPLICAS", 0, lo=0, hi=2)
        if args.cluster and replicas:
            env.setdefault("FIXLAB_REDIS_WAIT_REPLICAS", "1")
        if fsync not in APPENDFSYNC:
            raise ConfigError(f"FIXLAB_REDIS_APPENDFSYNC={fsync!r} is not one of {', '.join(APPENDFSYNC)}")
        token_line = operator_token(env, run_dir)
    except (ConfigError, OSError) as exc:
        print(f"fixlab: {exc}", file=sys.stderr)
        return 2
    server: RedisServer | None = None
    cluster: LocalCluster | None = None
    if not env.get("REDIS_URL") and args.cluster:
        # A fresh cluster every run: its nodes take new free ports, which an old nodes.conf would
        # contradict (the lab keeps nothing across runs of the cluster either).
        shutil.rmtree(run_dir / "cluster", ignore_errors=True)
        try:
            cluster = LocalCluster(run_dir / "cluster", masters=3, replicas=replicas, appendonly=True,
                                   appendfsync=fsync, die_with_parent=True).start()
        except ClusterError as exc:
            print(f"fixlab: {exc}", file=sys.stderr)
            return 1
        env["REDIS_URL"] = cluster.url
        each = f" ({replicas} replicas each, waited for: FIXLAB_REDIS_WAIT_REPLICAS)" if replicas else ""
        print(f"run     | started a private Redis Cluster: 3 masters{each} on "
              f"{', '.join(n.address for n in cluster.nodes)} (data in {run_dir / 'cluster'}, AOF with "
              f"appendfsync {fsync})", flush=True)
    elif not env.get("REDIS_URL"):
        server = RedisServer(run_dir / "redis", appendonly=True, die_with_parent=True,
                             appendfsync=fsync).start()
        env["REDIS_URL"] = server.url
        print(f"run     | started a private redis-server on {server.url} (AOF in {run_dir / 'redis'}, "
              f"appendfsync {fsync})", flush=True)

    def ready() -> None:
        names = ", ".join(s.name for s in specs)
        print(f"run     | services: {names}", flush=True)
        for line in addresses:
            print(f"run     | {line}", flush=True)
        print(f"run     | {token_line}", flush=True)
        print(f"run     | the lab page: http://127.0.0.1:{web_port}/   (Ctrl-C stops everything)",
              flush=True)

    reported: set[int] = set()

    def watch_redis() -> None:
        # What compose's restart policy does for its redis service: a redis-server that died is
        # started again on the same port and AOF; the services reconnect by themselves.
        if cluster is not None:
            # A cluster node is not restarted here: the cluster itself notices (and, with replicas,
            # fails over); say it once.
            for node in cluster.nodes:
                if node.proc is not None and node.proc.poll() is not None and node.port not in reported:
                    reported.add(node.port)
                    print(f"run     | Redis Cluster node {node.address} exited with {node.proc.returncode}",
                          flush=True)
            return
        if server is None:
            return
        try:
            status = server.revive()
        except RuntimeError as exc:  # it did not come back: try again on the next poll
            print(f"run     | redis-server did not restart: {exc}", flush=True)
            return
        if status is not None:
            print(f"run     | redis-server exited with {status}; restarted it on {server.url} "
                  f"(restart {server.restarts})", flush=True)

    try:
        return Supervisor(specs, env, on_ready=ready, watch=watch_redis).run()
    finally:
        # Last: the services above wrote to it until they stopped.
        if server is not None:
            server.stop()
            print("run     | stopped redis-server", flush=True)
        if cluster is not None:
            cluster.stop()
            print("run     | stopped the Redis Cluster's nodes", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
