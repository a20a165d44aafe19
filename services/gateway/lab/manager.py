"""LabManager: the gateway's lab sessions, driven over the bus.

Threads: one consumer of LAB_START_STREAM (group GATEWAY_GROUP, so any one gateway takes a start),
one of this gateway's lab_commands_stream, one housekeeper (publishes each session's LabState when
it changes, ends sessions past their lifetime or logon timeout, renews CompID claims), the outbox
writer, the taps' asyncio loop, and one QuickFIX initiator per session. A session ends on a short
thread of its own, since stopping an engine waits for its Logout.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from services.gateway.lab.claims import CompIdClaims
from services.gateway.lab.outbox import Outbox
from services.gateway.lab.session import CONNECTING, ENDED, LabSession, SetStp
from services.gateway.lab.settings import LabSettings
from shared import streams
from shared.bus import REDIS_ERRORS, Effects, Entry, StreamConsumer, connect, wait_for_redis
from shared.clock import now_ns
from shared.compids import LAB_COMP_IDS
from shared.fix.orders import CommandError
from shared.fix.tap import Tap, TapLoop
from shared.fix.versions import VERSIONS
from shared.schema import LabCommand, LabNotice, LabStart, LabState, Message, to_dict

log = logging.getLogger(__name__)

LAB_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
TICK_S = 0.2
LOGOUT_GRACE_S = 10.0  # a Logout unanswered this long ends the session anyway


class LabManager:
    """Start, drive and end visitors' lab sessions for one gateway (``start`` returns at once)."""

    def __init__(self, redis_url: str, gateway_id: str, exchange_host: str, exchange_port: int, *,
                 settings: LabSettings | None = None, set_stp: SetStp | None = None,
                 comp_ids: Sequence[str] = LAB_COMP_IDS,
                 version_comp_ids: Mapping[str, Sequence[str]] | None = None,
                 version_dictionaries: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.redis_url = redis_url
        self.gateway_id = gateway_id
        self.exchange_host = exchange_host
        self.exchange_port = exchange_port
        self.settings = settings or LabSettings.from_env()
        self.set_stp = set_stp  # the gateway's: a session's self-trade prevention (the lab page sets it)
        # The lab CompIDs this gateway's acceptor accepts: its own range when several gateways run,
        # so two gateways never hand out the same one (each also claims it in Redis, claims.py).
        self.comp_ids = tuple(comp_ids)
        # The pools of the other versions a visitor may choose ("4.2", "5.0SP2"; FIX 4.4's is comp_ids).
        self.version_comp_ids = {name: tuple(pool) for name, pool in (version_comp_ids or {}).items()
                                 if name != "4.4" and pool}
        # Their dictionaries, as QuickFIX settings (the gateway's acceptor files of that version);
        # a version not given validates with the installed files.
        self.version_dictionaries = dict(version_dictionaries or {})
        self._sessions: dict[str, LabSession] = {}
        self._ending: set[str] = set()
        self._logout_sent: dict[str, float] = {}
        self._last_state: dict[str, LabState] = {}
        self._lock = threading.Lock()
        self._publish_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._enders: list[threading.Thread] = []
        self.started_count = 0
        self.refused_count = 0
        self.ended_count = 0
        self.notice_count = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LabManager:
        s = self.settings
        self.r = connect(self.redis_url)
        wait_for_redis(self.r)
        self.claims = CompIdClaims(self.r, s.claim_ttl_s, self.comp_ids)
        self.version_claims = {"4.4": self.claims, **{
            name: CompIdClaims(self.r, s.claim_ttl_s, pool, streams.lab_compid_cursor_key(name))
            for name, pool in self.version_comp_ids.items()}}
        self.outbox = Outbox(connect(self.redis_url), s.stream_maxlen).start()
        self.taps = TapLoop().start()
        # One start per read: with several gateways in the group, a burst of starts is dealt out
        # (each gateway takes one, and the others, blocked meanwhile, the next ones) instead of a
        # whole batch landing on whichever gateway read first.
        starts = StreamConsumer(connect(self.redis_url), streams.LAB_START_STREAM, streams.GATEWAY_GROUP,
                                self.gateway_id, count=1, maxlen=s.stream_maxlen)
        commands = StreamConsumer(connect(self.redis_url), streams.lab_commands_stream(self.gateway_id),
                                  streams.GATEWAY_GROUP, self.gateway_id, count=100,
                                  maxlen=s.stream_maxlen, start_id="$")
        self._spawn("lab-starts", lambda: starts.run(self._on_starts, self._stop))
        self._spawn("lab-commands", lambda: commands.run(self._on_commands, self._stop))
        self._spawn("lab-housekeeper", self._housekeep)
        log.info("lab sessions ready: gateway %s, exchange %s:%d, heartbeat %ds, lifetime %.0fs, max %d",
                 self.gateway_id, self.exchange_host, self.exchange_port, s.heartbeat_s, s.lifetime_s,
                 s.max_sessions)
        return self

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Log out every lab session, then stop every thread (blocks a few seconds at most)."""
        if not hasattr(self, "outbox"):
            return  # never started
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(10)
        with self._lock:
            live = list(self._sessions.values())
        for session in live:
            self._end(session, "the gateway is stopping")
        with self._lock:
            enders = list(self._enders)
        for thread in enders:
            thread.join(15)
        self.outbox.stop()
        self.taps.stop()
        self.r.close()

    def counters(self) -> dict[str, int]:
        """Counters for the gateway's health report."""
        return {"lab_live": len(self._sessions), "lab_started": self.started_count,
                "lab_refused": self.refused_count, "lab_ended": self.ended_count,
                "lab_notices": self.notice_count, "lab_written": self.outbox.written,
                "lab_dropped": self.outbox.dropped}

    def live_lab_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._sessions)

    # ------------------------------------------------------------------ output

    def _live_ttl_s(self, session: LabSession) -> float:
        return max(0.0, (session.expires_at - now_ns()) / 1e9) + self.settings.stream_ttl_s + 60

    def _emit(self, session: LabSession, msg: Message) -> None:
        self.outbox.put(session.lab_id, msg, self._live_ttl_s(session))
        self._wake.set()

    def _notice(self, lab_id: str, text: str, level: str = "error") -> None:
        self.notice_count += 1
        ttl = self.settings.stream_ttl_s
        with self._lock:
            session = self._sessions.get(lab_id)
        if session is not None:
            ttl = int(self._live_ttl_s(session))
        self.outbox.put(lab_id, LabNotice(lab_id, level, text, now_ns()), ttl)

    def _refuse(self, lab_id: str, text: str) -> None:
        self.refused_count += 1
        self._notice(lab_id, text)
        self.outbox.put(lab_id, LabState(lab_id, self.gateway_id, "", ENDED, 0, 0, 0, 0,
                                         self.settings.heartbeat_s, 0, False, False, (), text, now_ns()),
                        self.settings.stream_ttl_s)

    def _publish_state(self, session: LabSession, *, final: bool = False) -> None:
        # One lock, so that no state computed before the final one is queued after it.
        with self._publish_lock:
            if session.final_published:
                return
            state = session.state()
            key = dataclasses.replace(state, ts=0)
            if not final and self._last_state.get(session.lab_id) == key:
                return
            self._last_state[session.lab_id] = key
            ttl = self.settings.stream_ttl_s if final else self._live_ttl_s(session)
            self.outbox.put(session.lab_id, state, ttl)
            session.final_published = final

    # ------------------------------------------------------------------ bus handlers

    @staticmethod
    def _deadletter(effects: Effects, stream: str, entry_id: bytes, reason: str, msg: Message) -> None:
        log.error("lab: %s %s: %s", stream, entry_id.decode(), reason)
        fields = {b"stream": stream, b"id": entry_id, b"group": streams.GATEWAY_GROUP,
                  b"reason": reason, b"payload": repr(to_dict(msg))[:4096]}
        # Another slot than the stream's: on a Redis Cluster it goes just before the acknowledgement.
        effects.elsewhere.append(lambda pipe: pipe.xadd(streams.DEADLETTER_STREAM, fields, maxlen=10_000,
                                                        approximate=True))

    def _on_starts(self, batch: list[Entry]) -> Effects:
        effects = Effects()
        for entry_id, msgs in batch:
            for msg in msgs:
                if not isinstance(msg, LabStart):
                    self._deadletter(effects, streams.LAB_START_STREAM, entry_id,
                                     f"{type(msg).__name__} is not a LabStart", msg)
                elif not LAB_ID.match(msg.lab_id):
                    self._deadletter(effects, streams.LAB_START_STREAM, entry_id,
                                     "lab_id must be 1-64 of A-Z a-z 0-9 _ . : -", msg)
                else:
                    # Nothing may escape: the consumer thread would end with it.
                    try:
                        self._start_session(msg)
                    except REDIS_ERRORS as exc:
                        log.warning("lab %s: redis unavailable while starting (%s)", msg.lab_id, exc)
                        self._refuse(msg.lab_id,
                                     "the exchange's bus is unavailable; log on again in a moment")
                    except Exception as exc:
                        log.exception("lab %s: could not start", msg.lab_id)
                        self._refuse(msg.lab_id, f"the lab session could not start: {exc}")
        return effects

    def _start_session(self, start: LabStart) -> None:
        lab_id = start.lab_id
        s = self.settings
        with self._lock:
            existing = self._sessions.get(lab_id)
            live = len(self._sessions)
        if existing is not None:
            self._notice(lab_id, "this lab session is already running", "info")
            self._last_state.pop(lab_id, None)
            self._wake.set()
            return
        if self._stop.is_set():
            self._refuse(lab_id, "the gateway is stopping; log on again in a moment")
            return
        age_s = (now_ns() - start.ts) / 1e9
        if age_s > s.start_max_age_s:
            self._refuse(lab_id, f"the start request waited {age_s:.0f}s for a gateway; log on again")
            return
        if live >= s.max_sessions:
            self._refuse(lab_id, f"too many lab sessions on this gateway ({s.max_sessions} at most); "
                                 "try again in a few minutes")
            return
        version = VERSIONS.get(start.fix_version or "4.4")
        claims = self.version_claims.get(version.name) if version is not None else None
        if version is None or claims is None:
            self._refuse(lab_id, f"FIX version {start.fix_version!r}: this gateway's lab speaks "
                                 f"{', '.join(self.version_claims)}")
            return
        owner = f"{self.gateway_id}:{lab_id}"
        comp_id = claims.claim(owner)
        if comp_id is None:
            self._refuse(lab_id, f"every FIX {version.name} lab CompID is in use; try again in a few minutes")
            return
        tap = Tap(self.taps, self.exchange_host, self.exchange_port, lambda *a: None, lambda r: None)
        session = LabSession(lab_id, comp_id, self.gateway_id, s, tap,
                             lambda m: self._emit(session, m), self._end, self.set_stp, version,
                             self.version_dictionaries.get(version.name))
        tap.on_record = session.on_wire
        tap.on_closed = session.on_tap_closed
        try:
            tap.open()
            with self._lock:
                self._sessions[lab_id] = session
            self._publish_state(session)
            session.start()
        except Exception:
            with self._lock:
                self._sessions.pop(lab_id, None)
            tap.close()
            claims.release(comp_id, owner)
            raise
        self.started_count += 1
        log.info("lab %s: started as %s, FIX %s (tap port %d, client %s)", lab_id, comp_id, version.name,
                 tap.port, start.client_addr)

    def _on_commands(self, batch: list[Entry]) -> Effects:
        effects = Effects()
        stream = streams.lab_commands_stream(self.gateway_id)
        for entry_id, msgs in batch:
            for msg in msgs:
                if not isinstance(msg, LabCommand):
                    self._deadletter(effects, stream, entry_id,
                                     f"{type(msg).__name__} is not a LabCommand", msg)
                elif not LAB_ID.match(msg.lab_id):
                    self._deadletter(effects, stream, entry_id, "lab_id must be 1-64 of A-Z a-z 0-9 _ . : -",
                                     msg)
                else:
                    self._command(msg)
        return effects

    def _command(self, cmd: LabCommand) -> None:
        with self._lock:
            session = self._sessions.get(cmd.lab_id)
        if session is None:
            self._notice(cmd.lab_id, f"no lab session {cmd.lab_id!r} here: it ended or never started")
            return
        try:
            session.command(cmd)
        except CommandError as exc:
            self._notice(cmd.lab_id, str(exc))
        except Exception as exc:  # an engine error must not end the consumer thread
            log.exception("lab %s: command %s failed", cmd.lab_id, cmd.op)
            self._notice(cmd.lab_id, f"the {cmd.op} command failed: {exc}")
        self._wake.set()

    # ------------------------------------------------------------------ housekeeping and ending

    def _housekeep(self) -> None:
        last_renew = time.monotonic()
        while not self._stop.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            try:
                self._tick()
                if time.monotonic() - last_renew > self.settings.claim_ttl_s / 3:
                    last_renew = time.monotonic()
                    self._renew_claims()
            except REDIS_ERRORS as exc:
                log.warning("lab housekeeping: redis unavailable (%s)", exc)
            except Exception:
                log.exception("lab housekeeping failed")

    def _tick(self) -> None:
        with self._lock:
            live = [s for s in self._sessions.values() if s.lab_id not in self._ending]
        mono = time.monotonic()
        for session in live:
            self._publish_state(session)
            if session.logging_out:
                sent = self._logout_sent.setdefault(session.lab_id, mono)
                if mono - sent > LOGOUT_GRACE_S:
                    self._end(session, "the exchange did not answer the Logout")
            elif now_ns() >= session.expires_at:
                text = f"the lab session's {self.settings.lifetime_s:.0f} s are over"
                if not session.logout(text):
                    self._end(session, text)
            elif session.status == CONNECTING and mono - session.created > self.settings.logon_timeout_s:
                self._end(session, f"could not log on to the exchange within "
                                   f"{self.settings.logon_timeout_s:.0f} s")

    def _renew_claims(self) -> None:
        with self._lock:
            live = list(self._sessions.values())
        for session in live:
            if not self._claims(session).renew(session.comp_id, f"{self.gateway_id}:{session.lab_id}"):
                log.error("lab %s: the claim on %s lapsed", session.lab_id, session.comp_id)

    def _claims(self, session: LabSession) -> CompIdClaims:
        return self.version_claims.get(session.fix_version.name, self.claims)

    def _end(self, session: LabSession, reason: str) -> None:
        thread = threading.Thread(target=self._finish, args=(session, reason),
                                  name=f"lab-end-{session.lab_id}", daemon=True)
        with self._lock:
            if session.lab_id in self._ending or session.lab_id not in self._sessions:
                return
            self._ending.add(session.lab_id)
            self._enders = [t for t in self._enders if t.is_alive()]
            self._enders.append(thread)
            thread.start()  # under the lock, so stop() never joins a thread not yet started

    def _finish(self, session: LabSession, reason: str) -> None:
        try:
            if not session.text:
                session.text = reason
            try:
                session.stop_engine()
            except Exception:
                log.exception("lab %s: stopping the engine failed", session.lab_id)
            session.tap.close()
            try:
                session.reset_stp()  # before the CompID is free for another visitor
            except Exception:
                log.exception("lab %s: resetting self-trade prevention failed", session.lab_id)
            try:
                self._claims(session).release(session.comp_id, f"{self.gateway_id}:{session.lab_id}")
            except REDIS_ERRORS as exc:  # the claim's TTL frees it anyway
                log.warning("lab %s: could not release %s (%s)", session.lab_id, session.comp_id, exc)
            session.status = ENDED
            self._publish_state(session, final=True)
            with self._lock:
                self._last_state.pop(session.lab_id, None)
            self.ended_count += 1
            log.info("lab %s: ended (%s): %s", session.lab_id, session.comp_id, session.text)
        finally:
            with self._lock:
                self._sessions.pop(session.lab_id, None)
                self._ending.discard(session.lab_id)
                self._logout_sent.pop(session.lab_id, None)
