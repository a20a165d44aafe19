"""Child processes the suite and the tests start and always stop: the stack and the baseline."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from services.stack import stack_specs
from shared.redis_server import RedisServer, free_port


class Child:
    """A process in its own process group, output to a log file; stop() ends the whole group."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(list(argv), env=dict(env), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def wait_port(host: str, port: int, children: Sequence[Child], timeout_s: float) -> None:
    """Wait until host:port accepts a connection; fail at once if a child died meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        for child in children:
            if not child.alive():
                raise RuntimeError(f"{child.name} exited with {child.proc.returncode} before "
                                   f"{host}:{port} opened:\n{child.tail()}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{host}:{port} did not open in {timeout_s:.0f}s") from None
            time.sleep(0.05)


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("FIXLAB_LOG_LEVEL", "WARNING")
    env.update(extra or {})
    return env


class Baseline:
    """The engine-only acceptor on a free port."""

    def __init__(self, workdir: Path, python: str = sys.executable, ignore_every: int = 0) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.python = python
        self.ignore_every = ignore_every
        self.child: Child | None = None

    def __enter__(self) -> Baseline:
        argv = (self.python, "-m", "services.bench.baseline", "--port", str(self.port),
                "--ignore-every", str(self.ignore_every))
        self.child = Child("baseline", argv, base_env(), self.workdir / "baseline.log")
        try:
            wait_port("127.0.0.1", self.port, [self.child], 60)
        except BaseException:
            self.child.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.child is not None:
            self.child.stop()


class Stack:
    """A fresh exchange: its own redis-server, then matcher and gateway from ``make run``'s own list
    (services.stack: ``python -m services.NAME``, configured from the environment), FIX on a free
    loopback port. The web service is left out: nothing here reads the market stream."""

    SERVICES = ("matcher", "gateway")

    def __init__(self, workdir: Path, python: str = sys.executable) -> None:
        self.workdir = workdir
        self.python = python
        self.fix_port = free_port()
        self.redis = RedisServer(workdir / "redis")
        self.children: list[Child] = []

    @property
    def url(self) -> str:
        return self.redis.url

    def __enter__(self) -> Stack:
        self.redis.start()
        try:
            env = base_env({"REDIS_URL": self.redis.url, "FIXLAB_FIX_PORT": str(self.fix_port),
                            "FIXLAB_FIX_HOST": "127.0.0.1", "FIXLAB_RUN_DIR": str(self.workdir / "run")})
            specs = {s.name: s for s in stack_specs(self.python)}
            missing = [name for name in self.SERVICES if name not in specs]
            if missing:
                raise RuntimeError(f"services not in this checkout: {', '.join(missing)}")
            for name in self.SERVICES:
                spec = specs[name]
                log_path = self.workdir / f"{name}.log"
                self.children.append(Child(name, spec.argv, {**env, **spec.env}, log_path))
            wait_port("127.0.0.1", self.fix_port, self.children, 60)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()
        self.redis.stop()
