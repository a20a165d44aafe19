"""The matcher's settings, read once from the environment at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from shared.config import (
    ENV_PREFIX,
    CommonSettings,
    ConfigError,
    Instrument,
    common_settings,
    env_float,
    env_int,
    env_str,
)


@dataclass(frozen=True, slots=True)
class MatcherSettings:
    """One matcher process: the shard it owns and how it reads, snapshots and reports."""

    common: CommonSettings
    shard: str
    batch: int  # stream entries per read (each entry holds a batch of commands)
    block_ms: int
    snapshot_every: int  # commands between snapshots
    snapshot_seconds: float  # and at most this long between snapshots while commands arrive
    depth_levels: int
    done_orders: int  # done orders per session whose final state a StatusRequest still gets
    health_interval_s: float
    lease_seconds: float  # a killed matcher's lease expires after this (at once on the same host)
    # A market order in continuous trading trades up to this far from the last trade price (basis
    # points; 500 = 5%), the rest is cancelled (issue 31).
    market_band_bps: int = 500
    max_open_orders: int = 20  # open orders per session (the 21st is refused, 103=3)

    @property
    def instruments(self) -> tuple[Instrument, ...]:
        """The instruments this shard trades."""
        return tuple(i for i in self.common.instruments if i.shard == self.shard)

    @property
    def consumer_name(self) -> str:
        # Fixed per shard: a restarted matcher must find the pending entries of the one before it.
        return f"matcher-{self.shard}"


def load(env: Mapping[str, str] | None = None) -> MatcherSettings:
    env = os.environ if env is None else env
    common = common_settings(env)
    shard = env_str(env, ENV_PREFIX + "MATCHER_SHARD", "0")
    settings = MatcherSettings(
        common=common,
        shard=shard,
        batch=env_int(env, ENV_PREFIX + "MATCHER_BATCH", 500, lo=1, hi=100_000),
        block_ms=env_int(env, ENV_PREFIX + "MATCHER_BLOCK_MS", 500, lo=1, hi=60_000),
        snapshot_every=env_int(env, ENV_PREFIX + "MATCHER_SNAPSHOT_EVERY", 100_000, lo=1),
        snapshot_seconds=env_float(env, ENV_PREFIX + "MATCHER_SNAPSHOT_SECONDS", 30.0, lo=0.0),
        depth_levels=env_int(env, ENV_PREFIX + "MATCHER_DEPTH_LEVELS", 10, lo=1, hi=1000),
        done_orders=env_int(env, ENV_PREFIX + "MATCHER_DONE_ORDERS", 100, lo=1, hi=100_000),
        max_open_orders=env_int(env, ENV_PREFIX + "MATCHER_MAX_OPEN_ORDERS", 20, lo=1, hi=1_000_000),
        health_interval_s=env_float(env, ENV_PREFIX + "MATCHER_HEALTH_SECONDS", 2.0, lo=0.1),
        lease_seconds=env_float(env, ENV_PREFIX + "MATCHER_LEASE_SECONDS", 6.0, lo=0.5),
        market_band_bps=env_int(env, ENV_PREFIX + "MARKET_BAND_BPS", 500, lo=1, hi=10_000),
    )
    if not settings.instruments:
        known = ", ".join(f"{i.symbol}:{i.shard}" for i in common.instruments)
        raise ConfigError(f"{ENV_PREFIX}MATCHER_SHARD={shard!r} owns no instrument "
                          f"(instrument:shard is {known}; see {ENV_PREFIX}SHARDS)")
    return settings
