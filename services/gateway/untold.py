"""What a session was not logged on to hear: kept in Redis, told at its next Logon, once.

After a gateway is killed -9, the new one's start-up sweep ends every CancelOnDisconnect session a
previous life left open (server.Gateway.end_sessions_left_open), and the matcher cancels their resting
orders. Nobody is logged on to hear those Cancelled ExecutionReports yet: with the memory store they
were lost, and a client learned its orders' fate only by asking (35=H). Now the events thread keeps
the report of each such Cancelled event, for a session that keeps its identity across Logons (its
sequence numbers: the CLIENT pools and a user's own sessions by default; not the BENCH, BOT and LAB
sessions, whose CompIDs pass from run to run and visitor to visitor), on a Redis list of its own
(``shared.streams.untold_key``), in the same thread and before the batch is acknowledged: it
survives a restart of the gateway. When the session next logs on, the ``Teller`` thread (never the
engine thread: the Logon callback only queues the CompID) sends each kept report as an unsolicited
ExecutionReport (150=4, 39=4, Text "session ended"), in the session's own version, and removes what
it sent: told once. A session logged on when its Cancelled arrives hears it as before.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Container, Sequence

import redis

from shared import streams
from shared.bus import REDIS_ERRORS

log = logging.getLogger(__name__)

KEEP_S = 7 * 24 * 3600  # a session that never comes back: its list expires a week after the last write
_STOP = ""


class Untold:
    """Keep reports for sessions not logged on (events thread); tell them at Logon (own thread)."""

    def __init__(self, r: redis.Redis, gateway_id: str, sessions: Container[str],
                 send: Callable[[str, str], bool], retry_s: float = 1.0) -> None:
        self.r = r
        self.gateway_id = gateway_id
        self.sessions = sessions  # the sessions whose reports are kept
        self.send = send
        self.retry_s = retry_s
        self.kept = 0
        self.told = 0
        self._logons: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="gateway-untold", daemon=True)

    def wanted(self, session: str) -> bool:
        return session in self.sessions

    def keep(self, items: Sequence[tuple[str, str]]) -> None:
        """Keep ``(session, body)`` reports, in order; raises on a Redis error (the caller's batch
        is then not acknowledged, and read again)."""
        with self.r.pipeline(transaction=False) as pipe:
            for session, body in items:
                key = streams.untold_key(self.gateway_id, session)
                pipe.rpush(key, body)
                pipe.expire(key, KEEP_S)
            pipe.execute()
        self.kept += len(items)

    def logged_on(self, session: str) -> None:
        """The engine thread's Logon callback: queue the session (no Redis here)."""
        if session in self.sessions:
            self._logons.put(session)

    def start(self) -> Untold:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._logons.put(_STOP)
        self._thread.join(timeout_s)

    def tell(self, session: str) -> int:
        """Send ``session`` what it was kept; remove what was sent. How many were sent."""
        key = streams.untold_key(self.gateway_id, session)
        bodies = self.r.lrange(key, 0, -1)
        sent = 0
        for body in bodies:
            text = body.decode() if isinstance(body, bytes) else str(body)
            if not self.send(session, text):
                break  # logged out again: the rest waits for the next Logon
            sent += 1
        if sent:
            self.r.ltrim(key, sent, -1)
            self.told += sent
            log.info("told %d reports it was not logged on to hear", sent, extra={"session": session})
        return sent

    def _run(self) -> None:
        while True:
            session = self._logons.get()
            if session == _STOP:
                return
            try:
                self.tell(session)
            except REDIS_ERRORS as exc:
                log.warning("cannot read what %s was not told (%s); again at its next Logon", session, exc)
            except Exception:
                log.exception("cannot tell %s what it missed", session)
