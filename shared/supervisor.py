"""Run several service processes as one stack: prefixed logs, restart on death, clean stop.

What compose does with ``restart: unless-stopped``, for a machine without Docker: each service is a
child process in its own process group; its output is copied line by line with its name in front; a
service that dies is started again after a back-off; SIGINT or SIGTERM stops every child (SIGTERM,
then SIGKILL after a grace period), leaving no process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


class Supervised:
    def __init__(self, spec: ServiceSpec, base_env: dict[str, str], out: IO[str],
                 lock: threading.Lock) -> None:
        self.spec = spec
        self.env = {**base_env, **spec.env}
        self.out = out
        self.lock = lock
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.started_at = 0.0

    def start(self) -> None:
        self.proc = subprocess.Popen(
            list(self.spec.argv), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self.started_at = time.monotonic()
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True,
                         name=f"log-{self.spec.name}").start()

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        width = 8
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.lock:
                self.out.write(f"{self.spec.name:<{width}}| {line}\n")
                self.out.flush()

    def signal_group(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)


class Supervisor:
    """Start ``specs`` in order, restart the ones that die, stop them all on a signal."""

    def __init__(self, specs: Sequence[ServiceSpec], base_env: dict[str, str], *,
                 out: IO[str] = sys.stdout, grace_s: float = 8.0,
                 on_ready: Callable[[], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.children = [Supervised(s, base_env, out, self.lock) for s in specs]
        self.out = out
        self.grace_s = grace_s
        self.on_ready = on_ready
        self.stopping = threading.Event()

    def say(self, text: str) -> None:
        with self.lock:
            self.out.write(f"{'run':<8}| {text}\n")
            self.out.flush()

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stopping.set())
        try:
            for child in self.children:
                child.start()
                self.say(f"started {child.spec.name} (pid {child.proc.pid if child.proc else '?'})")
            if self.on_ready is not None:
                self.on_ready()
            while not self.stopping.wait(0.5):
                for child in self.children:
                    proc = child.proc
                    if proc is None or proc.poll() is None:
                        continue
                    # Back off when it keeps dying: 1 s, 2 s, 4 s ... at most 30 s.
                    quick = time.monotonic() - child.started_at < 10
                    child.restarts = child.restarts + 1 if quick else 1
                    delay = min(2 ** (child.restarts - 1), 30)
                    self.say(f"{child.spec.name} exited with {proc.returncode}; restarting in {delay}s")
                    child.proc = None
                    threading.Timer(delay, self._restart, args=(child,)).start()
        finally:
            self.stop()
        return 0

    def _restart(self, child: Supervised) -> None:
        if not self.stopping.is_set():
            child.start()
            self.say(f"restarted {child.spec.name} (pid {child.proc.pid if child.proc else '?'})")

    def stop(self) -> None:
        self.stopping.set()
        self.say("stopping")
        for child in reversed(self.children):
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{child.spec.name} did not stop in {self.grace_s}s; killing it")
                child.signal_group(signal.SIGKILL)
                child.proc.wait()
        self.say("stopped")
