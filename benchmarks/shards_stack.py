"""``python -m benchmarks.shards_stack`` (part of ``make bench``): orders/s at 8x32 through the whole
runner stack (``python -m services``, bots off) laid out four ways, side by side in one run, and a
model of N shards built from what each process cost per order.

Layouts (deploy/SCALING.md section 5):
- ``1x1``: one shard, one gateway, one redis-server (what ``make run`` starts);
- ``1x2``: one shard, two gateways, one redis-server;
- ``2x2``: two shards (ACORN.LAB:a, BIRCH.LAB:b), two gateways, one redis-server;
- ``2x2-cluster``: the same on a private three-master Redis Cluster (``make run-cluster``).

Each is a fresh stack (its AOF with appendfsync everysec unless --appendfsync says otherwise); the
same bench runs against each (``python -m services.bench --gateways G --symbol ACORN.LAB,BIRCH.LAB``:
sessions dealt over the gateways' CompID ranges, alternating the two instruments), and the CPU time
of every process over the measured phase is read from /proc.

The model: every part of the route is one thread at a time (a matcher is single-threaded, a
gateway's Python is serialised by the GIL, its publisher is one process, Redis executes commands on
one thread per node), so one instance of a part with a core of its own handles at most
1 / (its CPU seconds per order) orders/s. Measured per part in the two-shard layouts (each part's CPU
over the orders it carried), with N shards, G gateways and R Redis nodes the stack handles at most
min(N x matcher, G x gateway, R x Redis) orders/s, and a machine of C cores at most
C / (every process's CPU per order). Cross-checks measured in the same run: the matcher service
alone (benchmarks.matcher's service run, at the stack's own orders per stream entry) and one
gateway's intake alone (benchmarks.intake).

Writes benchmarks/results/shards-stack.json and shards-stack.md.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.bench import report, suite
from services.bench.procs import FullStack
from shared import machine, redis_cluster, streams

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SHARDS = "ACORN.LAB:a,BIRCH.LAB:b"
INSTRUMENTS = (("ACORN.LAB", "100.00"), ("BIRCH.LAB", "25.00"))
MODEL_SHARDS = (1, 2, 4, 8, 16)
MODEL_GATEWAYS = 2  # as make run-cluster starts
MODEL_NODES = 3  # masters of make run-cluster's cluster


@dataclass(frozen=True, slots=True)
class Layout:
    key: str
    label: str
    shards: str  # FIXLAB_SHARDS ("" = every instrument on shard 0)
    gateways: int
    cluster: bool = False

    @property
    def shard_count(self) -> int:
        return len({item.split(":")[1] for item in self.shards.split(",")}) if self.shards else 1


LAYOUTS = (
    Layout("1x1", "1 shard, 1 gateway, one redis-server (make run)", "", 1),
    Layout("1x2", "1 shard, 2 gateways, one redis-server", "", 2),
    Layout("2x2", "2 shards, 2 gateways, one redis-server", SHARDS, 2),
    Layout("2x2-cluster", "2 shards, 2 gateways, 3-master Redis Cluster (make run-cluster)", SHARDS, 2, True),
)


def say(text: str) -> None:
    print(f"shards | {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- what each part costs (pure)

def part_of(process: str) -> str | None:
    """The part of the route a process name (services.bench.procs.process_name) belongs to."""
    if process.startswith("matcher"):
        return "matcher"
    if process.startswith("gateway"):
        return "publisher" if process.endswith("publisher") else "gateway"
    if process.startswith("redis-server"):
        return "redis"
    return None


def part_costs(us_per_order: Mapping[str, float]) -> dict[str, float]:
    """CPU µs per order of each part, summed over its instances (processes of the same part)."""
    out: dict[str, float] = {}
    for process, us in us_per_order.items():
        part = part_of(process)
        if part is not None:
            out[part] = round(out.get(part, 0.0) + us, 1)
    return out


def capacities(costs: Mapping[str, float]) -> dict[str, float]:
    """Orders/s one instance of each part handles on a core of its own: 1 / its CPU per order (the
    part's instances share the orders, so the summed cost is one instance's cost per own order).
    A gateway is its main process and its publisher, each a process of its own: the slower one."""
    cap = {part: 1e6 / us for part, us in costs.items() if us > 0}
    if "gateway" in cap and "publisher" in cap:
        cap["gateway"] = min(cap["gateway"], cap.pop("publisher"))
    return cap


def model_rows(matcher: float, gateway: float, redis: float, cluster_node: float,
               shard_counts: Iterable[int], gateways: int, nodes: int) -> list[dict[str, Any]]:
    """N shards: the cap of each part and the predicted orders/s = the smallest, with ``gateways``
    gateways and either one redis-server (``redis`` orders/s) or a cluster of ``nodes`` masters of
    ``cluster_node`` orders/s each, its keys spread evenly over them."""
    rows = []
    for n in shard_counts:
        caps = {"matchers": n * matcher, "gateways": gateways * gateway, "redis": redis,
                "cluster": nodes * cluster_node}
        one = min(("matchers", "gateways", "redis"), key=lambda k: caps[k])
        many = min(("matchers", "gateways", "cluster"), key=lambda k: caps[k])
        # With as many gateways as it takes (each on a core of its own): matchers or Redis.
        one_scaled = min(("matchers", "redis"), key=lambda k: caps[k])
        many_scaled = min(("matchers", "cluster"), key=lambda k: caps[k])
        rows.append({
            "shards": n, **{k: round(v) for k, v in caps.items()},
            "one_redis_orders_per_s": round(caps[one]), "one_redis_limit": one,
            "cluster_orders_per_s": round(caps[many]), "cluster_limit": many,
            "scaled_one_redis_orders_per_s": round(caps[one_scaled]), "scaled_one_redis_limit": one_scaled,
            "scaled_cluster_orders_per_s": round(caps[many_scaled]), "scaled_cluster_limit": many_scaled,
            "scaled_cluster_gateways": math.ceil(caps[many_scaled] / gateway),
        })
    return rows


# ---------------------------------------------------------------------- runs

def entries_per_stream(url: str, shards: Sequence[str]) -> dict[str, int]:
    """Entries ever added to each shard's orders stream (XINFO STREAM entries-added)."""
    r = redis_cluster.connect_any(url)
    try:
        out = {}
        for shard in shards:
            info: Any = r.xinfo_stream(streams.orders_stream(shard))
            out[shard] = int(info.get("entries-added", info.get("length", 0)))
        return out
    finally:
        r.close()


