"""The lean RESP encoder (shared.resp): redis-py's bytes on the wire, its exceptions for error replies."""

from __future__ import annotations

from typing import Any

import hiredis
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis import exceptions as rex
from redis.connection import Connection

from shared.resp import CommandBuffer, RespConnection, bulk, check, command, error_for, supports


def redis_py_bytes(build: Any) -> list[bytes]:
    """What redis-py would send for the pipeline calls ``build`` makes."""
    pipe = redis.Redis().pipeline(transaction=False)
    build(pipe)
    conn = Connection()
    return [b"".join(conn.pack_command(*args)) for args, _ in pipe.command_stack]


def buffered(build: Any) -> list[bytes]:
    buf = CommandBuffer()
    build(buf)
    return buf.commands


def test_command_is_a_resp_array_of_bulk_strings() -> None:
    assert command(b"SET", "k", b"\r\n\x00") == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\n\r\n\x00\r\n"
    assert command("XADD", "s", 5, 1.5) == b"".join(Connection().pack_command("XADD", "s", 5, 1.5))
    assert command() == b"*0\r\n"
    assert bulk("é") == b"$2\r\n\xc3\xa9\r\n"  # length in bytes, not characters


@pytest.mark.parametrize("bad", [True, None, object(), ["a"]])
def test_arguments_that_are_not_redis_values_are_refused(bad: Any) -> None:
    with pytest.raises(TypeError):
        command(b"SET", b"k", bad)


names = st.one_of(st.text(min_size=1, max_size=20), st.binary(min_size=1, max_size=20))
values = st.one_of(st.binary(max_size=64), st.text(max_size=20), st.integers(-10**12, 10**12))


@given(name=names, fields=st.dictionaries(names, values, min_size=1, max_size=4),
       maxlen=st.one_of(st.none(), st.integers(0, 10**9)), approximate=st.booleans(),
       nomkstream=st.booleans())
def test_xadd_sends_what_redis_py_sends(name: Any, fields: dict[Any, Any], maxlen: int | None,
                                        approximate: bool, nomkstream: bool) -> None:
    def build(p: Any) -> None:
        p.xadd(name, fields, maxlen=maxlen, approximate=approximate, nomkstream=nomkstream)
        p.xadd(name, fields, maxlen=maxlen, approximate=approximate, nomkstream=nomkstream)  # cached head

    assert buffered(build) == redis_py_bytes(build)


def test_the_other_commands_effects_use_send_what_redis_py_sends() -> None:
    def build(p: Any) -> None:
        p.xadd("s", {b"b": b"x"}, id="5-1", minid="3-0", approximate=False, limit=100)
        p.xtrim("s", minid=b"17-3", approximate=True)
        p.xtrim("s", maxlen=10, approximate=False)
        p.xtrim("s", maxlen=10, approximate=True, limit=50)
        p.set("fixlab:k", b"\x00\xff")
        p.xack("s", "g", b"1-0", "2-0")

    assert buffered(build) == redis_py_bytes(build)


def test_command_buffer_refuses_what_redis_py_refuses() -> None:
    buf = CommandBuffer()
    with pytest.raises(redis.DataError):
        buf.xadd("s", {})
    with pytest.raises(redis.DataError):
        buf.xadd("s", {b"b": b"x"}, maxlen=1, minid="1-0")
    with pytest.raises(redis.DataError):
        buf.xtrim("s")
    with pytest.raises(AttributeError):  # a pipeline call effects may not make here: loud
        buf.hset("h", "f", "v")  # type: ignore[attr-defined]
    assert len(buf) == 0


@pytest.mark.parametrize(("text", "kind"), [
    ("ERR wrong number of arguments", rex.ResponseError),
    ("WRONGTYPE Operation against a key holding the wrong kind of value", rex.ResponseError),
    ("LOADING Redis is loading the dataset in memory", rex.BusyLoadingError),
    ("EXECABORT Transaction discarded because of previous errors.", rex.ExecAbortError),
    ("NOAUTH Authentication required.", rex.AuthenticationError),
    ("WRONGPASS invalid username-password pair", rex.AuthenticationError),
    ("READONLY You can't write against a read only replica.", rex.ReadOnlyError),
    ("NOGROUP No such key 's' or consumer group 'g'", rex.ResponseError),
])
def test_error_replies_become_redis_py_exceptions(text: str, kind: type[Exception]) -> None:
    reply = hiredis.ReplyError(text)
    err = error_for(reply)
    assert type(err) is kind
    assert str(err) == text
    with pytest.raises(kind):
        check(reply)
    assert check([b"ok"]) == [b"ok"]


def test_urls() -> None:
    assert supports("redis://127.0.0.1:6379/0")
    assert supports("unix:///tmp/redis.sock")
    assert not supports("rediss://example.org:6380/0")  # TLS stays with redis-py
    with pytest.raises(ValueError, match="rediss"):
        RespConnection("rediss://example.org:6380/0")
    with pytest.raises(ValueError, match="not a number"):
        RespConnection("redis://127.0.0.1:6379/zero")
    assert RespConnection("redis://127.0.0.1:6379/0").sock is None  # connects on first use
