"""Drop copy: every ExecutionReport of a firm's sessions, copied to the firm's drop copy session(s).

A firm (``[FIRM]`` in the sessions file) gets a drop copy session with ``DropCopyFor=FIRM`` on a
``[SESSION]``. Each ExecutionReport the gateway tells (or keeps, untold) one of the firm's sessions is
appended, as a ``CopiedReport``, to the firm's stream (``streams.dropcopy_stream``): by the events
thread in the batch it handles, before the batch is acknowledged (a Redis error reads the batch again:
a copy may then come twice, never not at all), and for the refusals the engine thread sends itself,
through a bounded queue to this module's thread (the engine thread never waits on Redis). Any gateway
writes there, whichever holds the member session.

The gateway that holds the drop copy session tells it, on its own thread, every entry after its
cursor (``streams.dropcopy_told_key``, moved after each entry is sent) while it is logged on: live,
in the order the copies were written, and, after a Logout or a gateway restart, from where it
stopped. Each copy is the member's report as the drop copy session's version says it (its dialect),
with DeliverToCompID (128) naming the member session and CopyMsgIndicator 797=Y. FIX 4.2 has no
797 (FIX42.xml lists none): there, every ExecutionReport on a drop copy session is a copy, and 128
says whose. A drop copy session may not trade: the guard refuses its orders (guard.py).

Several drop copy sessions of one firm (one per FIX version, say) each have their own cursor on the
one stream and each gets every copy. A copy says what the drop copy session's settings allow: the
TrdMatchID (880) of a member that gets it (a FIX 5.0 SP2 session, SendTrdMatchID=Y) is left out for a
drop copy session that does not (a stock FIX 4.4 client would Reject the message: it lists 880 in no
ExecutionReport); its SecondaryExecID (527) carries the same id.

Order: copies are written in the order each thread told them; the engine thread's refusals, queued,
are written by the events thread at its next write, ahead of that batch's reports (or by this
module's thread when the events thread is idle), so a member's refusal and its other reports are
copied in the order the member read them but for a refusal sent while the events thread was sending
a batch (then it comes before that batch's reports).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any

from shared import streams
from shared.bus import REDIS_ERRORS, publish
from shared.clock import now_ns
from shared.schema import CopiedReport, decode_batch

log = logging.getLogger(__name__)

FIX42 = "FIX.4.2"
QUEUE_MAX = 10_000
TRD_MATCH_ID = "\x01880="


def without_trd_match_id(body: str) -> str:
    """``body`` without its TrdMatchID (880) field."""
    at = body.find(TRD_MATCH_ID)
    if at < 0:
        return body
    end = body.find("\x01", at + 1)
    return body[:at] + body[end:]


def copy_fields(member: str, begin_string: str) -> str:
    """What a copy carries besides the member's report (after its dialect)."""
    return f"128={member}\x01" + ("" if begin_string == FIX42 else "797=Y\x01")


