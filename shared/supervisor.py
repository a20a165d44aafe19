"""Run several service processes as one stack: prefixed logs, restart on death, clean stop.

What compose does with ``restart: unless-stopped``, for a machine without Docker: each service is a
child process in its own process group; its output is copied line by line with its name in front; a
service that dies is started again after a back-off; SIGINT or SIGTERM stops the children in reverse
dependency order, one tier at a time (SIGTERM, then SIGKILL after a grace period), leaving no process
behind. Every child gets a parent-death signal, so a runner killed -9 takes its services with it.

One thread does everything but copying output: the main thread starts, restarts (the parent-death
signal fires when the thread that forked a child ends) and stops. The signal handler only records
the signal in a plain attribute, which the main loop polls: a handler that takes a lock (as
``threading.Event.set`` does) can deadlock on the lock its own interrupted thread holds.
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
from itertools import groupby
from types import FrameType
from typing import IO

from shared.lifeline import die_with_parent
from shared.logs import STACKS_SIGNAL

POLL_S = 0.05
STACKS_WAIT_S = 0.5  # for a hung service to write its stacks before it is killed


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    # Depth in the dependency graph: 0 needs nothing supervised, 1 needs a tier-0 service, ...
    # Services stop from the highest tier down.
    tier: int = 0


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
        self.restart_at: float | None = None  # monotonic time of a restart due, while it is dead

    def start(self) -> None:
        self.restart_at = None
        self.proc = subprocess.Popen(
            list(self.spec.argv), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent(),
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
        proc.stdout.close()

    def signal_group(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)


class Supervisor:
    """Start ``specs`` in order, restart the ones that die, stop them all on a signal."""

    def __init__(self, specs: Sequence[ServiceSpec], base_env: dict[str, str], *,
                 out: IO[str] = sys.stdout, grace_s: float = 8.0,
                 on_ready: Callable[[], None] | None = None,
                 watch: Callable[[], None] | None = None) -> None:
        self.lock = threading.Lock()  # the output, shared with the log threads; never in a handler
        self.children = [Supervised(s, base_env, out, self.lock) for s in specs]
        self.out = out
        self.grace_s = grace_s
        self.on_ready = on_ready
        # Called from the main loop on every poll: keeps something that is not a child alive (the
        # runner's redis-server), from the thread that started it.
        self.watch = watch
        self.signals = 0  # written by the signal handler only; read by the main loop

    def say(self, text: str) -> None:
        with self.lock:
            self.out.write(f"{'run':<8}| {text}\n")
            self.out.flush()

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self.signals += 1  # no lock, no I/O: the interrupted main thread may hold either

    def run(self) -> int:
        """Run until SIGINT or SIGTERM (from the main thread); return the exit status."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        try:
            for child in self.children:
                if self.signals:
                    break
                child.start()
                self.say(f"started {child.spec.name} (pid {child.proc.pid if child.proc else '?'})")
            if self.on_ready is not None and not self.signals:
                self.on_ready()
            while not self.signals:
                if self.watch is not None:
                    self.watch()
                self._watch(time.monotonic())
                time.sleep(POLL_S)
        finally:
            self.stop()
        return 0

    def _watch(self, now: float) -> None:
        """Notice dead children and start the ones whose back-off is over."""
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.start()
                    self.say(f"restarted {child.spec.name} (pid {child.proc.pid if child.proc else '?'})")
                continue
            proc = child.proc
            if proc is None or proc.poll() is None:
                continue
            # Back off when it keeps dying: 1 s, 2 s, 4 s ... at most 30 s.
            quick = now - child.started_at < 10
            child.restarts = child.restarts + 1 if quick else 1
            delay = min(2 ** (child.restarts - 1), 30)
            self.say(f"{child.spec.name} exited with {proc.returncode}; restarting in {delay}s")
            child.proc = None
            child.restart_at = now + delay

    def stop(self) -> None:
        """Stop every child, the highest tier first; a second signal meanwhile kills what is left."""
        self.say("stopping")
        tiers = sorted(self.children, key=lambda c: -c.spec.tier)
        for _tier, group in groupby(tiers, key=lambda c: c.spec.tier):
            self._stop_tier(list(group))
        self.say("stopped")

    def _stop_tier(self, children: list[Supervised]) -> None:
        for child in reversed(children):
            child.restart_at = None
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        waiting = [c for c in children if c.proc is not None]
        while waiting:
            waiting = [c for c in waiting if c.proc is not None and c.proc.poll() is None]
            if not waiting:
                break
            hurry = self.signals > 1  # the first one asked for this stop
            if hurry or time.monotonic() > deadline:
                if not hurry:
                    # Why it hangs goes to its log first: every thread's stack (shared.logs).
                    for child in waiting:
                        self.say(f"{child.spec.name}: did not stop in {self.grace_s:g}s; its threads' "
                                 "stacks follow in its log; killing it")
                        child.signal_group(STACKS_SIGNAL)
                    time.sleep(STACKS_WAIT_S)
                for child in waiting:
                    if hurry:
                        self.say(f"{child.spec.name}: a second signal; killing it")
                    child.signal_group(signal.SIGKILL)
                for child in waiting:
                    assert child.proc is not None
                    child.proc.wait()
                break
            time.sleep(POLL_S)
        # The service is gone; anything it left in its process group goes with it.
        for child in children:
            if child.proc is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
