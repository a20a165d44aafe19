"""`python -m services` (what `make run` starts): names every line, restarts a dead service, and
stops everything on SIGTERM, its own redis-server included, leaving no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shared.redis_server import free_port
from tests.gateway_stack import ROOT, stop_process
from tests.helpers import eventually

pytestmark = pytest.mark.e2e


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_runner_restarts_a_dead_service_and_stops_everything(tmp_path: Path) -> None:
    env = {**os.environ, "FIXLAB_RUN_DIR": str(tmp_path / "run"), "FIXLAB_WEB_PORT": str(free_port()),
           "FIXLAB_FIX_PORT": str(free_port()), "FIXLAB_BOTS": "0", "PYTHONUNBUFFERED": "1"}
    env.pop("REDIS_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "services"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        eventually(lambda: any("the lab page: http://127.0.0.1:" in x for x in lines), timeout=60,
                   what="the runner printing the page's address")
        started = {m.group(1): int(m.group(2)) for x in lines
                   if (m := re.match(r"run +\| started (\S+) \(pid (\d+)\)", x))}
        assert {"matcher", "gateway", "web", "bots"} <= set(started), lines
        port = next(m.group(1) for x in lines
                    if (m := re.search(r"private redis-server on redis://127\.0\.0\.1:(\d+)", x)))
        [redis_pid] = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_redis_on(int(p), port)]
        matcher = "matcher"
        # Every service's output comes with its name in front.
        eventually(lambda: any(x.startswith(("gateway ", "gateway|")) for x in lines), timeout=30,
                   what="a gateway log line")
        os.kill(started[matcher], signal.SIGKILL)
        eventually(lambda: any(re.match(rf"run +\| restarted {re.escape(matcher)} \(pid \d+\)", x)
                               for x in lines), timeout=30, what="the matcher restarted")
        restarted = next(int(m.group(1)) for x in lines
                         if (m := re.match(rf"run +\| restarted {re.escape(matcher)} \(pid (\d+)\)", x)))
        eventually(lambda: _alive(restarted), what="the new matcher running")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        reader.join(5)
        assert any("run     | stopped" in x for x in lines)
        for pid in [*started.values(), restarted, redis_pid]:
            eventually(lambda pid=pid: not _alive(pid), timeout=10, what=f"pid {pid} gone")
    finally:
        stop_process(proc)
        reader.join(5)
        if proc.stdout is not None:
            proc.stdout.close()


def _is_redis_on(pid: int, port: str) -> bool:
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # redis-server rewrites its process title to "/path/to/redis-server 127.0.0.1:PORT".
    return title.split(b" ")[0].endswith(b"redis-server") and f":{port}".encode() in title
