"""The gateway's resident memory with every provisioned session configured (a benchmark, not a test).

    python -m benchmarks.gateway_memory [--out benchmarks/results/gateway-memory.json] [--trimmed-only]

QuickFIX copies the acceptor's data dictionary into each session. This starts a redis-server, the
matcher and ``python -m services.gateway`` the way the tests do, once with the whole exchange
dictionary (FIXLAB_TRIM_DICTIONARY=0, as before issue 12; since issue 25 also the whole FIX42.xml and
FIX50SP2.xml of the FIX 4.2 and FIXT.1.1 sessions) and once trimmed to the messages the exchange
speaks (the default; since issue 14 those it only sends keep only the fields it writes),
one after the other in the same run. For each it reads VmRSS and
VmHWM from /proc/<pid>/status once the acceptor listens, then again after a few sessions logged on
and traded. The target (issue 12): at most 200 MiB resident, trimmed, with all sessions configured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shared import machine
from shared.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
TARGET_MIB = 200
# One trader per version beside two of FIX 4.4 (issue 25: every version's sessions configured).
TRADERS = (("CLIENT01", "FIX.4.4"), ("CLIENT02", "FIX.4.4"), ("CLIENT42-01", "FIX.4.2"),
           ("CLIENT50-01", "FIXT.1.1"))
ORDERS_EACH = 200
SOH = b"\x01"


def status_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid``, in MiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    out = {}
    for key in ("VmRSS", "VmHWM"):
        found = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
        out[key] = round(int(found.group(1)) / 1024, 1) if found else 0.0
    return out


def frame(fields: list[tuple[int, object]], begin: str = "FIX.4.4") -> bytes:
    body = b"".join(f"{t}={v}".encode() + SOH for t, v in fields)
    head = f"8={begin}".encode() + SOH + f"9={len(body)}".encode() + SOH
    return head + body + f"10={sum(head + body) % 256:03d}".encode() + SOH


def now() -> str:
    return time.strftime("%Y%m%d-%H:%M:%S.000", time.gmtime())


class Trader:
    """One session on a plain socket: log on, send orders, count the ExecutionReports back."""

    def __init__(self, port: int, comp_id: str, begin: str = "FIX.4.4") -> None:
        self.comp_id = comp_id
        self.begin = begin
        self.seq = 0
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.send("A", [(98, 0), (108, 30), (141, "Y"), *([(1137, 9)] if begin == "FIXT.1.1" else [])])
        if b"35=A" not in self.read_until(b"\x0135=A\x01"):
            raise RuntimeError(f"{comp_id}: logon refused")

    def send(self, msg_type: str, body: list[tuple[int, object]]) -> None:
        self.seq += 1
        self.sock.sendall(frame([(35, msg_type), (49, self.comp_id), (56, "FIXLAB"), (34, self.seq),
                                 (52, now()), *body], self.begin))

    def read_until(self, marker: bytes, count: int = 1) -> bytes:
        deadline = time.monotonic() + 30
        while self.buf.count(marker) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.comp_id}: waited 30 s for {count} x {marker!r}")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError(f"{self.comp_id}: connection closed")
            self.buf += chunk
        return self.buf

    def trade(self, orders: int) -> None:
        for i in range(orders):
            side, px = (1, "101.00") if i % 2 == 0 else (2, "99.00")
            # HandlInst (21): FIX 4.2 requires it; 4.4 and 5.0 SP2 take it.
            self.send("D", [(11, f"{self.comp_id}-{i}"), (21, 1), (55, "ACORN.LAB"), (54, side), (60, now()),
                            (38, 10), (40, 2), (44, px), (59, 0)])
        self.read_until(b"\x0135=8\x01", orders)

    def close(self) -> None:
        self.sock.close()


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"gateway did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure(trim: bool, base: Path) -> dict[str, Any]:
    """Start redis, matcher and gateway; memory once listening and after trading."""
    base.mkdir(parents=True)
    server = RedisServer(base / "redis").start()
    port = free_port()
    env = {**os.environ, "REDIS_URL": server.url, "FIXLAB_FIX_PORT": str(port), "FIXLAB_LABS": "0",
           "FIXLAB_GATEWAY_ID": "memory", "FIXLAB_RUN_DIR": str(base / "run"), "PYTHONUNBUFFERED": "1",
           "FIXLAB_TRIM_DICTIONARY": "1" if trim else "0"}
    procs: list[subprocess.Popen[bytes]] = []
    log = base / "gateway.log"
    try:
        with (base / "matcher.log").open("wb") as out:
            procs.append(subprocess.Popen([sys.executable, "-m", "services.matcher"], env=env, cwd=ROOT,
                                          stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        started = time.monotonic()
        with log.open("wb") as out:
            gw = subprocess.Popen([sys.executable, "-m", "services.gateway"], env=env, cwd=ROOT,
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append(gw)
        wait_port(port, gw, log)
        ready_s = time.monotonic() - started
        time.sleep(2.0)  # let start-up settle (the sweep, the first health report)
        idle = status_mib(gw.pid)
        traders = [Trader(port, comp, begin) for comp, begin in TRADERS]
        for t in traders:
            t.trade(ORDERS_EACH)
        trading = status_mib(gw.pid)
        for t in traders:
            t.close()
        sessions = re.search(r"\((\d+) sessions", log.read_text())
        return {"dictionary": "trimmed (default)" if trim else "whole dictionaries (before)",
                "sessions_configured": int(sessions.group(1)) if sessions else None,
                "seconds_to_listen": round(ready_s, 2),
                "listening": idle,
                "after_trading": {**trading, "sessions_logged_on": len(traders),
                                  "orders": len(traders) * ORDERS_EACH}}
    finally:
        for proc in reversed(procs):
            stop(proc)
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gateway_memory",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gateway-memory.json")
    parser.add_argument("--trimmed-only", action="store_true",
                        help="skip the run with the whole dictionaries (~2.4 GiB resident, 15 s to listen)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fixlab-memory-") as tmp:
        runs = [measure(trim, Path(tmp) / ("trimmed" if trim else "whole"))
                for trim in ((True,) if args.trimmed_only else (False, True))]
    trimmed = runs[-1]["listening"]["VmRSS"]
    result = {"benchmark": "gateway_memory", "target_mib": TARGET_MIB,
              "target_met": trimmed <= TARGET_MIB and runs[-1]["after_trading"]["VmRSS"] <= TARGET_MIB,
              "runs": runs, **machine.describe()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for run in runs:
        print(f"{run['dictionary']:>34}: {run['sessions_configured']} sessions, "
              f"VmRSS {run['listening']['VmRSS']:.0f} MiB listening, "
              f"{run['after_trading']['VmRSS']:.0f} MiB after {run['after_trading']['orders']} orders "
              f"on {run['after_trading']['sessions_logged_on']} sessions "
              f"(VmHWM {run['after_trading']['VmHWM']:.0f} MiB)")
    print(f"target {TARGET_MIB} MiB: {'met' if result['target_met'] else 'NOT met'} -> {args.out}")
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
