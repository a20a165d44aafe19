"""QuickFIX settings and message templates shared by the bench client and the baseline acceptor.

Messages are built from strings and copied templates, fields read with ``getField(int)``: the typed
field API of the Python bindings costs ~30x more (../shared/QUICKFIX.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import quickfix as fix

from services.bench.plan import Address, bench_pool
from shared.compids import EXCHANGE_COMP_ID
from shared.fix.dictionary import exchange_dictionary_file
from shared.fix.versions import version


def data_dictionary_path() -> Path:
    """The exchange's FIX 4.4 dictionary (the installed FIX44.xml + TrdMatchID in ExecutionReport)."""
    return exchange_dictionary_file()


def bench_comp_ids(first: int, count: int, gateways: int = 1, fix_version: str = "4.4") -> list[str]:
    """``count`` CompIDs from the BENCH pool (of ``fix_version``) starting at number ``first``
    (1-based); with several gateways, the pool dealt over their ranges (plan.bench_pool), the number
    counting in that order."""
    pool = bench_pool(gateways, fix_version)
    if first < 1 or count < 1 or first - 1 + count > len(pool):
        names = sorted(pool)
        raise ValueError(f"number {first} + {count} sessions is outside the pool {names[0]}..{names[-1]}")
    return list(pool[first - 1:first - 1 + count])


def dictionary_settings(fix_version: str = "4.4") -> list[tuple[str, str]]:
    """What validates a session of ``fix_version``: the exchange's FIX 4.4 dictionary, or the stock
    one the quickfix package installs for the version (FIXT.1.1: transport and application)."""
    v = version(fix_version)
    return list(v.dictionary_settings(data_dictionary_path() if v.name == "4.4" else None).items())


def _defaults(conn_type: str, heartbeat_s: int, fix_version: str = "4.4") -> fix.Dictionary:
    d = fix.Dictionary()
    for key, value in (
        ("ConnectionType", conn_type),
        ("BeginString", version(fix_version).begin_string),
        ("StartTime", "00:00:00"),
        ("EndTime", "00:00:00"),
        ("HeartBtInt", str(heartbeat_s)),
        ("ReconnectInterval", "1"),
        ("UseDataDictionary", "Y"),
        *dictionary_settings(fix_version),
        ("ResetOnLogon", "Y"),
        ("ResetOnDisconnect", "Y"),
        ("SocketNodelay", "Y"),
        ("TimestampPrecision", "6"),
    ):
        d.setString(key, value)
    return d


def initiator_settings(host: str, port: int, comp_ids: Sequence[str], heartbeat_s: int = 30,
                       addresses: Mapping[str, Address] | None = None,
                       fix_version: str = "4.4") -> fix.SessionSettings:
    """One initiator session per CompID, to FIXLAB at host:port (or at ``addresses[comp_id]``, the
    gateway that accepts it), messages kept in memory, in ``fix_version``."""
    settings = fix.SessionSettings()
    d = _defaults("initiator", heartbeat_s, fix_version)
    d.setString("SocketConnectHost", host)
    d.setString("SocketConnectPort", str(port))
    # The bench never resends an order: the exchange gets gap fills instead of a stored copy.
    d.setString("PersistMessages", "N")
    settings.set(d)
    for comp_id in comp_ids:
        own = fix.Dictionary()
        if addresses is not None and comp_id in addresses:
            own.setString("SocketConnectHost", addresses[comp_id][0])
            own.setString("SocketConnectPort", str(addresses[comp_id][1]))
        settings.set(fix.SessionID(version(fix_version).begin_string, comp_id, EXCHANGE_COMP_ID), own)
    return settings


def acceptor_settings(port: int, comp_ids: Sequence[str], host: str = "127.0.0.1") -> fix.SessionSettings:
    """An acceptor for FIXLAB on host:port accepting the given client CompIDs (FIX 4.4, validated)."""
    settings = fix.SessionSettings()
    d = _defaults("acceptor", 30)
    d.setString("SocketAcceptPort", str(port))
    d.setString("SocketAcceptHost", host)
    settings.set(d)
    for comp_id in comp_ids:
        settings.set(fix.SessionID(version("4.4").begin_string, EXCHANGE_COMP_ID, comp_id), fix.Dictionary())
    return settings


class TransactTime:
    """TransactTime (60) text, rebuilt once a second: a bench needs a valid stamp, not a precise one."""

    __slots__ = ("_second", "_text")

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._text = time.strftime("%Y%m%d-%H:%M:%S.000", time.gmtime(now))
        return self._text


def order_template(symbol: str, price: str) -> fix.Message:
    """A NewOrderSingle without ClOrdID, Side and TransactTime: one unit, limit, day."""
    msg = fix.Message()
    msg.getHeader().setField(35, "D")
    for tag, value in ((21, "1"), (55, symbol), (38, "1"), (40, "2"), (44, price), (59, "0")):
        msg.setField(tag, value)
    return msg
