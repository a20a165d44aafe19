"""One bench process from start to report: log on, warm up, meet, measure, merge."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from services.bench.client import BenchClient, PhaseOutcome
from services.bench.coordination import Coordinator
from services.bench.engine import bench_comp_ids
from services.bench.plan import Address, instance_share, session_plans
from services.bench.progress import ProgressBar
from services.bench.stats import Summary, summarize
from shared.bus import connect
from shared.schema import BenchResult

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    # Gateway k's FIX address is addresses[k - 1]; each session goes to the gateway whose CompID
    # range holds its CompID (shared.compids). One address: one gateway, as ever.
    addresses: tuple[Address, ...]
    sessions: int
    window: int
    orders: int
    warmup: int
    instances: int = 1
    run_id: str = "local"
    first_compid: int = 1
    # (symbol, limit price as it goes into tag 44): sessions alternate them (plan.session_plans).
    instruments: tuple[tuple[str, str], ...] = (("ACORN.LAB", "100.00"),)
    stall_s: float = 10.0
    logon_timeout_s: float = 30.0
    barrier_timeout_s: float = 300.0
    redis_url: str = ""
    progress: bool = False
    fix_version: str = "4.4"  # the sessions' version (shared.fix.versions), from its BENCH pool


def result_of(config: BenchConfig, instance: int, sessions: int, phase: PhaseOutcome) -> BenchResult:
    """This instance's measured phase as a mergeable record (wall-clock span, raw latencies)."""
    # One wall-clock reading anchors the perf_counter span, so instances share a time line.
    wall_now, perf_now = time.time_ns(), time.perf_counter_ns()
    latencies = tuple(x for w in phase.windows for x in w.latencies_ns)
    return BenchResult(
        run_id=config.run_id, instance=instance, sessions=sessions, window=config.window,
        orders=sum(w.quota for w in phase.windows), sent=sum(w.sent for w in phase.windows),
        acknowledged=sum(w.acknowledged for w in phase.windows),
        rejected=sum(w.rejected for w in phase.windows), lost=sum(w.lost for w in phase.windows),
        start_ns=wall_now - (perf_now - phase.start_ns), end_ns=wall_now - (perf_now - phase.end_ns),
        latencies_ns=latencies,
    )


def run(config: BenchConfig) -> tuple[Summary, list[int]]:
    """Run this instance's part; with several instances, return the merged result of all."""
    coord: Coordinator | None = None
    if config.instances > 1:
        coord = Coordinator(connect(config.redis_url), config.run_id, config.instances)
        instance = coord.claim_instance()
    else:
        instance = 0
    sessions, quotas = instance_share(config.sessions, config.orders, config.instances, instance)
    first = coord.claim_comp_ids(sessions, config.first_compid) if coord else config.first_compid
    comp_ids = bench_comp_ids(first, sessions, len(config.addresses), config.fix_version)
    plans = session_plans(comp_ids, config.addresses, config.instruments, config.fix_version)
    # A ClOrdID prefix unique to this run and instance: the exchange rejects repeated ClOrdIDs.
    run_tag = f"{config.run_id[-6:]}{instance}."
    client = BenchClient(plans, run_tag=run_tag, fix_version=config.fix_version)
    log.info("instance %d: %d sessions (%s..%s) to %s", instance, sessions, comp_ids[0],
             comp_ids[-1], ", ".join(sorted({f"{p.host}:{p.port}" for p in plans})))
    try:
        client.start(config.logon_timeout_s)
        if config.warmup:
            warm = client.run_phase([config.warmup] * sessions, config.window, 0, config.stall_s)
            unanswered = sum(w.lost for w in warm.windows)
            if unanswered:
                raise RuntimeError(f"{unanswered} warm-up orders were never answered")
        if coord is not None:
            coord.barrier(config.barrier_timeout_s)
        bar = ProgressBar(sum(quotas), f"bench {config.sessions}x{config.window}") \
            if config.progress else None
        phase = client.run_phase(quotas, config.window, config.warmup, config.stall_s,
                                 bar.update if bar else None)
        if bar is not None:
            bar.close("stalled" if phase.stalled else "")
    finally:
        client.stop()
    if client.app.errors:
        log.error("%d errors in QuickFIX callbacks (see the log)", client.app.errors)
    result = result_of(config, instance, sessions, phase)
    if coord is None:
        return summarize([result])
    coord.publish(result)
    return summarize(coord.collect(config.barrier_timeout_s))
