"""Benchmark plots drawn at build time from the committed results (benchmark-plots.md).

No plotting library is installed here (matplotlib is not), so the charts are horizontal bar charts
written as SVG by hand: a bar's length is its value over the chart's largest, each labelled with its
number, so a figure on the page is always the one in the results file it names.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "services" / "bench" / "results" / "results.json"
HOPS = ROOT / "benchmarks" / "results" / "hops.json"
STACKS = {"baseline": "engine alone", "fills": "engine alone, with fills", "exchange": "lean stack",
          "md": "lean stack, market data on", "full": "full stack (make run)"}
LABEL_W, BAR_W, ROW_H, PAD = 260, 380, 24, 8


def bars(title: str, unit: str, rows: list[tuple[str, float]]) -> str:
    """An SVG bar chart: one labelled bar per row, lengths proportional to the values."""
    top = max((v for _, v in rows), default=0.0) or 1.0
    height = PAD * 2 + 22 + ROW_H * len(rows)
    width = LABEL_W + BAR_W + 110
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">',
           f"<title>{escape(title)}</title>",
           f'<text x="{PAD}" y="{PAD + 14}" font-weight="bold">{escape(title)}</text>']
    for i, (label, value) in enumerate(rows):
        y = PAD + 22 + i * ROW_H
        length = round(BAR_W * value / top, 1)
        out += [f'<text x="{LABEL_W - 6}" y="{y + 16}" text-anchor="end">{escape(label)}</text>',
                f'<rect x="{LABEL_W}" y="{y + 4}" width="{length}" height="{ROW_H - 8}" fill="#2e7d5b" '
                f'data-value="{value:g}"/>',
                f'<text x="{LABEL_W + length + 6}" y="{y + 16}">{value:,.1f} {escape(unit)}</text>']
    out.append("</svg>")
    return "\n".join(out)


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def suite_charts() -> list[str]:
    suite = _load(SUITE)
    charts = []
    for run in suite["runs"]:
        rows = [(STACKS.get(k, k), float(v["orders_per_s"])) for k, v in run.items()
                if isinstance(v, dict) and "orders_per_s" in v]
        charts.append(bars(f"{run['name']} {run['sessions']}x{run['window']}, {run['orders']:,} orders: "
                           "throughput", "orders/s", rows))
    return charts


def hops_chart() -> str:
    hops = _load(HOPS)
    return bars("a lone order's round trip, median per hop", "µs",
                [(h["hop"], float(h["p50_us"])) for h in hops["hops"]])


def markdown() -> str:
    suite, hops = _load(SUITE), _load(HOPS)
    lines = [
        "# Benchmark plots",
        "",
        "Drawn when the site is built (tools/docs/plots.py) from the committed results files, so a",
        "plot always shows the numbers of the file it names. How they were measured:",
        "[benchmarks](benchmarks.md).",
        "",
        f"## The suite: `{suite['command']}`",
        "",
        f"`services/bench/results/results.json`, {suite['date']}, {suite['machine'].get('cpu_model', '')}, "
        f"{suite['machine'].get('logical_cpus', '?')} CPUs.",
        "",
        *[f"{chart}\n" for chart in suite_charts()],
        f"## Hop by hop: `{hops['command']}`",
        "",
        f"`benchmarks/results/hops.json`, {hops['date']}, {hops['machine'].get('cpu_model', '')}.",
        "",
        hops_chart(),
        "",
    ]
    return "\n".join(lines)
