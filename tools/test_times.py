"""Where `make test`'s time goes: every test's time from pytest's JUnit XML, summed per directory,
per module and per xdist lane (the ``serial`` and ``faults`` groups each run on one worker, one
test after another; the rest spread over the workers).

    python -m tools.test_times [.run/pytest.xml] [--modules 20]

The wall time of a run cannot be under the longest lane, nor under the sum over the workers.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    module: str  # tests/e2e/test_chaos.py
    name: str
    lane: str  # serial, faults, or "spread"
    seconds: float


def cases(xml: Path) -> list[Case]:
    out: list[Case] = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        parts = tc.get("classname", "").split(".")  # tests.e2e.test_chaos[.TestClass]
        while parts and parts[-1][:1].isupper():  # a test class inside the module
            parts.pop()
        module = "/".join(parts) + ".py"
        name = tc.get("name", "")
        # xdist's @group suffix, which lands inside a parametrized test's brackets: "t[a]@faults]"
        lane = name.rpartition("@")[2].rstrip("]") if "@" in name else "spread"
        if lane not in ("serial", "faults"):
            lane = "spread"
        out.append(Case(module, name, lane, float(tc.get("time", "0") or 0)))
    return out


def table(rows: dict[str, float], counts: dict[str, int], top: int | None = None) -> list[str]:
    ordered = sorted(rows.items(), key=lambda kv: -kv[1])[:top]
    width = max((len(k) for k, _ in ordered), default=4)
    return [f"  {k:<{width}}  {v:8.1f} s  {counts[k]:5d} tests" for k, v in ordered]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.test_times", description=__doc__.splitlines()[0])
    p.add_argument("xml", nargs="?", default=".run/pytest.xml")
    p.add_argument("--modules", type=int, default=20, help="how many of the slowest modules to list")
    p.add_argument("--workers", type=int, default=4, help="as `make test` runs (PYTEST_WORKERS)")
    args = p.parse_args(argv)
    path = Path(args.xml)
    if not path.is_file():
        print(f"tools.test_times: no {path}: `make test` writes it", file=sys.stderr)
        return 2
    try:
        found = cases(path)
    except ET.ParseError as exc:
        print(f"tools.test_times: {path} is not JUnit XML: {exc}", file=sys.stderr)
        return 2
    by: dict[str, dict[str, float]] = {"directory": defaultdict(float), "module": defaultdict(float),
                                       "lane": defaultdict(float)}
    n: dict[str, dict[str, int]] = {k: defaultdict(int) for k in by}
    for c in found:
        for kind, key in (("directory", c.module.rsplit("/", 1)[0]), ("module", c.module), ("lane", c.lane)):
            by[kind][key] += c.seconds
            n[kind][key] += 1
    total = sum(c.seconds for c in found)
    print(f"{len(found)} tests, {total:.1f} s of test time")
    for kind in ("directory", "lane"):
        print(f"per {kind}:")
        print("\n".join(table(by[kind], n[kind])))
    print(f"the {args.modules} slowest modules:")
    print("\n".join(table(by["module"], n["module"], args.modules)))
    floor = max([by["lane"].get("serial", 0.0), by["lane"].get("faults", 0.0), total / args.workers])
    print(f"no run on {args.workers} workers can take under {floor:.0f} s (its longest lane, or the "
          f"sum over the workers), before collection and set-up outside tests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
