"""Start and stop a private redis-server process on a free loopback port.

Used by ``make run`` (when REDIS_URL is not given) and by the test fixtures: a real server, never one
that happens to be running already.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

from shared import lifeline


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


APPENDFSYNC = ("always", "everysec", "no")
# What `make run` and docker-compose.yml use unless FIXLAB_REDIS_APPENDFSYNC says otherwise: an order
# acknowledged to its client is on disk (docs/RELIABILITY.md, fault 4, has the cost).
DEFAULT_APPENDFSYNC = "always"


class RedisServer:
    """A redis-server child process. ``appendonly`` turns on the AOF, flushed to disk as
    ``appendfsync`` says (docs/RELIABILITY.md: what each policy can lose)."""

    def __init__(self, workdir: Path, *, port: int | None = None, appendonly: bool = False,
                 die_with_parent: bool = False, appendfsync: str = "everysec") -> None:
        if appendfsync not in APPENDFSYNC:
            raise ValueError(f"appendfsync={appendfsync!r} is not one of {', '.join(APPENDFSYNC)}")
        self.workdir = workdir
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.restarts = 0
        # Killed when this process dies (kill -9 included); start it from the main thread then.
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (make system-deps installs it)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
                "--save", "", "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", self.appendfsync, "--protected-mode", "yes", "--daemonize", "no",
                "--logfile", str(self.workdir / "redis.log")]
        # A session of its own: a Ctrl-C in the terminal reaches the runner, which stops it last,
        # after the services that still write to it.
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=lifeline.die_with_parent() if self.die_with_parent else None)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if self.proc.poll() is not None:
                    log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {log}")
                try:
                    client.ping()
                    return self
                except (redis.ConnectionError, redis.BusyLoadingError):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not answer on port {self.port}") from None
                    time.sleep(0.02)
        finally:
            client.close()

    def revive(self) -> int | None:
        """Start it again on the same port and directory (the AOF replays) if it died; return the
        exit status it died with, or None while it runs. Call it from the thread that started it."""
        if self.proc is None or self.proc.poll() is None:
            return None
        status = self.proc.returncode
        self.restarts += 1
        self.start(timeout_s=60.0)  # replaying a large AOF takes a while
        return status

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """Kill -9, as a crash would (for tests of a dead Redis)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
