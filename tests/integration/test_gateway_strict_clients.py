"""The bots' and the bench client's QuickFIX settings validate strictly with the exchange's dictionary:
a trade between them reaches both applications (880 on the bots' sessions, which ask for it), and
neither engine sends a Reject."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import quickfix as fix

from services.bench.engine import initiator_settings as bench_settings
from services.bots.config import BotSettings, session_settings
from shared.compids import BENCH_COMP_IDS, BOT_COMP_IDS
from shared.config import common_settings
from shared.fix.dictionary import installed_dictionary
from tests.gateway_stack import gateway_stack, matcher_available
from tests.helpers import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


class Recorder(fix.Application):
    def __init__(self) -> None:
        super().__init__()
        self.logged_on = threading.Event()
        self.sent_admin: list[str] = []
        self.reports: list[str] = []

    def onCreate(self, sid: fix.SessionID) -> None: ...
    def onLogout(self, sid: fix.SessionID) -> None: ...
    def fromAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None: ...
    def toApp(self, msg: fix.Message, sid: fix.SessionID) -> None: ...

    def onLogon(self, sid: fix.SessionID) -> None:
        self.logged_on.set()

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            self.sent_admin.append(msg.getHeader().getField(35))
        except Exception as exc:  # an exception escaping a callback would end the test process
            self.sent_admin.append(f"error {exc}")

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        try:
            self.reports.append(msg.toString())
        except Exception as exc:
            self.reports.append(f"error {exc}")


def order(comp: str, clordid: str, side: int) -> fix.Message:
    now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
    raw = (f"8=FIX.4.4\x019=0\x0135=D\x0149={comp}\x0156=FIXLAB\x0111={clordid}\x0155=BIRCH.LAB"
           f"\x0154={side}\x0160={now}\x0138=1\x0140=2\x0144=25.00\x0159=0\x0110=000\x01")
    return fix.Message(raw, False)


@pytest.fixture
def port() -> Iterator[int]:
    with gateway_stack(None) as stack:
        yield stack.fix_port


def test_bots_and_bench_clients_take_fills_with_strict_validation(port: int) -> None:
    # Only the QuickFIX settings are used here (no Redis): the bots' own, for one bot session.
    common = common_settings({"REDIS_URL": "redis://127.0.0.1:1"})
    bot = BotSettings(common=common, bots=1, fix_port=port, levels=1, max_open=20, orders_per_s=1.0,
                      heartbeat_s=30)
    bot_app, bench_app = Recorder(), Recorder()
    bot_ini = fix.SocketInitiator(bot_app, fix.MemoryStoreFactory(), session_settings(bot))
    bench_ini = fix.SocketInitiator(bench_app, fix.MemoryStoreFactory(),
                                    bench_settings("127.0.0.1", port, [BENCH_COMP_IDS[0]]))
    bot_ini.start()
    bench_ini.start()
    try:
        assert bot_app.logged_on.wait(15) and bench_app.logged_on.wait(15)
        fix.Session.sendToTarget(order(BOT_COMP_IDS[0], "strict-b", 1),
                                 fix.SessionID("FIX.4.4", BOT_COMP_IDS[0], "FIXLAB"))
        eventually(lambda: any("\x0111=strict-b\x01" in r for r in bot_app.reports), what="bot's New")
        fix.Session.sendToTarget(order(BENCH_COMP_IDS[0], "strict-s", 2),
                                 fix.SessionID("FIX.4.4", BENCH_COMP_IDS[0], "FIXLAB"))
        fills = [eventually(lambda app=app: next((r for r in app.reports if "\x01150=F\x01" in r), None),
                            what="a fill") for app in (bot_app, bench_app)]
    finally:
        bot_ini.stop()
        bench_ini.stop()
    # The bots ask for TrdMatchID (880); the bench does not. Both get the match id in 527.
    assert "\x01880=" in fills[0] and "\x01880=" not in fills[1]
    assert all("\x01527=" in f for f in fills)
    assert "3" not in bot_app.sent_admin and "3" not in bench_app.sent_admin  # no Reject sent
    # The stock dictionary would have refused the very same fill.
    stock = fix.DataDictionary(str(installed_dictionary()))
    with pytest.raises(fix.TagNotDefinedForMessage):
        stock.validate(fix.Message(fills[0], stock, False))
