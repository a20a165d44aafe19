"""fixcore-engine (pure Python, not QuickFIX) as the client to certify, as a process of its own, with
its default settings and stock FIX44.xml, following the script's instructions as
tests/certify_client.py does.

    python -m tests.certify_fixcore_client --comp CERT03 --port 9880
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import fixcore
from fixcore import Application, SessionID
from fixcore.message.message import Message
from fixcore.session.session_settings import SessionSettings
from fixcore.transport.initiator import SocketInitiator

from tests.certify_client import Orders

DICTIONARY = Path(fixcore.__file__).parent / "specs" / "FIX44.xml"


class Client(Application):
    def __init__(self) -> None:
        self.orders = Orders(broken=False)
        self.done = asyncio.Event()
        self.initiator: SocketInitiator | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def on_logout(self, session_id: SessionID) -> None:
        self.done.set()

    def from_app(self, message: Message, session_id: SessionID) -> None:
        fields = {35: message.msg_type, **{int(t): str(v) for t, v in message.body.items()}}
        answer = self.orders.received(fields)
        if answer is None or self.initiator is None:
            return
        msg = Message()
        msg.header.set(35, answer[0])
        for tag, value in answer[1]:
            msg.set_field(tag, value)
        session = next(iter(self.initiator.sessions.values()))
        task = asyncio.ensure_future(session.send_app(msg))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


async def run(comp: str, port: int, timeout_s: float) -> int:
    settings = SessionSettings.from_string(f"""
[DEFAULT]
ConnectionType=initiator
HeartBtInt=30
ReconnectInterval=60
UseDataDictionary=Y
DataDictionary={DICTIONARY}

[SESSION]
BeginString=FIX.4.4
SenderCompID={comp}
TargetCompID=FIXLAB
SocketConnectHost=127.0.0.1
SocketConnectPort={port}
""")
    app = Client()
    initiator = SocketInitiator(settings, app)
    app.initiator = initiator
    async with initiator:
        try:
            await asyncio.wait_for(app.done.wait(), timeout_s)
        except TimeoutError:
            return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--comp", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=150.0)
    args = p.parse_args()
    return asyncio.run(run(args.comp, args.port, args.timeout))


if __name__ == "__main__":
    sys.exit(main())
