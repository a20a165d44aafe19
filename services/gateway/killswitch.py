"""The kill switch, the gateway's side: operator commands from the bus, checked here, acted on here.

A thread reads ``streams.ADMIN_STREAM`` (plain XREAD from where it stood at start: every gateway reads
every command) and acts on ``kill`` and ``unkill`` (other ops belong to other services). Each command's
HMAC is checked here with the operator's token (shared.operator.Verifier): one that fails is answered
"refused" and does nothing, whoever wrote it to the bus.

- ``kill COMPID``: the CompID joins the killed set in Redis (``streams.KILLED_KEY``: a kill stays in
  force across gateway restarts, as at a venue, until ``unkill``), and the guard refuses its new
  orders and replaces from now on (ExecutionReport Rejected with a Text, OrderCancelReject). The
  gateway whose acceptor holds that session puts a MassCancel of every order (ClOrdID
  ``KILL-<req_id>``) on every shard, behind what the session sent before: each open order is
  cancelled and told with an ExecutionReport Canceled. The matcher's OrderMassCancelReport is not
  sent to the session (it asked for nothing): the answer to the operator says how many were cancelled.
- ``unkill COMPID``: out of the set; its new orders are taken again.

Every gateway answers each command; the one holding the session answers twice (``more`` on the
first), the second time once its open orders are cancelled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from shared import streams
from shared.bus import REDIS_ERRORS, publish
from shared.clock import now_ns
from shared.operator import Verifier
from shared.schema import (
    MASS_CANCEL_ALL,
    AdminAnswer,
    AdminCommand,
    MassCancel,
    MassCancelReport,
    decode_batch,
)

log = logging.getLogger(__name__)

OPS = frozenset(("kill", "unkill"))
KILL_PREFIX = "KILL-"
ANSWER_KEEP_S = 300
ANSWER_MAXLEN = 100


class KillSwitch:
    """Operator commands in (own thread); the kill's MassCancelReport out (the events thread)."""

    def __init__(self, r: Any, gateway_id: str, verifier: Verifier, *, holds: Callable[[str], bool],
                 kill: Callable[[str], None], unkill: Callable[[str], None],
                 send_command: Callable[[MassCancel], None], block_ms: int = 500) -> None:
        self.r = r
        self.gateway_id = gateway_id
        self.source = f"gateway {gateway_id}"
        self.verifier = verifier
        self.holds = holds  # whether this gateway's acceptor holds a CompID's session
        self.kill = kill
        self.unkill = unkill
        self.send_command = send_command
        self.block_ms = block_ms
        self.refused = 0
        self._pending: dict[str, str] = {}  # a kill's MassCancel ClOrdID -> the command's req_id
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-admin", daemon=True)
        self._last = "$"

    def load(self) -> set[str]:
        """The CompIDs killed now (in Redis); each is refused from the start. Notes where the stream is."""
        killed = {m.decode() if isinstance(m, bytes) else str(m) for m in self.r.smembers(streams.KILLED_KEY)}
        for comp in sorted(killed):
            self.kill(comp)
            log.warning("killed by the operator (still in force): new orders refused",
                        extra={"session": comp})
        last: Any = self.r.xrevrange(streams.ADMIN_STREAM, count=1)
        self._last = last[0][0].decode() if last else "0-0"
        return killed

    def start(self) -> KillSwitch:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got: Any = self.r.xread({streams.ADMIN_STREAM: self._last}, block=self.block_ms, count=100)
            except REDIS_ERRORS as exc:
                log.warning("admin commands: redis unavailable (%s); again in 1 s", exc)
                self._stop.wait(1.0)
                continue
            for _stream, entries in got or ():
                for entry_id, fields in entries:
                    self._last = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                    try:
                        for msg in decode_batch(fields[streams.BATCH_FIELD]):
                            if isinstance(msg, AdminCommand):
                                self.handle(msg)
                    except Exception:
                        log.exception("admin command %s not handled", self._last)

    def handle(self, cmd: AdminCommand) -> None:
        if cmd.op not in OPS:
            return
        reason = self.verifier.check(cmd)
        if reason is not None:
            self.refused += 1
            log.warning("operator command %s %s refused: %s", cmd.op, cmd.target, reason)
            self.answer(cmd.req_id, False, f"refused: {reason}; nothing was done")
            return
        comp = cmd.target
        if cmd.op == "unkill":
            self.r.srem(streams.KILLED_KEY, comp)
            self.unkill(comp)
            log.warning("unkilled by the operator: new orders taken again", extra={"session": comp})
            self.answer(cmd.req_id, True, f"{comp} unkilled: its new orders are taken again")
            return
        self.r.sadd(streams.KILLED_KEY, comp)
        self.kill(comp)
        if not self.holds(comp):
            self.answer(cmd.req_id, True, f"{comp} killed (no such session here)")
            return
        clordid = KILL_PREFIX + cmd.req_id
        with self._lock:
            self._pending[clordid] = cmd.req_id
        self.send_command(MassCancel(comp, clordid, MASS_CANCEL_ALL, "", 0, self.gateway_id, 0, now_ns()))
        log.warning("killed by the operator: new orders refused, every open order cancelled",
                    extra={"session": comp})
        self.answer(cmd.req_id, True, f"{comp} killed: new orders refused until unkill; cancelling its "
                                      "open orders", more=True)

    def mass_cancel_report(self, ev: MassCancelReport) -> bool:
        """The events thread: True when ``ev`` answers a kill (then it is not sent to the session)."""
        if not ev.clordid.startswith(KILL_PREFIX):
            return False
        with self._lock:
            req_id = self._pending.pop(ev.clordid, None)
        if req_id is None:
            # A kill's report after a restart (the previous process answered its command): still
            # the exchange's own request, never the session's.
            return True
        try:
            self.answer(req_id, True, f"{ev.session}: {ev.affected} open orders cancelled, each told with an "
                                      "ExecutionReport Canceled")
        except REDIS_ERRORS as exc:
            log.warning("cannot answer the operator's kill of %s: %s", ev.session, exc)
        return True

    def answer(self, req_id: str, ok: bool, text: str, *, more: bool = False) -> None:
        stream = streams.admin_answers_stream(req_id)
        with self.r.pipeline(transaction=False) as pipe:
            publish(pipe, stream, [AdminAnswer(req_id, self.source, ok, text, now_ns(), more)], ANSWER_MAXLEN)
            pipe.expire(stream, ANSWER_KEEP_S)
            pipe.execute()
