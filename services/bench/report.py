"""The suite's outputs: the Markdown table (seed 000's columns, plus the engine-only ratio) and a
hand-written SVG of each run's latency distribution. Pure: records in, text out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from services.bench.stats import nearest_rank

COLUMNS = ("Run", "Sessions", "In flight per session", "Orders", "Acknowledged", "Rejected", "Lost",
           "Orders / s", "Ack p50", "Ack p90", "Ack p99", "Slowest")


def fmt_us(us: float) -> str:
    """Seed 000's style: 333 µs, 6.0 ms, 131 ms, 1.01 s."""
    if us < 1000:
        return f"{us:.0f} µs"
    ms = us / 1000
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.2f} s"


def fmt_int(n: float) -> str:
    return f"{round(n):,}"


def ratio(a: float, b: float) -> str:
    return f"x{a / b:.2f}" if b else "n/a"


def row(name: str, r: Mapping[str, Any]) -> list[str]:
    return [name, fmt_int(r["sessions"]), fmt_int(r["window"]), fmt_int(r["orders"]),
            fmt_int(r["acknowledged"]), fmt_int(r["rejected"]), fmt_int(r["lost"]),
            fmt_int(r["orders_per_s"]), fmt_us(r["ack_p50_us"]), fmt_us(r["ack_p90_us"]),
            fmt_us(r["ack_p99_us"]), fmt_us(r["ack_max_us"])]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def markdown(doc: Mapping[str, Any]) -> str:
    """The results page: machine, the exchange table, the engine-only table and ratios, targets."""
    m = doc["machine"]
    v = doc["versions"]
    lines = [
        "# FIX Lab benchmark",
        "",
        f"Machine: {m['cpu_model']}, {m['logical_cpus']} logical CPUs, {m['memory_gib']} GiB of memory, "
        f"{m['kernel']}. Python {v['python']}, QuickFIX {v['quickfix']} (Python bindings), "
        f"redis-server {v['redis_server']}. Date: {doc['date']}. Load average at start: "
        f"{', '.join(str(x) for x in m['load_average_at_start'])}.",
        "",
        f"Command: `{doc['command']}`",
        "",
        "Bench, exchange and Redis on the same machine over loopback TCP; each run starts a fresh stack "
        "(its own redis-server, matcher and gateway). Orders alternate buy and sell, one unit each, at one "
        "price on one instrument. Ack latency: from just before the NewOrderSingle is handed to the "
        "client's engine to its ExecutionReport New arriving back, on one clock; exact nearest-rank "
        "percentiles over every measured order.",
        "",
        "## The exchange (bench → gateway → Redis → matcher → Redis → gateway → bench)",
        "",
    ]
    runs = doc["runs"]
    lines += _table(COLUMNS, [row(r["name"], r["exchange"]) for r in runs if r.get("exchange")])
    lines += ["", "## The engine alone (baseline acceptor answering New itself: no bus, no matcher)", ""]
    lines += _table(COLUMNS, [row(r["name"], r["baseline"]) for r in runs if r.get("baseline")])
    if any(r.get("fills") for r in runs):
        lines += ["", "## The engine alone, sending the exchange's Fills too (`services.bench.baseline "
                  "--fills`)", "",
                  "The same acceptor, which also trades crossing orders (one price, one unit: the oldest "
                  "resting order of the other side) and sends each side an ExecutionReport Fill, as the "
                  "exchange does: the FIX messages an order costs the two engines here, with no bus and "
                  "no matcher.", ""]
        lines += _table(COLUMNS, [row(r["name"], r["fills"]) for r in runs if r.get("fills")])
    lines += ["", "## What the Redis hop and the matcher cost (exchange over engine alone)", ""]
    lines += _table(("Run", "Orders / s", "Ack p50", "Ack p99"), _ratios(runs, "exchange", "baseline"))
    if any(r.get("full") for r in runs):
        lines += ["", "## The full stack, as `make run` starts it (bots off, a page watching the books)", "",
                  "`python -m services`: its runner, a private redis-server with the AOF, one matcher "
                  "per shard, the gateway with its lab manager, the web service with one WebSocket page open "
                  "(python -m services.bench.page: every depth and trade it is sent, read and decoded), "
                  "the bots process with FIXLAB_BOTS=0.", ""]
        lines += _table(COLUMNS, [row(r["name"], r["full"]) for r in runs if r.get("full")])
        lines += ["", "## What the rest of the stack costs (full stack over lean stack)", ""]
        lines += _table(("Run", "Orders / s", "Ack p50", "Ack p99"), _ratios(runs, "full", "exchange"))
    if any(r.get("md") for r in runs):
        lines += ["", "## Market data: the lean stack with subscribers (issue 14)", "",
                  "The same lean stack, started fresh, with 32 market-data sessions logged on and subscribed "
                  "before the bench starts (python -m services.bench.mdsubs: MarketDataRequest snapshot + "
                  "updates, full depth, bids, offers and trades, every instrument; each W and X validated "
                  "with the exchange's dictionary). X/s: incremental refreshes the subscribers received "
                  "during the measured phase, all sessions together.", ""]
        lines += _table(COLUMNS, [row(r["name"], r["md"]) for r in runs if r.get("md")])
        lines += ["", "Orders/s on a shared machine move with whatever else runs; the CPU the exchange "
                  "spends per order (from /proc, per process) moves much less: its difference is what the "
                  "subscribers cost the exchange.", "",
                  "| Run | Orders / s with over without | Exchange CPU µs/order with over without | "
                  "Gateway CPU µs/order, difference | X / s received | X entries | Session Rejects |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in runs:
            md, lean = r.get("md"), r.get("exchange")
            if md and lean:
                got = md.get("market_data", {})
                cpu_md, cpu_lean = md.get("cpu", {}), lean.get("cpu", {})
                ex = (ratio(cpu_md["exchange_us_per_order"], cpu_lean["exchange_us_per_order"])
                      if "exchange_us_per_order" in cpu_md and "exchange_us_per_order" in cpu_lean else "n/a")
                gw_md = cpu_md.get("us_per_order", {}).get("gateway")
                gw_lean = cpu_lean.get("us_per_order", {}).get("gateway")
                gw = f"{gw_md - gw_lean:+,.0f}" if gw_md is not None and gw_lean is not None else "n/a"
                lines.append(f"| {r['name']} | {ratio(md['orders_per_s'], lean['orders_per_s'])} | {ex} | "
                             f"{gw} | {fmt_int(got.get('x_per_s', 0))} | "
                             f"{fmt_int(got.get('x_entries', 0))} | {got.get('session_rejects_sent', '?')} |")
    lines += _cpu_tables(runs)
    errors = [(r["name"], side, " ".join(r[f"{side}_error"].split()))
              for r in runs for side in ("exchange", "baseline", "md", "full") if r.get(f"{side}_error")]
    if errors:
        lines += ["", "## Runs that failed", ""]
        lines += [f"- {name} ({side}): {err}" for name, side, err in errors]
    lines += ["", "## Targets", ""]
    where = {"full": " (full stack)", "md": " (market data)"}
    lines += [f"- {t['run']}{where.get(t.get('stack', ''), '')}: {t['what']}: "
              f"{t['value']} — {'met' if t['met'] else 'NOT met'}" for t in doc.get("targets", [])]
    lines += ["", "## Components", ""]
    for name, comp in doc.get("components", {}).items():
        if comp.get("status") == "ok":
            lines.append(f"- {name}: `{comp['command']}`: {comp.get('headline', '')}")
        else:
            lines.append(f"- {name}: {comp.get('status')}")
    lines += ["", "Latency distributions: " + ", ".join(f"[{r['name']}]({r['svg']})" for r in runs
                                                      if r.get("svg")), ""]
    return "\n".join(lines)


def _ratios(runs: Sequence[Mapping[str, Any]], top: str, bottom: str) -> list[list[str]]:
    out = []
    for r in runs:
        a, b = r.get(top), r.get(bottom)
        if a and b:
            out.append([r["name"], ratio(a["orders_per_s"], b["orders_per_s"]),
                        ratio(a["ack_p50_us"], b["ack_p50_us"]), ratio(a["ack_p99_us"], b["ack_p99_us"])])
    return out


STACK_LABELS = (("baseline", "engine only"), ("fills", "engine with fills"), ("exchange", "lean stack"),
                ("md", "lean + market data"), ("full", "full stack"))
# Processes in the order a reader follows an order; anything else after them, by name.
PROCESS_ORDER = ("bench", "baseline", "gateway", "gateway publisher", "redis-server", "matcher", "web",
                 "run", "bots", "page", "mdsubs")


def _process_key(name: str) -> tuple[int, str]:
    base = "matcher" if name.startswith("matcher") else name
    return (PROCESS_ORDER.index(base) if base in PROCESS_ORDER else len(PROCESS_ORDER), name)


def _cpu_tables(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per run: CPU µs per answered order of every process on each stack, and the full stack's extra."""
    lines: list[str] = []
    for r in runs:
        sides = [(key, label, r[key]["cpu"]) for key, label in STACK_LABELS
                 if r.get(key) and r[key].get("cpu")]
        if not sides:
            continue
        if not lines:
            lines += ["", "## CPU per answered order, by process", "",
                      "utime + stime from /proc/PID/stat, sampled every 0.2 s and interpolated to the "
                      "measured phase, divided by the orders answered in it. Cores: the process's CPU "
                      "seconds per second of the phase. \"exchange\" is every process but the bench "
                      "client, the page and the market-data subscribers."]
        names = sorted({n for _, _, cpu in sides for n in cpu["us_per_order"]}, key=_process_key)
        header = ["Process", *[f"{label} µs/order (cores)" for _, label, _ in sides]]
        has_extra = any(k == "full" for k, _, _ in sides) and any(k == "exchange" for k, _, _ in sides)
        if has_extra:
            header.append("full over lean, µs/order")
        rows = []
        for n in names:
            cells = [n]
            for _, _, cpu in sides:
                us = cpu["us_per_order"].get(n)
                cells.append("-" if us is None else f"{us:,.0f} ({cpu['cores'].get(n, 0):.2f})")
            if has_extra:
                full = r["full"]["cpu"]["us_per_order"].get(n, 0.0)
                lean = r["exchange"]["cpu"]["us_per_order"].get(n, 0.0)
                cells.append(f"{full - lean:+,.0f}")
            rows.append(cells)
        for total_key, total_name in (("exchange_us_per_order", "exchange"), ("all_us_per_order", "all")):
            cells = [f"**{total_name}**"]
            for _, _, cpu in sides:
                cells.append(f"**{cpu.get(total_key, 0):,.0f}**")
            if has_extra:
                delta = r["full"]["cpu"].get(total_key, 0) - r["exchange"]["cpu"].get(total_key, 0)
                cells.append(f"**{delta:+,.0f}**")
            rows.append(cells)
        lines += ["", f"### {r['name']} ({r['sessions']}x{r['window']})", ""]
        lines += _table(header, rows)
    return lines


def _percentile_points(sorted_ns: Sequence[int], n: int = 160) -> list[tuple[float, float]]:
    """(x, latency µs) with x = log10(1 / (1 - p)): HdrHistogram's percentile axis, tails visible."""
    if not sorted_ns:
        return []
    count = len(sorted_ns)
    top = math.log10(count) if count > 1 else 1.0
    pts = []
    for i in range(n + 1):
        x = top * i / n
        p = 100 * (1 - 10 ** -x)
        value = sorted_ns[0] if p <= 0 else nearest_rank(sorted_ns, min(max(p, 1e-9), 100))
        pts.append((x, value / 1000))
    pts.append((top, sorted_ns[-1] / 1000))
    return pts


def svg(title: str, series: Mapping[str, Sequence[int]], width: int = 720, height: int = 420) -> str:
    """Latency by percentile for each series (sorted ns), log-scaled latency, HdrHistogram-style x."""
    colors = ("#c0392b", "#2471a3", "#229954", "#7d3c98")
    left, right, top_m, bottom = 70, 20, 40, 50
    pw, ph = width - left - right, height - top_m - bottom
    curves = {name: _percentile_points(v) for name, v in series.items() if v}
    all_us = [y for pts in curves.values() for _, y in pts] or [1.0]
    lo = 10 ** math.floor(math.log10(max(min(all_us), 1.0)))
    hi = 10 ** math.ceil(math.log10(max(max(all_us), lo * 10)))
    xmax = max((pts[-1][0] for pts in curves.values()), default=1.0) or 1.0

    def sx(x: float) -> float:
        return left + pw * x / xmax

    def sy(us: float) -> float:
        return top_m + ph * (1 - (math.log10(max(us, lo)) - math.log10(lo)) /
                             (math.log10(hi) - math.log10(lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{_esc(title)}</text>']
    decade = lo
    while decade <= hi:
        y = sy(decade)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_esc(fmt_us(decade))}</text>')
        decade *= 10
    for label, x in (("0%", 0.0), ("90%", 1.0), ("99%", 2.0), ("99.9%", 3.0), ("99.99%", 4.0),
                     ("99.999%", 5.0)):
        if x > xmax + 1e-9:
            break
        out.append(f'<line x1="{sx(x):.1f}" y1="{top_m}" x2="{sx(x):.1f}" y2="{top_m + ph}" stroke="#ddd"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{top_m + ph + 16}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">percentile</text>')
    out.append(f'<text x="16" y="{top_m + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {top_m + ph / 2})">ack latency</text>')
    out.append(f'<rect x="{left}" y="{top_m}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    for i, (name, pts) in enumerate(curves.items()):
        color = colors[i % len(colors)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        out.append(f'<rect x="{left + 10}" y="{top_m + 10 + 18 * i}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{left + 28}" y="{top_m + 21 + 18 * i}">{_esc(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
