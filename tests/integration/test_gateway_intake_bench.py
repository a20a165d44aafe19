"""The intake benchmark's tooling runs end to end on a small flood (its figures are not checked here:
speed is measured by `make bench`, never asserted in a test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.engine_floor import VARIANTS

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("serial")]


def test_intake_bench_puts_every_order_on_the_bus_once_and_measures_each_engine_variant(
        tmp_path: Path) -> None:
    out = tmp_path / "intake.json"
    subprocess.run([sys.executable, "-m", "benchmarks.intake", "--orders", "20000",
                    "--floor", "1000", "--out", str(out)], check=True, timeout=300,
                   stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    assert result["published"] == 20000 and result["gateway_health"]["busy"] == "0"
    assert (result["first_clordid"], result["last_clordid"]) == ("i0", "i19999")
    assert result["orders_per_s"] > 0 and result["publisher_cpu_s"] > 0
    assert set(result["engine_floor"]) == set(VARIANTS)
    assert all(v["orders_per_s"] > 0 for v in result["engine_floor"].values())
