"""Send one signed AdminCommand on the bus and wait, with a deadline, for the services' answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from shared import streams
from shared.bus import publish
from shared.health import instances
from shared.schema import AdminAnswer, AdminCommand, decode_batch

ADMIN_MAXLEN = 10_000
POLL_MS = 200  # one blocking read at most this long, so the deadline is kept

Enough = Callable[[list[AdminAnswer]], bool]


def live_instances(r: Any, service: str) -> list[str]:
    """The instances of ``service`` that reported their health recently (shared.health)."""
    return [i.get("instance", "") for i in instances(r) if i.get("service") == service]


def from_each(names: list[str]) -> Enough:
    """Enough once every one of ``names`` answered (an answer's source is "SERVICE INSTANCE")."""
    wanted = set(names)

    def enough(answers: list[AdminAnswer]) -> bool:
        got = {a.source.split(" ", 1)[-1] for a in answers if not a.more}
        return wanted <= got

    return enough


def send(r: Any, cmd: AdminCommand, *, enough: Enough, deadline_s: float) -> list[AdminAnswer]:
    """Publish ``cmd`` and collect its answers until ``enough`` says so or ``deadline_s`` passes."""
    answers_stream = streams.admin_answers_stream(cmd.req_id)
    publish(r, streams.ADMIN_STREAM, [cmd], ADMIN_MAXLEN)
    answers: list[AdminAnswer] = []
    last = "0"
    end = time.monotonic() + deadline_s
    try:
        while not enough(answers):
            left_ms = int((end - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            got: Any = r.xread({answers_stream: last}, block=min(POLL_MS, left_ms), count=100)
            for _stream, entries in got or ():
                for entry_id, fields in entries:
                    last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                    for msg in decode_batch(fields[streams.BATCH_FIELD]):
                        if isinstance(msg, AdminAnswer) and msg.req_id == cmd.req_id:
                            answers.append(msg)
    finally:
        r.delete(answers_stream)
    return answers
