"""The last trade of each instrument, from every shard's market-data stream, for the risk limits'
price collar (risk.py). Runs only when some session or firm has a PriceCollar.

At start, the newest Trade of each stream (XREVRANGE, up to ``LOOK_BACK`` entries back); then every
entry after where the stream stood (plain XREAD, no group: every gateway reads it all). Only Trade
messages matter; the rest of the market data is skipped after decoding.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from shared import streams
from shared.bus import REDIS_ERRORS, read_streams
from shared.schema import Trade, decode_batch

log = logging.getLogger(__name__)

LOOK_BACK = 200


class LastTrades:
    """Calls ``trade(symbol, price_ticks)`` for each trade, oldest first, on its own thread."""

    def __init__(self, r: Any, shards: Sequence[str], trade: Callable[[str, int], None],
                 interval_s: float = 0.05) -> None:
        self.r = r
        self.names = [streams.shard_market_stream(s) for s in shards]
        self.trade = trade
        self.interval_s = interval_s
        self._last: dict[str, bytes | str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-last-trade", daemon=True)

    def _apply(self, fields: Any) -> None:
        for msg in decode_batch(fields[streams.BATCH_FIELD]):
            if type(msg) is Trade:
                self.trade(msg.symbol, msg.price)

    def load(self) -> None:
        for name in self.names:
            rows: Any = self.r.xrevrange(name, count=LOOK_BACK)
            self._last[name] = rows[0][0] if rows else "0-0"
            for _entry_id, fields in reversed(rows or []):
                self._apply(fields)

    def start(self) -> LastTrades:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._last:
                    self.load()
                rows = read_streams(self.r, self._last, 1000)
                for name, entries in rows:
                    key = name.decode() if isinstance(name, bytes) else name
                    for entry_id, fields in entries:
                        self._last[key] = entry_id
                        self._apply(fields)
                if not rows:
                    self._stop.wait(self.interval_s)
            except REDIS_ERRORS as exc:
                log.warning("last trades: redis unavailable (%s); again in 1 s", exc)
                self._stop.wait(1.0)
            except Exception:
                log.exception("last trades: unexpected error; again in 1 s")
                self._stop.wait(1.0)
