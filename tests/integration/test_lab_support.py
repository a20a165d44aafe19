"""Helpers for the lab tests (no tests here): a plain QuickFIX acceptor, bus helpers, a lab stream reader.

``PlainExchange`` is a real QuickFIX engine (FIX 4.4, SenderCompID FIXLAB, the LAB CompIDs,
ResetOnLogon, dictionary validation) that acknowledges orders with ExecutionReports: the lab's
peer where the gateway's own acceptor is not needed. It runs in a process of its own
(``python -m tests.integration.test_lab_support PORT``), as the gateway does, and prints every
application message it receives as a JSON line. (In one process with the lab's initiators,
QuickFIX 1.16's Acceptor.stop() crashed with SIGSEGV in SocketServer::close while a connection
was closing: the engine's own race, seen in gdb.)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import quickfix as fix
import redis

from services.gateway.lab import LabManager, LabSettings
from services.gateway.lab.settings import default_dictionary
from shared import streams
from shared.bus import publish
from shared.clock import now_ns
from shared.compids import LAB_COMP_IDS
from shared.redis_server import free_port
from shared.schema import (
    LabCommand,
    LabNotice,
    LabOrder,
    LabStart,
    LabState,
    Message,
    WireRecord,
    decode_batch,
)
from tests.helpers import eventually

SOH = "\x01"


def acceptor_settings(port: int) -> fix.SessionSettings:
    sessions = "".join(f"[SESSION]\nTargetCompID={c}\n" for c in LAB_COMP_IDS)
    text = f"""[DEFAULT]
ConnectionType=acceptor
SocketAcceptPort={port}
SocketReuseAddress=Y
BeginString=FIX.4.4
SenderCompID=FIXLAB
StartTime=00:00:00
EndTime=00:00:00
ResetOnLogon=Y
ResetOnLogout=Y
ResetOnDisconnect=Y
UseDataDictionary=Y
DataDictionary={default_dictionary()}
{sessions}"""
    out = fix.SessionSettings()
    out.setFromString(text)
    return out


class PlainExchange(fix.Application):
    """Acknowledge every order (New), cancel (Canceled) and replace (Replaced) it receives."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port
        self.received: list[dict[int, str]] = []  # application messages, in order
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self.acceptor = fix.SocketAcceptor(self, fix.MemoryStoreFactory(), acceptor_settings(self.port))

    def start(self) -> PlainExchange:
        self.acceptor.start()
        return self

    def stop(self) -> None:
        self.acceptor.stop()

    def onCreate(self, sid: fix.SessionID) -> None:
        pass

    def onLogon(self, sid: fix.SessionID) -> None:
        pass

    def onLogout(self, sid: fix.SessionID) -> None:
        pass

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        pass

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            f: dict[int, str] = {}
            for part in msg.toString().split(SOH):
                tag, _, value = part.partition("=")
                if tag.isdigit():
                    f.setdefault(int(tag), value)
            with self.lock:
                self.received.append(f)
                print(json.dumps(f), flush=True)
            kind = {"D": ("0", "0"), "F": ("4", "4"), "G": ("5", "0")}.get(f.get(35, ""))
            if kind is None:
                return
            n = next(self._ids)
            er = fix.Message()
            er.getHeader().setField(35, "8")
            qty = f.get(38, "0")
            values = [(37, f"X{f.get(41, f.get(11))}"), (17, f"E{n}"), (150, kind[0]), (39, kind[1]),
                      (11, f[11]), (55, f.get(55, "")), (54, f.get(54, "1")), (38, qty),
                      (44, f.get(44, "0")), (151, "0" if kind[0] == "4" else qty), (14, "0"),
                      (6, "0"), (60, f.get(60, "20260101-00:00:00.000"))]
            if 41 in f:
                values.append((41, f[41]))
            for tag, value in values:
                er.setField(tag, value)
            fix.Session.sendToTarget(er, sid)
        except Exception as exc:  # a callback must never raise into QuickFIX
            print(f"plain exchange: fromApp failed: {exc!r}")



@dataclass
class ExchangeProcess:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def received(self) -> list[dict[int, str]]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                out.append({int(k): v for k, v in json.loads(line).items()})
        return out

    def orders(self, clordid: str) -> list[dict[int, str]]:
        return [m for m in self.received() if m.get(35) == "D" and m.get(11) == clordid]