def run_layout(layout: Layout, spec: suite.RunSpec, opts: argparse.Namespace, work: Path) -> dict[str, Any]:
    env = {"FIXLAB_SHARDS": layout.shards, "FIXLAB_GATEWAYS": str(layout.gateways),
           "FIXLAB_REDIS_APPENDFSYNC": opts.appendfsync}
    args = ("--cluster",) if layout.cluster else ()
    extra = ["--gateways", str(layout.gateways), "--symbol", ",".join(s for s, _ in INSTRUMENTS),
             "--price", ",".join(p for _, p in INSTRUMENTS)]
    with FullStack(work / layout.key, env=env, args=args, gateways=layout.gateways) as full:
        record, _ = suite.measured(spec, opts, work, full.processes(), full.fix_port, layout.key, extra)
        shards = ["0"] if not layout.shards else sorted({i.split(":")[1] for i in layout.shards.split(",")})
        entries = entries_per_stream(full.redis_url, shards)
    record.pop("latencies_ns", None)
    us = record.get("cpu", {}).get("us_per_order", {})
    commands = spec.orders + spec.sessions * opts.warmup
    nodes = {name: v for name, v in us.items() if part_of(name) == "redis"}
    return {"layout": layout.label, "shards": layout.shard_count, "gateways": layout.gateways,
            "cluster": layout.cluster, "record": record, "part_us_per_order": part_costs(us),
            "redis_us_per_order_by_node": nodes,
            "orders_stream_entries": entries,
            "orders_per_entry": round(commands / max(1, sum(entries.values())), 1)}


def run_components(work: Path, per_entry: int, orders: int) -> dict[str, Any]:
    """The matcher service alone at ``per_entry`` commands per entry, and one gateway's intake alone."""
    from benchmarks import intake, matcher

    out: dict[str, Any] = {}
    say(f"matcher service alone: {orders:,} orders, {per_entry} per entry")
    try:
        got = matcher.run_service(orders, per_entry, work / "matcher")
        out["matcher_service"] = {k: got[k] for k in ("orders", "commands_per_entry", "orders_per_s",
                                                      "orders_per_matcher_cpu_s", "all_answered")}
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        out["matcher_service"] = {"error": str(exc)[:500]}
    say(f"gateway intake alone: {orders:,} orders")
    try:
        got = intake.run(orders, None, None)
        out["gateway_intake"] = {k: got[k] for k in ("orders", "orders_per_s", "gateway_cpu_us_per_order",
                                                     "publisher_cpu_us_per_order")}
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        out["gateway_intake"] = {"error": str(exc)[:500]}
    return out


