"""Configuration from the environment: one frozen settings object per service, read once.

Every service builds its settings with the helpers here, so an invalid value fails at start-up
with one clear line (``ConfigError``) instead of surfacing later as a confusing traceback.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from shared.compids import MAX_GATEWAYS

ENV_PREFIX = "FIXLAB_"


class ConfigError(ValueError):
    """An environment variable has a value the service cannot run with."""


def _raw(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(env: Mapping[str, str], name: str, default: str) -> str:
    return _raw(env, name) or default


def env_opt_str(env: Mapping[str, str], name: str) -> str | None:
    return _raw(env, name)


def env_int(env: Mapping[str, str], name: str, default: int, *, lo: int | None = None,
            hi: int | None = None) -> int:
    raw = _raw(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if lo is not None and value < lo:
        raise ConfigError(f"{name}={value} is below its minimum {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{name}={value} is above its maximum {hi}")
    return value


def env_float(env: Mapping[str, str], name: str, default: float, *, lo: float | None = None,
              hi: float | None = None) -> float:
    raw = _raw(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name}={raw!r} is not a finite number")
    if lo is not None and value < lo:
        raise ConfigError(f"{name}={value} is below its minimum {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{name}={value} is above its maximum {hi}")
    return value


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _raw(env, name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_time(env: Mapping[str, str], name: str, default: str) -> dt.time:
    """A time of day written HH:MM (24-hour), e.g. FIXLAB_END_OF_DAY=21:00."""
    raw = _raw(env, name) or default
    m = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", raw)
    if m is None:
        raise ConfigError(f"{name}={raw!r} is not a time of day HH:MM (00:00 to 23:59)")
    return dt.time(int(m.group(1)), int(m.group(2)))


def redact_url(url: str) -> str:
    """Hide a password in a redis:// URL so it never reaches a log or a repr."""
    return re.sub(r"//([^:/@]*):[^@]*@", r"//\1:***@", url)


_SYMBOL = re.compile(r"^[A-Z][A-Z0-9.]{0,15}$")


