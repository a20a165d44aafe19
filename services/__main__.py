"""``python -m services``: run the whole stack on this machine (what ``make run`` does)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from services.stack import stack_specs
from shared.config import ConfigError, env_int, env_str
from shared.redis_server import APPENDFSYNC, DEFAULT_APPENDFSYNC, RedisServer
from shared.supervisor import Supervisor


def main() -> int:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    run_dir = Path(env.get("FIXLAB_RUN_DIR", ".run")).resolve()
    try:
        web_port = env_int(env, "FIXLAB_WEB_PORT", 8000, lo=1, hi=65535)
        fix_port = env_int(env, "FIXLAB_FIX_PORT", 9878, lo=1, hi=65535)
        specs = stack_specs(env=env)  # one matcher per shard of FIXLAB_SHARDS
        fsync = env_str(env, "FIXLAB_REDIS_APPENDFSYNC", DEFAULT_APPENDFSYNC)
        if fsync not in APPENDFSYNC:
            raise ConfigError(f"FIXLAB_REDIS_APPENDFSYNC={fsync!r} is not one of {', '.join(APPENDFSYNC)}")
    except ConfigError as exc:
        print(f"fixlab: {exc}", file=sys.stderr)
        return 2
    server: RedisServer | None = None
    if not env.get("REDIS_URL"):
        server = RedisServer(run_dir / "redis", appendonly=True, die_with_parent=True,
                             appendfsync=fsync).start()
        env["REDIS_URL"] = server.url
        print(f"run     | started a private redis-server on {server.url} (AOF in {run_dir / 'redis'}, "
              f"appendfsync {fsync})", flush=True)

    def ready() -> None:
        names = ", ".join(s.name for s in specs)
        print(f"run     | services: {names}", flush=True)
        print(f"run     | FIX acceptor: 127.0.0.1:{fix_port} (SenderCompID FIXLAB)", flush=True)
        print(f"run     | the lab page: http://127.0.0.1:{web_port}/   (Ctrl-C stops everything)",
              flush=True)

    def revive_redis() -> None:
        # What compose's restart policy does for its redis service: a redis-server that died is
        # started again on the same port and AOF; the services reconnect by themselves.
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
        return Supervisor(specs, env, on_ready=ready, watch=revive_redis).run()
    finally:
        if server is not None:  # last: the services above wrote to it until they stopped
            server.stop()
            print("run     | stopped redis-server", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
