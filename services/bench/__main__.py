"""``python -m services.bench``: measure ack latency and throughput of a FIX 4.4 exchange."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from services.bench.plan import gateway_addresses
from services.bench.runner import BenchConfig, run
from shared import logs
from shared.config import ConfigError, gateway_count
from shared.tls import ClientTunnel, default_ca_file


def _addr(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def _addrs(text: str) -> list[tuple[str, int]]:
    return [_addr(item.strip()) for item in text.split(",") if item.strip()]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must not be negative")
    return value


def _instruments(symbols: str, prices: str) -> tuple[tuple[str, str], ...]:
    """``--symbol A,B`` with ``--price P`` (for all) or ``--price PA,PB``."""
    syms = [s.strip() for s in symbols.split(",") if s.strip()]
    pxs = [p.strip() for p in prices.split(",") if p.strip()]
    if not syms or not pxs:
        raise ValueError("--symbol and --price need a value")
    if len(pxs) == 1:
        pxs *= len(syms)
    if len(pxs) != len(syms):
        raise ValueError(f"{len(pxs)} prices for {len(syms)} symbols: give one, or one per symbol")
    return tuple(zip(syms, pxs, strict=True))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m services.bench", description=__doc__)
    p.add_argument("--addr", type=_addr, default=("127.0.0.1", 9878),
                   help="exchange HOST:PORT; with --gateways N, the first gateway's, the others on the "
                        "following ports (the runner's layout)")
    p.add_argument("--addrs", type=_addrs,
                   help="every gateway's HOST:PORT, comma separated, gateway 1 first (in place of --addr)")
    p.add_argument("--gateways", type=_positive,
                   help="gateways sharing the BENCH CompIDs (default: as many as --addrs names, else "
                        "FIXLAB_GATEWAYS, else 1): each session goes to the one whose range holds its CompID")
    p.add_argument("--sessions", type=_positive, default=1, help="FIX sessions in the whole run")
    p.add_argument("--window", type=_positive, default=1, help="most unanswered orders per session")
    p.add_argument("--orders", type=_positive, default=20_000, help="measured orders in the whole run")
    p.add_argument("--warmup", type=_count, default=1_000, help="warm-up orders per session")
    p.add_argument("--out", type=Path, help="write the (merged) result as one JSON object here")
    p.add_argument("--instances", type=_positive, default=1,
                   help="bench processes in this run (more than one meet on Redis: REDIS_URL)")
    p.add_argument("--run-id", default=os.environ.get("FIXLAB_BENCH_RUN_ID", ""),
                   help="names the run on Redis (required with --instances > 1)")
    p.add_argument("--first-compid", type=_positive, default=1,
                   help="first BENCH CompID number (with several gateways, the position in the pool "
                        "dealt over their ranges: 1 is BENCH001, 2 the second gateway's first)")
    p.add_argument("--symbol", default="ACORN.LAB",
                   help="instrument, or several comma separated: sessions alternate them")
    p.add_argument("--price", default="100.00",
                   help="limit price, as it goes into tag 44; one for all, or one per --symbol")
    p.add_argument("--stall", type=float, default=10.0,
                   help="seconds without any answer after which unanswered orders count as lost")
    p.add_argument("--logon-timeout", type=float, default=30.0)
    p.add_argument("--barrier-timeout", type=float, default=300.0)
    p.add_argument("--latencies", type=Path, help="also write every latency (ns, sorted) here, one a line")
    p.add_argument("--progress", action="store_true", help="a progress bar on stderr")
    p.add_argument("--fix-version", choices=["4.2", "4.4", "5.0SP2"], default="4.4",
                   help="the sessions' FIX version: BENCH001.. (4.4), BENCH42-001.. (FIX.4.2) or "
                        "BENCH50-001.. (FIXT.1.1, FIX.5.0SP2), each validating with its stock dictionary")
    p.add_argument("--tls", action="store_true",
                   help="connect over TLS: --addr/--addrs are the exchange's TLS ports; the initiators "
                        "reach them through a local stunnel in client mode (QuickFIX has no SSL here)")
    p.add_argument("--tls-ca", type=Path,
                   help="--tls: the CA file to verify the certificate with (default FIXLAB_TLS_CA, else a "
                        "local run's FIXLAB_RUN_DIR/tls/cert.pem, else the system's CAs)")
    p.add_argument("--tls-insecure", action="store_true", help="--tls: accept any certificate, unverified")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.setup("bench")
    if args.instances > 1 and not args.run_id:
        print("bench: --instances > 1 needs --run-id (the same in every instance)", file=sys.stderr)
        return 2
    redis_url = os.environ.get("REDIS_URL", "")
    if args.instances > 1 and not redis_url:
        print("bench: --instances > 1 meets on Redis: set REDIS_URL", file=sys.stderr)
        return 2
    try:
        addrs = args.addrs or [args.addr]
        gateways = args.gateways or (len(addrs) if args.addrs else gateway_count(os.environ))
        addresses = gateway_addresses(addrs, gateways)
        instruments = _instruments(args.symbol, args.price)
    except (ValueError, ConfigError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as tunnels:
        if args.tls:
            try:
                ca = args.tls_ca or default_ca_file(os.environ)
                workdir = Path(tempfile.mkdtemp(prefix="fixlab-bench-tls-"))
                tunnels.callback(shutil.rmtree, workdir, True)
                addresses = tuple(("127.0.0.1", tunnels.enter_context(
                    ClientTunnel(workdir, host, port, ca_file=ca, insecure=args.tls_insecure)).port)
                    for host, port in addresses)
            except ConfigError as exc:
                print(f"bench: {exc}", file=sys.stderr)
                return 2
        return _run(args, addresses, instruments, redis_url)


def _run(args: argparse.Namespace, addresses: tuple[tuple[str, int], ...],
         instruments: tuple[tuple[str, str], ...],
         redis_url: str) -> int:
    config = BenchConfig(
        addresses=addresses, sessions=args.sessions, window=args.window,
        orders=args.orders, warmup=args.warmup, instances=args.instances,
        run_id=args.run_id or uuid.uuid4().hex[:12], first_compid=args.first_compid,
        instruments=instruments, stall_s=args.stall, logon_timeout_s=args.logon_timeout,
        barrier_timeout_s=args.barrier_timeout, redis_url=redis_url, progress=args.progress,
        fix_version=args.fix_version,
    )
    try:
        summary, latencies = run(config)
    except (ValueError, TimeoutError, RuntimeError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    record = {**summary.to_json(), "addr": ",".join(f"{h}:{p}" for h, p in config.addresses),
              "symbols": [sym for sym, _ in config.instruments], "warmup": config.warmup,
              "run_id": config.run_id, "fix_version": config.fix_version,
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(json.dumps(record), flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    if args.latencies is not None:
        args.latencies.write_text("".join(f"{x}\n" for x in latencies))
    if summary.lost:
        logging.getLogger("bench").error("%d orders lost", summary.lost)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
