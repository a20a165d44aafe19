"""The bots' settings, read once from the environment, and their QuickFIX initiator settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import quickfix as fix

from shared.compids import BEGIN_STRING, BOT_COMP_IDS, EXCHANGE_COMP_ID, bot_comp_ids, gateway_of
from shared.config import (
    CommonSettings,
    ConfigError,
    common_settings,
    env_float,
    env_int,
    env_str,
    gateway_count,
    gateway_fix_port,
)
from shared.fix.dictionary import exchange_dictionary_file


@dataclass(frozen=True, slots=True)
class BotSettings:
    common: CommonSettings
    bots: int
    fix_port: int
    levels: int  # wanted levels per side and instrument (capped by max_open)
    max_open: int  # the exchange's open-order limit per session
    orders_per_s: float  # each bot's own pace when it replenishes
    heartbeat_s: int
    # Several gateways (FIXLAB_GATEWAYS): each bot connects to the gateway that accepts its CompID,
    # gateway k at gateway_hosts[k-1], port fix_port + k - 1 (the runner's and compose's layout).
    gateways: int = 1
    gateway_hosts: tuple[str, ...] = ("127.0.0.1",)

    @property
    def comp_ids(self) -> tuple[str, ...]:
        return bot_comp_ids(self.bots, self.gateways)

    def address(self, comp_id: str) -> tuple[str, int]:
        """Where the bot ``comp_id`` connects: its gateway's host and FIX port."""
        index = gateway_of(comp_id, self.gateways) or 1
        return self.gateway_hosts[index - 1], gateway_fix_port(self.fix_port, index)


def bot_settings(env: Mapping[str, str] | None = None) -> BotSettings:
    env = os.environ if env is None else env
    gateways = gateway_count(env)
    hosts = tuple(h.strip() for h in env_str(env, "FIXLAB_GATEWAY_HOSTS", "127.0.0.1").split(","))
    if len(hosts) == 1:
        hosts *= gateways
    if len(hosts) != gateways or not all(hosts):
        raise ConfigError(f"FIXLAB_GATEWAY_HOSTS names {len(hosts)} hosts for FIXLAB_GATEWAYS={gateways} "
                          "(one host for all, or one per gateway)")
    return BotSettings(
        common=common_settings(env),
        bots=env_int(env, "FIXLAB_BOTS", 2, lo=0, hi=len(BOT_COMP_IDS)),
        fix_port=env_int(env, "FIXLAB_FIX_PORT", 9878, lo=1, hi=65535),
        levels=env_int(env, "FIXLAB_BOT_LEVELS", 3, lo=1),
        max_open=env_int(env, "FIXLAB_MAX_OPEN_ORDERS", 20, lo=1),
        orders_per_s=env_float(env, "FIXLAB_BOT_ORDERS_PER_S", 5.0, lo=0.1),
        heartbeat_s=env_int(env, "FIXLAB_BOT_HEARTBEAT", 30, lo=1),
        gateways=gateways,
        gateway_hosts=hosts,
    )


def session_settings(s: BotSettings) -> fix.SessionSettings:
    lines = ["[DEFAULT]", "ConnectionType=initiator", "StartTime=00:00:00", "EndTime=00:00:00",
             f"HeartBtInt={s.heartbeat_s}", "ReconnectInterval=2", "ResetOnLogon=Y", "ResetOnLogout=Y",
             "ResetOnDisconnect=Y", "UseDataDictionary=Y",
             # Strict validation with the exchange's own dictionary (FIX44.xml + TrdMatchID in 35=8).
             f"DataDictionary={exchange_dictionary_file()}"]
    for comp in s.comp_ids:
        host, port = s.address(comp)
        lines += ["[SESSION]", f"BeginString={BEGIN_STRING}", f"SenderCompID={comp}",
                  f"TargetCompID={EXCHANGE_COMP_ID}", f"SocketConnectHost={host}",
                  f"SocketConnectPort={port}"]
    out = fix.SessionSettings()
    out.setFromString("\n".join(lines) + "\n")
    return out
