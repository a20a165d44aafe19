"""``python -m services.bench.tls``: the same exchange over TLS and plain, 1x1 latency and 4x8 throughput
side by side.

One lean exchange (services.bench.procs.Stack: redis-server, matcher, gateway) and stunnel4 in front of
it as the stack runs it (``python -m services.tls``, its self-signed pair). The bench's initiators reach
the TLS port through a local stunnel in client mode (``python -m services.bench --tls``, verifying that
certificate). Plain and TLS alternate, ``--rounds`` times, so that a slow spell of a shared machine
falls on both alike. The TLS sessions arrive from stunnel's 127.0.0.3, which the own-address rule keeps
BENCH CompIDs away from; this measurement's exchange lists it in FIXLAB_OWN_ADDRESSES on purpose.
Writes services/bench/results/tls.json and tls.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from services.bench.procs import Child, Stack, base_env, wait_port
from services.bench.suite import RESULTS_DIR, RunSpec, bench_once, say
from shared import machine
from shared.redis_server import free_port

MODES = ("plain", "tls")


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"# FIX over TLS (stunnel4) and plain, side by side ({doc['date']}, "
             f"{doc.get('machine', {}).get('cpu_model', '?')})", "",
             f"`{doc['command']}`: {doc['rounds']} rounds, plain and TLS alternated, one lean exchange; "
             "medians of the rounds.", "",
             "| run | mode | orders/s | p50 µs | p99 µs | rounds (orders/s) |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for run, modes in doc["runs"].items():
        for mode, row in modes.items():
            rounds = ", ".join(f"{x:,.0f}" for x in row["rounds"])
            lines.append(f"| {run} | {mode} | {row['orders_per_s']:,.0f} | {row['p50_us']:,.0f} | "
                         f"{row['p99_us']:,.0f} | {rounds} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.bench.tls", description=__doc__)
    p.add_argument("--latency-orders", type=int, default=3_000, help="measured orders of each 1x1 run")
    p.add_argument("--orders", type=int, default=20_000, help="measured orders of each 4x8 run")
    p.add_argument("--warmup", type=int, default=300, help="warm-up orders per session")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    specs = (RunSpec("latency", 1, 1, args.latency_orders), RunSpec("concurrent", 4, 8, args.orders))
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {s.name: {m: [] for m in MODES} for s in specs}
    with tempfile.TemporaryDirectory(prefix="fixlab-tls-bench-") as tmp:
        work = Path(tmp)
        # BENCH CompIDs over TLS come from stunnel's own address: allowed here, for the measurement.
        own = {"FIXLAB_OWN_ADDRESSES": "127.0.0.1,127.0.0.3"}
        with Stack(work / "stack", env=own) as stack:
            tls_port = free_port()
            run_dir = work / "stack" / "run"
            env = base_env({"FIXLAB_FIX_PORT": str(stack.fix_port), "FIXLAB_FIX_TLS_PORT": str(tls_port),
                            "FIXLAB_RUN_DIR": str(run_dir)})
            tunnel = Child("tls", (sys.executable, "-m", "services.tls"), env, work / "tls.log")
            try:
                wait_port("127.0.0.1", tls_port, [tunnel], 30)
                ca = str(run_dir / "tls" / "cert.pem")
                for round_no in range(args.rounds):
                    for spec in specs:
                        order = MODES if round_no % 2 == 0 else tuple(reversed(MODES))
                        for mode in order:
                            say(f"tls: round {round_no + 1}, {spec.name} {spec.sessions}x{spec.window}, "
                                f"{mode}, {spec.orders:,} orders")
                            port, extra = ((tls_port, ("--tls", "--tls-ca", ca)) if mode == "tls"
                                           else (stack.fix_port, ()))
                            record, _lat = bench_once(spec, port, args.warmup, work,
                                                      f"{spec.name}-{mode}-{round_no}", 10.0, extra=extra)
                            rows[spec.name][mode].append(record)
            finally:
                tunnel.stop()
    out: dict[str, dict[str, Any]] = {}
    for run, modes in rows.items():
        out[run] = {}
        for mode, records in modes.items():
            out[run][mode] = {
                "orders_per_s": statistics.median(r["orders_per_s"] for r in records),
                "rounds": [r["orders_per_s"] for r in records],
                "p50_us": statistics.median(r["ack_p50_us"] for r in records),
                "p99_us": statistics.median(r["ack_p99_us"] for r in records),
                "lost": sum(r["lost"] for r in records)}
    doc = {**machine.describe(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": "python -m services.bench.tls " + " ".join(sys.argv[1:] if argv is None else argv),
           "rounds": args.rounds, "runs": out}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "tls.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.results_dir / "tls.md").write_text(markdown(doc))
    for run, summary in out.items():
        for mode, row in summary.items():
            say(f"{run} {mode}: {row['orders_per_s']:,.0f} orders/s, p50 {row['p50_us']:,.0f} µs, "
                f"lost {row['lost']}")
    return 0 if all(row["lost"] == 0 for summary in out.values() for row in summary.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
