"""The stack `make run` starts: one list of services, shared with docker-compose.yml's checks.

The matcher runs once per shard: FIXLAB_SHARDS maps instruments to shards ("ACORN.LAB:a,BIRCH.LAB:b"),
and each shard gets its own ``python -m services.matcher`` with FIXLAB_MATCHER_SHARD set (see
deploy/SCALING.md). With every instrument on the default shard there is one service named "matcher".
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping

from shared.config import parse_instruments
from shared.supervisor import ServiceSpec

# Order matters: each service starts after the ones before it. Entries are (name, module).
SERVICE_MODULES = (
    ("matcher", "services.matcher"),
    ("gateway", "services.gateway"),
    ("web", "services.web"),
    ("bots", "services.bots"),
)
# What each service talks to, among the services above (docker-compose.yml's depends_on says the
# same). Services stop in the reverse order: web and bots, then the gateway, then the matchers (and
# Redis, started by services/__main__.py, last), so a gateway's last SessionEnded still reaches them.
DEPENDS_ON = {
    "matcher": (),
    "gateway": ("matcher",),
    "web": ("gateway",),
    "bots": ("gateway",),
}
SHARD_ENV = "FIXLAB_MATCHER_SHARD"


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


def stack_specs(python: str = sys.executable, env: Mapping[str, str] | None = None, *,
                only_present: bool = True) -> list[ServiceSpec]:
    """Every service as ``python -m MODULE``; by default only those present in this checkout."""
    env = os.environ if env is None else env
    shards = matcher_shards(env)  # checked even before the matcher exists: a bad map fails here
    specs = []
    for name, module in SERVICE_MODULES:
        if only_present and not _present(module):
            continue
        if name == "matcher":
            for shard in shards:
                label = name if len(shards) == 1 else f"{name}-{shard}"
                specs.append(ServiceSpec(label, (python, "-m", module), {SHARD_ENV: shard}, tier(name)))
        else:
            specs.append(ServiceSpec(name, (python, "-m", module), tier=tier(name)))
    return specs
