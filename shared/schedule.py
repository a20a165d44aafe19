"""The trading day's schedule: which phase each instrument is in at a time; pure (no clock, no I/O).

``FIXLAB_SCHEDULE`` says it (``parse_schedule``):

- unset or empty (the default), or ``continuous``: no schedule, every instrument trades continuously
  all day, as the lab always did;
- ``demo`` or ``demo:SECONDS``: a whole day compressed into SECONDS (default 300, at least 60) and
  repeated, counted from the epoch so every gateway agrees: the opening call (0%), the opening auction
  and continuous trading (20%), a halt (50%), the resume auction and continuous trading (60%), the
  closing call (80%), the closing auction and closed (95%), the next opening call (100%);
- a day: ``;``-separated items, ``tz=ZONE`` (an IANA zone, default UTC: the exchange's time zone)
  and ``[SYMBOL ]HH:MM[:SS] PHASE`` (PHASE one of closed, pre_open, continuous, pre_close, halted),
  for example ``tz=Europe/London; 07:50 pre_open; 08:00 continuous; 16:30 pre_close; 16:35 closed;
  BIRCH.LAB 08:10 continuous``. An item without SYMBOL is every instrument's; an instrument's own
  item at the same time wins. Before an instrument's first item of the day, it is in the phase of
  its last (the day wraps round).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.config import ConfigError
from shared.schema import (
    PHASE_CLOSED,
    PHASE_CONTINUOUS,
    PHASE_HALTED,
    PHASE_NAMES,
    PHASE_PRE_CLOSE,
    PHASE_PRE_OPEN,
)

ENV = "FIXLAB_SCHEDULE"
DAY_S = 86_400
DEMO_DEFAULT_S = 300
DEMO_MIN_S = 60
# The demo day: (fraction of the cycle in thousandths, phase).
DEMO_DAY = ((0, PHASE_PRE_OPEN), (200, PHASE_CONTINUOUS), (500, PHASE_HALTED), (600, PHASE_CONTINUOUS),
            (800, PHASE_PRE_CLOSE), (950, PHASE_CLOSED))
PHASES = {name.lower(): code for code, name in PHASE_NAMES.items()}
_ITEM = re.compile(r"(?:(?P<symbol>\S+)\s+)?(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?\s+(?P<phase>\S+)")


@dataclass(frozen=True, slots=True)
class Schedule:
    """Each instrument's changes ((second of the cycle, phase), ...) sorted by time.

    ``cycle_s``: 86,400 for a day (seconds since local midnight in ``zone``); a demo's length (seconds
    since the epoch, modulo it)."""

    name: str
    cycle_s: int
    zone: dt.tzinfo
    changes: dict[str, tuple[tuple[int, int], ...]]

    def second_of_cycle(self, t_ns: int) -> int:
        secs = t_ns // 1_000_000_000
        if self.cycle_s != DAY_S:
            return secs % self.cycle_s
        local = dt.datetime.fromtimestamp(secs, self.zone)
        return local.hour * 3600 + local.minute * 60 + local.second

    def phase_at(self, symbol: str, t_ns: int) -> int:
        """The phase ``symbol`` is scheduled to be in at ``t_ns`` (ns since the epoch)."""
        changes = self.changes[symbol]
        now = self.second_of_cycle(t_ns)
        phase = changes[-1][1]  # before the first change: the last one's (it wraps round)
        for at, p in changes:
            if at > now:
                break
            phase = p
        return phase

    def phases_at(self, t_ns: int) -> dict[str, int]:
        return {symbol: self.phase_at(symbol, t_ns) for symbol in self.changes}

    def next_change(self, symbol: str, t_ns: int) -> tuple[float, int] | None:
        """Seconds from ``t_ns`` to ``symbol``'s next scheduled change, and the phase it changes to;
        None for an instrument the schedule does not name. (A day's count is in local seconds of the
        day: across a summer-time change it is an hour out, which a countdown can bear.)"""
        changes = self.changes.get(symbol)
        if not changes:
            return None
        now = self.second_of_cycle(t_ns) + (t_ns % 1_000_000_000) / 1e9
        for at, phase in changes:
            if at > now:
                return at - now, phase
        at, phase = changes[0]  # past the last one: the cycle's first, next time round
        return at + self.cycle_s - now, phase


def _phase(text: str, where: str) -> int:
    phase = PHASES.get(text.lower().replace("-", "_"))
    if phase is None:
        raise ConfigError(f"{ENV}: {where}: unknown phase {text!r}: one of {', '.join(PHASES)}")
    return phase


def parse_schedule(text: str | None, symbols: Iterable[str]) -> Schedule | None:
    """The schedule ``text`` says for the instruments ``symbols``; None: continuous all day.
    Raises ConfigError with one clear line for anything it cannot read."""
    symbols = tuple(symbols)
    spec = (text or "").strip()
    if not spec or spec.lower() == "continuous":
        return None
    if spec.lower().startswith("demo"):
        rest = spec[4:]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            raise ConfigError(f"{ENV}={spec!r}: a demo day is 'demo' or 'demo:SECONDS'")
        cycle = int(rest[1:]) if rest else DEMO_DEFAULT_S
        if cycle < DEMO_MIN_S:
            raise ConfigError(f"{ENV}={spec!r}: a demo day lasts at least {DEMO_MIN_S} s")
        day = tuple((cycle * thousandths // 1000, phase) for thousandths, phase in DEMO_DAY)
        return Schedule(f"demo:{cycle}", cycle, dt.UTC, {s: day for s in symbols})
    zone: dt.tzinfo = dt.UTC
    common: dict[int, int] = {}
    own: dict[str, dict[int, int]] = {}
    for raw in spec.split(";"):
        item = raw.strip()
        if not item:
            continue
        if item.lower().startswith("tz="):
            try:
                zone = ZoneInfo(item[3:].strip())
            except (ZoneInfoNotFoundError, ValueError):
                raise ConfigError(f"{ENV}: unknown time zone {item[3:].strip()!r}") from None
            continue
        m = _ITEM.fullmatch(item)
        if m is None:
            raise ConfigError(f"{ENV}: {item!r} is not '[SYMBOL ]HH:MM[:SS] PHASE' nor 'tz=ZONE'")
        h, mi, s = int(m["h"]), int(m["m"]), int(m["s"] or 0)
        if h > 23 or mi > 59 or s > 59:
            raise ConfigError(f"{ENV}: {item!r}: no such time of day")
        phase = _phase(m["phase"], repr(item))
        symbol = m["symbol"]
        if symbol is not None and symbol not in symbols:
            raise ConfigError(f"{ENV}: {item!r}: unknown symbol {symbol!r}: this exchange trades "
                              f"{', '.join(symbols)}")
        (common if symbol is None else own.setdefault(symbol, {}))[h * 3600 + mi * 60 + s] = phase
    changes: dict[str, tuple[tuple[int, int], ...]] = {}
    for symbol in symbols:
        merged = {**common, **own.get(symbol, {})}
        if not merged:
            raise ConfigError(f"{ENV}: no item for {symbol} (give some without a symbol, for every "
                              "instrument)")
        changes[symbol] = tuple(sorted(merged.items()))
    return Schedule("day", DAY_S, zone, changes)