@dataclass(frozen=True, slots=True)
class Instrument:
    """A tradable instrument: prices inside the exchange are integer ticks of ``tick``."""

    symbol: str
    reference_ticks: int
    tick: Decimal
    shard: str = "0"
    pro_rata: bool = False

    @property
    def band_ticks(self) -> tuple[int, int]:
        """The lowest and highest accepted price, 20% either side of the reference."""
        low = -(-self.reference_ticks * 8 // 10)  # ceil(0.8 * ref)
        high = self.reference_ticks * 12 // 10  # floor(1.2 * ref)
        return low, high

    def to_ticks(self, price: Decimal) -> int | None:
        """Return the price in ticks, or None when it is not a whole number of ticks."""
        ticks, rem = divmod(price, self.tick)
        if rem != 0:
            return None
        return int(ticks)

    def to_price(self, ticks: int) -> Decimal:
        return ticks * self.tick


DEFAULT_INSTRUMENTS = "ACORN.LAB:100.00,BIRCH.LAB:25.00"


def parse_instruments(env: Mapping[str, str]) -> tuple[Instrument, ...]:
    """Read FIXLAB_INSTRUMENTS ("SYM:REF,SYM:REF"), FIXLAB_TICK, FIXLAB_PRO_RATA and FIXLAB_SHARDS.

    FIXLAB_PRO_RATA names the instruments matched pro-rata (comma separated); FIXLAB_SHARDS maps
    instruments to matcher shards ("ACORN.LAB:a,BIRCH.LAB:b"); unlisted instruments go to shard "0".
    """
    name = ENV_PREFIX + "INSTRUMENTS"
    spec = env_str(env, name, DEFAULT_INSTRUMENTS)
    tick_raw = env_str(env, ENV_PREFIX + "TICK", "0.01")
    try:
        tick = Decimal(tick_raw)
    except InvalidOperation:
        raise ConfigError(f"FIXLAB_TICK={tick_raw!r} is not a decimal") from None
    if tick <= 0 or not tick.is_finite():
        raise ConfigError(f"FIXLAB_TICK={tick_raw!r} must be a positive decimal")
    pro_rata = {s.strip() for s in env_str(env, ENV_PREFIX + "PRO_RATA", "").split(",") if s.strip()}
    shards: dict[str, str] = {}
    for item in env_str(env, ENV_PREFIX + "SHARDS", "").split(","):
        if not item.strip():
            continue
        sym, sep, shard = item.strip().partition(":")
        if not sep or not shard.strip():
            raise ConfigError(f"FIXLAB_SHARDS item {item!r} is not SYMBOL:SHARD")
        shards[sym.strip()] = shard.strip()
    out: list[Instrument] = []
    for item in spec.split(","):
        sym, sep, ref = item.strip().partition(":")
        if not sep:
            raise ConfigError(f"{name} item {item!r} is not SYMBOL:REFERENCE_PRICE")
        if not _SYMBOL.match(sym):
            raise ConfigError(f"{name}: {sym!r} is not a symbol (A-Z, 0-9 and '.', up to 16)")
        try:
            ref_px = Decimal(ref)
        except InvalidOperation:
            raise ConfigError(f"{name}: reference price {ref!r} of {sym} is not a decimal") from None
        ticks, rem = divmod(ref_px, tick)
        if ref_px <= 0 or rem != 0:
            raise ConfigError(f"{name}: reference price {ref} of {sym} is not a positive multiple of {tick}")
        out.append(Instrument(sym, int(ticks), tick, shards.get(sym, "0"), sym in pro_rata))
    symbols = [i.symbol for i in out]
    if len(set(symbols)) != len(symbols):
        raise ConfigError(f"{name} names an instrument twice: {spec}")
    unknown = (pro_rata | set(shards)) - set(symbols)
    if unknown:
        raise ConfigError(f"FIXLAB_PRO_RATA/FIXLAB_SHARDS name unknown instruments: {sorted(unknown)}")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class CommonSettings:
    """What every service shares: where Redis is and what is traded."""

    redis_url: str
    instruments: tuple[Instrument, ...]
    stream_maxlen: int = 1_000_000
    extra: Mapping[str, str] = field(default_factory=dict, repr=False)
    # On a Redis Cluster, the lean connections (shared.cluster_node) where one Redis has them;
    # FIXLAB_CLUSTER_LEAN=0 goes back to redis-py's cluster client for every call.
    cluster_lean: bool = True
    # On a Redis Cluster with replicas: what is told outside Redis waits for this many to hold it
    # (shared.replication; WAIT). 0, the default: not waited for (and always so on one Redis).
    wait_replicas: int = 0

    def __repr__(self) -> str:
        return (f"CommonSettings(redis_url={redact_url(self.redis_url)!r}, "
                f"instruments={[i.symbol for i in self.instruments]!r})")

    def instrument(self, symbol: str) -> Instrument | None:
        for inst in self.instruments:
            if inst.symbol == symbol:
                return inst
        return None

    @property
    def shards(self) -> tuple[str, ...]:
        return tuple(sorted({i.shard for i in self.instruments}))


def common_settings(env: Mapping[str, str] | None = None) -> CommonSettings:
    env = os.environ if env is None else env
    url = env_opt_str(env, "REDIS_URL")
    if url is None:
        raise ConfigError("REDIS_URL is not set (make run starts a private redis-server and sets it)")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"REDIS_URL={redact_url(url)!r} is not a redis://, rediss:// or unix:// URL")
    return CommonSettings(
        redis_url=url,
        instruments=parse_instruments(env),
        stream_maxlen=env_int(env, ENV_PREFIX + "STREAM_MAXLEN", 1_000_000, lo=1000),
        cluster_lean=env_bool(env, ENV_PREFIX + "CLUSTER_LEAN", True),
        wait_replicas=env_int(env, ENV_PREFIX + "REDIS_WAIT_REPLICAS", 0, lo=0, hi=5),
    )


def gateway_count(env: Mapping[str, str]) -> int:
    """FIXLAB_GATEWAYS: how many gateways share the CompID pools (shared.compids), 1 by default."""
    return env_int(env, ENV_PREFIX + "GATEWAYS", 1, lo=1, hi=MAX_GATEWAYS)


def gateway_fix_port(base_port: int, index: int) -> int:
    """Gateway ``index``'s (1-based) FIX port: FIXLAB_FIX_PORT for the first, the next ones after it."""
    return base_port + index - 1
