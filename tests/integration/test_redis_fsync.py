"""What each AOF fsync policy promises, read from redis-server's own system calls (strace).

``always`` (the default of `make run` and compose): redis-server writes the command to the AOF,
fdatasyncs it and only then writes the reply: an acknowledged write is on disk, a power cut cannot
take it. ``everysec``: the reply goes out after the write(2) to the AOF but before any flush (a
background thread flushes about once a second): acknowledged writes sit in the page cache for up to
about a second, which a crash of redis-server alone does not lose (test_redis_server.py) and a crash
of the machine does. docs/RELIABILITY.md, fault 4.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import redis

from shared.redis_server import RedisServer
from tests.helpers import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("strace") is None,
                       reason="needs strace to see redis-server's system calls"),
]

LINE = re.compile(r"^(\d+) +(write|fdatasync|fsync)\((\d+)(?:, \"(.{0,40}))?")


def traced_writes(tmp_path: Path, fsync: str, n: int) -> list[tuple[int, str, int, str]]:
    """(thread, call, fd, first bytes) of redis-server's writes and flushes while ``n`` XADDs, each
    awaited, are answered."""
    server = RedisServer(tmp_path / "redis", appendonly=True, appendfsync=fsync).start()
    out = tmp_path / "strace.txt"
    r = redis.Redis.from_url(server.url)
    assert server.proc is not None
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=write,fdatasync,fsync", "-o", str(out),
                               "-p", str(server.proc.pid)], stderr=subprocess.PIPE)
    try:
        # Attached once a PING's reply shows up in the trace; strace exits at once when it may not.
        def attached() -> bool:
            return tracer.poll() is not None or bool(r.ping() and out.exists() and "+PONG" in out.read_text())

        eventually(attached, timeout=20, what="strace attached")
        if tracer.poll() is not None:
            assert tracer.stderr is not None
            pytest.skip(f"strace cannot attach to redis-server here: {tracer.stderr.read().decode()[:200]}")
        for i in range(n):
            r.xadd("s", {"i": i})
        r.set("done", 1)
        eventually(lambda: "+OK" in out.read_text(), timeout=20, what="the last reply traced")
    finally:
        if tracer.poll() is None:
            tracer.terminate()
        tracer.wait(10)
        assert tracer.stderr is not None
        tracer.stderr.close()
        r.close()
        server.stop()
    calls = []
    for line in out.read_text().splitlines():
        m = LINE.match(line)
        if m:
            calls.append((int(m.group(1)), m.group(2), int(m.group(3)), m.group(4) or ""))
    return calls


def split(calls: list[tuple[int, str, int, str]]) -> tuple[int, int, int]:
    """The AOF's fd, the client's fd and redis-server's main thread, from the XADD traffic."""
    aof = next(c for c in calls if c[1] == "write" and "XADD" in c[3])
    reply = next(c for c in calls if c[1] == "write" and c[3].startswith("$") and c[2] != aof[2])
    assert aof[0] == reply[0]
    return aof[2], reply[2], aof[0]


def test_always_flushes_every_write_before_its_reply(tmp_path: Path) -> None:
    calls = traced_writes(tmp_path, "always", 50)
    aof, client, main = split(calls)
    replies = 0
    unflushed = False
    for thread, call, fd, head in calls:
        if call == "write" and fd == aof:
            unflushed = True
        elif call in ("fdatasync", "fsync") and fd == aof and thread == main:
            unflushed = False
        elif call == "write" and fd == client and head.startswith("$"):
            replies += 1
            assert not unflushed, "a reply went out before its AOF write was flushed"
    assert replies == 50


def test_everysec_replies_before_the_flush(tmp_path: Path) -> None:
    calls = traced_writes(tmp_path, "everysec", 50)
    _aof, client, main = split(calls)
    replies = [i for i, c in enumerate(calls) if c[1] == "write" and c[2] == client and c[3].startswith("$")]
    assert len(replies) == 50
    # The thread that answers never flushes: each answered write waits for the background flush.
    assert not [c for c in calls if c[1] in ("fdatasync", "fsync") and c[0] == main]
