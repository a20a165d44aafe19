"""The load run of issue 13 (a benchmark, not a test; not in ``make test``).

    python -m benchmarks.load [--seconds 300] [--pages 20] [--rounds 1] [--no-bench]
                              [--out benchmarks/results/load.json]

Starts its own redis-server, matcher, gateway (lab sessions on) and web service as processes, opens
``--pages`` lab pages (20, the site's cap) over WebSocket, logs each on and has it trade through the
web at the order rate limit (a Day buy, then a Day sell, at one price on BIRCH.LAB, so the pages
trade with each other and nothing piles up), while ``python -m services.bench`` runs 8 sessions x
32 orders in flight on ACORN.LAB, one run after the other, for ``--seconds``. Reports:

- errors: every ``error`` message a page received, every bench run that failed or lost orders;
- how late wire records reach the pages: from the gateway tap's record ``ts`` to the page's receipt
  of the WebSocket message (same host, same clock), p50/p90/p99/max over every record;
- the resident memory (VmRSS) of every service at the start (pages logged on, nothing traded yet)
  and at the end, with samples in between; the gateway's includes its publisher child.

``--rounds N`` does it N times over with fresh pages (so fresh lab sessions), sampling also once each
round's sessions have ended: whether what one round's sessions held is reused by the next (the
gateway's RSS levels off) or not. ``--no-bench`` leaves the bench out (the lab's traffic alone).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from shared import machine
from shared.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
SYMBOL = "BIRCH.LAB"
PRICE = "25.00"


def rss_mib(pid: int) -> float:
    """VmRSS of ``pid`` and of its children (the gateway's publisher), in MiB."""
    total = 0
    pids = [pid]
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            pids += [int(c) for c in (task / "children").read_text().split()]
    for p in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return round(total / 1024, 1)


def percentiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] / 1e6, 2)
    return {"count": len(s), "p50_ms": at(0.50), "p90_ms": at(0.90), "p99_ms": at(0.99),
            "max_ms": round(s[-1] / 1e6, 2)}


@dataclass
class PageStats:
    latencies_ns: list[int] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    orders_sent: int = 0
    fills: int = 0
    closed: str = ""


async def run_page(n: int, url: str, rate: float, start_trading: asyncio.Event, stop: asyncio.Event,
                   logged_on: asyncio.Queue[int], stats: PageStats) -> None:
    async with connect(url, max_size=2**22, open_timeout=30) as ws:
        on = asyncio.Event()

        async def reader() -> None:
            try:
                async for raw in ws:
                    got = time.time_ns()
                    m = json.loads(raw)
                    kind = m.get("type")
                    if kind == "wire":
                        stats.latencies_ns.append(got - int(m["ts"]))
                    elif kind == "state" and m.get("status") == "logged_on":
                        on.set()
                    elif kind == "error":
                        stats.errors.append(m)
                    elif kind == "notice" and m.get("level") == "error":
                        stats.notices.append(str(m.get("text")))
                    elif kind == "fill":
                        stats.fills += 1
            except Exception as exc:  # the page's socket closed under it: say how
                stats.closed = repr(exc)

        task = asyncio.create_task(reader())
        await ws.send(json.dumps({"op": "logon"}))
        await asyncio.wait_for(on.wait(), 60)
        await logged_on.put(n)
        await start_trading.wait()
        period = 1.0 / rate
        next_at = time.monotonic()
        side = "buy" if n % 2 else "sell"
        while not stop.is_set():
            await ws.send(json.dumps({"op": "order", "symbol": SYMBOL, "side": side, "price": PRICE,
                                      "qty": 1, "id": stats.orders_sent}))
            stats.orders_sent += 1
            side = "sell" if side == "buy" else "buy"
            next_at += period
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
        await ws.send(json.dumps({"op": "logout"}))
        await asyncio.sleep(2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def spawn(module: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", module], env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer in {timeout_s}s")


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"port {port}: the process exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s}s")


def bench_loop(fix_port: int, deadline: float, orders: int, workdir: Path, env: dict[str, str]
               ) -> list[dict[str, Any]]:
    """8x32 bench runs, one after the other, until ``deadline``; each run's scalar figures."""
    runs: list[dict[str, Any]] = []
    k = 0
    while time.monotonic() < deadline:
        out = workdir / f"bench-{k}.json"
        argv = [sys.executable, "-m", "services.bench", "--addr", f"127.0.0.1:{fix_port}", "--sessions", "8",
                "--window", "32", "--orders", str(orders), "--warmup", "200", "--out", str(out)]
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        run: dict[str, Any] = {"exit": proc.returncode, "seconds": round(time.monotonic() - started, 1)}
        if out.exists():
            result = json.loads(out.read_text())
            run.update({k_: v for k_, v in result.items() if isinstance(v, int | float | str | bool)})
        else:
            run["stderr"] = proc.stderr[-500:]
        runs.append(run)
        k += 1
    return runs


