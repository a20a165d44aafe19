"""The client's prompt (services/client/commands.py): seed 000's fixcli verbs, one clear line when bad."""

from __future__ import annotations

import pytest

from services.client.commands import HELP, Command, CommandError, help_text, parse
from shared.schema import BUY, DAY, FOK, GTC, IOC, SELL


def test_buy_and_sell_as_fixcli_types_them() -> None:
    assert parse("buy ACORN.LAB 99.90 10") == Command("buy", symbol="ACORN.LAB", side=BUY, price="99.90",
                                                     qty=10, tif=DAY)
    assert parse("sell birch.lab 25 3 ioc") == Command("sell", symbol="BIRCH.LAB", side=SELL, price="25",
                                                      qty=3, tif=IOC)
    assert parse("buy X 1 1 gtc").tif == GTC  # type: ignore[union-attr]
    assert parse("buy X 1 1 4").tif == FOK  # type: ignore[union-attr]


def test_order_verbs_and_session_verbs() -> None:
    assert parse("cancel ME1-1") == Command("cancel", ref="ME1-1")
    assert parse("status 3") == Command("status", ref="3")
    assert parse("replace T-1 100.10 5") == Command("replace", ref="T-1", price="100.10", qty=5)
    assert parse("replace T-1 - 5") == Command("replace", ref="T-1", price="", qty=5)
    assert parse("book ACORN.LAB 5") == Command("book", symbol="ACORN.LAB", n=5)
    assert parse("show 12") == Command("show", n=12)
    for verb in ("orders", "fills", "seq", "drop", "silent", "talk", "quit", "help", "logout", "logon"):
        assert parse(verb) == Command(verb)
    assert parse("exit") == Command("quit")
    assert parse("go-silent") == Command("silent")
    assert parse("   ") is None


@pytest.mark.parametrize(("line", "says"), [
    ("bogus", "unknown command 'bogus'"),
    ("buy ACORN.LAB 99.90", "usage: buy SYMBOL [mkt|stop STOP|stoplimit STOP] PRICE QTY"),
    ("buy ACORN.LAB abc 10", "price 'abc' is not a number"),
    ("buy ACORN.LAB -1 10", "not a positive number"),
    ("sell ACORN.LAB 1 ten", "quantity 'ten' is not a whole number"),
    ("buy ACORN.LAB 1 1 gtd", "TimeInForce 'gtd'"),
    ("cancel", "usage: cancel ID"),
    ("replace T-1 - -", "not - -"),
    ("seq now", "seq takes no arguments"),
    ("show x", "usage: show N"),
    ('buy "ACORN', "cannot read"),
])
def test_a_bad_command_is_one_clear_line(line: str, says: str) -> None:
    with pytest.raises(CommandError) as err:
        parse(line)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_help_lists_every_verb() -> None:
    lines = help_text()
    assert len(lines) == len(HELP)
    assert all(any(line.startswith(verb) for line in lines) for verb in HELP)


def test_market_stop_and_stop_limit_orders_and_the_auction_tifs() -> None:
    from shared.fix.orders import LabOrders
    from shared.schema import AT_CLOSE, AT_OPEN, LabCommand

    mkt = parse("buy ACORN.LAB mkt 10")
    stop = parse("sell acorn.lab stop 98.50 10 gtc")
    stop_limit = parse("buy ACORN.LAB stoplimit 101.00 101.50 5 opg")
    assert mkt is not None and stop is not None and stop_limit is not None
    assert (mkt.kind, mkt.price, mkt.stop, mkt.qty) == ("mkt", "", "", 10)
    assert (stop.kind, stop.symbol, stop.price, stop.stop, stop.qty, stop.tif) == ("stop", "ACORN.LAB", "",
                                                                                  "98.50", 10, 1)
    assert (stop_limit.kind, stop_limit.stop, stop_limit.price, stop_limit.qty, stop_limit.tif) == (
        "stoplimit", "101.00", "101.50", 5, AT_OPEN)
    assert parse("buy ACORN.LAB 100.00 5 atc").tif == AT_CLOSE  # type: ignore[union-attr]
    for bad in ("buy ACORN.LAB mkt", "sell ACORN.LAB stop 10", "buy ACORN.LAB stoplimit 101 5",
                "buy ACORN.LAB stop x 5"):
        with pytest.raises(CommandError):
            parse(bad)
    # What goes on the wire: 40 and 99 as each type needs, no 44 where there is no price.
    orders = LabOrders("t")
    terms = []
    for value, price in (("mkt", ""), ("stop:98.50", ""), ("stoplimit:101.00", "101.50")):
        _t, fields = orders.new_order(LabCommand("", "order", symbol="ACORN.LAB", side=1, price=price, qty=5,
                                                 value=value), 0)
        terms.append([(tag, v) for tag, v in fields if tag in (40, 44, 99)])
    assert terms == [[(40, "1")], [(40, "3"), (99, "98.50")], [(40, "4"), (44, "101.50"), (99, "101.00")]]


def test_status_of_a_symbol_is_a_security_status_request() -> None:
    assert parse("status acorn.lab") == Command("status", symbol="ACORN.LAB")
    assert parse("status 3") == Command("status", ref="3")