@contextlib.contextmanager
def plain_exchange() -> Iterator[ExchangeProcess]:
    """Run a PlainExchange in its own process on a free port; stop it (SIGTERM, then SIGKILL)."""
    from tests.gateway_stack import ROOT, stop_process, wait_port

    port = free_port()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fixlab-plain-")))
        log = tmp / "exchange.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "tests.integration.test_lab_support", str(port)],
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=ROOT)
        stack.callback(stop_process, proc, 5.0)
        wait_port(port, proc, log)
        yield ExchangeProcess(port, proc, log)


def _serve(port: int) -> None:
    exchange = PlainExchange(port).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"plain exchange on {port}", flush=True)
    stop.wait()
    exchange.stop()


def lab_settings(**kw: Any) -> LabSettings:
    base: dict[str, Any] = {"heartbeat_s": 2, "lifetime_s": 120.0, "max_sessions": 20,
                            "logon_timeout_s": 15.0, "data_dictionary": default_dictionary()}
    base.update(kw)
    return LabSettings(**base)


@contextlib.contextmanager
def lab_manager(redis_url: str, port: int, gateway_id: str = "gwlab", **kw: Any) -> Iterator[LabManager]:
    manager = LabManager(redis_url, gateway_id, "127.0.0.1", port, settings=lab_settings(**kw)).start()
    try:
        yield manager
    finally:
        manager.stop()


# --------------------------------------------------------------------------- the bus, as the web uses it

def start_lab(r: redis.Redis, lab_id: str, ts: int | None = None) -> None:
    publish(r, streams.LAB_START_STREAM, [LabStart(lab_id, "127.0.0.1", now_ns() if ts is None else ts)],
            10_000)


def command(r: redis.Redis, gateway_id: str, lab_id: str, op: str, **kw: Any) -> None:
    publish(r, streams.lab_commands_stream(gateway_id), [LabCommand(lab_id, op, **kw)], 10_000)


def tags(raw: bytes) -> dict[int, str]:
    out: dict[int, str] = {}
    for part in raw.decode("latin-1").split(SOH):
        tag, _, value = part.partition("=")
        if tag.isdigit():
            out.setdefault(int(tag), value)
    return out


@dataclass
class Lab:
    """Everything published on one lab stream so far (re-read on every call)."""

    r: redis.Redis
    lab_id: str
    msgs: list[Message] = field(default_factory=list)

    def read(self) -> list[Message]:
        rows: Any = self.r.xrange(streams.lab_stream(self.lab_id))
        self.msgs = [m for _, f in rows for m in decode_batch(f[streams.BATCH_FIELD])]
        return self.msgs

    def wire(self) -> list[WireRecord]:
        return [m for m in self.read() if isinstance(m, WireRecord)]

    def states(self) -> list[LabState]:
        return [m for m in self.read() if isinstance(m, LabState)]

    def state(self) -> LabState | None:
        states = self.states()
        return states[-1] if states else None

    def notices(self) -> list[LabNotice]:
        return [m for m in self.read() if isinstance(m, LabNotice)]

    def find(self, source: str, msg_type: str, **want: str) -> list[WireRecord]:
        out = []
        for rec in self.wire():
            t = tags(rec.raw)
            if rec.source == source and t.get(35) == msg_type and all(
                    t.get(int(k[1:])) == v for k, v in want.items()):
                out.append(rec)
        return out

    def orders(self) -> tuple[LabOrder, ...]:
        """The open orders of the lab's latest state: as the visitor's engine has taken them."""
        st = self.state()
        return st.orders if st is not None else ()

    def wait_status(self, status: str, timeout: float = 20.0) -> LabState:
        def check() -> LabState | None:
            st = self.state()
            return st if st is not None and st.status == status else None
        return eventually(check, timeout, what=f"lab {self.lab_id} {status}")

    def wait_wire(self, source: str, msg_type: str, timeout: float = 20.0, **want: str) -> WireRecord:
        return eventually(lambda: (self.find(source, msg_type, **want) or [None])[-1], timeout,
                          what=f"{source} 35={msg_type} {want} on lab {self.lab_id}")

    def wait_notice(self, text: str, timeout: float = 10.0) -> LabNotice:
        return eventually(lambda: next((n for n in self.notices() if text in n.text), None), timeout,
                          what=f"a notice with {text!r} on lab {self.lab_id}")


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
