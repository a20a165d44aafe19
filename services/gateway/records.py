"""The intake pipe's records, acceptor -> publisher: a kind byte, a 4-byte length, the payload.

- ``F``: a received order message, the bytes QuickFIX had (the publisher translates it);
- ``C``: a command the gateway makes itself (SessionEnded, EndOfDay), in the schema's encoding; also
  a setting for the publisher itself (StpSetting), applied in order with the orders around it.

Each record is its own kind, so neither end parses FIX to find where a record ends, and a command is
never dressed up as a FIX message. Pure, no I/O: the acceptor writes ``fix_record`` and
``command_record``; the publisher cuts its input back into records with ``split_records``.
"""

from __future__ import annotations

from shared.schema import Command, StpSetting, encode

FIX = ord("F")
COMMAND = ord("C")
HEADER = 5  # kind + length
MAX_RECORD = 256 << 20  # QuickFIX already took the message whole: any size it passes is framed


class RecordError(ValueError):
    """Bytes on the pipe that are not records: the stream cannot be followed past them."""


def fix_record(raw: bytes) -> bytes:
    """A received FIX message as a record."""
    return b"F" + len(raw).to_bytes(4, "big") + raw


def command_record(cmd: Command | StpSetting) -> bytes:
    """A command of the gateway's own as a record."""
    body = encode(cmd)
    return b"C" + len(body).to_bytes(4, "big") + body


def split_records(buf: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """The whole records at the start of ``buf`` as (kind, payload), and the incomplete rest.

    A record of a kind this module does not know is returned as it is (the reader counts and skips
    it); a length past MAX_RECORD means the stream is not records at all: RecordError.
    """
    out: list[tuple[int, bytes]] = []
    pos = 0
    n = len(buf)
    while n - pos >= HEADER:
        size = int.from_bytes(buf[pos + 1:pos + HEADER], "big")
        if size > MAX_RECORD:
            raise RecordError(f"a record of {size} bytes at offset {pos}: not a record stream")
        end = pos + HEADER + size
        if end > n:
            break
        out.append((buf[pos], buf[pos + HEADER:end]))
        pos = end
    return out, buf[pos:]
