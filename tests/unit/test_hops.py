"""The hop trace (shared/hoptrace.py), its pairing (benchmarks/hops.py) and the cold steps
(benchmarks/cold.py). No test looks at a speed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.hops import HOPS, hop_table, pair_orders, read_marks
from shared import hoptrace

ROOT = Path(__file__).resolve().parents[2]


def _order_marks(t0: int, gaps: list[int]) -> dict[str, list[tuple[str, int]]]:
    """One order's marks, by process kind, with the given hop durations (ns)."""
    out: dict[str, list[tuple[str, int]]] = {"bench": [("bench.sent", t0)]}
    t = t0
    for (_name, _pa, _la, proc, label), gap in zip(HOPS, gaps, strict=True):
        t += gap
        out.setdefault(proc, []).append((label, t))
    return out


def _write(tmp_path: Path, orders: list[dict[str, list[tuple[str, int]]]]) -> None:
    pids = {"bench": 11, "gateway": 22, "matcher": 33}
    lines: dict[str, list[str]] = {k: [] for k in pids}
    for marks in orders:
        for proc, items in marks.items():
            lines[proc].extend(f"{label} {ns}" for label, ns in items)
    for proc, pid in pids.items():
        (tmp_path / f"trace.{pid}").write_text("\n".join(lines[proc]) + "\n", encoding="ascii")
    (tmp_path / "trace.44").write_text("bus.read 5\nsomething else\n", encoding="ascii")  # another process


def test_each_order_is_followed_through_every_process_in_time_order(tmp_path: Path) -> None:
    gaps = [[70_000, 150_000, 60_000, 18_000, 100_000, 20_000, 55_000, 75_000],
            [71_000, 151_000, 61_000, 19_000, 101_000, 21_000, 56_000, 76_000],
            [72_000, 152_000, 62_000, 20_000, 102_000, 22_000, 57_000, 77_000]]
    _write(tmp_path, [_order_marks(1_000_000 * (i + 1), g) for i, g in enumerate(gaps)])
    marks = read_marks(tmp_path.glob("trace.*"))
    assert set(marks) == {"bench", "gateway", "matcher"}  # the file of no known kind is left out
    assert pair_orders(marks, skip=0) == gaps
    table = hop_table(pair_orders(marks, skip=0))
    assert [row["p50_us"] for row in table] == [71.0, 151.0, 61.0, 19.0, 101.0, 21.0, 56.0, 76.0]
    assert [row["floor"] for row in table].count("exchange") == 3


def test_an_order_missing_a_mark_or_answered_late_is_left_out(tmp_path: Path) -> None:
    gaps = [10_000] * len(HOPS)
    first = _order_marks(1_000_000, gaps)
    first["matcher"] = [m for m in first["matcher"] if m[0] != "matcher.handled"]  # lost with a kill -9
    slow = _order_marks(5_000_000, [10_000] * (len(HOPS) - 1) + [60_000_000])
    _write(tmp_path, [first, _order_marks(2_000_000, gaps), slow])
    # The first order's chain would borrow the second's marks and end at the second's answer.
    assert pair_orders(read_marks(tmp_path.glob("trace.*")), skip=0) == [gaps]


def test_marks_are_off_unless_asked_and_written_by_each_process_when_asked(tmp_path: Path) -> None:
    if os.environ.get(hoptrace.ENV):
        pytest.skip(f"{hoptrace.ENV} is set for this test run")
    assert hoptrace.ON is False
    prefix = tmp_path / "t"
    code = "from shared import hoptrace\nfor _ in range(300): hoptrace.mark('bench.sent')\n"
    env = {**os.environ, hoptrace.ENV: str(prefix), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("t.*")
    lines = path.read_text().splitlines()
    assert len(lines) == 300  # the 256 flushed on the way and the rest at exit
    stamps = [int(line.split()[1]) for line in lines]
    assert all(line.startswith("bench.sent ") for line in lines) and stamps == sorted(stamps)


def test_the_cold_steps_run_the_exchanges_code_for_each_order() -> None:
    from benchmarks.cold import CONDITIONS, _Steps, measure

    steps = _Steps(4)
    steps.matcher()  # a buy rests: New
    steps.matcher()  # a sell trades with it: New and a Fill to each side
    assert len(steps.events) == 2
    steps.gateway()
    steps.gateway()
    assert steps.events == [] and steps.engine.commands == 2
    result = measure(20, 0, block=10)
    assert set(result) == {"matcher", "gateway"}
    assert all(set(r["p50_us"]) == set(CONDITIONS) and min(r["p50_us"].values()) > 0 for r in result.values())
