"""The stack under test, started as ``make run`` starts it, and what can be read from it afterwards.

``Runner`` is ``python -m services`` (the runner: shared/supervisor.py) in a process group of its own,
on free ports and a run directory of its own (the same directory across a restart: the same AOF), its
output kept line by line and copied to ``runner.log``. Faults are plain ``os.kill(pid, SIGKILL)``.

``matcher_state`` is a fresh read of a matcher's state: its latest snapshot and the acknowledged
orders-stream entries after it, replayed through the matcher's own engine (what a restarted matcher
does), after checking that the matcher has applied every entry of the stream.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import redis

from services.matcher.engine import Engine, Limits
from shared import streams
from shared.config import common_settings
from shared.schema import Cancelled, Filled, MatcherSnapshot, decode, decode_batch

ROOT = Path(__file__).resolve().parents[2]


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> float:
    """Poll ``check`` until truthy; return the seconds it took; raise TimeoutError naming ``what``."""
    started = time.monotonic()
    while True:
        with contextlib.suppress(redis.RedisError, OSError):
            if check():
                return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f}s")
        time.sleep(interval_s)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pid: int) -> bool:
    return not alive(pid)


def children_running(module: str) -> dict[int, int]:
    """Processes whose command line names ``module``: pid -> parent pid."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if module.encode() in cmd.split(b"\0") and stat[0] != "Z":
            out[int(entry)] = int(stat[1])
    return out


class Runner:
    """``python -m services`` with its own ports and run directory."""

    def __init__(self, run_dir: Path, fix_port: int, web_port: int, env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.fix_port = fix_port
        self.env = {**os.environ, "FIXLAB_RUN_DIR": str(run_dir), "PYTHONUNBUFFERED": "1",
                    "FIXLAB_FIX_PORT": str(fix_port), "FIXLAB_WEB_PORT": str(web_port),
                    # Far from now: no trading day ends during a run.
                    "FIXLAB_END_OF_DAY": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=12)).strftime("%H:%M"),
                    **env}
        self.env.pop("REDIS_URL", None)
        self.lines: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.reader: threading.Thread | None = None
        self.redis_url = ""
        self.r: redis.Redis | None = None
        self.log = run_dir.parent / "runner.log"

    def start(self, timeout_s: float = 120.0) -> float:
        """Start it; return the seconds until the gateway was ready."""
        started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "services"], cwd=ROOT, env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        first = len(self.lines)
        self.reader = threading.Thread(target=self._pump, args=(self.proc,), daemon=True)
        self.reader.start()
        wait_for(lambda: self.count(r"gateway .*ready on port", first) > 0, timeout_s, "the gateway ready")
        self.redis_url = next(m.group(1) for x in self.lines[first:]
                              if (m := re.search(r"private redis-server on (redis://\S+)", x)))
        self.r = redis.Redis.from_url(self.redis_url, socket_timeout=5)
        return time.monotonic() - started

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with self.log.open("a") as out:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.lines.append(line)
                out.write(line + "\n")

    def count(self, pattern: str, since: int = 0) -> int:
        return sum(1 for x in self.lines[since:] if re.search(pattern, x))

    def pid(self, name: str) -> int:
        """The latest pid the runner started for service ``name``."""
        pids = [int(m.group(2)) for x in self.lines
                if (m := re.match(rf"run +\| (started|restarted) {re.escape(name)} \(pid (\d+)\)", x))]
        return pids[-1]

    def redis_pid(self) -> int:
        port = self.redis_url.rsplit(":", 1)[1].split("/")[0]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    title = Path(f"/proc/{entry}/cmdline").read_bytes()
                    if title.split(b" ")[0].split(b"\0")[0].endswith(b"redis-server") and \
                            f":{port}".encode() in title and alive(int(entry)):
                        return int(entry)
        raise LookupError(f"no redis-server on port {port}")

    def kill_all(self) -> list[int]:
        """kill -9 of every process of the stack at once (runner, services, their children, Redis)."""
        assert self.proc is not None
        pids = [self.proc.pid, self.redis_pid()]
        for name in ("matcher", "gateway", "web", "bots"):
            with contextlib.suppress(IndexError):
                pids.append(self.pid(name))
        pids += [p for p, parent in children_running("services.gateway.publisher").items() if parent in pids]
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        self.proc.wait(10)
        for p in pids:
            wait_for(partial(gone, p), 15, f"pid {p} gone")
        self.close()
        return pids

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.close()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.join(10)
            self.reader = None
        if self.proc is not None and self.proc.stdout is not None and self.proc.poll() is not None:
            self.proc.stdout.close()
        if self.r is not None:
            self.r.close()
            self.r = None

    def redis(self) -> redis.Redis:
        assert self.r is not None
        return self.r


