"""``python -m services.bench.suite`` (``make bench``): seed 000's standard runs, each against a fresh
exchange and against the engine-only baseline, plus the matcher and gateway intake benchmarks.

Writes under services/bench/results/: results.json (machine, date, versions, command, every
figure), results.md (the table) and one SVG latency distribution per run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.bench import report
from services.bench.procs import Baseline, Stack, base_env
from shared import machine
from shared.redis_server import RedisServer

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True, slots=True)
class RunSpec:
    name: str
    sessions: int
    window: int
    orders: int


STANDARD = (RunSpec("latency", 1, 1, 20_000), RunSpec("concurrent", 4, 8, 100_000),
            RunSpec("throughput", 8, 32, 200_000))
COMPONENTS = {
    "matcher": "services.matcher.bench",
    "gateway intake": "services.gateway.intake_bench",
}


def say(text: str) -> None:
    print(f"bench | {text}", file=sys.stderr, flush=True)


def bench_once(spec: RunSpec, port: int, warmup: int, workdir: Path, label: str,
               stall_s: float) -> tuple[dict[str, Any], list[int]]:
    """One bench process against 127.0.0.1:port; its JSON record and sorted latencies (ns)."""
    out, lat = workdir / f"{label}.json", workdir / f"{label}.lat"
    argv = [sys.executable, "-m", "services.bench", "--addr", f"127.0.0.1:{port}",
            "--sessions", str(spec.sessions), "--window", str(spec.window), "--orders", str(spec.orders),
            "--warmup", str(warmup), "--out", str(out), "--latencies", str(lat), "--progress",
            "--stall", str(stall_s), "--run-id", f"{label}-{int(time.time())}"]
    # Generous: a broken exchange shows as a stall (lost orders) long before this.
    timeout = 120 + spec.orders / 200
    proc = subprocess.run(argv, env=base_env(), stdout=subprocess.PIPE, stderr=None, timeout=timeout,
                          text=True)
    if not out.is_file():
        raise RuntimeError(f"the bench exited with {proc.returncode} and wrote no result")
    record = json.loads(out.read_text())
    latencies = [int(x) for x in lat.read_text().split()] if lat.is_file() else []
    return record, latencies


def run_component(name: str, module: str, workdir: Path, timeout_s: float) -> dict[str, Any]:
    if importlib.util.find_spec(module) is None:
        return {"status": "not available", "module": module}
    out = workdir / f"{module}.json"
    command = [sys.executable, "-m", module, "--out", str(out)]
    shown = f"python -m {module} --out FILE"
    say(f"{name}: {shown}")
    with RedisServer(workdir / f"redis-{module}") as server:
        try:
            proc = subprocess.run(command, env=base_env({"REDIS_URL": server.url}), timeout=timeout_s,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except subprocess.TimeoutExpired:
            return {"status": f"did not finish in {timeout_s:.0f}s", "command": shown}
    if proc.returncode != 0 or not out.is_file():
        return {"status": f"failed with exit code {proc.returncode}", "command": shown,
                "output_tail": proc.stdout[-2000:]}
    try:
        result = json.loads(out.read_text())
    except json.JSONDecodeError as exc:
        return {"status": f"wrote invalid JSON: {exc}", "command": shown}
    rates = {k: v for k, v in _flatten(result) if "per_s" in k.rsplit(".", 1)[-1]}
    headline = ", ".join(f"{k} {v:,.0f}" for k, v in list(rates.items())[:6]) or json.dumps(result)[:300]
    return {"status": "ok", "command": shown, "headline": headline, "result": result}


def _flatten(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, float]]:
    """Numeric leaves of a component's JSON as (dotted.key, number), a few levels deep."""
    out: list[tuple[str, float]] = []
    if depth > 5:
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value[:10]):
            name = v.get("name", i) if isinstance(v, dict) else i
            out += _flatten(v, f"{prefix}[{name}]", depth + 1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append((prefix, value))
    return out


def targets(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 5's targets, checked against the exchange's figures."""
    by = {r["name"]: r.get("exchange") for r in runs}
    out: list[dict[str, Any]] = []

    def add(run: str, what: str, value: str, met: bool) -> None:
        out.append({"run": run, "what": what, "value": value, "met": met})

    for name, ex in by.items():
        if ex:
            add(name, "all acknowledged, none lost",
                f"{ex['acknowledged']:,} of {ex['orders']:,}, lost {ex['lost']}",
                ex["acknowledged"] == ex["orders"] and ex["lost"] == 0)
    if lat := by.get("latency"):
        add("latency", "p50 <= 333 µs", report.fmt_us(lat["ack_p50_us"]), lat["ack_p50_us"] <= 333)
        add("latency", "p99 <= 1 ms", report.fmt_us(lat["ack_p99_us"]), lat["ack_p99_us"] <= 1000)
    if con := by.get("concurrent"):
        add("concurrent", ">= 4,523 orders/s", report.fmt_int(con["orders_per_s"]),
            con["orders_per_s"] >= 4523)
        add("concurrent", "p99 <= 21 ms", report.fmt_us(con["ack_p99_us"]), con["ack_p99_us"] <= 21_000)
    if thr := by.get("throughput"):
        add("throughput", ">= 4,523 orders/s", report.fmt_int(thr["orders_per_s"]),
            thr["orders_per_s"] >= 4523)
        if con:
            add("throughput", "not below the concurrent run",
                f"{report.fmt_int(thr['orders_per_s'])} vs {report.fmt_int(con['orders_per_s'])}",
                thr["orders_per_s"] >= con["orders_per_s"])
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m services.bench.suite", description=__doc__)
    p.add_argument("--quick", action="store_true",
                   help="a twentieth of the orders, results under .run/bench-quick (for development)")
    p.add_argument("--scale", type=float, help="multiply every run's orders by this")
    p.add_argument("--runs", default=",".join(s.name for s in STANDARD),
                   help="which standard runs, comma separated")
    p.add_argument("--warmup", type=int, default=1000, help="warm-up orders per session")
    p.add_argument("--no-baseline", action="store_true", help="skip the engine-only runs")
    p.add_argument("--no-components", action="store_true", help="skip the matcher and gateway benchmarks")
    p.add_argument("--results-dir", type=Path)
    p.add_argument("--stall", type=float, default=15.0, help="seconds without an answer before giving up")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so every stack and baseline started so far is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wanted = [n.strip() for n in args.runs.split(",") if n.strip()]
    known = {s.name: s for s in STANDARD}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        print(f"bench: unknown runs {unknown}; choose from {sorted(known)}", file=sys.stderr)
        return 2
    scale = args.scale if args.scale is not None else (0.05 if args.quick else 1.0)
    if not 0 < scale <= 10:
        print(f"bench: --scale {scale} must be in (0, 10]", file=sys.stderr)
        return 2
    results_dir = args.results_dir or (Path(".run/bench-quick") if args.quick else RESULTS_DIR)
    results_dir.mkdir(parents=True, exist_ok=True)
    specs = [RunSpec(s.name, s.sessions, s.window, max(s.sessions, int(s.orders * scale)))
             for s in (known[n] for n in wanted)]
    doc: dict[str, Any] = {
        **machine.describe(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "make bench" if argv is None and len(sys.argv) == 1
        else "python -m services.bench.suite " + shlex.join(sys.argv[1:] if argv is None else argv),
        "warmup_per_session": args.warmup,
        "runs": [],
        "components": {},
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fixlab-bench-") as tmp:
        work = Path(tmp)
        for spec in specs:
            run: dict[str, Any] = {"name": spec.name, "sessions": spec.sessions, "window": spec.window,
                                   "orders": spec.orders}
            series: dict[str, list[int]] = {}
            if not args.no_baseline:
                say(f"{spec.name}: {spec.sessions}x{spec.window}, {spec.orders:,} orders, engine only")
                try:
                    with Baseline(work / f"{spec.name}-baseline") as bl:
                        run["baseline"], lat = bench_once(spec, bl.port, args.warmup, work,
                                                          f"{spec.name}-baseline", args.stall)
                        series["engine only"] = lat
                except (RuntimeError, TimeoutError, subprocess.TimeoutExpired, OSError) as exc:
                    run["baseline_error"] = str(exc)[:2000]
                    say(f"{spec.name}: engine-only run failed: {exc}")
            say(f"{spec.name}: {spec.sessions}x{spec.window}, {spec.orders:,} orders, fresh exchange")
            try:
                with Stack(work / f"{spec.name}-stack") as stack:
                    run["exchange"], lat = bench_once(spec, stack.fix_port, args.warmup, work,
                                                      f"{spec.name}-exchange", args.stall)
                    series["exchange"] = lat
            except (RuntimeError, TimeoutError, subprocess.TimeoutExpired, OSError) as exc:
                run["exchange_error"] = str(exc)[:2000]
                say(f"{spec.name}: exchange run failed: {exc}")
            if series:
                svg_name = f"{spec.name}.svg"
                title = (f"{spec.name}: {spec.sessions} sessions x {spec.window} in flight, "
                         f"{spec.orders:,} orders")
                (results_dir / svg_name).write_text(report.svg(title, series))
                run["svg"] = svg_name
            for side in ("exchange", "baseline"):
                if rec := run.get(side):
                    say(f"{spec.name} {side}: {report.fmt_int(rec['orders_per_s'])} orders/s, "
                        f"p50 {report.fmt_us(rec['ack_p50_us'])}, p99 {report.fmt_us(rec['ack_p99_us'])}, "
                        f"lost {rec['lost']}")
            doc["runs"].append(run)
        if not args.no_components:
            for name, module in COMPONENTS.items():
                doc["components"][name] = run_component(name, module, work, 300)
    doc["targets"] = targets(doc["runs"])
    doc["elapsed_s"] = round(time.monotonic() - started, 1)
    (results_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    (results_dir / "results.md").write_text(report.markdown(doc))
    say(f"wrote {results_dir}/results.json, results.md and the SVGs in {doc['elapsed_s']}s")
    failed = any(k.endswith("_error") for r in doc["runs"] for k in r)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
