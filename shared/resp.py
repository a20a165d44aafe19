"""A lean Redis connection: pre-encoded RESP commands over a plain socket, replies parsed by hiredis.

redis-py spends ~80-120 us of CPU per call on this machine (command packing, connection-pool
checkout, response callbacks that build dicts), which dominates a consumer that handles one small
batch at a time. Here a caller encodes its commands once (``command``), sends any number of them
in one write and reads the replies in order: a transaction and the next blocking read cost one
system call each way.

Failures raise redis-py's own exceptions (ConnectionError, TimeoutError, ResponseError and its
subclasses), so callers handle them exactly as any Redis error. Error replies inside a batch come
back as ``hiredis.ReplyError`` values, so that a caller reading a MULTI/EXEC can tell which command
failed; ``check`` turns one into the matching exception.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import hiredis
import redis
from redis import exceptions as rex

Arg = bytes | str | int | float

# Error prefixes redis-py maps to its own subclasses; the rest are ResponseError.
_ERRORS: dict[str, type[rex.RedisError]] = {
    "LOADING": rex.BusyLoadingError,
    "EXECABORT": rex.ExecAbortError,
    "NOSCRIPT": rex.NoScriptError,
    "READONLY": rex.ReadOnlyError,
    "NOAUTH": rex.AuthenticationError,
    "WRONGPASS": rex.AuthenticationError,
    "NOPERM": rex.NoPermissionError,
}


def _arg(a: Arg) -> bytes:
    if isinstance(a, bytes):
        return a
    if isinstance(a, str):
        return a.encode()
    if isinstance(a, bool):  # a bool is an int to Python, but never a Redis argument
        raise TypeError("a bool is not a Redis argument")
    if isinstance(a, int | float):
        return repr(a).encode()
    raise TypeError(f"{type(a).__name__} is not a Redis argument")


def bulk(a: Arg) -> bytes:
    """One argument as a RESP bulk string (to pre-encode the fixed part of a command)."""
    b = a if type(a) is bytes else _arg(a)
    return b"$%d\r\n%s\r\n" % (len(b), b)


def command(*args: Arg) -> bytes:
    """One command as a RESP array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join([bulk(a) for a in args])


@lru_cache(maxsize=4096)
def _xadd_head(name: Arg, id: Arg, maxlen: Arg | None, minid: Arg | None, approximate: bool,
               limit: int | None, nomkstream: bool) -> tuple[int, bytes]:
    args: list[Arg] = [b"XADD", name]
    if nomkstream:
        args.append(b"NOMKSTREAM")
    if maxlen is not None or minid is not None:
        args.append(b"MAXLEN" if maxlen is not None else b"MINID")
        if approximate:
            args.append(b"~")
        args.append(maxlen if maxlen is not None else minid)  # type: ignore[arg-type]
        if limit is not None:
            args += [b"LIMIT", limit]
    args.append(id)
    return len(args), b"".join(bulk(a) for a in args)


def error_for(reply: hiredis.ReplyError) -> rex.RedisError:
    """The redis-py exception for an error reply."""
    text = str(reply)
    return _ERRORS.get(text.split(" ", 1)[0], rex.ResponseError)(text)


def check(reply: Any) -> Any:
    """Return ``reply``, or raise it when it is an error reply."""
    if isinstance(reply, hiredis.ReplyError):
        raise error_for(reply)
    return reply


def supports(url: str) -> bool:
    """True for the URLs this connection speaks (redis:// and unix://; TLS is left to redis-py)."""
    return urlparse(url).scheme in ("redis", "unix")


