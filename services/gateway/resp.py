"""A lean Redis connection for the writer's one job: MULTI, XADD per shard, EXEC.

redis-py spends ~75-95 us of CPU per command here (QUICKFIX.md); the writer pays that for MULTI, each
XADD and EXEC of every batch, on the gateway's hot path. This sends the same commands as one
pre-encoded RESP write and parses the replies with hiredis, ~16 us per batch. Failures raise
redis-py's own ConnectionError/ResponseError so callers handle them as any Redis error.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from urllib.parse import unquote, urlparse

import hiredis
import redis

from shared import streams


def _bulk(item: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(item), item)


def command(*args: bytes) -> bytes:
    """One RESP array command."""
    return b"*%d\r\n" % len(args) + b"".join(_bulk(a) for a in args)


class RespConnection:
    """One socket to Redis (redis:// or unix:// URLs); reconnects on the next call after a failure."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in ("redis", "unix"):
            raise ValueError(f"{parsed.scheme}:// is not supported by the lean writer")
        self.parsed = parsed
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self.reader = hiredis.Reader()

    def _connect(self) -> socket.socket:
        p = self.parsed
        try:
            if p.scheme == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout_s)
                sock.connect(p.path)
            else:
                sock = socket.create_connection((p.hostname or "127.0.0.1", p.port or 6379), self.timeout_s)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise redis.ConnectionError(f"cannot connect to redis: {exc}") from None
        self.sock = sock
        self.reader = hiredis.Reader()
        setup: list[bytes] = []
        if p.password is not None:
            user = unquote(p.username) if p.username else "default"
            setup.append(command(b"AUTH", user.encode(), unquote(p.password).encode()))
        db = (p.path or "/0").lstrip("/") if p.scheme == "redis" else ""
        if db and db != "0":
            setup.append(command(b"SELECT", db.encode()))
        if setup:
            for reply in self.roundtrip(b"".join(setup), len(setup)):
                if isinstance(reply, hiredis.ReplyError):
                    self.close()
                    raise redis.ResponseError(str(reply))
        return sock

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def roundtrip(self, payload: bytes, replies: int) -> list[object]:
        """Send ``payload`` and read ``replies`` replies; errors come back as hiredis.ReplyError."""
        sock = self.sock or self._connect()
        try:
            sock.sendall(payload)
            out: list[object] = []
            reader = self.reader
            while len(out) < replies:
                reply = reader.gets()
                if reply is False:
                    data = sock.recv(65536)
                    if not data:
                        raise OSError("redis closed the connection")
                    reader.feed(data)
                    continue
                out.append(reply)
            return out
        except OSError as exc:
            self.close()
            raise redis.ConnectionError(f"redis connection lost: {exc}") from None

    def xadd_batches(self, entries: Sequence[tuple[str, bytes]], maxlen: int) -> list[int]:
        """Append each (stream, encoded batch) in one MULTI/EXEC; return the indexes that failed.

        Redis does not roll a transaction back: when one XADD fails at EXEC (a key of the wrong type),
        the others are applied. The caller retries only the failed ones, so nothing is doubled.
        A failure before EXEC ran (nothing applied) raises.
        """
        ml = str(maxlen).encode()
        parts = [b"*1\r\n$5\r\nMULTI\r\n"]
        for stream, payload in entries:
            parts.append(command(b"XADD", stream.encode(), b"MAXLEN", b"~", ml, b"*",
                                 streams.BATCH_FIELD, payload))
        parts.append(b"*1\r\n$4\r\nEXEC\r\n")
        replies = self.roundtrip(b"".join(parts), len(entries) + 2)
        result = replies[-1]
        if isinstance(result, hiredis.ReplyError):  # EXECABORT: queued commands were refused
            raise redis.ResponseError(str(result))
        for reply in replies[:-1]:
            if isinstance(reply, hiredis.ReplyError):
                raise redis.ResponseError(str(reply))
        if not isinstance(result, list):
            raise redis.ResponseError(f"EXEC did not run: {result!r}")
        return [i for i, item in enumerate(result) if isinstance(item, hiredis.ReplyError)]
