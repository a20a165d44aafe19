"""``python -m services.bench.suite`` (``make bench``): seed 000's standard runs, each side by side
against the engine-only baseline, a fresh lean exchange (redis-server, matcher, gateway) and a fresh
full stack exactly as ``make run`` starts it (bots off, a page watching the books), plus the matcher
and gateway intake benchmarks. Every process's CPU time over each measured phase is read from /proc.

Writes under services/bench/results/: results.json (machine, date, versions, command, every
figure), results.md (the tables) and one SVG latency distribution per run.
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
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.bench import report
from services.bench.mdsubs import x_per_second
from services.bench.procs import Baseline, Child, CpuSampler, FullStack, Stack, base_env
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
    "matcher": "benchmarks.matcher",
    "gateway intake": "benchmarks.intake",
    "relay": "benchmarks.relay",  # the floor of two Redis stream hops (issue 12's latency target)
}
# The stacks each run is measured on, in this order: (key in results.json, label, --stacks name).
STACKS = (("baseline", "engine only", "engine"), ("fills", "engine with fills", "fills"),
          ("exchange", "lean stack", "lean"),
          ("md", "lean stack + market data", "md"), ("full", "full stack", "full"))
# Issue 14: the lean stack again with this many market-data subscribers (python -m
# services.bench.mdsubs: full depth, updates, every instrument) logged on, on these runs only.
MD_SUBSCRIBERS = 32
MD_RUNS = ("concurrent", "throughput")
# The engine alone sending the exchange's reports too (a Fill to each side when orders cross:
# services.bench.baseline --fills): what the FIX messages alone allow at 4x8, beside issue 12's ratio.
FILLS_RUNS = ("concurrent",)


def say(text: str) -> None:
    print(f"bench | {text}", file=sys.stderr, flush=True)


def bench_once(spec: RunSpec, port: int, warmup: int, workdir: Path, label: str,
               stall_s: float, sampler: CpuSampler | None = None,
               extra: Sequence[str] = ()) -> tuple[dict[str, Any], list[int]]:
    """One bench process against 127.0.0.1:port (``extra``: more of its arguments, e.g. --gateways);
    its JSON record and sorted latencies (ns).

    With a sampler, the bench process's own CPU time is sampled too (as "bench")."""
    out, lat = workdir / f"{label}.json", workdir / f"{label}.lat"
    argv = [sys.executable, "-m", "services.bench", "--addr", f"127.0.0.1:{port}",
            "--sessions", str(spec.sessions), "--window", str(spec.window), "--orders", str(spec.orders),
            "--warmup", str(warmup), "--out", str(out), "--latencies", str(lat), "--progress",
            "--stall", str(stall_s), "--run-id", f"{label}-{int(time.time())}",
            # One gateway unless ``extra`` says otherwise (the last --gateways counts), whatever
            # FIXLAB_GATEWAYS the shell exported: the stacks here start one unless told otherwise.
            "--gateways", "1", *extra]
    # Generous: a broken exchange shows as a stall (lost orders) long before this.
    timeout = 120 + spec.orders / 200
    proc = subprocess.Popen(argv, env=base_env(), stdout=subprocess.DEVNULL, stderr=None)
    if sampler is not None:
        sampler.add("bench", proc.pid)
    try:
        proc.wait(timeout)
    except BaseException:  # a time-out, or SIGTERM unwinding the suite: the bench goes too
        proc.kill()
        proc.wait()
        raise
    if not out.is_file():
        raise RuntimeError(f"the bench exited with {proc.returncode} and wrote no result")
    record = json.loads(out.read_text())
    latencies = [int(x) for x in lat.read_text().split()] if lat.is_file() else []
    return record, latencies