class DropCopy:
    """Write copies (events and engine threads), tell them to the drop copy sessions held here."""

    def __init__(self, r: Any, firm_of: Mapping[str, str], drop_copies: Mapping[str, str], *,
                 send: Callable[[str, str, str], bool], logged_on: Callable[[str], bool],
                 begin_string: Callable[[str], str], holds: Callable[[str], bool],
                 trd_match: Container[str] = frozenset(), maxlen: int = 1_000_000,
                 block_ms: int = 200) -> None:
        """``trd_match``: the sessions whose fills carry TrdMatchID (880): a drop copy session not
        named there gets its copies without it."""
        firms = set(drop_copies.values())
        self.r = r
        self.firm_of = {s: f for s, f in firm_of.items() if f in firms}  # members whose firm has a copy
        self.drop_copies = dict(drop_copies)  # drop copy CompID -> firm
        self.send = send
        self.logged_on = logged_on
        self.begin_string = begin_string
        self.holds = holds
        self.trd_match = trd_match
        self.maxlen = maxlen
        self.block_ms = block_ms
        self.written = 0
        self.told = 0
        self.lost = 0  # engine-thread copies dropped (the queue full: Redis away for long)
        # The engine thread's copies not written yet: appended there (never waiting), taken whole
        # by whichever thread writes next (the events thread, or this module's).
        self._pending: list[tuple[str, str]] = []
        self._pending_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-dropcopy", daemon=True)

    @property
    def active(self) -> bool:
        return bool(self.firm_of)

    def keep(self, items: Iterable[tuple[str, str]]) -> None:
        """Append the copies of ``(session, body)`` reports, in order, one entry per firm, after the
        engine thread's copies not written yet; raises on a Redis error (the events thread then reads
        its batch again; the engine thread's copies wait for the next write)."""
        with self._pending_lock:
            taken, self._pending = self._pending, []
        try:
            self._write([*taken, *items])
        except BaseException:
            with self._pending_lock:
                self._pending[:0] = taken
            raise

    def _write(self, items: Iterable[tuple[str, str]]) -> None:
        by_firm: dict[str, list[CopiedReport]] = {}
        ts = now_ns()
        for session, body in items:
            firm = self.firm_of.get(session)
            if firm is not None:
                by_firm.setdefault(firm, []).append(CopiedReport(session, body, ts))
        if not by_firm:
            return
        with self.r.pipeline(transaction=False) as pipe:
            for firm, copies in by_firm.items():
                publish(pipe, streams.dropcopy_stream(firm), copies, self.maxlen)
            pipe.execute()
        self.written += sum(len(c) for c in by_firm.values())

    def copy(self, session: str, body: str) -> None:
        """The engine thread's own answer (a refusal) to a member: kept here, written by the next
        thread that writes (the engine thread never waits on Redis)."""
        if session not in self.firm_of or not body.startswith("35=8\x01"):
            return
        with self._pending_lock:
            if len(self._pending) >= QUEUE_MAX:
                self.lost += 1
                log.error("drop copy queue full: a copy of a report to %s is lost", session)
                return
            self._pending.append((session, body))
        self._wake.set()

    def start(self) -> DropCopy:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout_s)

    def _drain(self) -> None:
        if not self._pending:
            return
        try:
            self.keep(())
        except REDIS_ERRORS as exc:
            log.warning("drop copy: redis unavailable (%s); again in 1 s", exc)
            self._stop.wait(1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self._drain()
            here = [dc for dc in self.drop_copies if self.holds(dc) and self.logged_on(dc)]
            if not here:
                self._wake.wait(self.block_ms / 1000)
                continue
            try:
                self.tell(here, block_ms=0 if self._pending else self.block_ms)
            except REDIS_ERRORS as exc:
                log.warning("drop copy: redis unavailable (%s); again in 1 s", exc)
                self._stop.wait(1.0)
            except Exception:
                log.exception("drop copy: cannot tell copies; again in 1 s")
                self._stop.wait(1.0)

    def tell(self, sessions: Sequence[str], block_ms: int = 0) -> int:
        """Send each of ``sessions`` (drop copy sessions logged on here) what its cursor has not
        passed yet; how many copies were sent."""
        cursors: dict[str, str] = {}
        for dc in sessions:
            raw = self.r.get(streams.dropcopy_told_key(self.drop_copies[dc], dc))
            cursors[dc] = raw.decode() if isinstance(raw, bytes) else (raw or "0-0")
        # One read per stream, from the cursor furthest behind among its drop copy sessions (a firm
        # may have several: each gets every copy past its own cursor).
        readers: dict[str, list[str]] = {}
        for dc in sessions:
            readers.setdefault(streams.dropcopy_stream(self.drop_copies[dc]), []).append(dc)
        read = {stream: min((cursors[dc] for dc in dcs), key=_id_key) for stream, dcs in readers.items()}
        kwargs: dict[str, Any] = {"count": 500}
        if block_ms > 0:
            kwargs["block"] = block_ms
        got: Any = self.r.xread(read, **kwargs)
        sent = 0
        for stream_name, entries in got or ():
            name = stream_name.decode() if isinstance(stream_name, bytes) else stream_name
            for dc in readers[name]:
                sent += self._tell_one(dc, entries, _id_key(cursors[dc]))
        self.told += sent
        return sent

    def _tell_one(self, dc: str, entries: Sequence[Any], cursor: tuple[int, int]) -> int:
        """Send ``dc`` the copies of ``entries`` past its cursor, moving it after each entry."""
        extra_of: dict[str, str] = {}
        begin = self.begin_string(dc)
        strip = dc not in self.trd_match
        sent = 0
        for entry_id, fields in entries:
            eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            if _id_key(eid) <= cursor:
                continue
            for msg in decode_batch(fields[streams.BATCH_FIELD]):
                if not isinstance(msg, CopiedReport):
                    continue
                extra = extra_of.get(msg.session)
                if extra is None:
                    extra = extra_of[msg.session] = copy_fields(msg.session, begin)
                body = without_trd_match_id(msg.body) if strip else msg.body
                if not self.logged_on(dc) or not self.send(dc, body, extra):
                    # Logged out mid-entry: the entry comes again, whole, at its next Logon (a
                    # copy may then be told twice; 797=Y says it is a copy, its ExecID says which).
                    return sent
                sent += 1
            self.r.set(streams.dropcopy_told_key(self.drop_copies[dc], dc), eid)
        return sent


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