def _id_after(a: str, b: str) -> bool:
    pa, pb = a.split("-"), b.split("-")
    return (int(pa[0]), int(pa[1])) > (int(pb[0]), int(pb[1]))


class MatcherBehind(RuntimeError):
    """The matcher has not applied its whole orders stream yet: its state is not final."""


def matcher_state(r: redis.Redis, env: dict[str, str], shard: str = "0") -> dict[tuple[str, str], int]:
    """Every resting order of ``shard``: (session, ClOrdID) -> quantity filled so far.

    Raises MatcherBehind while the matcher has not applied its whole orders stream."""
    settings = common_settings({"REDIS_URL": "redis://unused", **env})  # for the instruments only
    instruments = [i for i in settings.instruments if i.shard == shard]
    stream = streams.orders_stream(shard)
    last: Any = r.xrevrange(stream, count=1)
    applied_raw: Any = r.get(streams.applied_key(stream, streams.MATCHER_GROUP))
    applied = applied_raw.decode() if applied_raw else "0-0"
    if last and last[0][0].decode() != applied:
        raise MatcherBehind(f"the matcher applied up to {applied}, the stream holds {last[0][0].decode()}")
    raw: Any = r.get(streams.snapshot_key(shard))
    if raw is not None:
        snap = decode(raw)
        assert isinstance(snap, MatcherSnapshot)
        engine = Engine.restore(snap, instruments, limits=Limits(), id_prefix=f"{shard}-")
        start = snap.last_id
    else:
        engine, start = Engine(instruments, limits=Limits(), id_prefix=f"{shard}-"), "0-0"
    while _id_after(applied, start):
        rows: Any = r.xrange(stream, min=f"({start}", max=applied, count=1000)
        if not rows:
            break
        for _id, fields in rows:
            engine.apply_batch(decode_batch(fields[streams.BATCH_FIELD]))
        start = rows[-1][0].decode()
    return {(o.session, o.clordid): o.cum for book in engine.books.values() for o in book.orders()}


def terminal_events(r: redis.Redis, gateway_id: str = "gw1", shards: Sequence[str] = ("0",)) -> set[str]:
    """ClOrdIDs the shards' events streams for the gateway hold a final event for (filled
    completely, or cancelled)."""
    done: set[str] = set()
    for shard in shards:
        for fields in _all_entries(r, streams.shard_events_stream(shard, gateway_id)):
            for ev in decode_batch(fields[streams.BATCH_FIELD]):
                if isinstance(ev, Filled) and ev.leaves_qty == 0:
                    done.add(ev.clordid)
                elif isinstance(ev, Cancelled):
                    done.add(ev.orig_clordid)
                    done.add(ev.clordid)
    return done


def _all_entries(r: redis.Redis, stream: str) -> Iterator[dict[bytes, bytes]]:
    """Every entry's fields, in order, read 2000 at a time."""
    start = "-"
    while True:
        rows: Any = r.xrange(stream, min=start, count=2000)
        for _id, fields in rows:
            yield fields
        if len(rows) < 2000:
            return
        start = "(" + rows[-1][0].decode()


def bots_logged_on(r: redis.Redis) -> tuple[int, int]:
    """(logged on, configured) over every bots instance's health report."""
    on = total = 0
    for key in r.scan_iter(match=streams.health_key("bots", "*")):
        h: Any = r.hgetall(key)
        on += int(h.get(b"logged_on", 0))
        total += int(h.get(b"sessions", 0))
    return on, total
