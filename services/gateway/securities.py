"""SecurityListRequest (35=x) in, SecurityList (35=y) out: the venue's instruments, from its config.

Pure, no QuickFIX, no Redis: the acceptor answers at once on the engine thread (no matcher knows
more about an instrument than the gateway's own configuration). Stock FIX 4.4 fields only, so that
a client validating with the stock FIX44.xml accepts the answer. Each instrument is one entry of
the NoRelatedSym (146) group:

- Symbol (55);
- SecurityDesc (107): the matching mode, ``price-time`` or ``pro-rata``;
- RoundLot (561) 1: quantities are whole units; MinTradeVol (562): the smallest order quantity;
- Text (58): what stock FIX 4.4 has no field for in this group (MinPriceIncrement 969 came with FIX
  5.0), as ``key=value`` words a program can split: ``tick=0.01 reference=100.00
  band=80.00-120.00 min_qty=1 max_qty=1000 matching=price-time``.

SecurityListRequestType (559): 0 one symbol (an unknown symbol gets 560=2, no instruments found,
with no group; no symbol at all, 560=1) and 4 all; the others (by type, product, trading session)
get 560=1, invalid or unsupported request. SecurityList has no Text field in FIX 4.4.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from shared.config import Instrument
from shared.fix.codec import SOH_TEXT as SOH

SECURITY_LIST_REQUEST = "x"
# The matcher's order limits (services.matcher.engine.Limits; a test keeps the two equal).
MIN_QTY = 1
MAX_QTY = 1000

REQUEST_SYMBOL = "0"  # SecurityListRequestType (559)
REQUEST_ALL = "4"
RESULT_VALID = 0  # SecurityRequestResult (560)
RESULT_INVALID = 1
RESULT_NOT_FOUND = 2


def matching(inst: Instrument) -> str:
    return "pro-rata" if inst.pro_rata else "price-time"


def describe(inst: Instrument) -> str:
    """The Text (58) of an instrument's entry: what stock FIX 4.4 has no field for, as key=value."""
    low, high = inst.band_ticks
    return (f"tick={inst.tick} reference={inst.to_price(inst.reference_ticks)} "
            f"band={inst.to_price(low)}-{inst.to_price(high)} min_qty={MIN_QTY} max_qty={MAX_QTY} "
            f"matching={matching(inst)}")


class SecurityLists:
    """Answer SecurityListRequests from the configured instruments; entries are built once."""

    def __init__(self, instruments: Iterable[Instrument], id_prefix: str) -> None:
        self.instruments = {i.symbol: i for i in instruments}
        if not self.instruments:
            raise ValueError("no instruments")
        self.id_prefix = id_prefix
        self._ids = itertools.count(1)  # next() is atomic under the GIL
        self._entries = {s: self._entry(i) for s, i in self.instruments.items()}

    @staticmethod
    def _entry(inst: Instrument) -> str:
        return SOH.join((f"55={inst.symbol}", f"107={matching(inst)}", "561=1", f"562={MIN_QTY}",
                         f"58={describe(inst)}")) + SOH

    def answer(self, f: dict[str, str]) -> str:
        """The SecurityList (from tag 35 on) answering a request's fields (``split_fields``)."""
        kind = f.get("559", "")
        if kind == REQUEST_ALL:
            symbols = list(self._entries)
        elif kind == REQUEST_SYMBOL:
            symbol = f.get("55")
            if not symbol:
                return self._head(f, RESULT_INVALID)
            if symbol not in self._entries:
                return self._head(f, RESULT_NOT_FOUND)
            symbols = [symbol]
        else:
            return self._head(f, RESULT_INVALID)
        return (self._head(f, RESULT_VALID) + f"393={len(symbols)}{SOH}893=Y{SOH}146={len(symbols)}{SOH}"
                + "".join(self._entries[s] for s in symbols))

    def _head(self, f: dict[str, str], result: int) -> str:
        return (f"35=y{SOH}320={f.get('320', 'NONE')}{SOH}322={self.id_prefix}-{next(self._ids)}{SOH}"
                f"560={result}{SOH}")
