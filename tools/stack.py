"""A fresh ``python -m services`` stack for the tools that need a real exchange (the course's wire
excerpts, the screenshots): its own run directory and Redis, free ports, stopped on the way out.

    with fresh_stack(run_dir, {"FIXLAB_BOTS": "0"}) as stack:
        ...stack.fix_port, stack.web_port...
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from shared.redis_server import free_port

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"gateway \S+ ready on port (\d+)")
PAGE = re.compile(r"the lab page: http://127\.0\.0\.1:(\d+)/")
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Stack:
    fix_port: int
    web_port: int

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}/"


@contextmanager
def fresh_stack(run_dir: Path, env: Mapping[str, str] | None = None) -> Iterator[Stack]:
    """Start the stack as `make run` does, with ``env`` over this process's environment; yield once
    the gateway is ready and the runner has printed the page's address (every service up)."""
    stack = Stack(free_port(), free_port())
    full = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {}), "FIXLAB_RUN_DIR": str(run_dir),
            "FIXLAB_FIX_PORT": str(stack.fix_port), "FIXLAB_WEB_PORT": str(stack.web_port)}
    full.pop("REDIS_URL", None)  # the runner starts a Redis of its own
    proc = subprocess.Popen([sys.executable, "-m", "services"], cwd=ROOT, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    lines: list[str] = []
    seen = {"gateway": threading.Event(), "page": threading.Event()}

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode("utf-8", "replace").rstrip())
            if (m := READY.search(lines[-1])) and int(m.group(1)) == stack.fix_port:
                seen["gateway"].set()
            if (m := PAGE.search(lines[-1])) and int(m.group(1)) == stack.web_port:
                seen["page"].set()
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(e.wait(0.2) for e in seen.values()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the stack did not start:\n" + "\n".join(lines[-40:]))
        yield stack
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        reader.join(5)
        if proc.stdout is not None:
            proc.stdout.close()
