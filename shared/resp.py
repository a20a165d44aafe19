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
from collections.abc import Mapping
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


def command(*args: Arg) -> bytes:
    """One command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = _arg(a)
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


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
            if sock.gettimeout() != timeout_s:
                sock.settimeout(timeout_s)
            sock.sendall(payload)
            out: list[Any] = []
            reader = self._reader
            while len(out) < replies:
                reply = reader.gets()
                if reply is False:
                    data = sock.recv(262144)
                    if not data:
                        raise ConnectionResetError("redis closed the connection")
                    reader.feed(data)
                    continue
                out.append(reply)
            return out
        except TimeoutError as exc:
            self.close()
            raise rex.TimeoutError(f"redis did not answer in {timeout_s:g}s: {exc}") from None
        except (OSError, hiredis.ProtocolError) as exc:
            self.close()
            raise rex.ConnectionError(f"redis connection lost: {exc}") from None


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
        args: list[Arg] = [b"XADD", name]
        if nomkstream:
            args.append(b"NOMKSTREAM")
        if maxlen is not None and minid is not None:
            raise redis.DataError("only one of maxlen and minid")
        if maxlen is not None or minid is not None:
            args += [b"MAXLEN" if maxlen is not None else b"MINID"]
            if approximate:
                args.append(b"~")
            args.append(maxlen if maxlen is not None else minid)  # type: ignore[arg-type]
            if limit is not None:
                args += [b"LIMIT", limit]
        args.append(id)
        if not fields:
            raise redis.DataError("XADD needs at least one field")
        for k, v in fields.items():
            args += [k, v]
        self.raw(*args)

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
