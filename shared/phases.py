"""Set an instrument's trading phase through the bus and wait for the matcher to say it changed.

What ``fixlab admin phase`` does (services/admin/phases.py) and the scenario runner's ``phase`` step
(services/client/scenario): a SetPhase on the orders stream of the instrument's matcher shard (so a
replay of that stream does the same), then, until the deadline, the PhaseChanged the matcher publishes
on its market stream. A SetPhase to the phase an instrument is in changes nothing, so none comes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from shared import streams
from shared.bus import publish
from shared.config import Instrument
from shared.schema import ALL_SYMBOLS, PHASE_NAMES, PhaseChanged, SchemaError, SetPhase, decode_batch

MAXLEN = 1_000_000  # the orders streams' bound (FIXLAB_STREAM_MAXLEN's default)
POLL_MS = 200
PHASES = {name.lower(): code for code, name in PHASE_NAMES.items()}


def phase_of(text: str) -> int | None:
    """The phase named ``text`` (any case, - or _): None when there is no such phase."""
    return PHASES.get(text.strip().lower().replace("-", "_"))


def set_phase(r: Any, instruments: Iterable[Instrument], symbol: str, phase: int, reason: str,
              deadline_s: float) -> list[PhaseChanged]:
    """Send the SetPhase (``symbol`` one of ``instruments`` or ALL_SYMBOLS) to each shard concerned;
    return the PhaseChanged to ``phase`` of each symbol seen before the deadline."""
    shard_of = {i.symbol: i.shard for i in instruments}
    if symbol != ALL_SYMBOLS and symbol not in shard_of:
        raise ValueError(f"unknown symbol {symbol!r}: this exchange trades {', '.join(shard_of)}")
    shards = sorted(set(shard_of.values())) if symbol == ALL_SYMBOLS else [shard_of[symbol]]
    wanted = set(shard_of) if symbol == ALL_SYMBOLS else {symbol}
    markets = {name: _last_id(r, name) for name in map(streams.shard_market_stream, shards)}
    for shard in shards:
        publish(r, streams.orders_stream(shard), [SetPhase(symbol, phase, reason, time.time_ns())], MAXLEN)
    return wait_changes(r, markets, wanted, phase, deadline_s)


def _last_id(r: Any, stream: str) -> str:
    newest: Any = r.xrevrange(stream, count=1)
    if not newest:
        return "0-0"
    entry_id = newest[0][0]
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


def wait_changes(r: Any, last: dict[str, str], wanted: set[str], phase: int,
                 deadline_s: float) -> list[PhaseChanged]:
    """The PhaseChanged to ``phase`` of each ``wanted`` symbol the market streams show (after the ids
    in ``last``) before the deadline."""
    seen: dict[str, PhaseChanged] = {}
    end = time.monotonic() + deadline_s
    while set(seen) < wanted:
        left_ms = int((end - time.monotonic()) * 1000)
        if left_ms <= 0:
            break
        got: Any = r.xread(dict(last), block=min(POLL_MS, left_ms), count=100)
        for stream, entries in got or ():
            name = stream.decode() if isinstance(stream, bytes) else stream
            for entry_id, fields in entries:
                last[name] = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                payload = fields.get(streams.BATCH_FIELD)
                if payload is None:
                    continue
                try:
                    msgs = decode_batch(payload)
                except SchemaError:
                    continue
                for msg in msgs:
                    if (isinstance(msg, PhaseChanged) and msg.symbol in wanted and msg.phase == phase
                            and msg.prev_phase != phase):  # a restatement (after a BookImage) is no change
                        seen.setdefault(msg.symbol, msg)
    return list(seen.values())
