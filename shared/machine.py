"""What machine and versions a benchmark ran on (read from /proc and the tools themselves).

Every benchmark of the project (bench suite, matcher, gateway intake) records this in its JSON.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def _redis_version() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        return "not installed"
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def describe(packages: tuple[str, ...] = ()) -> dict[str, Any]:
    """The machine, the versions (plus ``packages``' own) and the commit, as JSON-ready dicts."""
    out: dict[str, Any] = {
        "machine": {
            "cpu_model": _cpu_model(),
            "logical_cpus": os.cpu_count(),
            "memory_gib": _memory_gib(),
            "kernel": f"{platform.system()} {platform.release()}",
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {
            "python": platform.python_version(),
            "quickfix": _package_version("quickfix"),
            "redis_server": _redis_version(),
            "redis_py": _package_version("redis"),
            "hiredis": _package_version("hiredis"),
            **{name: _package_version(name) for name in packages},
            "fixlab_commit": _commit(),
        },
        "python_executable": sys.executable,
    }
    return out