def model(doc: dict[str, Any]) -> dict[str, Any] | None:
    """Capacities from the two-shard runs (the cluster's for the Redis node when it ran) and the rows."""
    by = {r["key"]: r for r in doc["layouts"] if "record" in r}
    base = by.get("2x2") or by.get("2x2-cluster")
    if base is None:
        return None
    cap = capacities(base["part_us_per_order"])
    redis = cap.get("redis", 0.0)
    # A cluster node's capacity: 1 / (the cluster's Redis CPU per order, all nodes), as if one node
    # carried it all; a cluster of R nodes with its keys spread evenly carries R times that.
    node = capacities(by["2x2-cluster"]["part_us_per_order"]).get("redis", redis) \
        if "2x2-cluster" in by else redis
    # How evenly the cluster's slots spread the work: the busiest node's share of the Redis CPU.
    by_node = by["2x2-cluster"].get("redis_us_per_order_by_node", {}) if "2x2-cluster" in by else {}
    busiest = max(by_node.values()) / sum(by_node.values()) if by_node and sum(by_node.values()) else None
    every = base["record"]["cpu"].get("all_us_per_order", 0.0)
    cores = doc["machine"]["logical_cpus"]
    ready = bool(cap.get("matcher") and cap.get("gateway") and redis and node)
    return {
        "from": base["key"], "matcher_orders_per_s": round(cap.get("matcher", 0)),
        "gateway_orders_per_s": round(cap.get("gateway", 0)), "redis_orders_per_s": round(redis),
        "cluster_node_orders_per_s": round(node),
        "cluster_node_from": "2x2-cluster" if "2x2-cluster" in by else base["key"],
        "cluster_busiest_node_share": round(busiest, 2) if busiest is not None else None,
        "this_machine_orders_per_s": round(cores * 1e6 / every) if every else None,
        "all_us_per_order": every, "cores": cores,
        "rows": model_rows(cap["matcher"], cap["gateway"], redis, node, MODEL_SHARDS, MODEL_GATEWAYS,
                           MODEL_NODES) if ready else [],
    }


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [f"# Orders/s at {doc['sessions']}x{doc['window']} by layout, through the runner's stack", "",
             f"{doc['date']}, `{doc['command']}`, {m['cpu_model']}, {m['logical_cpus']} logical CPUs, "
             f"load average at start {m['load_average_at_start']}, {doc['orders']:,} orders a layout "
             f"(+{doc['warmup_per_session']} warm-up per session), AOF appendfsync {doc['appendfsync']}, "
             f"{doc['elapsed_s']} s in all.", "",
             "| layout | orders/s | p50 | p99 | lost | CPU µs/order: matchers | gateways | publishers | "
             "Redis | bench | all | orders per entry |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["layouts"]:
        if "record" not in r:
            lines.append(f"| {r['layout']} | failed: {r.get('error', '?')[:120]} | | | | | | | | | | |")
            continue
        rec, part = r["record"], r["part_us_per_order"]
        cpu = rec.get("cpu", {})
        lines.append(
            f"| {r['layout']} | {report.fmt_int(rec['orders_per_s'])} | {report.fmt_us(rec['ack_p50_us'])} | "
            f"{report.fmt_us(rec['ack_p99_us'])} | {rec['lost']} | {part.get('matcher', 0):.0f} | "
            f"{part.get('gateway', 0):.0f} | {part.get('publisher', 0):.0f} | {part.get('redis', 0):.0f} | "
            f"{cpu.get('us_per_order', {}).get('bench', 0):.0f} | {cpu.get('all_us_per_order', 0):.0f} | "
            f"{r['orders_per_entry']} |")
    comp = doc.get("components", {})
    if comp:
        ms, gi = comp.get("matcher_service", {}), comp.get("gateway_intake", {})
        lines += ["", "Alone, in the same run: the matcher service "
                  f"{report.fmt_int(ms.get('orders_per_s', 0))} orders/s at {ms.get('commands_per_entry')} "
                  f"commands per entry (benchmarks.matcher's service run); one gateway's intake "
                  f"{report.fmt_int(gi.get('orders_per_s', 0))} orders/s "
                  "(benchmarks.intake, no reports back)."]
    mod = doc.get("model")
    if mod and mod["rows"]:
        lines += ["", f"## Model of N shards ({MODEL_GATEWAYS} gateways; one redis-server, or a "
                  f"{MODEL_NODES}-master cluster)", "",
                  f"One instance on a core of its own, from the CPU per order measured in `{mod['from']}`: "
                  f"matcher {report.fmt_int(mod['matcher_orders_per_s'])} orders/s, gateway (the slower of "
                  f"its process and its publisher) {report.fmt_int(mod['gateway_orders_per_s'])}, one "
                  f"redis-server {report.fmt_int(mod['redis_orders_per_s'])}, a cluster node "
                  f"{report.fmt_int(mod['cluster_node_orders_per_s'])} (from `{mod['cluster_node_from']}`"
                  + (f"; its busiest node did {mod['cluster_busiest_node_share']:.0%} of the cluster's Redis "
                     "work" if mod.get("cluster_busiest_node_share") else "") + "). "
                  f"This machine ({mod['cores']} cores, every process "
                  f"{mod['all_us_per_order']:.0f} µs of CPU an order): at most "
                  f"{report.fmt_int(mod['this_machine_orders_per_s'] or 0)} orders/s "
                  "whatever the layout.", "",
                  "Caps in orders/s; predicted = the smallest cap that applies (named). The last two "
                  "columns give the gateways as many as it takes (how many in brackets for the cluster).",
                  "",
                  "| shards | N x matcher | 2 gateways | one redis-server | 3-master cluster | "
                  "2 gateways, one redis-server | 2 gateways, cluster | enough gateways, one redis-server | "
                  "enough gateways, cluster |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for row in mod["rows"]:
            lines.append(
                f"| {row['shards']} | {report.fmt_int(row['matchers'])} | "
                f"{report.fmt_int(row['gateways'])} | "
                f"{report.fmt_int(row['redis'])} | {report.fmt_int(row['cluster'])} | "
                f"{report.fmt_int(row['one_redis_orders_per_s'])} ({row['one_redis_limit']}) | "
                f"{report.fmt_int(row['cluster_orders_per_s'])} ({row['cluster_limit']}) | "
                f"{report.fmt_int(row['scaled_one_redis_orders_per_s'])} ({row['scaled_one_redis_limit']}) | "
                f"{report.fmt_int(row['scaled_cluster_orders_per_s'])} ({row['scaled_cluster_limit']}, "
                f"{row['scaled_cluster_gateways']} gateways) |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.shards_stack", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layouts", default=",".join(x.key for x in LAYOUTS),
                   help="which layouts, comma separated")
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--window", type=int, default=32)
    # 100,000 a layout keeps the four layouts and the two components near 10 minutes on 2 cores.
    p.add_argument("--orders", type=int, default=100_000, help="measured orders a layout")
    p.add_argument("--warmup", type=int, default=1000, help="warm-up orders per session")
    p.add_argument("--stall", type=float, default=15.0)
    p.add_argument("--component-orders", type=int, default=100_000,
                   help="orders of the matcher-alone and intake-alone runs (0: skip them)")
    p.add_argument("--appendfsync", default="everysec", choices=("always", "everysec", "no"),
                   help="the AOF's fsync policy of every layout's Redis (make run's default is always: "
                        "then each order waits for a disk flush, and the disk, not the processes, sets "
                        "the pace; everysec measures what the processes can do)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


def main(argv: list[str] | None = None) -> int:
    opts = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    known = {x.key: x for x in LAYOUTS}
    wanted = [k.strip() for k in opts.layouts.split(",") if k.strip()]
    if not wanted or any(k not in known for k in wanted):
        print(f"shards: --layouts {opts.layouts!r}: choose from {sorted(known)}", file=sys.stderr)
        return 2
    spec = suite.RunSpec("throughput", opts.sessions, opts.window, opts.orders)
    doc: dict[str, Any] = {
        **machine.describe(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python -m benchmarks.shards_stack " + shlex.join(sys.argv[1:] if argv is None else argv),
        "sessions": opts.sessions, "window": opts.window, "orders": opts.orders,
        "warmup_per_session": opts.warmup, "appendfsync": opts.appendfsync,
        "instruments": [s for s, _ in INSTRUMENTS], "layouts": [],
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fixlab-shards-") as tmp:
        work = Path(tmp)
        for key in wanted:
            layout = known[key]
            say(f"{layout.label}: {opts.sessions}x{opts.window}, {opts.orders:,} orders, a fresh stack")
            try:
                got = run_layout(layout, spec, opts, work)
                rec = got["record"]
                say(f"{layout.key}: {report.fmt_int(rec['orders_per_s'])} orders/s, lost {rec['lost']}, "
                    f"CPU µs/order by part {got['part_us_per_order']}")
                doc["layouts"].append({"key": key, **got})
            except (RuntimeError, TimeoutError, subprocess.SubprocessError, OSError, KeyError) as exc:
                say(f"{layout.key}: failed: {exc}")
                doc["layouts"].append({"key": key, "layout": layout.label, "error": str(exc)[:2000]})
        if opts.component_orders:
            per_entry = next((round(r["orders_per_entry"]) for r in doc["layouts"]
                              if r["key"] == "2x2" and "record" in r), 50)
            doc["components"] = run_components(work, max(1, per_entry), opts.component_orders)
    doc["model"] = model(doc)
    doc["elapsed_s"] = round(time.monotonic() - started, 1)
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    (opts.results_dir / "shards-stack.json").write_text(json.dumps(doc, indent=2) + "\n")
    (opts.results_dir / "shards-stack.md").write_text(markdown(doc))
    say(f"wrote {opts.results_dir}/shards-stack.json and shards-stack.md in {doc['elapsed_s']} s")
    print(markdown(doc))
    return 1 if any("error" in r or r["record"]["lost"] for r in doc["layouts"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
