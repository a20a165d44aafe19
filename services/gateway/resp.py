"""The intake publisher's one Redis job on the shared lean connection: MULTI, XADD per shard, EXEC.

redis-py spends ~75-95 us of CPU per command here (QUICKFIX.md); the publisher would pay that for
MULTI, each XADD and EXEC of every batch, on the gateway's hot path. ``shared.resp`` sends the same
commands as one pre-encoded RESP write and parses the replies with hiredis.
"""

from __future__ import annotations

from collections.abc import Sequence

import hiredis
import redis

from shared import streams
from shared.resp import RespConnection as _SharedConnection
from shared.resp import command

__all__ = ["RespConnection", "command"]

_MULTI = command(b"MULTI")
_EXEC = command(b"EXEC")
_DAY_MS = 86_400_000


class RespConnection(_SharedConnection):
    """The shared lean connection plus the publisher's batched, per-shard XADD transaction."""

    def xadd_batches(self, entries: Sequence[tuple[str, bytes]], maxlen: int,
                     done: tuple[str, int] | None = None) -> list[int]:
        """Append each (stream, encoded batch) in one MULTI/EXEC; return the indexes that failed.

        ``done`` (key, count) is SET in the same transaction (kept a day): how many records the
        gateway's intake has handled, so a restarted publisher skips what is already on the bus.

        Redis does not roll a transaction back: when one XADD fails at EXEC (a key of the wrong type),
        the others are applied. The caller retries only the failed ones, so nothing is doubled.
        A failure before EXEC ran (nothing applied) raises.
        """
        parts = [_MULTI]
        for stream, payload in entries:
            parts.append(command(b"XADD", stream, b"MAXLEN", b"~", maxlen, b"*",
                                 streams.BATCH_FIELD, payload))
        if done is not None:
            parts.append(command(b"SET", done[0], done[1], b"PX", _DAY_MS))
        parts.append(_EXEC)
        replies = self.roundtrip(b"".join(parts), len(parts))
        result = replies[-1]
        if isinstance(result, hiredis.ReplyError):  # EXECABORT: queued commands were refused
            raise redis.ResponseError(str(result))
        for reply in replies[:-1]:
            if isinstance(reply, hiredis.ReplyError):
                raise redis.ResponseError(str(reply))
        if not isinstance(result, list):
            raise redis.ResponseError(f"EXEC did not run: {result!r}")
        return [i for i, item in enumerate(result[:len(entries)]) if isinstance(item, hiredis.ReplyError)]
