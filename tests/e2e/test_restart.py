"""Orders of ended sessions do not survive a restart of `python -m services` (issue 11).

Each test runs the stack as a user does, on a run directory of its own (so the same AOF across
restarts), and reads the books from the market stream: every change to a book publishes its Depth,
so the latest one is the book now.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from benchmarks.chaos.stack import alive, children_running
from shared import streams
from shared.redis_server import free_port
from shared.schema import Depth, decode_batch
from tests.gateway_stack import ROOT, FixClient, order, stop_process
from tests.helpers import eventually

pytestmark = pytest.mark.e2e

ACORN = "ACORN.LAB"
Levels = tuple[tuple[int, int, int], ...]  # (price, qty, orders), best first
Book = tuple[Levels, Levels]  # bids, asks
SESSIONS_FILE = """\
[SESSION]
TargetCompID=KEEPER
CancelOnDisconnect=N
"""


class Runner:
    """``python -m services`` in its own process group, its output kept line by line."""

    def __init__(self, base: Path, ports: dict[str, str], **env: str) -> None:
        self.env = {**os.environ, "FIXLAB_RUN_DIR": str(base / "run"), "PYTHONUNBUFFERED": "1",
                    "FIXLAB_FIX_SESSIONS_FILE": str(base / "sessions.cfg"),
                    # Far from now: no day ends while the test runs.
                    "FIXLAB_END_OF_DAY": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=12)).strftime("%H:%M"),
                    **ports, **env}
        self.env.pop("REDIS_URL", None)
        self.fix_port = int(ports["FIXLAB_FIX_PORT"])
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "services"], cwd=ROOT, env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()
        eventually(lambda: any(re.search(r"gateway .*ready on port", x) for x in self.lines), timeout=90,
                   what="the gateway ready")
        self.redis_url = next(m.group(1) for x in self.lines
                              if (m := re.search(r"private redis-server on (redis://\S+)", x)))
        self.r = redis.Redis.from_url(self.redis_url)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def pids(self, name: str) -> list[int]:
        return [int(m.group(2)) for x in self.lines
                if (m := re.match(rf"run +\| (started|restarted) {name} \(pid (\d+)\)", x))]

    def book(self, symbol: str = ACORN) -> Book:
        """The latest Depth of ``symbol``: (bids, asks), each ((price, qty, orders), ...)."""
        for _id, fields in self.r.xrevrange(streams.shard_market_stream("0"), count=500):  # type: ignore[union-attr]
            for msg in reversed(decode_batch(fields[streams.BATCH_FIELD])):
                if isinstance(msg, Depth) and msg.symbol == symbol:
                    return msg.bids, msg.asks
        return (), ()

    def stop(self, sig: int = signal.SIGINT) -> float:
        """Signal the runner's process group; return how long it took to exit."""
        started = time.monotonic()
        os.killpg(self.proc.pid, sig)
        assert self.proc.wait(30) == 0, self.lines[-30:]
        took = time.monotonic() - started
        self.close()
        return took

    def close(self) -> None:
        stop_process(self.proc)
        self.reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.r.close()


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "sessions.cfg").write_text(SESSIONS_FILE)
    yield tmp_path


@pytest.fixture
def ports() -> dict[str, str]:
    return {"FIXLAB_WEB_PORT": str(free_port()), "FIXLAB_FIX_PORT": str(free_port())}


def rest(client: FixClient, clordid: str, qty: int, price: str, tif: int = 1) -> None:
    client.send("D", order(clordid, 1, qty, price, tif=tif))
    client.expect("8", lambda m: m.get(11) == clordid and m.get(150) == "0")


def bid_qty(book: Book) -> dict[int, int]:
    return {price: qty for price, qty, _n in book[0]}


def sell_everything(port: int, comp: str) -> int:
    """Sell 1000 at the bottom of the band, then log out; return how much traded."""
    with FixClient(port, comp) as c:
        c.send("D", order("sweep", 2, 1000, "80.00"))
        ack = c.expect("8", lambda m: m.get(11) == "sweep" and m.get(150) in ("0", "F", "2"))
        filled = int(ack.get(14, "0"))
        while filled < 1000:
            try:
                m = c.expect("8", lambda m: m.get(11) == "sweep", timeout_s=1.0)
            except TimeoutError:
                break
            filled = int(m.get(14, "0"))
        c.logout()
    return filled


def _publishers() -> dict[int, int]:
    """The gateway publisher processes running now: pid -> parent pid."""
    return children_running("services.gateway.publisher")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        # As servers bind (the killed ones' accepted connections may linger in TIME_WAIT): this fails
        # only while something listens there.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_book_is(run: Runner, bids: dict[int, int]) -> bool:
    book = run.book()
    return bid_qty(book) == bids and book[1] == ()