def cpu_per_order(cpu_s: dict[str, float], record: dict[str, Any]) -> dict[str, Any]:
    """CPU µs per answered order of each process over the measured phase, and the cores each kept busy."""
    answered = record["acknowledged"] + record["rejected"]
    seconds = record["seconds"]
    out: dict[str, Any] = {
        "us_per_order": {n: round(c * 1e6 / answered, 1) for n, c in cpu_s.items()} if answered else {},
        "cores": {n: round(c / seconds, 3) for n, c in cpu_s.items()} if seconds else {},
    }
    exchange = {n: c for n, c in cpu_s.items() if n not in ("bench", "page", "mdsubs")}
    if answered:
        out["exchange_us_per_order"] = round(sum(exchange.values()) * 1e6 / answered, 1)
        out["all_us_per_order"] = round(sum(cpu_s.values()) * 1e6 / answered, 1)
    return out


def measured(spec: RunSpec, args: argparse.Namespace, work: Path, pids: dict[str, int], port: int,
             label: str, extra: Sequence[str] = ()) -> tuple[dict[str, Any], list[int]]:
    with CpuSampler(pids) as sampler:
        record, lat = bench_once(spec, port, args.warmup, work, label, args.stall, sampler, extra)
    if record.get("start_ns") and record.get("end_ns"):
        record["cpu"] = cpu_per_order(sampler.between(record["start_ns"], record["end_ns"]), record)
    return record, lat


