"""The fault suite (``make chaos``), shortened: each fault of issue 13 under a short load, with nothing
lost and nothing duplicated (benchmarks/chaos; docs/RELIABILITY.md has the long run's figures).

Each case starts the stack as ``make run`` does, puts 4 strict QuickFIX sessions (window 8) and two
trading lab pages on it, kills something with kill -9 (or, fault 6, adds consumers that stop
reading), and compares every ExecutionReport the sessions received with the matcher's state read
afresh after the run. Fault 5 also checks that both pages resumed their sessions and traded on and
that no FIX session noticed; fault 6 that the stalled page was dropped and the deaf FIX peer cut.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos.faults import Options, run_case

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("faults")]

# Every fault but redis-everysec (tests/integration/test_redis_server.py covers that policy).
FAULTS = ["matcher", "gateway-file", "gateway-memory", "publisher", "redis", "web", "slow", "machine",
          "matcher-call", "matcher-uncross"]
SHORT = Options(sessions=4, window=8, before_s=3.0, after_s=3.0)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_under_load_loses_and_duplicates_nothing(fault: str, tmp_path: Path) -> None:
    case = run_case(fault, tmp_path, SHORT)
    t = case.tally
    assert t is not None
    assert t.acknowledged > 0 and case.recover_s is not None, case.saw
    assert (t.lost, t.duplicated) == (0, 0), t.examples
    assert case.client.app.rejects_sent == 0  # the strict stock dictionary took every report
    assert case.extra_ok, case.saw
    if fault == "web":
        assert case.pages is not None and case.pages.resumed_and_trading(), case.saw
        assert case.client.disconnects() == 0, case.saw
    if fault == "slow":
        assert case.figures["pages_dropped"] == 1, case.figures
        assert case.figures["deaf_fix_closed"], case.figures
        assert int(str(case.figures["stalled_readers_cut"])) >= 1, case.figures