class RespConnection:
    """One socket to Redis; connects on first use and again on the next call after a failure.

    Not thread-safe: one thread owns it (a consumer loop).
    """

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in ("redis", "unix"):
            raise ValueError(f"{parsed.scheme}:// is not supported by the lean connection "
                             f"(redis:// or unix://)")
        query = parse_qs(parsed.query)
        db = query["db"][0] if "db" in query else (
            parsed.path.lstrip("/") if parsed.scheme == "redis" else "")
        if db and not db.isdigit():
            raise ValueError(f"database {db!r} in the Redis URL is not a number")
        self._parsed = parsed
        self._db = int(db or 0)
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self._reader = hiredis.Reader()
        self._buf = bytearray(262144)  # received into, then copied by hiredis: no allocation per read
        self._timeout_s = timeout_s  # what the socket is set to

    def _connect(self) -> socket.socket:
        p = self._parsed
        try:
            if p.scheme == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout_s)
                sock.connect(p.path)
            else:
                sock = socket.create_connection((p.hostname or "127.0.0.1", p.port or 6379),
                                                self.timeout_s)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except TimeoutError as exc:
            raise rex.TimeoutError(f"timed out connecting to redis: {exc}") from None
        except OSError as exc:
            raise rex.ConnectionError(f"cannot connect to redis: {exc}") from None
        sock.settimeout(None)
        _set_timeouts(sock, self.timeout_s)
        self._timeout_s = self.timeout_s
        self.sock = sock
        self._reader = hiredis.Reader()
        setup: list[bytes] = []
        if p.password is not None:
            user = unquote(p.username) if p.username else "default"
            setup.append(command(b"AUTH", user, unquote(p.password)))
        if self._db:
            setup.append(command(b"SELECT", self._db))
        if setup:
            try:
                for reply in self._exchange(sock, b"".join(setup), len(setup), self.timeout_s):
                    check(reply)
            except rex.RedisError:
                self.close()
                raise
        return sock

    def close(self) -> None:
        """Close the socket; the next call connects again."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def roundtrip(self, payload: bytes, replies: int, *, timeout_s: float | None = None) -> list[Any]:
        """Send ``payload`` (one or more commands) and read ``replies`` replies, in order.

        Error replies are returned as ``hiredis.ReplyError`` values. ``timeout_s`` bounds the wait
        for the replies (give a blocking read its block time plus a margin). Any failure on the
        socket closes it: the replies still owed would be misread on the next call.
        """
        sock = self.sock or self._connect()
        return self._exchange(sock, payload, replies, self.timeout_s if timeout_s is None else timeout_s)

    def call(self, *args: Arg) -> Any:
        """Run one command; raise when Redis answers with an error."""
        return check(self.roundtrip(command(*args), 1)[0])

    def _exchange(self, sock: socket.socket, payload: bytes, replies: int, timeout_s: float) -> list[Any]:
        try:
            if timeout_s != self._timeout_s:
                _set_timeouts(sock, timeout_s)
                self._timeout_s = timeout_s
            sock.sendall(payload)
            out: list[Any] = []
            reader, buf = self._reader, self._buf
            while len(out) < replies:
                reply = reader.gets()
                if reply is False:
                    n = sock.recv_into(buf)
                    if not n:
                        raise ConnectionResetError("redis closed the connection")
                    reader.feed(buf, 0, n)  # type: ignore[arg-type]  # any buffer will do
                    continue
                out.append(reply)
            return out
        except (BlockingIOError, TimeoutError) as exc:  # SO_RCVTIMEO/SO_SNDTIMEO ran out
            self.close()
            raise rex.TimeoutError(f"redis did not answer in {timeout_s:g}s: {exc}") from None
        except (OSError, hiredis.ProtocolError) as exc:
            self.close()
            raise rex.ConnectionError(f"redis connection lost: {exc}") from None


def _set_timeouts(sock: socket.socket, timeout_s: float) -> None:
    # Kernel time-outs on a blocking socket: a Python-level time-out would poll() before every
    # send and receive, two more system calls per round trip.
    whole = int(timeout_s)
    tv = struct.pack("ll", whole, int((timeout_s - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


class CommandBuffer:
    """Records commands in RESP through the subset of redis-py's pipeline API that effects use.

    ``Effects.extra`` callables take a pipeline; given a CommandBuffer instead, the same callables
    queue pre-encoded commands for a RespConnection. A method not defined here fails loudly.
    """

    __slots__ = ("commands",)

    def __init__(self) -> None:
        self.commands: list[bytes] = []

    def __len__(self) -> int:
        return len(self.commands)

    def raw(self, *args: Arg) -> None:
        """Queue any command."""
        self.commands.append(command(*args))

    def xadd(self, name: Arg, fields: Mapping[Arg, Arg], id: Arg = "*", maxlen: int | None = None,
             approximate: bool = True, nomkstream: bool = False, minid: Arg | None = None,
             limit: int | None = None) -> None:
        if maxlen is not None and minid is not None:
            raise redis.DataError("only one of maxlen and minid")
        if not fields:
            raise redis.DataError("XADD needs at least one field")
        # The head (stream, trimming, id) repeats batch after batch: encoded once.
        n, head = _xadd_head(name, id, maxlen, minid, approximate, limit, nomkstream)
        parts = [b"*%d\r\n" % (n + 2 * len(fields)), head]
        for k, v in fields.items():
            parts.append(bulk(k))
            parts.append(bulk(v))
        self.commands.append(b"".join(parts))

    def xtrim(self, name: Arg, maxlen: int | None = None, approximate: bool = True,
              minid: Arg | None = None, limit: int | None = None) -> None:
        if (maxlen is None) == (minid is None):
            raise redis.DataError("exactly one of maxlen and minid")
        args: list[Arg] = [b"XTRIM", name, b"MAXLEN" if maxlen is not None else b"MINID"]
        if approximate:
            args.append(b"~")
        args.append(maxlen if maxlen is not None else minid)  # type: ignore[arg-type]
        if limit is not None:
            args += [b"LIMIT", limit]
        self.raw(*args)

    def xack(self, name: Arg, groupname: Arg, *ids: Arg) -> None:
        self.raw(b"XACK", name, groupname, *ids)

    def set(self, name: Arg, value: Arg) -> None:
        self.raw(b"SET", name, value)