def run_stack(key: str, spec: RunSpec, args: argparse.Namespace, work: Path,
              run: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """Start the stack named ``key``, bench it, stop it; the record (with CPU per process)."""
    label = f"{spec.name}-{key}"
    if key == "baseline":
        with Baseline(work / label) as bl:
            assert bl.child is not None
            return measured(spec, args, work, {"baseline": bl.child.proc.pid}, bl.port, label)
    if key == "fills":
        with Baseline(work / label, fills=True) as bl:
            assert bl.child is not None
            return measured(spec, args, work, {"baseline": bl.child.proc.pid}, bl.port, label)
    if key == "exchange":
        with Stack(work / label) as stack:
            return measured(spec, args, work, stack.processes(), stack.fix_port, label)
    if key == "md":
        with Stack(work / label) as stack:
            return with_subscribers(spec, args, work, stack, label)
    extra = dict(kv.split("=", 1) for kv in args.full_env)
    with FullStack(work / label, env=extra) as full:
        page_out = work / f"{label}-page.json"
        page = Child("page", (sys.executable, "-m", "services.bench.page", "--url",
                              f"ws://127.0.0.1:{full.web_port}/ws", "--out", str(page_out)),
                     base_env(), work / label / "page.log")
        try:
            wait_pages(full.web_url, 1, page, 30)
            record, lat = measured(spec, args, work, {**full.processes(), "page": page.proc.pid},
                                   full.fix_port, label)
        finally:
            page.stop()
        if page_out.is_file():
            run["page"] = json.loads(page_out.read_text())
        return record, lat


def with_subscribers(spec: RunSpec, args: argparse.Namespace, work: Path, stack: Stack,
                     label: str) -> tuple[dict[str, Any], list[int]]:
    """Bench ``stack`` with MD_SUBSCRIBERS market-data sessions subscribed (each holding its W of every
    instrument before the bench starts); the record gets what they received during the phase."""
    out, ready = work / f"{label}-mdsubs.json", work / f"{label}-mdsubs.ready"
    subs = Child("mdsubs", (sys.executable, "-m", "services.bench.mdsubs", "--addr",
                            f"127.0.0.1:{stack.fix_port}", "--sessions", str(MD_SUBSCRIBERS),
                            "--out", str(out), "--ready", str(ready)),
                 base_env(), work / label / "mdsubs.log")
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if not subs.alive():
                raise RuntimeError(f"the subscribers exited with {subs.proc.returncode}:\n{subs.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{MD_SUBSCRIBERS} subscribers not all holding their snapshots in 60s")
            time.sleep(0.1)
        record, lat = measured(spec, args, work, {**stack.processes(), "mdsubs": subs.proc.pid},
                               stack.fix_port, label)
    finally:
        subs.stop()
    if out.is_file():
        got = json.loads(out.read_text())
        md: dict[str, Any] = {k: v for k, v in got.items() if k != "x_buckets"}
        if record.get("start_ns") and record.get("end_ns"):
            md["x_per_s"] = round(x_per_second(got, record["start_ns"], record["end_ns"]), 1)
        record["market_data"] = md
    return record, lat


def wait_pages(web_url: str, pages: int, page: Child, timeout_s: float) -> None:
    """Wait until the web service counts ``pages`` open pages (the watcher has its snapshot)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not page.alive():
            raise RuntimeError(f"the page exited with {page.proc.returncode}:\n{page.tail()}")
        try:
            with urllib.request.urlopen(f"{web_url}/api/health", timeout=2) as resp:
                if json.loads(resp.read()).get("pages", 0) >= pages:
                    return
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no page open on {web_url} after {timeout_s:.0f}s")
        time.sleep(0.1)


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
    rates = ({k: v for k, v in _flatten(result) if "per_s" in k.rsplit(".", 1)[-1]}
             or {k: v for k, v in _flatten(result) if k.startswith("floor.")})
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
    """Issue 5's targets, checked against the lean exchange's figures and, where it ran, the full
    stack's (issue 11: the stack users run is held to the same targets)."""
    out = _targets(runs, "exchange")
    if any(r.get("full") for r in runs):
        out += [{**t, "stack": "full"} for t in _targets(runs, "full")]
    return out


def floor_targets(runs: list[dict[str, Any]], relay: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Issue 12's targets, as ratios measured in this one run: 1x1 near its floor (the engine alone
    plus two Redis stream hops), and 4x8 at half the engine alone's orders/s or more."""
    out: list[dict[str, Any]] = []
    by = {r["name"]: r for r in runs}
    floor = (relay or {}).get("result", {}).get("floor")
    for side, stack in (("exchange", "lean"), ("full", "full")):
        lat, con = by.get("latency", {}), by.get("concurrent", {})
        if floor and lat.get(side) and lat.get("baseline"):
            base = lat["baseline"]["ack_p50_us"] + floor["p50_us"]
            p50, p99 = lat[side]["ack_p50_us"], lat[side]["ack_p99_us"]
            out.append({"run": "latency", "stack": stack, "met": p50 <= 1.15 * base,
                        "what": "p50 <= 1.15 x (engine alone p50 + relay p50)",
                        "value": f"{report.fmt_us(p50)} vs {report.fmt_us(1.15 * base)} (x{p50 / base:.2f})"})
            out.append({"run": "latency", "stack": stack, "met": p99 <= 2 * base,
                        "what": "p99 <= 2 x (engine alone p50 + relay p50)",
                        "value": f"{report.fmt_us(p99)} vs {report.fmt_us(2 * base)} (x{p99 / base:.2f})"})
        if con.get(side) and con.get("baseline"):
            ratio = con[side]["orders_per_s"] / con["baseline"]["orders_per_s"]
            value = f"x{ratio:.2f}"
            if con.get("fills"):  # what the FIX messages alone allow, beside it
                fills = con["fills"]["orders_per_s"] / con["baseline"]["orders_per_s"]
                value += (f" (the engine alone sending the exchange's Fills too: x{fills:.2f};"
                          f" this stack x{con[side]['orders_per_s'] / con['fills']['orders_per_s']:.2f}"
                          " of that)")
            out.append({"run": "concurrent", "stack": stack, "met": ratio >= 0.5,
                        "what": "orders/s >= 0.5 x the engine alone's", "value": value})
    return out


def md_targets(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 14: with MD_SUBSCRIBERS subscribers, orders/s at least 90% of the same stack without them,
    every subscriber served (no session Reject), in the same suite run."""
    out: list[dict[str, Any]] = []
    for r in runs:
        md, lean = r.get("md"), r.get("exchange")
        if not (md and lean):
            continue
        ratio = md["orders_per_s"] / lean["orders_per_s"] if lean["orders_per_s"] else 0.0
        got = md.get("market_data", {})
        out.append({"run": r["name"], "stack": "md", "met": ratio >= 0.9,
                    "what": f"orders/s with {MD_SUBSCRIBERS} market-data subscribers >= 0.9 x without",
                    "value": f"{report.fmt_int(md['orders_per_s'])} vs "
                             f"{report.fmt_int(lean['orders_per_s'])} (x{ratio:.2f}); "
                             f"{report.fmt_int(got.get('x_per_s', 0))} X/s received"})
        out.append({"run": r["name"], "stack": "md",
                    "met": got.get("session_rejects_sent", 1) == 0 and got.get("snapshots", 0) > 0,
                    "what": "every W and X valid at the subscribers (no session Reject)",
                    "value": f"{got.get('session_rejects_sent', '?')} rejects, "
                             f"by type {got.get('by_type', {})}"})
    return out


def _targets(runs: list[dict[str, Any]], side: str) -> list[dict[str, Any]]:
    by = {r["name"]: r.get(side) for r in runs}
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
    p.add_argument("--stacks", default=",".join(name for _, _, name in STACKS),
                   help="which stacks each run is measured on, comma separated: engine (the engine "
                        "alone), lean (redis-server, matcher, gateway), md (lean with 32 market-data "
                        "subscribers, concurrent and throughput runs only), full (python -m services, as "
                        "make run starts it, bots off, a page watching the books)")
    p.add_argument("--full-env", action="append", default=[], metavar="NAME=VALUE",
                   help="set this in the full stack's environment (e.g. FIXLAB_SHARDS=...); repeatable")
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
    stacks = [n.strip() for n in args.stacks.split(",") if n.strip()]
    known_stacks = [name for _, _, name in STACKS]
    if not stacks or any(n not in known_stacks for n in stacks):
        print(f"bench: --stacks {args.stacks!r}: choose from {known_stacks}", file=sys.stderr)
        return 2
    if args.no_baseline:
        stacks = [n for n in stacks if n not in ("engine", "fills")]
    if any("=" not in kv for kv in args.full_env):
        print("bench: --full-env takes NAME=VALUE", file=sys.stderr)
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
            for key, label, name in STACKS:
                if name not in stacks or (key == "md" and spec.name not in MD_RUNS) or (
                        key == "fills" and spec.name not in FILLS_RUNS):
                    continue
                fresh = "" if key in ("baseline", "fills") else ", a fresh exchange"
                say(f"{spec.name}: {spec.sessions}x{spec.window}, {spec.orders:,} orders, {label}{fresh}")
                try:
                    run[key], series[label] = run_stack(key, spec, args, work, run)
                except (RuntimeError, TimeoutError, subprocess.TimeoutExpired, OSError) as exc:
                    run[f"{key}_error"] = str(exc)[:2000]
                    say(f"{spec.name}: {label} run failed: {exc}")
            if series:
                svg_name = f"{spec.name}.svg"
                title = (f"{spec.name}: {spec.sessions} sessions x {spec.window} in flight, "
                         f"{spec.orders:,} orders")
                (results_dir / svg_name).write_text(report.svg(title, series))
                run["svg"] = svg_name
            for key, label, _ in STACKS:
                if rec := run.get(key):
                    cpu = rec.get("cpu", {}).get("exchange_us_per_order")
                    say(f"{spec.name} {label}: {report.fmt_int(rec['orders_per_s'])} orders/s, "
                        f"p50 {report.fmt_us(rec['ack_p50_us'])}, p99 {report.fmt_us(rec['ack_p99_us'])}, "
                        f"lost {rec['lost']}" + (f", exchange CPU {cpu:.0f} µs/order" if cpu else ""))
            doc["runs"].append(run)
        if not args.no_components:
            for name, module in COMPONENTS.items():
                doc["components"][name] = run_component(name, module, work, 300)
    doc["targets"] = (targets(doc["runs"]) + floor_targets(doc["runs"], doc["components"].get("relay"))
                      + md_targets(doc["runs"]))
    doc["elapsed_s"] = round(time.monotonic() - started, 1)
    (results_dir / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    (results_dir / "results.md").write_text(report.markdown(doc))
    say(f"wrote {results_dir}/results.json, results.md and the SVGs in {doc['elapsed_s']}s")
    failed = any(k.endswith("_error") for r in doc["runs"] for k in r)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
