"""Split a byte stream into whole FIX messages: pure, no I/O (the tap's parser).

A whole message is ``8=<BeginString>\\x01 9=<BodyLength>\\x01 <body> 10=<3 digits>\\x01`` where the
body is exactly BodyLength bytes. Bytes that cannot start such a message are returned as a
``garbage`` frame (the tap still forwards them unchanged: it never edits the wire); a message that
is not complete yet stays in the remainder until more bytes arrive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SOH = b"\x01"
START = b"8=FIX"
MAX_MESSAGE = 1 << 20  # a BodyLength beyond this is treated as garbage: the tap's buffers stay bounded

_HEADER = re.compile(rb"8=[^\x01=]{1,16}\x019=(\d{1,7})\x01")
_TRAILER = re.compile(rb"10=\d{3}\x01")
_HEADER_MAX = 2 + 16 + 1 + 2 + 7 + 1


@dataclass(frozen=True, slots=True)
class Frame:
    raw: bytes
    whole: bool  # True for a whole FIX message, False for bytes that are not one


def _next_start(buf: bytes, after: int) -> int:
    """Where the next possible message starts, keeping a tail that may be the start of one."""
    found = buf.find(START, after)
    if found >= 0:
        return found
    # Keep a suffix that could be the first bytes of "8=FIX" arriving in the next read.
    for keep in range(len(START) - 1, 0, -1):
        if len(buf) - keep >= after and buf.endswith(START[:keep]):
            return len(buf) - keep
    return len(buf)


def split_frames(buf: bytes, *, max_message: int = MAX_MESSAGE) -> tuple[list[Frame], bytes]:
    """Return the frames at the start of ``buf`` and the incomplete remainder."""
    frames: list[Frame] = []
    pos = 0
    n = len(buf)
    while pos < n:
        if not buf.startswith(START[: min(len(START), n - pos)], pos):
            end = _next_start(buf, pos + 1)
            frames.append(Frame(buf[pos:end], False))
            pos = end
            continue
        header = _HEADER.match(buf, pos)
        if header is None:
            soh_seen = buf.count(SOH, pos, min(n, pos + _HEADER_MAX))
            if n - pos < _HEADER_MAX and soh_seen < 2:
                break  # the header may still be arriving
            end = _next_start(buf, pos + 1)
            frames.append(Frame(buf[pos:end], False))
            pos = end
            continue
        body_len = int(header.group(1))
        if body_len > max_message:
            end = _next_start(buf, pos + 1)
            frames.append(Frame(buf[pos:end], False))
            pos = end
            continue
        body_end = header.end() + body_len
        total_end = body_end + 7
        if total_end > n:
            break
        if _TRAILER.match(buf, body_end) is None:
            end = _next_start(buf, pos + 1)
            frames.append(Frame(buf[pos:end], False))
            pos = end
            continue
        frames.append(Frame(buf[pos:total_end], True))
        pos = total_end
    return frames, buf[pos:]


def field(raw: bytes, tag: int) -> str | None:
    """The first value of ``tag`` in a raw message, or None (fields are SOH separated)."""
    key = b"%d=" % tag
    if raw.startswith(key):
        start = len(key)
    else:
        found = raw.find(SOH + key)
        if found < 0:
            return None
        start = found + 1 + len(key)
    end = raw.find(SOH, start)
    return raw[start:end if end >= 0 else len(raw)].decode("latin-1")


def fields(raw: bytes) -> list[tuple[int, str]]:
    """Every (tag, value) of a raw message in order; malformed pieces are skipped."""
    out: list[tuple[int, str]] = []
    for part in raw.split(SOH):
        tag, sep, value = part.partition(b"=")
        if sep and tag.isdigit():
            out.append((int(tag), value.decode("latin-1")))
    return out
