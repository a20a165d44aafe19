"""The book and pro-rata allocation: own scenarios, seed 003's worked examples, ported liquibook cases."""

from __future__ import annotations

from decimal import Decimal

import pytest

from services.matcher.book import Book, Order
from services.matcher.prorata import allocate
from shared.config import Instrument
from shared.schema import BUY, SELL

FIFO = Instrument("LQB.LAB", 1250, Decimal("0.01"))
PRO = Instrument("PRO.LAB", 10000, Decimal("0.01"), pro_rata=True)

_n = 0


def order(side: int, price: int, qty: int) -> Order:
    global _n
    _n += 1
    return Order(f"o{_n}", "S", f"c{_n}", "X", side, price, qty, 0, "gw")


def rest(book: Book, *orders: Order) -> None:
    for o in orders:
        assert not book.crosses(o.side, o.price)
        book.add(o)


def depth(book: Book) -> tuple[tuple[tuple[int, int, int], ...], tuple[tuple[int, int, int], ...]]:
    return book.depth(10)


# --------------------------------------------------------------------------- pro-rata (seed 003)

def test_seed_003_rounding_residual_goes_fifo_to_the_oldest() -> None:
    # seed 003 (orderbook-fix README): 500 against A=100, B=200, C=300 -> 83/166/250 + 1 to A.
    assert allocate(500, [100, 200, 300]) == [84, 166, 250]


def test_seed_003_exact_split() -> None:
    # seed 003: 1000 against 300/300/400 -> 300/300/400, no residual.
    assert allocate(1000, [300, 300, 400]) == [300, 300, 400]


def test_seed_003_pathological_residual() -> None:
    # orderbook-fix docs/pro_rata.md: five orders of 7, aggressor 11 -> 3, 2, 2, 2, 2.
    assert allocate(11, [7, 7, 7, 7, 7]) == [3, 2, 2, 2, 2]


def test_allocation_never_exceeds_a_resting_order_and_sums_to_the_fill() -> None:
    for qty in range(1, 40):
        leaves = [1, 5, 2, 9]
        fills = allocate(qty, leaves)
        assert sum(fills) == min(qty, sum(leaves))
        assert all(0 <= f <= q for f, q in zip(fills, leaves, strict=True))


def test_residual_skips_orders_already_full() -> None:
    # 3 against 1/1/100 (T=102): floors 0/0/2, residual 1 goes to the oldest with room: A.
    assert allocate(3, [1, 1, 100]) == [1, 0, 2]


def test_pro_rata_book_fills_level_by_allocation() -> None:
    book = Book(PRO)
    a, b, c = order(SELL, 10000, 100), order(SELL, 10000, 200), order(SELL, 10000, 300)
    rest(book, a, b, c)
    fills = book.match(BUY, 10000, 500)
    assert [(m, q) for m, q, _ in fills] == [(a, 84), (b, 166), (c, 250)]
    assert (a.leaves, b.leaves, c.leaves) == (16, 34, 50)
    assert depth(book) == ((), ((10000, 100, 3),))


def test_pro_rata_walks_levels_in_price_order() -> None:
    # orderbook-fix pro_rata_test.cpp AcrossMultiplePriceLevels: the best level is taken whole first.
    book = Book(PRO)
    o1, o2, o3 = order(SELL, 10000, 100), order(SELL, 10001, 200), order(SELL, 10001, 200)
    rest(book, o1, o2, o3)
    fills = book.match(BUY, 10001, 300)
    assert [(m, q, p) for m, q, p in fills] == [(o1, 100, 10000), (o2, 100, 10001), (o3, 100, 10001)]
    assert book.resting == 2


def test_pro_rata_removes_orders_filled_completely() -> None:
    # orderbook-fix pro_rata_test.cpp FullyFilledOrdersAreRemovedFromBook.
    book = Book(PRO)
    rest(book, order(SELL, 10000, 100), order(SELL, 10000, 100))
    book.match(BUY, 10000, 200)
    assert book.best_ask() is None and book.resting == 0


# --------------------------------------------------------------------------- FIFO (own scenarios)

def test_trade_at_resting_price_and_remainder_rests_behind() -> None:
    book = Book(FIFO)
    s1 = order(SELL, 1250, 5)
    older_bid = order(BUY, 1251, 1)
    rest(book, s1)
    fills = book.match(BUY, 1251, 7)
    assert fills == [(s1, 5, 1250)]  # at the resting order's price, not the incoming limit
    rest(book, older_bid)
    remainder = order(BUY, 1251, 7)
    remainder.leaves = 2
    book.add(remainder)
    assert list(book.orders()) == [older_bid, remainder]
    assert depth(book) == (((1251, 3, 2),), ())


