"""shared.fix.engine_thread over a real QuickFIX session: a stock initiator against the bench's
baseline acceptor (its own process, loopback TCP). A callback on QuickFIX's engine thread that calls
``keep_thread_state`` runs every later callback in the same Python thread state (a thread-local
set in one is still there in the next); without it each callback gets a new state."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import quickfix as fix

from shared.fix.engine_thread import keep_thread_state
from shared.redis_server import free_port
from tests.gateway_stack import ROOT, stop_process
from tests.helpers import eventually
from tests.stock_client import StockClient, nos, stock_sessions

ORDERS = 5


class Marking(StockClient):
    """Notes, per ExecutionReport, whether its engine thread's thread-local survived from the last."""

    def __init__(self, keep: bool) -> None:
        super().__init__()
        self.keep = keep
        self.local = threading.local()
        self.survived: list[bool] = []

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        if self.keep:
            keep_thread_state()
        self.survived.append(getattr(self.local, "mark", False))
        self.local.mark = True
        super().fromApp(msg, sid)


@pytest.fixture(scope="module")
def baseline_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    log = tmp_path_factory.mktemp("baseline") / "baseline.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "services.bench.baseline", "--port", str(port)],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        eventually(lambda: "ready" in log.read_text(), 30, what="the baseline acceptor listening")
        yield port
    finally:
        stop_process(proc)


def _orders(tmp_path: Path, port: int, comp: str, keep: bool) -> list[bool]:
    app = Marking(keep)
    with stock_sessions(tmp_path, port, [comp], app=lambda: app) as (session,):
        for i in range(ORDERS):
            session.send("D", nos(f"o{i}", 1, 1, "100.00"))
            eventually(lambda i=i: len(app.survived) > i, 10, what=f"order {i}'s ExecutionReport")
        assert app.errors == [] and not any(m.get(35) == "3" for m in app.sent_admin)
    return app.survived


def test_a_kept_engine_thread_runs_every_callback_in_one_thread_state(baseline_port: int,
                                                                      tmp_path: Path) -> None:
    survived = _orders(tmp_path, baseline_port, "BENCH001", keep=True)
    assert survived == [False] + [True] * (ORDERS - 1)


def test_without_it_each_callback_gets_a_new_thread_state(baseline_port: int, tmp_path: Path) -> None:
    # What keep_thread_state() is for (and the proof that the test above can fail): a thread that
    # Python did not start loses its state, and its frame stack, with every callback.
    assert _orders(tmp_path, baseline_port, "BENCH002", keep=False) == [False] * ORDERS