def cancelled_at_ms(run: Runner, clordid: str, gateway: str = "gw1") -> int | None:
    """When (stream id, ms) the Cancelled of ``clordid`` went to the gateway, or None."""
    for entry_id, fields in run.r.xrange(streams.shard_events_stream("0", gateway)):  # type: ignore[union-attr]
        for msg in decode_batch(fields[streams.BATCH_FIELD]):
            if type(msg).__name__ == "Cancelled" and msg.orig_clordid == clordid:  # type: ignore[attr-defined]
                return int(entry_id.split(b"-")[0])
    return None


def test_ctrl_c_ends_the_sessions_before_redis_stops_and_a_restart_starts_clean(
        base: Path, ports: dict[str, str]) -> None:
    run = Runner(base, ports)  # the bots as configured: on unless FIXLAB_BOTS=0
    try:
        with FixClient(run.fix_port, "KEEPER") as keeper, FixClient(run.fix_port, "CLIENT01") as client:
            rest(keeper, "k1", 5, "81.00")  # GTC, below anything the bots quote
            rest(client, "c1", 7, "82.00")
            want_levels = 3 if run.pids("bots") else 2  # the bots' ladder too, when they run
            eventually(lambda: {8100: 5, 8200: 7}.items() <= bid_qty(run.book()).items()
                       and len(run.book()[0]) >= want_levels, timeout=30, what="the orders resting")
            took = run.stop(signal.SIGINT)  # both sessions still logged on
        assert took < 15, took
        assert "run     | stopped redis-server" in run.lines
    finally:
        run.close()
    restarted_ms = int(time.time() * 1000)
    again = Runner(base, ports, FIXLAB_BOTS="0")
    try:
        # The gateway stopped before the matcher and Redis: CLIENT01's Logout reached the matcher then.
        cancelled = cancelled_at_ms(again, "c1")
        assert cancelled is not None and cancelled < restarted_ms
        # Only the CancelOnDisconnect=N session's GTC order is left: a sell at the bottom of the band
        # trades 5, nothing against sessions that no longer exist.
        eventually(lambda: run_book_is(again, {8100: 5}), timeout=20, what="only KEEPER's order resting")
        assert sell_everything(again.fix_port, "CLIENT02") == 5
        assert again.stop(signal.SIGTERM) < 15
    finally:
        again.close()


def test_kill_9_of_the_gateway_then_of_the_whole_runner(base: Path, ports: dict[str, str]) -> None:
    run = Runner(base, ports, FIXLAB_BOTS="0")
    try:
        with FixClient(run.fix_port, "KEEPER") as keeper:
            rest(keeper, "k1", 5, "81.00")
            keeper.logout()  # its GTC order rests on
        client = FixClient(run.fix_port, "CLIENT03")
        rest(client, "c3", 7, "82.00")
        eventually(lambda: run_book_is(run, {8100: 5, 8200: 7}), what="both orders resting")
        [gateway] = run.pids("gateway")
        [old_publisher] = [p for p, parent in _publishers().items() if parent == gateway]
        os.kill(gateway, signal.SIGKILL)
        client.close()
        # The runner starts it again; it ends CLIENT03's session before it takes a Logon.
        eventually(lambda: len(run.pids("gateway")) == 2, timeout=20, what="the gateway restarted")
        eventually(lambda: run_book_is(run, {8100: 5}), timeout=60, what="CLIENT03's order cancelled")
        # The old gateway's publisher ended with its pipe.
        eventually(lambda: not alive(old_publisher), timeout=15, what="the old publisher gone")
        eventually(lambda: sum(1 for x in run.lines if re.search(r"gateway .*ready on port", x)) == 2,
                   timeout=60, what="the new gateway ready")
        with FixClient(run.fix_port, "CLIENT04") as c4:
            rest(c4, "c4", 3, "83.00")
            eventually(lambda: run_book_is(run, {8100: 5, 8300: 3}), what="CLIENT04's order resting")
            services = [pid for name in ("matcher", "gateway", "web", "bots") for pid in run.pids(name)]
            redis_port = int(run.redis_url.rsplit(":", 1)[1].split("/")[0])
            publishers = [p for p, parent in _publishers().items() if parent in services]
            os.kill(run.proc.pid, signal.SIGKILL)  # the runner alone, as the OOM killer would
            assert run.proc.wait(10) == -signal.SIGKILL
        for pid in [*services, *publishers]:
            eventually(lambda pid=pid: not alive(pid), timeout=15, what=f"pid {pid} gone")
        for port in (run.fix_port, int(ports["FIXLAB_WEB_PORT"]), redis_port):
            eventually(lambda port=port: _port_free(port), timeout=10, what=f"port {port} free")
    finally:
        run.close()
    again = Runner(base, ports, FIXLAB_BOTS="0")
    try:
        eventually(lambda: run_book_is(again, {8100: 5}), timeout=20, what="only KEEPER's order resting")
        assert sell_everything(again.fix_port, "CLIENT05") == 5
    finally:
        assert again.stop(signal.SIGTERM) < 15
