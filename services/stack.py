"""The stack `make run` starts: one list of services, shared with docker-compose.yml's checks.

The matcher runs once per shard: FIXLAB_SHARDS maps instruments to shards ("ACORN.LAB:a,BIRCH.LAB:b"),
and each shard gets its own ``python -m services.matcher`` with FIXLAB_MATCHER_SHARD set (see
deploy/SCALING.md). With every instrument on the default shard there is one service named "matcher".

The gateway runs FIXLAB_GATEWAYS times (default 1: one service named "gateway", as ever). Gateway k of
N is a service named "gateway-k" with FIXLAB_GATEWAY_ID=gwk, FIXLAB_GATEWAY_INDEX=k (it accepts the
k-th range of every CompID pool, shared.compids) and FIXLAB_FIX_PORT = the base port + k - 1.

With FIXLAB_FIX_TLS_PORT set (``make run`` sets 9898), a service named "tls" runs stunnel4 in front
of the gateways (``python -m services.tls``, shared/tls.py): one TLS port per gateway, in a row.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping

from shared.config import ENV_PREFIX, env_int, gateway_count, gateway_fix_port, parse_instruments
from shared.supervisor import ServiceSpec
from shared.tls import tls_port

# Order matters: each service starts after the ones before it. Entries are (name, module).
SERVICE_MODULES = (
    ("matcher", "services.matcher"),
    ("gateway", "services.gateway"),
    ("web", "services.web"),
    ("bots", "services.bots"),
    ("tls", "services.tls"),  # only with FIXLAB_FIX_TLS_PORT set
)
# What each service talks to, among the services above (docker-compose.yml's depends_on says the
# same). Services stop in the reverse order: web and bots, then the gateway, then the matchers (and
# Redis, started by services/__main__.py, last), so a gateway's last SessionEnded still reaches them.
DEPENDS_ON = {
    "matcher": (),
    "gateway": ("matcher",),
    "web": ("gateway",),
    "bots": ("gateway",),
    "tls": ("gateway",),
}
SHARD_ENV = "FIXLAB_MATCHER_SHARD"
GATEWAY_ID_ENV = ENV_PREFIX + "GATEWAY_ID"
GATEWAY_INDEX_ENV = ENV_PREFIX + "GATEWAY_INDEX"
FIX_PORT_ENV = ENV_PREFIX + "FIX_PORT"
SESSIONS_FILE_ENV = ENV_PREFIX + "FIX_SESSIONS_FILE"
DEFAULT_FIX_PORT = 9878
# What the runner sets per instance (beside the variables every service shares).
INSTANCE_ENV = (SHARD_ENV, GATEWAY_ID_ENV, GATEWAY_INDEX_ENV, FIX_PORT_ENV, SESSIONS_FILE_ENV)


def tier(name: str) -> int:
    """How deep ``name`` sits in DEPENDS_ON: 0 needs no other service."""
    return max((tier(dep) + 1 for dep in DEPENDS_ON[name]), default=0)


def _present(module: str) -> bool:
    """``python -m module`` can run: a module, or a package with a ``__main__``."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is None:
            return False
        if spec.submodule_search_locations is None:
            return True
        return importlib.util.find_spec(f"{module}.__main__") is not None
    except ModuleNotFoundError:  # a parent package is missing too
        return False


def matcher_shards(env: Mapping[str, str]) -> tuple[str, ...]:
    """The shards FIXLAB_SHARDS and FIXLAB_INSTRUMENTS name, sorted (raises ConfigError)."""
    return tuple(sorted({i.shard for i in parse_instruments(env)}))


def gateway_instances(env: Mapping[str, str]) -> list[tuple[str, dict[str, str]]]:
    """(service name, its own variables) of each gateway FIXLAB_GATEWAYS asks for (raises ConfigError)."""
    count = gateway_count(env)
    if count == 1:
        return [("gateway", {})]
    base = env_int(env, FIX_PORT_ENV, DEFAULT_FIX_PORT, lo=1, hi=65536 - count)
    out = []
    for k in range(1, count + 1):
        own = {GATEWAY_ID_ENV: f"gw{k}", GATEWAY_INDEX_ENV: str(k),
               FIX_PORT_ENV: str(gateway_fix_port(base, k))}
        if k > 1:
            # A user's own sessions file names CompIDs of its own: one gateway (the first) owns them.
            own[SESSIONS_FILE_ENV] = ""
        out.append((f"gateway-{k}", own))
    return out


def stack_specs(python: str = sys.executable, env: Mapping[str, str] | None = None, *,
                only_present: bool = True) -> list[ServiceSpec]:
    """Every service as ``python -m MODULE``; by default only those present in this checkout."""
    env = os.environ if env is None else env
    shards = matcher_shards(env)  # checked even before the matcher exists: a bad map fails here
    gateways = gateway_instances(env)
    tls = tls_port(env) != 0
    specs = []
    for name, module in SERVICE_MODULES:
        if only_present and not _present(module):
            continue
        if name == "matcher":
            for shard in shards:
                label = name if len(shards) == 1 else f"{name}-{shard}"
                specs.append(ServiceSpec(label, (python, "-m", module), {SHARD_ENV: shard}, tier(name)))
        elif name == "gateway":
            for label, own in gateways:
                specs.append(ServiceSpec(label, (python, "-m", module), own, tier(name)))
        elif name == "tls" and not tls:
            continue
        else:
            specs.append(ServiceSpec(name, (python, "-m", module), tier=tier(name)))
    return specs


CLUSTER_SHARDS = ("a", "b")
CLUSTER_GATEWAYS = 2


def cluster_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """What ``python -m services --cluster`` sets where the environment says nothing: two gateways,
    and the instruments dealt in turn to two shards (ACORN.LAB:a,BIRCH.LAB:b by default), so each
    shard's keys land in a slot of their own (raises ConfigError on a bad instrument list)."""
    out = {}
    if not (env.get("FIXLAB_SHARDS") or "").strip():
        symbols = [i.symbol for i in parse_instruments(env)]
        out["FIXLAB_SHARDS"] = ",".join(f"{sym}:{CLUSTER_SHARDS[n % len(CLUSTER_SHARDS)]}"
                                        for n, sym in enumerate(symbols))
    if not (env.get(ENV_PREFIX + "GATEWAYS") or "").strip():
        out[ENV_PREFIX + "GATEWAYS"] = str(CLUSTER_GATEWAYS)
    return out
