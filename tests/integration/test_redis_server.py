"""shared.redis_server: the runner's redis-server comes back on the same port and AOF after kill -9,
and what each fsync policy keeps when only the process dies (docs/RELIABILITY.md, fault 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from shared.redis_server import RedisServer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_a_redis_server_killed_9_comes_back_with_every_acknowledged_write(tmp_path: Path, fsync: str) -> None:
    server = RedisServer(tmp_path, appendonly=True, appendfsync=fsync).start()
    try:
        r = redis.Redis.from_url(server.url)
        assert r.config_get("appendfsync") == {"appendfsync": fsync}
        assert server.revive() is None  # running: nothing to do
        # Every write below was answered, then the process dies at once. With everysec the last
        # second is not yet fsynced, but it is in the kernel's page cache (Redis write(2)s the AOF
        # before it answers): only a crash of the machine itself could lose it.
        for i in range(500):
            r.xadd("s", {"i": i})
        r.close()
        port = server.port
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait()
        assert server.revive() == -9
        assert (server.port, server.restarts) == (port, 1)
        r = redis.Redis.from_url(server.url)
        assert r.xlen("s") == 500
        r.close()
    finally:
        server.stop()


def test_an_unknown_fsync_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="appendfsync='sometimes'"):
        RedisServer(tmp_path, appendonly=True, appendfsync="sometimes")
