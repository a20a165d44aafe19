"""The gateway's settings: read once from the environment at start-up, frozen."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shared.compids import GatewayCompIds, gateway_comp_ids
from shared.config import (
    ENV_PREFIX,
    CommonSettings,
    ConfigError,
    common_settings,
    env_bool,
    env_float,
    env_int,
    env_opt_str,
    env_str,
    env_time,
    gateway_count,
)
from shared.fix.dictionary import installed_dictionary
from shared.schedule import Schedule, parse_schedule

STORES = ("memory", "file")


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything ``python -m services.gateway`` needs."""

    common: CommonSettings
    gateway_id: str
    fix_host: str  # address the acceptor binds
    fix_port: int
    sessions_file: Path | None  # extra sessions in QuickFIX's own settings format
    labs: bool
    run_dir: Path
    store: str  # "memory" (default: seed 000, everything in memory) or "file" for CLIENT sessions
    queue_max: int  # received records not yet on the bus before the acceptor refuses new orders
    batch_max: int  # commands the publisher publishes per transaction at most
    data_dictionary: Path  # the installed FIX44.xml; the gateway derives the exchange's own from it
    # Log out a session that leaves a TestRequest unanswered this many HeartBtInts after it
    # (0: off, QuickFIX's own behaviour, closing the connection at 2.4 x HeartBtInt).
    silent_logout: float = 0.8
    # The peers LAB/BOT/BENCH/CERT CompIDs log on from (FIXLAB_OWN_ADDRESSES; empty: any).
    own_addresses: tuple[str, ...] = ("127.0.0.1",)
    # How often the intake publisher reports its progress to the acceptor (which then forgets the
    # records that are on the bus); tests lengthen it to make a publisher die with reports owed.
    publisher_report_s: float = 0.1
    # A lone order (nothing received for this long before it) goes on the bus from the engine
    # thread itself, past the publisher process (direct.py); 0 turns the shortcut off.
    direct_idle_s: float = 0.00025
    # Three shortcut writes in a row slower than this rest the shortcut for 2 s (direct.py: fsyncs).
    direct_slow_s: float = 0.001
    # When the trading day ends (UTC): Day orders still resting are cancelled (services/gateway/endofday.py).
    end_of_day: dt.time = dt.time(21, 0)
    # The acceptor validates with the exchange's dictionary trimmed to the messages it speaks (N: the
    # whole of it, ~1 GiB resident for the 344 sessions; benchmarks/gateway_memory.py compares them).
    trim_dictionary: bool = True
    # Market data (marketdata.py): conflated updates go out this often; trades beyond md_max_trades
    # per symbol in one interval are summed per price. Each X costs the gateway ~70-110 µs whatever
    # its size (QuickFIX's send): 100 ms keeps 32 subscribers of a busy book near 2-3% of a core.
    md_interval_s: float = 0.1
    md_max_trades: int = 50
    # A connection whose peer leaves at least this many bytes unread for stall_s on end is cut off
    # (stalled.py); 0 seconds: never.
    stall_s: float = 30.0
    stall_bytes: int = 65536
    # Several gateways (deploy/SCALING.md section 3): this one accepts range ``gateway_index`` of
    # ``gateways`` of every CompID pool (shared.compids); 1 of 1 is every pool whole.
    gateways: int = 1
    gateway_index: int = 1
    # The trading day's phases (FIXLAB_SCHEDULE, shared/schedule.py); None: continuous all day.
    schedule: Schedule | None = None

    @property
    def comp_ids(self) -> GatewayCompIds:
        """The pooled CompIDs this gateway accepts (its range of each pool)."""
        return gateway_comp_ids(self.gateway_index, self.gateways)

    @property
    def dictionary_path(self) -> Path:
        """Where the gateway writes the exchange's dictionary (FIXLAB-FIX44.xml) at start-up."""
        return self.run_dir / "gateway" / self.gateway_id / "FIXLAB-FIX44.xml"

    @property
    def acceptor_dictionary_path(self) -> Path:
        """Where the gateway writes what its own sessions validate with: that file, trimmed."""
        return self.run_dir / "gateway" / self.gateway_id / "FIXLAB-FIX44-acceptor.xml"

    @property
    def store_dir(self) -> Path:
        return self.run_dir / "gateway" / self.gateway_id / "store"

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "gateway" / self.gateway_id / "log"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address the acceptor binds) is reached only from this machine."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def own_addresses(env: Mapping[str, str]) -> tuple[str, ...]:
    """FIXLAB_OWN_ADDRESSES: comma-separated IP addresses, 127.0.0.1 by default, "" for any."""
    raw = env.get(ENV_PREFIX + "OWN_ADDRESSES", "127.0.0.1")
    items = tuple(item.strip() for item in raw.split(",") if item.strip())
    for item in items:
        try:
            ipaddress.ip_address(item)
        except ValueError:
            raise ConfigError(f"FIXLAB_OWN_ADDRESSES item {item!r} is not an IP address") from None
    return items


