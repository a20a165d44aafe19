"""A FIX client to certify, as a process of its own: a stock QuickFIX (Python) client of its FIX version
(``--fix-version`` 4.2, 4.4, 5.0SP2: FIXT.1.1 with DefaultApplVerID 9) with the stock dictionary the
quickfix package installs for it and every validation switch on, following
the certification script's instructions (News 35=B whose headline starts "order buy 100 SYM 10.00",
"replace 50" or "cancel"). ``--broken`` gives it three defects, and only those: its Heartbeats drop
TestReqID (112), so no TestRequest is answered; its second order reuses the first's ClOrdID; its
cancel names the order's first ClOrdID in OrigClOrdID (41), not the one the replace gave it.

    python -m tests.certify_client --comp CERT01 --port 9880 [--fix-version 4.2] [--host H] [--password P]
                                   [--broken]

FIX 4.2: its orders and replaces carry HandlInst (21), which FIX 4.2 requires, and a password goes in
RawData (96, with RawDataLength 95), FIX 4.2 having no Password (554).

It exits 0 once logged out (the certification ends with the exchange's Logout), 1 on a time-out.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from datetime import UTC, datetime

import quickfix as fix

from shared.fix.versions import DEFAULT, FIX42, FixVersion, settings_lines, version

SOH = "\x01"


def settings(comp: str, port: int, host: str = "127.0.0.1", fix_version: FixVersion = DEFAULT) -> str:
    v = fix_version
    dictionaries = settings_lines(v.dictionary_settings())
    return f"""[DEFAULT]
ConnectionType=initiator
BeginString={v.begin_string}
SenderCompID={comp}
TargetCompID=FIXLAB
SocketConnectHost={host}
SocketConnectPort={port}
StartTime=00:00:00
EndTime=00:00:00
HeartBtInt=30
ReconnectInterval=60
UseDataDictionary=Y
{dictionaries}
ValidateUserDefinedFields=Y
ValidateFieldsOutOfOrder=Y
ValidateFieldsHaveValues=Y
AllowUnknownMsgFields=N
[SESSION]
"""


class Orders:
    """What a client does with the script's instructions, whatever its engine: pure."""

    def __init__(self, broken: bool, handl_inst: bool = False) -> None:
        self.broken = broken
        self.handl_inst = [(21, "1")] if handl_inst else []  # FIX 4.2 requires it in D and G
        self.ids = itertools.count(1)
        self.first = ""  # the first order's ClOrdID (the broken client reuses it)
        self.orders = 0
        self.order: dict[int, str] = {}  # the last order: its fields, 11 its current ClOrdID
        self.origin = ""  # the last order's first ClOrdID
        self.pending = ""  # ClOrdID of a replace sent, not yet answered

    def received(self, fields: dict[int, str]) -> tuple[str, list[tuple[int, str]]] | None:
        """The message to send in answer to one received (MsgType, body fields), if any."""
        kind = fields.get(35)
        if kind == "8" and fields.get(150) == "5" and fields.get(11) == self.pending:
            self.order[11] = self.pending  # the replace took: its ClOrdID is the order's now
        if kind == "9" and fields.get(11) == self.pending:
            self.pending = ""
        if kind != "B":
            return None
        words = fields.get(148, "").split()
        if words[:1] == ["order"]:
            _, side, qty, symbol, price = words[:5]
            self.orders += 1
            clordid = self.first if self.broken and self.orders == 2 else self.clordid()
            self.first = self.first or clordid
            self.origin = clordid
            self.order = {11: clordid, 55: symbol, 54: "1" if side == "buy" else "2", 38: qty, 40: "2",
                          44: price}
            return "D", [*self.order.items(), *self.handl_inst, (60, now())]
        if words[:1] == ["replace"]:
            self.pending = self.clordid()
            return "G", [(41, self.order[11]), (11, self.pending), *self.handl_inst, (55, self.order[55]),
                         (54, self.order[54]), (38, words[1]), (40, "2"), (44, self.order[44]), (60, now())]
        if words[:1] == ["cancel"]:
            orig = self.origin if self.broken else self.order[11]
            return "F", [(41, orig), (11, self.clordid()), (55, self.order[55]), (54, self.order[54]),
                         (38, self.order[38]), (60, now())]
        return None

    def clordid(self) -> str:
        return f"c{time.time_ns() % 10**9}-{next(self.ids)}"


def fields_of(raw: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in raw.split(SOH):
        tag, _, value = item.partition("=")
        if tag.isdigit():
            out.setdefault(int(tag), value)
    return out


class Client(fix.Application):
    def __init__(self, broken: bool, password: str | None = None, fix_version: FixVersion = DEFAULT) -> None:
        super().__init__()
        self.broken = broken
        self.password = password
        self.version = fix_version
        self.orders = Orders(broken, handl_inst=fix_version.begin_string == FIX42)
        self.done = threading.Event()
        self.sid: fix.SessionID | None = None

    def onCreate(self, sid: fix.SessionID) -> None:
        self.sid = sid

    def onLogon(self, sid: fix.SessionID) -> None: ...

    def onLogout(self, sid: fix.SessionID) -> None:
        self.done.set()

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            if self.broken and msg.getHeader().getField(35) == "0" and msg.isSetField(112):
                msg.removeField(112)
            if self.password is not None and msg.getHeader().getField(35) == "A":
                if self.version.password_tag == 96:  # FIX 4.2: RawData, after its length
                    msg.setField(95, str(len(self.password.encode())))
                msg.setField(self.version.password_tag, self.password)
        except Exception as exc:  # an exception escaping a callback would end the process
            print(f"toAdmin: {exc!r}", file=sys.stderr)

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            answer = self.orders.received(fields_of(msg.toString()))
            if answer is not None:
                self.send(*answer)
        except Exception as exc:
            print(f"fromApp: {exc!r}", file=sys.stderr)

    def send(self, msg_type: str, fields: list[tuple[int, str]]) -> None:
        body = "".join(f"{t}={v}{SOH}" for t, v in [(35, msg_type), *fields])
        msg = fix.Message(f"8={self.version.begin_string}{SOH}9=0{SOH}{body}10=000{SOH}", False)
        assert self.sid is not None
        fix.Session.sendToTarget(msg, self.sid)


def now() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--comp", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--broken", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--password", help="the one-time password (Password 554 in the Logon; 4.2: RawData 96)")
    p.add_argument("--fix-version", default=DEFAULT.name, help="4.2, 4.4 (default) or 5.0SP2")
    p.add_argument("--timeout", type=float, default=150.0)
    args = p.parse_args()
    v = version(args.fix_version)
    app = Client(args.broken, args.password, v)
    s = fix.SessionSettings()
    s.setFromString(settings(args.comp, args.port, args.host, v))
    # Its events and messages on stdout (the test keeps them): a run it never logged on to says why.
    initiator = fix.SocketInitiator(app, fix.MemoryStoreFactory(), s, fix.ScreenLogFactory(s))
    initiator.start()
    try:
        return 0 if app.done.wait(args.timeout) else 1
    finally:
        initiator.stop()


if __name__ == "__main__":
    sys.exit(main())
