"""Start the web service (and the liquidity bots) as real processes for a test.

    with web_process(redis_url, env={...}) as web:   # web.url, web.ws_url, web.port
        ...

Every process started here is stopped on exit (SIGTERM, then SIGKILL); its log is printed when
the body failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

from shared.redis_server import free_port
from tests.gateway_stack import stop_process

ROOT = Path(__file__).resolve().parent.parent.parent

# Debian's chromium, as the browser tests launch it (Playwright with executable_path).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@dataclass
class WebProcess:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"


def _spawn(module: str, env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", module], env=dict(env), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                start_new_session=True)


@contextlib.contextmanager
def web_process(redis_url: str, env: Mapping[str, str] | None = None,
                timeout_s: float = 30.0) -> Iterator[WebProcess]:
    """``python -m services.web`` on a free port, ready (its health endpoint answers) when yielded."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fixlab-web-") as tmp:
        log = Path(tmp) / "web.log"
        full = {**os.environ, "REDIS_URL": redis_url, "FIXLAB_WEB_PORT": str(port),
                "FIXLAB_WEB_HOST": "127.0.0.1", "PYTHONUNBUFFERED": "1", **(env or {})}
        proc = _spawn("services.web", full, log)
        web = WebProcess(port, proc, log)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"web exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
                try:
                    if httpx.get(f"{web.url}/api/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"web did not answer in {timeout_s}s:\n{log.read_text()[-3000:]}")
                time.sleep(0.05)
            yield web
        except BaseException:
            sys.stderr.write(f"----- web log -----\n{log.read_text()[-6000:]}\n")
            raise
        finally:
            stop_process(proc)


@contextlib.contextmanager
def bots_process(redis_url: str, fix_port: int, env: Mapping[str, str] | None = None) -> Iterator[Path]:
    """``python -m services.bots`` against the gateway on ``fix_port``; yields its log path."""
    with tempfile.TemporaryDirectory(prefix="fixlab-bots-") as tmp:
        log = Path(tmp) / "bots.log"
        full = {**os.environ, "REDIS_URL": redis_url, "FIXLAB_FIX_PORT": str(fix_port),
                "PYTHONUNBUFFERED": "1", **(env or {})}
        proc = _spawn("services.bots", full, log)
        try:
            yield log
        except BaseException:
            sys.stderr.write(f"----- bots log -----\n{log.read_text()[-6000:]}\n")
            raise
        finally:
            stop_process(proc)


JSOND = dict[str, Any]


class Client:
    """A WebSocket page: keeps every message it received."""

    def __init__(self, url: str) -> None:
        # No keepalive pings of its own (the web pings, and it answers): the keepalive thread draws its
        # ping payloads from the global random, which Hypothesis reports as a strategy using random
        # when one lands during a draw of the WebSocket fuzzer.
        self.ws: ClientConnection = connect(url, open_timeout=10, max_size=2**22, legacy=True,
                                            ping_interval=None)
        self.got: list[JSOND] = []  # received, not yet matched by wait()
        self.seen: list[JSOND] = []  # everything received, in order

    def wait(self, type_: str, where: Callable[[JSOND], bool] = lambda m: True,
             timeout: float = 10.0) -> JSOND:
        for m in self.got:
            if m.get("type") == type_ and where(m):
                self.got.remove(m)
                return m
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {type_} message in {timeout}s; got {self.got[-5:]}")
            try:
                m = json.loads(self.ws.recv(timeout=left))
            except TimeoutError:
                continue
            self.seen.append(m)
            if m.get("type") == type_ and where(m):
                return m
            self.got.append(m)

    def send(self, obj: Any) -> None:
        self.ws.send(obj if isinstance(obj, str | bytes) else json.dumps(obj))

    def close(self) -> None:
        self.ws.close()