def test_fifo_within_a_level() -> None:
    book = Book(FIFO)
    first, second, third = order(BUY, 1250, 3), order(BUY, 1250, 3), order(BUY, 1250, 3)
    rest(book, first, second, third)
    fills = book.match(SELL, 1250, 4)
    assert [(m, q) for m, q, _ in fills] == [(first, 3), (second, 1)]
    assert list(book.orders()) == [second, third]
    assert (second.leaves, second.cum, second.cost) == (2, 1, 1250)


def test_remove_and_reduce_keep_level_totals() -> None:
    book = Book(FIFO)
    a, b = order(BUY, 1250, 3), order(BUY, 1250, 4)
    rest(book, a, b)
    book.reduce(b, 1)
    assert depth(book) == (((1250, 4, 2),), ())
    book.remove(a)
    assert depth(book) == (((1250, 1, 1),), ())
    book.remove(b)
    assert depth(book) == ((), ()) and book.resting == 0 and not book.bid_prices


# --------------------------------------------------------------------------- ported from liquibook
# enewhuis/liquibook test/unit/ut_order_book.cpp; prices in ticks, "verify depth" as (price, qty, n).

def test_liquibook_add_multi_match_bid() -> None:
    # TestAddMultiMatchBid: bid 500 @1251 takes ask0 (300) then ask2 (200), ask1 @1252 stays.
    book = Book(FIFO)
    ask1, ask0, ask2 = order(SELL, 1252, 100), order(SELL, 1251, 300), order(SELL, 1251, 200)
    bid0 = order(BUY, 1250, 100)
    rest(book, bid0, ask0, ask1, ask2)
    assert depth(book) == (((1250, 100, 1),), ((1251, 500, 2), (1252, 100, 1)))
    fills = book.match(BUY, 1251, 500)
    assert [(m, q, p) for m, q, p in fills] == [(ask0, 300, 1251), (ask2, 200, 1251)]
    assert depth(book) == (((1250, 100, 1),), ((1252, 100, 1),))
    assert next(book.levels(SELL))[0] is ask1


def test_liquibook_add_partial_match_bid() -> None:
    # TestAddPartialMatchBid: bid 350 @7251 fills 200 against ask2, 150 rests as the best bid.
    book = Book(Instrument("LQ2.LAB", 7250, Decimal("0.01")))
    ask0, ask1, ask2 = order(SELL, 7253, 300), order(SELL, 7252, 100), order(SELL, 7251, 200)
    bid0, bid1 = order(BUY, 7250, 100), order(BUY, 7251, 350)
    rest(book, bid0, ask0, ask1, ask2)
    fills = book.match(BUY, 7251, 350)
    assert [(m, q) for m, q, _ in fills] == [(ask2, 200)]
    bid1.leaves = 150
    book.add(bid1)
    assert depth(book) == (((7251, 150, 1), (7250, 100, 1)), ((7252, 100, 1), (7253, 300, 1)))


def test_liquibook_add_multi_partial_match_ask() -> None:
    # TestAddMultiPartialMatchAsk: ask 700 @1251 fills bid1 370 and bid2 200; 130 rests.
    book = Book(FIFO)
    ask0, bid1, bid2, bid0 = (order(SELL, 1253, 300), order(BUY, 1251, 370), order(BUY, 1251, 200),
                              order(BUY, 1250, 100))
    rest(book, bid0, ask0, bid1, bid2)
    assert depth(book) == (((1251, 570, 2), (1250, 100, 1)), ((1253, 300, 1),))
    fills = book.match(SELL, 1251, 700)
    assert [(m, q, p) for m, q, p in fills] == [(bid1, 370, 1251), (bid2, 200, 1251)]
    assert depth(book) == (((1250, 100, 1),), ((1253, 300, 1),))


def test_liquibook_repeat_match_bid() -> None:
    # TestRepeatMatchBid: asks of 100, 300, 200 and 400 @1251 take a resting bid of 900 in turn;
    # the last one fills 300 and rests with 100.
    book = Book(FIFO)
    bid1, bid0 = order(BUY, 1251, 900), order(BUY, 1250, 100)
    rest(book, bid0, bid1)
    for qty, filled, left in ((100, 100, 800), (300, 300, 500), (200, 200, 300), (400, 300, 0)):
        assert book.match(SELL, 1251, qty) == [(bid1, filled, 1251)]
        assert bid1.leaves == left
    assert (bid1.cum, bid1.cost) == (900, 900 * 1251)
    assert depth(book) == (((1250, 100, 1),), ())


@pytest.mark.parametrize("side", [BUY, SELL])
def test_limit_is_respected(side: int) -> None:
    book = Book(FIFO)
    other = SELL if side == BUY else BUY
    rest(book, order(other, 1255 if side == BUY else 1245, 10))
    assert book.match(side, 1250, 10) == []
