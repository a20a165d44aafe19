"""The terminal client's two numbers (issue 24): start-up to logged on, and the TUI at 1,000 msgs/s.

    python -m benchmarks.client [--runs 5] [--fix-version 4.4 --fix-version 5.0SP2] [--startup-only]
                                [--rate 1000] [--seconds 10] [--out PATH.json]

1. Start-up: redis-server, matcher and gateway as processes (as ``make run`` has them), then
   ``python -m services.client --plain --fix-version V`` run ``--runs`` times for each version (by
   default 4.4 and 5.0SP2, in turns, so the machine's drift hits both alike), each a new process: the
   time from spawning it to its ``<- Logon`` line (interpreter, imports, dictionaries, engine, tap,
   Logon both ways). The full-screen client logs on the same way before it draws; its first screen
   (Textual imported, app mounted, headless) is timed beside it.
2. Throughput: the Textual app (headless, Textual's own test harness, 200x50) fed ``--rate`` records a
   second for ``--seconds`` from another thread, as the tap feeds it (each record decoded there, as
   the tap's thread does): ExecutionReports and market-data refreshes, one in ten a Heartbeat. It
   keeps up if, when the feed stops, every record is on the screen within one drain tick or so and the
   backlog never grew; reported: records shown, the largest backlog at a drain, the longest a record
   waited between the feed and the screen, the app's CPU share.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import output
from services.client.core import Client
from services.client.session import LOGGED_ON, Record
from services.client.tui import ClientApp, WireView
from shared.compids import CLIENT42_COMP_IDS, CLIENT50_COMP_IDS, CLIENT_COMP_IDS
from shared.fix import dictionary
from shared.fix.codec import encode
from shared.redis_server import RedisServer, free_port


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise SystemExit("the gateway exited while starting")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"nothing listens on {port} after {timeout_s} s")
        time.sleep(0.05)


def startup(runs: int, versions: tuple[str, ...] = ("4.4",)) -> dict[str, Any]:
    """Seconds from spawning ``python -m services.client --plain`` to its ``<- Logon`` line, per version."""
    with tempfile.TemporaryDirectory(prefix="fixlab-clientbench-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        port = free_port()
        env = {**os.environ, "REDIS_URL": server.url, "FIXLAB_FIX_PORT": str(port), "FIXLAB_LABS": "0",
               "FIXLAB_GATEWAY_ID": "clientbench", "FIXLAB_RUN_DIR": str(Path(tmp) / "run")}
        procs: list[subprocess.Popen[bytes]] = []
        times: dict[str, list[float]] = {v: [] for v in versions}
        try:
            with (Path(tmp) / "services.log").open("wb") as log:
                for module in ("services.matcher", "services.gateway"):
                    procs.append(subprocess.Popen([sys.executable, "-m", module], env=env, stdout=log,
                                                  stderr=subprocess.STDOUT))
            _wait_port(port, procs[-1])
            for i in range(runs):
                for name in versions:
                    times[name].append(_one_start(port, name, i))
        finally:
            for proc in reversed(procs):
                proc.terminate()
                proc.wait(15)
            server.stop()
    out: dict[str, Any] = {}
    for name, got in times.items():
        out[name] = {"runs": runs, "min_s": min(got), "median_s": statistics.median(got), "max_s": max(got),
                     "all_s": got}
    return out


def _one_start(port: int, name: str, i: int) -> float:
    """One client process of version ``name``, spawned to logged on, in seconds."""
    pool = {"4.4": CLIENT_COMP_IDS, "4.2": CLIENT42_COMP_IDS, "5.0SP2": CLIENT50_COMP_IDS}[name]
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "services.client", "--plain", "--port", str(port), "--fix-version", name,
            "--comp-id", pool[i % len(pool)]]
    client = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert client.stdout is not None and client.stdin is not None
    try:
        while True:
            text = client.stdout.readline()
            if not text:
                why = client.stderr.read() if client.stderr else b""
                raise SystemExit(f"the client ended: {why!r}")
            if b"<- Logon 35=A" in text:
                return time.perf_counter() - t0
    finally:
        client.stdin.close()
        client.wait(10)
        client.stdout.close()
        if client.stderr is not None:
            client.stderr.close()


class _Session:
    """A session that is logged on and sends nothing: the app reads its state, the feed is the wire."""

    comp_id, target, host, port = "CLIENT01", "FIXLAB", "127.0.0.1", 9878
    status, text, silent, drop_armed, logged_on = LOGGED_ON, "", False, False, True
    on_status: Any = None

    def seqs(self) -> tuple[int, int]:
        return 2, 2

    def exchange_seqs(self) -> tuple[int, int]:
        return 2, 2


def _messages() -> list[bytes]:
    """What a busy session receives: ExecutionReports, market-data refreshes, a Heartbeat now and then."""
    head = "35={t}\x0149=FIXLAB\x0156=CLIENT01\x0134={seq}\x0152=20261205-10:00:00.000\x01"
    er = ("6=99.90\x0111=T-{n}\x0114=4\x0117=E{n}\x0131=99.90\x0132=4\x0137=O{n}\x0138=10\x0139=1\x0140=2\x01"
          "44=99.90\x0154=1\x0155=ACORN.LAB\x0160=20261205-10:00:00.000\x01150=F\x01151=6\x01527=M{n}\x01")
    x = ("262=md1\x01268=2\x01279=0\x01269=2\x0155=ACORN.LAB\x01270=99.90\x01271=3\x01"
         "279=1\x01269=0\x0155=ACORN.LAB\x01270=99.90\x01271=7\x01346=2\x01")
    out = []
    for n in range(1000):
        if n % 10 == 9:
            body = head.format(t="0", seq=n + 2)
        elif n % 2:
            body = head.format(t="X", seq=n + 2) + x
        else:
            body = head.format(t="8", seq=n + 2) + er.format(n=n % 20)  # the exchange's 20 open orders
        out.append(encode(body.encode()))
    return out


def throughput(rate: int, seconds: float) -> dict[str, Any]:
    """Feed the app ``rate`` records a second for ``seconds``; how it kept up."""
    client = Client(_Session(), dictionary.load(), prefix="T-")  # type: ignore[arg-type]
    app = ClientApp(client)
    raws = _messages()
    total = int(rate * seconds)
    fed = [0]

    def feed() -> None:
        start = time.perf_counter()
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            client.on_record(Record(i + 1, "exchange", raws[i % len(raws)], False, time.time_ns()))
            fed[0] = i + 1

    result: dict[str, Any] = {}

    async def run() -> None:
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause(0.2)
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            feeder = threading.Thread(target=feed)
            feeder.start()
            while feeder.is_alive():
                await pilot.pause(0.1)
            fed_at = time.perf_counter()
            while app.shown < total and time.perf_counter() - fed_at < 10:
                await pilot.pause(0.01)
            done = time.perf_counter()
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
            drains = sorted(app.drains, key=lambda d: d[1])
            waits_ms = [w / 1e6 for _, w in drains]
            result.update(drains=len(drains), wait_p50_ms=statistics.median(waits_ms),
                          wait_p99_ms=waits_ms[int(len(waits_ms) * 0.99)],
                          backlog_p50=statistics.median(b for b, _ in drains),
                          over_100ms=sum(1 for w in waits_ms if w > 100))
            result.update(fed=fed[0], shown=app.shown, feed_s=fed_at - t0,
                          rate_achieved=fed[0] / (fed_at - t0),
                          caught_up_after_feed_s=done - fed_at, max_backlog=app.max_backlog,
                          max_lag_ms=app.lag_ns_max / 1e6, cpu_share=cpu / (done - t0),
                          wire_rows_kept=len(app.query_one("#wire", WireView).rows))
            app.exit(0)

    asyncio.run(run())
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.client", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--fix-version", action="append", dest="versions", choices=("4.2", "4.4", "5.0SP2"),
                   help="start-up of this version's client (repeat; default: 4.4 and 5.0SP2)")
    p.add_argument("--startup-only", action="store_true", help="time the start-up only")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    result = output.head("client", "benchmarks.client", argv)

    async def first_screen() -> float:
        t0 = time.perf_counter()
        app = ClientApp(Client(_Session(), dictionary.load(), prefix="T-"))  # type: ignore[arg-type]
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause(0)
            return time.perf_counter() - t0

    result["loadavg_before"] = os.getloadavg()  # the machine is shared: what else ran says how to read it
    versions = tuple(args.versions or ("4.4", "5.0SP2"))
    result["startup"] = startup(args.runs, versions)
    lines = [f"# Terminal client\n\n`{result['command']}`, {result['date']}\n"]
    for name, s in result["startup"].items():
        lines.append(f"- start-up to logged on, FIX {name} (`python -m services.client --plain --fix-version "
                     f"{name}`, new process, {s['runs']} runs, versions in turns): "
                     f"median {s['median_s']:.2f} s, "
                     f"min {s['min_s']:.2f} s, max {s['max_s']:.2f} s (target: 2 s)")
    if not args.startup_only:
        result["first_screen_s"] = asyncio.run(first_screen())
        result["throughput"] = throughput(args.rate, args.seconds)
        t = result["throughput"]
        lines += [
            f"- the TUI's first screen (app built and mounted, headless): {result['first_screen_s']:.2f} s",
            f"- TUI fed {t['fed']:,} records at {t['rate_achieved']:,.0f}/s for {t['feed_s']:.1f} s: "
            f"{t['shown']:,} shown, all of them {t['caught_up_after_feed_s'] * 1000:.0f} ms after the feed "
            f"stopped; largest backlog at a drain {t['max_backlog']}, longest wait feed->screen "
            f"{t['max_lag_ms']:.0f} ms; at the {t['drains']} drains (every 50 ms) the oldest waiting one had "
            f"waited {t['wait_p50_ms']:.0f} ms (median), {t['wait_p99_ms']:.0f} ms (p99), over 100 ms at "
            f"{t['over_100ms']}; median backlog {t['backlog_p50']:.0f}; process CPU "
            f"{t['cpu_share'] * 100:.0f}% of one core"]
    result["loadavg_after"] = os.getloadavg()
    lines.append(f"- load average (1 min) before and after: {result['loadavg_before'][0]:.2f}, "
                 f"{result['loadavg_after'][0]:.2f} ({os.cpu_count()} cores, shared with other work)")
    text = "\n".join(lines) + "\n"
    output.write(args.out, result, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
