"""The lean RESP connection against a real redis-server: replies, errors, time-outs, reconnects, URLs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import hiredis
import pytest
import redis
from redis import exceptions as rex

from shared.redis_server import RedisServer, free_port
from shared.resp import RespConnection, command
from tests.helpers import eventually

pytestmark = pytest.mark.integration


def test_pipelined_commands_get_their_replies_in_order(redis_url: str) -> None:
    conn = RespConnection(redis_url)
    try:
        payload = b"".join([command(b"SET", b"k", b"v\r\n\x00"), command(b"GET", b"k"),
                            command(b"INCRBY", b"n", 5), command(b"LPUSH", b"k", b"x"),
                            command(b"GET", b"missing")])
        ok, got, n, wrong, missing = conn.roundtrip(payload, 5)
        assert (ok, got, n, missing) == (b"OK", b"v\r\n\x00", 5, None)
        assert isinstance(wrong, hiredis.ReplyError)  # an error inside a batch is a value...
        with pytest.raises(rex.ResponseError, match="WRONGTYPE"):
            conn.call(b"LPUSH", b"k", b"x")  # ...and raised by call()
        assert conn.call(b"PING") == b"PONG"  # the connection is still in step
    finally:
        conn.close()


def test_a_large_reply_arrives_whole(redis_url: str) -> None:
    conn = RespConnection(redis_url)
    try:
        blob = bytes(range(256)) * 4096  # 1 MiB: several reads of the receive buffer
        conn.call(b"SET", b"big", blob)
        assert conn.call(b"GET", b"big") == blob
    finally:
        conn.close()


def test_a_time_out_closes_the_connection_and_the_next_call_reconnects(redis_url: str) -> None:
    conn = RespConnection(redis_url, timeout_s=0.2)
    try:
        with pytest.raises(rex.TimeoutError):
            conn.call(b"BLPOP", b"nothing", b"2")
        assert conn.sock is None  # the BLPOP reply still owed would be misread later
        assert conn.call(b"PING") == b"PONG"
        # A longer wait for one call (a blocking read) does not time out.
        assert conn.roundtrip(command(b"BLPOP", b"nothing", b"0.3"), 1, timeout_s=2)[0] is None
    finally:
        conn.close()


def test_a_restarted_server_is_reached_again(fresh_redis: RedisServer) -> None:
    conn = RespConnection(fresh_redis.url, timeout_s=1)
    try:
        conn.call(b"SET", b"k", b"1")
        fresh_redis.kill()
        with pytest.raises(rex.ConnectionError):
            conn.call(b"GET", b"k")
        with pytest.raises(rex.ConnectionError, match="cannot connect"):
            conn.call(b"GET", b"k")
        fresh_redis.start()
        assert eventually(lambda: conn.call(b"PING"), what="redis back") == b"PONG"
    finally:
        conn.close()


def test_database_and_password_from_the_url(fresh_redis: RedisServer) -> None:
    admin = redis.Redis(port=fresh_redis.port)
    admin.config_set("requirepass", "s3cr:t")
    admin = redis.Redis(port=fresh_redis.port, password="s3cr:t")
    try:
        conn = RespConnection(f"redis://:s3cr%3At@127.0.0.1:{fresh_redis.port}/3")
        conn.call(b"SET", b"where", b"db3")
        conn.close()
        assert redis.Redis(port=fresh_redis.port, password="s3cr:t", db=3).get("where") == b"db3"
        assert admin.get("where") is None
        wrong = RespConnection(f"redis://default:nope@127.0.0.1:{fresh_redis.port}/0")
        with pytest.raises(rex.AuthenticationError):
            wrong.call(b"PING")
        assert wrong.sock is None
        anonymous = RespConnection(f"redis://127.0.0.1:{fresh_redis.port}/0")
        with pytest.raises(rex.AuthenticationError):
            anonymous.call(b"GET", b"where")
        anonymous.close()
    finally:
        admin.config_set("requirepass", "")


@pytest.fixture
def unix_redis(tmp_path: Path) -> Iterator[Path]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    sock = tmp_path / "redis.sock"
    proc = subprocess.Popen([binary, "--port", str(free_port()), "--bind", "127.0.0.1",
                             "--unixsocket", str(sock), "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        eventually(lambda: redis.Redis(unix_socket_path=str(sock)).ping(), what="redis on a unix socket")
        yield sock
    finally:
        proc.terminate()
        proc.wait(10)


def test_unix_socket(unix_redis: Path) -> None:
    conn = RespConnection(f"unix://{unix_redis}?db=2")
    try:
        conn.call(b"SET", b"k", b"over a unix socket")
        assert redis.Redis(unix_socket_path=str(unix_redis), db=2).get("k") == b"over a unix socket"
    finally:
        conn.close()
