"""``python -m services`` as a user starts it, for tests: its output kept line by line.

    with runner(env, "--cluster") as run:
        run.wait_line(r"the lab page: ")
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from shared.redis_server import free_port
from tests.gateway_stack import ROOT, stop_process
from tests.helpers import eventually


class Runner:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.times: list[float] = []  # when each line arrived (time.monotonic()), for ordering events
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.times.append(time.monotonic())
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def find(self, pattern: str) -> re.Match[str] | None:
        return next((m for x in list(self.lines) if (m := re.search(pattern, x))), None)

    def wait_line(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        def check() -> re.Match[str] | None:
            assert self.proc.poll() is None, f"the runner exited with {self.proc.returncode}"
            return self.find(pattern)
        return eventually(check, timeout=timeout, what=f"a line matching {pattern!r}")

    def started_pids(self) -> dict[str, list[int]]:
        """Every pid the runner said it started or restarted, by service."""
        out: dict[str, list[int]] = {}
        for x in list(self.lines):
            if m := re.match(r"run +\| (?:re)?started (\S+) \(pid (\d+)\)", x):
                out.setdefault(m.group(1), []).append(int(m.group(2)))
        return out

    def stop(self, timeout: float = 60.0) -> int:
        self.proc.terminate()
        status = self.proc.wait(timeout)
        self._reader.join(5)
        return status

    def tail(self, n: int = 80) -> str:
        return "\n".join(self.lines[-n:])


def two_free_ports() -> int:
    """A port whose next one is free too: the base FIX port of two gateways."""
    while True:
        port = free_port()
        if port >= 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def runner(env: Mapping[str, str], *args: str) -> Iterator[Runner]:
    """Start the runner with ``env`` over this process's environment (REDIS_URL dropped: it starts its
    own Redis); print its last lines if the body failed; stop it on the way out."""
    full = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    if "REDIS_URL" not in env:
        full.pop("REDIS_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "services", *args], cwd=ROOT, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    run = Runner(proc)
    try:
        yield run
    except BaseException:
        sys.stderr.write(f"----- runner output -----\n{run.tail(200)}\n")
        raise
    finally:
        stop_process(proc, 60)
        if proc.stdout is not None:
            proc.stdout.close()
