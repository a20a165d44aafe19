"""Read-only views of the bus: every stream, its groups and their pending entries, entries decoded.

msgpack payloads are unreadable in redis-cli; these functions turn them into JSON-ready dicts through
``shared.schema`` (FIX wire bytes with ``|`` for SOH). The ``fixlab`` command (``python -m
shared.streams``) prints them and the web page's bus view can return them as they are.

Only read commands are sent (SCAN, TYPE, XINFO, XLEN, XRANGE, XREVRANGE, XREAD, XPENDING): never a
consumer-group read, which would move a group's cursor and change its pending list.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import redis

from shared import streams
from shared.schema import Message, SchemaError, decode_batch, to_dict

JSON = dict[str, Any]
MAX_COUNT = 10_000  # most entries one call returns: the tool must not pull a million-entry stream


class InspectError(ValueError):
    """A request the bus cannot answer: an unknown stream, entry or group, a malformed id."""


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def readable(value: bytes) -> str:
    """Bytes as text a person can read: SOH as ``|``, other undecodable bytes escaped."""
    return value.replace(b"\x01", b"|").decode("utf-8", "backslashreplace")


def message_view(msg: Message) -> JSON:
    """``schema.to_dict`` with every bytes field (FIX wire records) made readable."""
    out = to_dict(msg)
    for name in msg._FIELDS:
        value = getattr(msg, name)
        if isinstance(value, bytes):
            out[name] = readable(value)
    return out


def entry_view(entry_id: bytes | str, fields: Mapping[bytes, bytes] | None) -> JSON:
    """One stream entry: its messages when it holds a bus batch, else its fields as text.

    An entry whose batch does not decode is shown with the reason and its bytes, never dropped.
    """
    out: JSON = {"id": _text(entry_id)}
    if fields is None:
        out["error"] = "entry was deleted or trimmed"
        return out
    payload = fields.get(streams.BATCH_FIELD)
    others = {_text(k): readable(v) for k, v in fields.items() if k != streams.BATCH_FIELD}
    if payload is not None:
        try:
            out["messages"] = [message_view(m) for m in decode_batch(payload)]
        except SchemaError as exc:
            out["error"] = str(exc)
            out["raw"] = readable(payload)
    if others:
        out["fields"] = others
    return out


def _stream_type(r: redis.Redis, stream: str) -> None:
    kind = _text(r.type(stream))
    if kind == "none":
        raise InspectError(f"no stream named {stream!r} (`fixlab list` shows every stream)")
    if kind != "stream":
        raise InspectError(f"{stream!r} is a Redis {kind}, not a stream")


def _check_id(entry_id: str) -> str:
    ms, sep, seq = entry_id.partition("-")
    if not ms.isdigit() or (sep and not seq.isdigit()):
        raise InspectError(f"{entry_id!r} is not a stream entry id (like 1700000000000-0)")
    return entry_id


def stream_names(r: redis.Redis) -> list[str]:
    """Every stream key in the database, sorted."""
    return sorted(_text(k) for k in r.scan_iter(count=1000, _type="stream"))


def _group_view(group: Mapping[str, Any], consumers: Any) -> JSON:
    lag = group.get("lag")
    return {
        "name": _text(group["name"]),
        "pending": int(group["pending"]),
        "last_delivered_id": _text(group["last-delivered-id"]),
        # Redis 7 reports how far the group is behind the stream's end (None when it cannot tell).
        "lag": None if lag is None else int(lag),
        "consumers": [
            {"name": _text(c["name"]), "pending": int(c["pending"]), "idle_ms": int(c["idle"])}
            for c in consumers
        ],
    }


def _stream_view(stream: str, info: Mapping[str, Any], groups: list[JSON]) -> JSON:
    first = info.get("first-entry")
    last = info.get("last-entry")
    added = info.get("entries-added")
    return {
        "stream": stream,
        "length": int(info["length"]),
        "first_id": _text(first[0]) if first else None,
        "last_id": _text(last[0]) if last else None,
        "last_generated_id": _text(info["last-generated-id"]),
        # Every entry ever appended, trimmed ones included (Redis 7): a rate is its difference.
        "entries_added": None if added is None else int(added),
        "groups": groups,
    }


def stream_info(r: redis.Redis, stream: str) -> JSON:
    """Length, first and last entry id, and every group with its consumers and pending count."""
    _stream_type(r, stream)
    info: Any = r.xinfo_stream(stream)
    groups: Any = r.xinfo_groups(stream)
    return _stream_view(stream, info, [
        _group_view(g, r.xinfo_consumers(stream, _text(g["name"]))) for g in groups])


def list_streams(r: redis.Redis) -> list[JSON]:
    """``stream_info`` of every stream, in two pipelined round trips; a stream deleted meanwhile is
    left out."""
    names = stream_names(r)
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.xinfo_stream(name)
        pipe.xinfo_groups(name)
    replies: list[Any] = pipe.execute(raise_on_error=False)
    found = [(name, info, groups)
             for name, info, groups in zip(names, replies[::2], replies[1::2], strict=True)
             if not isinstance(info, Exception) and not isinstance(groups, Exception)]
    pipe = r.pipeline(transaction=False)
    for name, _, groups in found:
        for g in groups:
            pipe.xinfo_consumers(name, _text(g["name"]))
    consumers = iter(pipe.execute(raise_on_error=False))
    out = []
    for name, info, groups in found:
        views = []
        for g in groups:
            members = next(consumers)
            views.append(_group_view(g, [] if isinstance(members, Exception) else members))
        out.append(_stream_view(name, info, views))
    return out


def show(r: redis.Redis, stream: str, entry_id: str) -> JSON:
    """One entry, decoded."""
    _stream_type(r, stream)
    rows: Any = r.xrange(stream, min=_check_id(entry_id), max=entry_id, count=1)
    if not rows:
        raise InspectError(f"{stream!r} has no entry {entry_id!r} (it may have been trimmed)")
    return entry_view(*rows[0])


def last_entries(r: redis.Redis, stream: str, n: int) -> list[JSON]:
    """The last ``n`` entries, oldest first."""
    if n < 0 or n > MAX_COUNT:
        raise InspectError(f"-n {n}: give 0 to {MAX_COUNT} entries")
    _stream_type(r, stream)
    if n == 0:
        return []
    rows: Any = r.xrevrange(stream, count=n)
    return [entry_view(i, f) for i, f in reversed(rows)]


def last_id(r: redis.Redis, stream: str) -> str:
    """The id of the last entry ever added to ``stream`` ("0-0" while it does not exist)."""
    info: Any = r.xinfo_stream(stream) if _text(r.type(stream)) == "stream" else None
    return _text(info["last-generated-id"]) if info else "0-0"


def follow(r: redis.Redis, stream: str, after: str = "$", block_ms: int = 1000) -> Iterator[JSON | None]:
    """Yield entries added after ``after`` as they arrive; ``None`` after each idle ``block_ms``.

    ``"$"`` means after the last entry there is when following starts. XREAD without a group:
    following moves no cursor and acknowledges nothing.
    """
    after = last_id(r, stream) if after == "$" else _check_id(after)
    while True:
        rows: Any = r.xread({stream: after}, count=500, block=block_ms)
        if not rows:
            yield None
            continue
        for entry_id, fields in rows[0][1]:
            after = _text(entry_id)
            yield entry_view(entry_id, fields)


def pending(r: redis.Redis, group: str, stream: str | None = None, count: int = 100) -> list[JSON]:
    """For every stream that has ``group`` (or just ``stream``): its pending entries.

    Each result has the summary (count, lowest and highest id, count per consumer) and up to
    ``count`` entries with their consumer, idle time and delivery count, oldest first.
    """
    if count < 0 or count > MAX_COUNT:
        raise InspectError(f"--count {count}: give 0 to {MAX_COUNT} entries")
    names = [stream] if stream is not None else stream_names(r)
    if stream is not None:
        _stream_type(r, stream)
    out = []
    for name in names:
        groups: Any = r.xinfo_groups(name)
        if not any(_text(g["name"]) == group for g in groups):
            continue
        summary: Any = r.xpending(name, group)
        rows: Any = r.xpending_range(name, group, min="-", max="+", count=count) if count else []
        out.append({
            "stream": name,
            "group": group,
            "pending": int(summary["pending"]),
            "min_id": _text(summary["min"]) if summary["min"] else None,
            "max_id": _text(summary["max"]) if summary["max"] else None,
            "consumers": {_text(c["name"]): int(c["pending"]) for c in summary["consumers"]},
            "entries": [
                {"id": _text(p["message_id"]), "consumer": _text(p["consumer"]),
                 "idle_ms": int(p["time_since_delivered"]), "deliveries": int(p["times_delivered"])}
                for p in rows
            ],
        })
    if not out:
        where = f"stream {stream!r}" if stream is not None else "any stream"
        raise InspectError(f"no consumer group {group!r} on {where} (`fixlab list` shows the groups)")
    return out
