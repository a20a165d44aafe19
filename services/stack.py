"""The stack `make run` starts: one list of services, shared with docker-compose.yml's checks."""

from __future__ import annotations

import importlib.util
import sys

from shared.supervisor import ServiceSpec

# Order matters: each service starts after the ones before it.
SERVICE_MODULES = ("matcher", "gateway", "web")


def stack_specs(python: str = sys.executable) -> list[ServiceSpec]:
    """Every service that exists in this checkout, as ``python -m services.NAME``."""
    specs = []
    for name in SERVICE_MODULES:
        module = f"services.{name}"
        if importlib.util.find_spec(f"{module}.__main__") is None:
            continue
        specs.append(ServiceSpec(name, (python, "-m", module)))
    return specs