async def pages_phase(url: str, pages: int, rate: float, seconds: float, fix_port: int, workdir: Path,
                      env: dict[str, str], bench_orders: int, sample: Any, rounds: int = 1,
                      bench_on: bool = True) -> dict[str, Any]:
    """``rounds`` times: ``pages`` fresh pages log on, trade for ``seconds`` beside the bench, log out.

    Each round's sessions are new ones (each page a new socket and session), so a second round shows
    whether what the first one's sessions held is given back or reused (RSS flat) or still grows.
    """
    stats = [PageStats() for _ in range(pages * rounds)]
    runs: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    rss_start: dict[str, float] = {}
    round_rss: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for r in range(rounds):
        start_trading, stop_ev = asyncio.Event(), asyncio.Event()
        logged_on: asyncio.Queue[int] = asyncio.Queue()
        mine = stats[r * pages:(r + 1) * pages]
        tasks = [asyncio.create_task(run_page(n, url, rate, start_trading, stop_ev, logged_on, mine[n]))
                 for n in range(pages)]
        for _ in range(pages):
            await asyncio.wait_for(logged_on.get(), 120)
        at_logon = sample()
        if r == 0:
            rss_start = at_logon
            t0 = time.monotonic()
        samples.append({"t_s": round(time.monotonic() - t0), "round": r + 1, **at_logon})
        start_trading.set()
        deadline = time.monotonic() + seconds
        bench = (asyncio.create_task(asyncio.to_thread(bench_loop, fix_port, deadline, bench_orders, workdir,
                                                       env)) if bench_on else None)
        while time.monotonic() < deadline:
            await asyncio.sleep(min(15.0, max(0.0, deadline - time.monotonic())))
            samples.append({"t_s": round(time.monotonic() - t0), "round": r + 1, **sample()})
        if bench is not None:
            runs += await bench
        at_end = sample()
        stop_ev.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(5)  # the round's sessions end (Logout answered, engines stopped)
        after = sample()
        samples.append({"t_s": round(time.monotonic() - t0), "round": r + 1, "sessions_ended": True, **after})
        round_rss.append({"round": r + 1, "logged_on": at_logon, "end": at_end, "sessions_ended": after})
    rss_end = round_rss[-1]["end"]
    lat = [x for s in stats for x in s.latencies_ns]
    return {
        "pages": pages, "rounds": rounds, "bench": bench_on, "order_rate_per_page": rate,
        "orders_sent_by_pages": sum(s.orders_sent for s in stats),
        "fills_seen_by_pages": sum(s.fills for s in stats),
        "page_errors": [e for s in stats for e in s.errors][:20],
        "page_error_count": sum(len(s.errors) for s in stats),
        "page_error_notices": sorted({t for s in stats for t in s.notices})[:10],
        "pages_closed_early": [s.closed for s in stats if s.closed],
        "wire_record_to_page": percentiles(lat),
        "bench_runs": runs,
        "bench_failed_runs": sum(1 for r in runs if r["exit"] != 0 or r.get("lost", 0) != 0),
        "rss_mib": {"start": rss_start, "end": rss_end, "rounds": round_rss, "samples": samples},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long the pages and the bench trade")
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--rate", type=float, default=2.0, help="orders per second per page (web limit)")
    parser.add_argument("--bench-orders", type=int, default=20_000, help="measured orders per bench run")
    parser.add_argument("--rounds", type=int, default=1,
                        help="trade this many times over, each time with fresh pages and sessions")
    parser.add_argument("--no-bench", action="store_true", help="the pages alone, no bench runs")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "load.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fixlab-load-") as tmp:
        work = Path(tmp)
        redis_server = RedisServer(work / "redis").start()
        fix_port, web_port = free_port(), free_port()
        env = {**os.environ, "REDIS_URL": redis_server.url, "FIXLAB_FIX_PORT": str(fix_port),
               "FIXLAB_GATEWAY_ID": "gwload", "FIXLAB_LABS": "1", "FIXLAB_RUN_DIR": str(work / "run"),
               "FIXLAB_WEB_PORT": str(web_port), "FIXLAB_WEB_HOST": "127.0.0.1",
               "FIXLAB_PAGES_PER_ADDRESS": str(args.pages), "FIXLAB_PAGES_TOTAL": str(args.pages),
               "FIXLAB_LAB_MAX_SESSIONS": str(args.pages), "PYTHONUNBUFFERED": "1"}
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            procs["matcher"] = spawn("services.matcher", env, work / "matcher.log")
            procs["gateway"] = spawn("services.gateway", env, work / "gateway.log")
            wait_port(fix_port, procs["gateway"])
            procs["web"] = spawn("services.web", env, work / "web.log")
            wait_http(f"http://127.0.0.1:{web_port}/api/health", procs["web"])
            assert redis_server.proc is not None
            pids = {"redis": redis_server.proc.pid, **{k: p.pid for k, p in procs.items()}}

            def sample() -> dict[str, float]:
                return {name: rss_mib(pid) for name, pid in pids.items()}

            result = asyncio.run(pages_phase(f"ws://127.0.0.1:{web_port}/ws", args.pages, args.rate,
                                             args.seconds, fix_port, work, env, args.bench_orders, sample,
                                             args.rounds, not args.no_bench))
            result["services_alive_at_end"] = {k: p.poll() is None for k, p in procs.items()}
        except BaseException:
            for name in ("matcher", "gateway", "web"):
                log = work / f"{name}.log"
                if log.exists():
                    sys.stderr.write(f"----- {name} -----\n{log.read_text()[-3000:]}\n")
            raise
        finally:
            for p in reversed(list(procs.values())):
                stop(p)
            redis_server.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip()
    out = {"benchmark": "load: lab pages through the web at the rate limit"
                        + ("" if args.no_bench else " + the 8x32 bench"),
           "command": " ".join(["python -m benchmarks.load", *(argv if argv is not None else sys.argv[1:])]),
           "commit": commit, "seconds": args.seconds, **result, **machine.describe()}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("bench_runs",)}, indent=2))
    return 0 if result["page_error_count"] == 0 and result["bench_failed_runs"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
