"""What one acceptor session costs in resident memory, per FIX version (a benchmark, not a test).

    python -m benchmarks.session_memory [--sessions 100] [--out FILE.json]

QuickFIX 1.16 gives every session its own copy of its data dictionary, so what a session costs is
mostly the size of the dictionary the gateway gives its version. This writes the dictionaries the
gateway writes at start (``services.gateway.server``: the trimmed FIX 4.4 one and
``VersionDictionaries`` for FIX 4.2 and FIX 5.0 SP2), then, for each version, starts a bare
QuickFIX ``SocketAcceptor`` in a process of its own twice, with 1 and with ``--sessions`` sessions of
that version, and reads VmRSS from /proc once it listens. Per session: the difference over the
sessions added.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import output
from shared.fix.versions import VERSIONS
from shared.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(settings: Path) -> int:
    """Start an acceptor with ``settings``; print its VmRSS; end without stopping it (quickfix
    1.16.0's SocketAcceptor.stop() may crash: docs/certify.md)."""
    import quickfix as fix

    class Quiet(fix.Application):
        def onCreate(self, session_id: Any) -> None: ...
        def onLogon(self, session_id: Any) -> None: ...
        def onLogout(self, session_id: Any) -> None: ...
        def toAdmin(self, message: Any, session_id: Any) -> None: ...
        def fromAdmin(self, message: Any, session_id: Any) -> None: ...
        def toApp(self, message: Any, session_id: Any) -> None: ...
        def fromApp(self, message: Any, session_id: Any) -> None: ...

    before = _rss_mib()
    acceptor = fix.SocketAcceptor(Quiet(), fix.MemoryStoreFactory(), fix.SessionSettings(str(settings)))
    acceptor.start()
    print(json.dumps({"rss_mib": round(_rss_mib(), 2), "before_mib": round(before, 2)}), flush=True)
    sys.stdout.flush()
    os._exit(0)


def dictionaries(directory: Path) -> dict[str, dict[str, str]]:
    """The per-version acceptor settings the gateway writes (its dictionaries), by version name."""
    from services.gateway.server import VersionDictionaries, acceptor_types
    from shared.fix.dictionary import WRITTEN, load, write_acceptor_dictionary, write_exchange_dictionary

    exchange_file = write_exchange_dictionary(directory / "FIXLAB-FIX44.xml")
    exchange = load(str(exchange_file))
    fix44 = write_acceptor_dictionary(directory / "FIXLAB-FIX44-acceptor.xml", exchange_file,
                                      acceptor_types(exchange), WRITTEN)
    out = {"4.4": {"DataDictionary": str(fix44)}}
    for v in VERSIONS.values():
        if v.name != "4.4":
            out[v.name] = VersionDictionaries(v, directory, exchange, trim=True).settings
    return out


def settings_file(path: Path, begin: str, own: dict[str, str], sessions: int) -> Path:
    lines = ["[DEFAULT]", "ConnectionType=acceptor", f"SocketAcceptPort={free_port()}",
             "SocketAcceptAddress=127.0.0.1", "NonStopSession=Y", "UseDataDictionary=Y"]
    for i in range(sessions):
        lines += ["", "[SESSION]", f"BeginString={begin}", "SenderCompID=FIXLAB", f"TargetCompID=MEM{i:04d}",
                  *(f"{k}={v}" for k, v in own.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def measure(settings: Path) -> float:
    done = subprocess.run([sys.executable, "-m", "benchmarks.session_memory", "--child", str(settings)],
                          capture_output=True, check=True, timeout=300, cwd=ROOT)
    return float(json.loads(done.stdout.decode().strip().splitlines()[-1])["rss_mib"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.session_memory",
                                description=(__doc__ or "").split("\n")[0])
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--out", type=Path)
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        return child(args.child)
    result = output.head("session_memory", "benchmarks.session_memory", argv)
    rows = []
    lines = ["# Memory per acceptor session", "", f"`{result['command'].strip()}`, {result['date']}", ""]
    with tempfile.TemporaryDirectory(prefix="fixlab-sessmem-") as tmp:
        base = Path(tmp)
        for name, own in dictionaries(base).items():
            begin = VERSIONS[name].begin_string
            one = measure(settings_file(base / f"{name}-1.cfg", begin, own, 1))
            many = measure(settings_file(base / f"{name}-n.cfg", begin, own, args.sessions))
            app = Path(own.get("AppDataDictionary") or own["DataDictionary"])
            per = (many - one) / (args.sessions - 1)
            rows.append({"version": name, "sessions": args.sessions, "rss_one_mib": one, "rss_many_mib": many,
                         "mib_per_session": round(per, 3), "app_dictionary_bytes": app.stat().st_size})
            lines.append(f"- {name}: {per:.3f} MiB per session (VmRSS {one:.0f} MiB with 1 session, "
                         f"{many:.0f} MiB with {args.sessions}; its application dictionary "
                         f"{app.stat().st_size:,} bytes)")
    result["versions_measured"] = rows
    output.write(args.out, result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