def check_exposure(env: Mapping[str, str], fix_host: str) -> None:
    """Refuse to listen beyond loopback without a credentials file (docs/security.md), unless
    FIXLAB_ALLOW_OPEN=1 says something else guards the port (compose: the container's 0.0.0.0 is
    published on the host's loopback only)."""
    if is_loopback(fix_host) or env_opt_str(env, ENV_PREFIX + "CREDENTIALS"):
        return
    if env_bool(env, ENV_PREFIX + "ALLOW_OPEN", False):
        return
    raise ConfigError(f"FIXLAB_FIX_HOST={fix_host} listens beyond loopback without passwords: make a "
                      "credentials file with `FIXLAB_CREDENTIALS=creds fixlab passwd CLIENT01` and start "
                      "with FIXLAB_CREDENTIALS=creds (docs/security.md), or set FIXLAB_ALLOW_OPEN=1")


def gateway_settings(env: Mapping[str, str] | None = None) -> GatewaySettings:
    """Read and check the gateway's settings; raise ConfigError with one clear line."""
    env = os.environ if env is None else env
    common = common_settings(env)
    gateway_id = env_str(env, ENV_PREFIX + "GATEWAY_ID", "gw1")
    if not gateway_id.replace("-", "").replace("_", "").isalnum() or len(gateway_id) > 32:
        raise ConfigError(f"FIXLAB_GATEWAY_ID={gateway_id!r} must be letters, digits, '-' or '_' (up to 32)")
    sessions_raw = env_opt_str(env, ENV_PREFIX + "FIX_SESSIONS_FILE")
    sessions_file = Path(sessions_raw) if sessions_raw else None
    if sessions_file is not None and not sessions_file.is_file():
        raise ConfigError(f"FIXLAB_FIX_SESSIONS_FILE={sessions_raw!r} is not a readable file")
    store = env_str(env, ENV_PREFIX + "FIX_STORE", "memory").lower()
    if store not in STORES:
        raise ConfigError(f"FIXLAB_FIX_STORE={store!r} is not one of {', '.join(STORES)}")
    dd = installed_dictionary()
    if not dd.is_file():
        raise ConfigError(f"the FIX 4.4 data dictionary {dd} is missing (reinstall quickfix==1.16.0)")
    silent_logout = env_float(env, ENV_PREFIX + "SILENT_LOGOUT", 0.8, lo=0.0)
    if silent_logout >= 1.2:
        # The TestRequest goes out at 1.2 x HeartBtInt and the engine closes the connection at 2.4 x.
        raise ConfigError(f"FIXLAB_SILENT_LOGOUT={silent_logout} must be below 1.2 (HeartBtInts after the "
                          "TestRequest; the engine disconnects 1.2 HeartBtInts after it), or 0 for off")
    gateways = gateway_count(env)
    gateway_index = env_int(env, ENV_PREFIX + "GATEWAY_INDEX", 1, lo=1)
    if gateway_index > gateways:
        raise ConfigError(f"FIXLAB_GATEWAY_INDEX={gateway_index} is above FIXLAB_GATEWAYS={gateways}")
    fix_host = env_str(env, ENV_PREFIX + "FIX_HOST", "127.0.0.1")
    check_exposure(env, fix_host)
    return GatewaySettings(
        common=common,
        gateway_id=gateway_id,
        fix_host=fix_host,
        own_addresses=own_addresses(env),
        fix_port=env_int(env, ENV_PREFIX + "FIX_PORT", 9878, lo=1, hi=65535),
        sessions_file=sessions_file,
        labs=env_bool(env, ENV_PREFIX + "LABS", True),
        run_dir=Path(env_str(env, ENV_PREFIX + "RUN_DIR", ".run")).resolve(),
        store=store,
        queue_max=env_int(env, ENV_PREFIX + "GATEWAY_QUEUE", 100_000, lo=10),
        batch_max=env_int(env, ENV_PREFIX + "GATEWAY_BATCH", 5000, lo=1, hi=100_000),
        data_dictionary=dd,
        silent_logout=silent_logout,
        publisher_report_s=env_float(env, ENV_PREFIX + "PUBLISHER_REPORT_S", 0.1, lo=0.01, hi=60.0),
        # 21:00 UTC is 17:00 in New York in summer: the daily roll of the FX market, after the close of
        # the US and European equity sessions (a lab run from anywhere sees one day end, not several).
        end_of_day=env_time(env, ENV_PREFIX + "END_OF_DAY", "21:00"),
        trim_dictionary=env_bool(env, ENV_PREFIX + "TRIM_DICTIONARY", True),
        direct_idle_s=env_float(env, ENV_PREFIX + "DIRECT_IDLE_US", 250.0, lo=0.0, hi=1e7) / 1e6,
        direct_slow_s=env_float(env, ENV_PREFIX + "DIRECT_SLOW_US", 1000.0, lo=1.0, hi=1e8) / 1e6,
        md_interval_s=env_int(env, ENV_PREFIX + "MD_INTERVAL_MS", 100, lo=1, hi=60_000) / 1000,
        md_max_trades=env_int(env, ENV_PREFIX + "MD_MAX_TRADES", 50, lo=1, hi=100_000),
        stall_s=env_float(env, ENV_PREFIX + "FIX_STALL_S", 30.0, lo=0.0),
        stall_bytes=env_int(env, ENV_PREFIX + "FIX_STALL_BYTES", 65536, lo=1),
        gateways=gateways,
        gateway_index=gateway_index,
        schedule=parse_schedule(env.get("FIXLAB_SCHEDULE"), [i.symbol for i in common.instruments]),
    )
