"""The README's worked example: a plain QuickFIX initiator that buys one lot and prints the answers.

    python -m tools.example_client --port 9878 --comp CLIENT01

It writes the settings file below (QuickFIX's own format) to a temporary folder, logs on, sends one
NewOrderSingle, prints every application message it gets until the ExecutionReport New (and a
fill, if someone was selling at that price) and logs out. Exit code 0 when the order was acked.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import quickfix as fix

from shared.fix.dictionary import installed_dictionary

SETTINGS = """\
[DEFAULT]
ConnectionType=initiator
HeartBtInt=30
ReconnectInterval=5
StartTime=00:00:00
EndTime=00:00:00
ResetOnLogon=Y
FileStorePath={store}
UseDataDictionary=Y
DataDictionary={dictionary}
# The FIX44.xml the quickfix package installs: the exchange sends nothing it does not list.

[SESSION]
BeginString=FIX.4.4
SenderCompID={comp}
TargetCompID=FIXLAB
SocketConnectHost={host}
SocketConnectPort={port}
"""


class Client(fix.Application):
    def __init__(self) -> None:
        super().__init__()
        self.logged_on = threading.Event()
        self.acked = threading.Event()

    def onCreate(self, sid: fix.SessionID) -> None:
        return None

    def onLogon(self, sid: fix.SessionID) -> None:
        self.logged_on.set()

    def onLogout(self, sid: fix.SessionID) -> None:
        return None

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        return None

    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        return None

    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        return None

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:  # an exception escaping a QuickFIX callback would end the process
            print("<-", msg.toString().replace("\x01", "|"), flush=True)
            if msg.getHeader().getField(35) == "8" and msg.getField(150) in ("0", "8"):
                self.acked.set()
        except Exception as exc:
            print("callback error:", exc, file=sys.stderr)


def new_order(comp: str, clordid: str, price: str, qty: int) -> fix.Message:
    now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
    raw = (f"8=FIX.4.4\x019=0\x0135=D\x0149={comp}\x0156=FIXLAB\x0111={clordid}\x0155=ACORN.LAB"
           f"\x0154=1\x0160={now}\x0138={qty}\x0140=2\x0144={price}\x0159=0\x0110=000\x01")
    return fix.Message(raw, False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9878)
    parser.add_argument("--comp", default="CLIENT01")
    parser.add_argument("--price", default="100.00")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fixlab-client-") as tmp:
        cfg = Path(tmp) / "client.cfg"
        cfg.write_text(SETTINGS.format(store=Path(tmp) / "store", comp=args.comp, host=args.host,
                                       port=args.port, dictionary=installed_dictionary()))
        settings = fix.SessionSettings(str(cfg))
        app = Client()
        initiator = fix.SocketInitiator(app, fix.FileStoreFactory(settings), settings)
        initiator.start()
        try:
            if not app.logged_on.wait(15):
                print("no logon (is the gateway running, and is the CompID configured?)", file=sys.stderr)
                return 1
            sid = fix.SessionID("FIX.4.4", args.comp, "FIXLAB")
            fix.Session.sendToTarget(new_order(args.comp, f"ex-{int(time.time())}", args.price, 1), sid)
            ok = app.acked.wait(15)
            time.sleep(0.2)  # a fill, when there is one, follows the New at once
            return 0 if ok else 1
        finally:
            initiator.stop()


if __name__ == "__main__":
    raise SystemExit(main())
