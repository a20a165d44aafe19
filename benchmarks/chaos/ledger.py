"""What the FIX clients saw, order by order, and what it adds up to against the matcher's state.

Pure: the client feeds it every ExecutionReport as text fields; ``tally`` compares it with the
matcher's resting orders and the terminal events on the bus. Tested with literals
(tests/unit/test_chaos_ledger.py).

Definitions (docs/RELIABILITY.md):
- acknowledged: got an ExecutionReport New (150=0).
- lost: acknowledged, then vanished: not resting in the matcher's book, no fill or cancel for it
  reached the client, and the bus holds no terminal event for it either.
- unreported: acknowledged and done (filled or cancelled on the bus) or resting with more filled than
  the client was told, but the client never got that report. The order is safe; a report is missing.
- duplicated: two ExecutionReports New with different ExecIDs for one ClOrdID, or fills (distinct
  ExecIDs) adding up to more than its quantity.
- redelivered: the same ExecID received more than once; resent: reports that came through a
  ResendRequest (PossDupFlag=Y), e.g. those produced while the client was away.
- unanswered: sent, no answer at all, and not in the book: it never reached the matcher.
- unconfirmed: sent, no ExecutionReport New reached the client, yet the matcher has it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(slots=True)
class OrderView:
    """One ClOrdID as the client saw it."""

    qty: int
    news: set[str] = field(default_factory=set)  # ExecIDs of 150=0
    fills: dict[str, int] = field(default_factory=dict)  # ExecID -> LastQty (32) of 150=F
    cancelled: bool = False
    rejected: bool = False
    reports: int = 0  # every ExecutionReport, repeats included
    repeats: int = 0  # an ExecID seen before
    possdup: int = 0  # reports flagged PossDupFlag=Y
    text: str = ""  # the Text (58) of a reject

    @property
    def filled_qty(self) -> int:
        return sum(self.fills.values())


class Ledger:
    """Every order a client sent and every report it received, by ClOrdID (thread-safe enough: the
    engine thread writes, the harness reads once the load is over)."""

    def __init__(self) -> None:
        self.orders: dict[str, OrderView] = {}
        self.stray = 0  # a report for a ClOrdID this client never sent

    def sent(self, clordid: str, qty: int) -> None:
        self.orders[clordid] = OrderView(qty)

    def report(self, fields: Mapping[int, str]) -> None:
        """Record one ExecutionReport given as tag -> value."""
        view = self.orders.get(fields.get(11, ""))
        if view is None:
            self.stray += 1
            return
        view.reports += 1
        if fields.get(43) == "Y":
            view.possdup += 1
        exec_id = fields.get(17, "")
        kind = fields.get(150, "")
        if kind == "0":
            if exec_id in view.news:
                view.repeats += 1
            view.news.add(exec_id)
        elif kind == "F":
            if exec_id in view.fills:
                view.repeats += 1
            view.fills[exec_id] = int(fields.get(32, "0") or 0)
        elif kind == "4":
            view.cancelled = True
        elif kind == "8":
            view.rejected = True
            view.text = fields.get(58, "")


@dataclass(frozen=True, slots=True)
class Tally:
    sent: int
    acknowledged: int
    rejected: int
    filled: int  # fully filled, as the client was told
    cancelled: int
    resting: int  # acknowledged and in the matcher's book at the end
    lost: int
    duplicated: int
    unreported: int
    redelivered: int
    resent: int  # reports that came again through a ResendRequest (PossDupFlag=Y)
    unanswered: int
    unconfirmed: int
    examples: tuple[str, ...]  # a few ClOrdIDs of lost or duplicated orders, to look at

    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0


def tally(orders: Mapping[str, OrderView], resting: Mapping[str, int],
          done_on_bus: Iterable[str] = (), *, limit_examples: int = 5) -> Tally:
    """Compare what the clients saw with the matcher's resting orders (ClOrdID -> filled so far)
    and the ClOrdIDs the bus holds a terminal event for (filled completely or cancelled)."""
    done = set(done_on_bus)
    acknowledged = rejected = filled = cancelled = rest = 0
    lost = duplicated = unreported = redelivered = resent = unanswered = unconfirmed = 0
    examples: list[str] = []
    for clordid, v in orders.items():
        redelivered += v.repeats
        resent += v.possdup
        over = len(v.news) > 1 or v.filled_qty > v.qty
        if over:
            duplicated += 1
            examples.append(f"{clordid}: {len(v.news)} New, filled {v.filled_qty} of {v.qty}")
        if v.rejected and not v.news:
            rejected += 1
            continue
        in_book = clordid in resting
        if not v.news:
            if in_book or clordid in done:
                unconfirmed += 1
            elif v.reports == 0:
                unanswered += 1
            continue
        acknowledged += 1
        if v.filled_qty >= v.qty:
            filled += 1
        elif v.cancelled:
            cancelled += 1
        elif in_book:
            rest += 1
            if resting[clordid] > v.filled_qty:
                unreported += 1
        elif clordid in done:
            unreported += 1
        else:
            lost += 1
            examples.append(f"{clordid}: New, filled {v.filled_qty} of {v.qty}, not in the book")
    return Tally(len(orders), acknowledged, rejected, filled, cancelled, rest, lost, duplicated, unreported,
                 redelivered, resent, unanswered, unconfirmed, tuple(examples[:limit_examples]))
