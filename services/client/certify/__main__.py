"""``fixlab certify``: certify a FIX client. The command hosts the certification acceptor and a tap,
waits for the client's Logon, plays the script at it, and writes the report.

    fixlab certify --comp CERT01 [--fix-version 4.2|4.4|5.0SP2] [--port 9880] [--listen ADDRESS]
                   [--password-stdin] [--script FILE] [--report out.md] [--json out.json] [--html out.html]

Point the client at 127.0.0.1:PORT, SenderCompID = the CompID, TargetCompID FIXLAB, FIX.4.4 (the
default), FIX.4.2 (``--fix-version 4.2``) or FIXT.1.1 with DefaultApplVerID 9 (``5.0SP2``); each
version has its own script (``SCRIPTS``). ``--listen`` another address (0.0.0.0: every interface) for
a client on another machine: the run then has a one-time password, printed (or read from stdin's
first line with ``--password-stdin``), that the client's Logon must carry in Password (554), or in
RawData (96) for FIX 4.2; a Logon without it gets a Logout saying so (58).
Exit 0 when every check passed (skips allowed), 1 when one failed, 2 on bad input, 3 when the client
never logged on (a refused Logon is not one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from services.client.certify.acceptor import SENDER, CertAcceptor, CertifyError, dictionaries
from services.client.certify.report import as_html, as_json, as_markdown, summary
from services.client.certify.run import FAIL, Certifier
from services.client.certify.script import parse
from services.client.scenario.runner import Inbox, new_run_id
from services.client.scenario.syntax import ScenarioSyntaxError
from shared.fix.dictionary import load_version
from shared.fix.tap import Tap, TapLoop
from shared.fix.versions import DEFAULT, VERSIONS, version

ROOT = Path(__file__).resolve().parents[3]
# Each version's script: the same checks, said in that version (each script says what differs).
SCRIPTS = {name: ROOT / "scripts" / "certify" / file for name, file in
           (("4.2", "fix42.scenario"), ("4.4", "default.scenario"), ("5.0SP2", "fix50sp2.scenario"))}
DEFAULT_SCRIPT = SCRIPTS[DEFAULT.name]
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_SECRET = re.compile(rb"(\x01(?:554|96)=)[^\x01]*")


def script_label(path: str) -> str:
    """How a report names the script: its path in the repo, else its file name (a report never shows
    where on the certifying machine a script lay)."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(ROOT))
    except ValueError:
        return resolved.name


def masked(raw: bytes) -> bytes:
    """``raw`` with a Password (554) or RawData (96) value replaced, for the report's wire."""
    return _SECRET.sub(rb"\1***", raw)


class _Record:
    __slots__ = ("ns", "raw", "source", "withheld")

    def __init__(self, source: str, raw: bytes, withheld: bool, ns: int) -> None:
        self.source, self.raw, self.withheld, self.ns = source, raw, withheld, ns


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fixlab certify", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--comp", required=True, help="the client's SenderCompID (CERT01..CERT08, or any)")
    p.add_argument("--port", type=int, default=9880, help="where the client connects (default 9880)")
    p.add_argument("--fix-version", default=DEFAULT.name,
                   help=f"the client's FIX version: {', '.join(VERSIONS)} (default {DEFAULT.name}; "
                        "5.0SP2: FIXT.1.1, DefaultApplVerID 9)")
    p.add_argument("--script", help="a certification script (default: the version's, scripts/certify/)")
    p.add_argument("--report", help="write the Markdown report here")
    p.add_argument("--json", help="write the JSON report here")
    p.add_argument("--html", help="write the report as a page (one self-contained HTML file) here")
    p.add_argument("--logon-timeout", type=float, default=120.0, help="seconds to wait for the Logon")
    p.add_argument("--heartbeat", type=int, default=30, help="the acceptor's HeartBtInt")
    p.add_argument("--listen", default="127.0.0.1",
                   help="the address to listen on (default 127.0.0.1; 0.0.0.0: every interface); any "
                        "but loopback gives the run a one-time password the client's Logon must carry")
    p.add_argument("--password-stdin", action="store_true",
                   help="the one-time password is stdin's first line (not printed), not a new one")
    args = p.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", args.comp):
        print(f"fixlab certify: --comp {args.comp!r}: letters, digits, '_', '.', '-'", file=sys.stderr)
        return 2
    try:
        v = version(args.fix_version)
    except ValueError as exc:
        print(f"fixlab certify: --fix-version: {exc}", file=sys.stderr)
        return 2
    script_path = args.script or str(SCRIPTS[v.name])
    label = script_label(script_path)
    try:
        script = parse(Path(script_path).read_text(), label)
    except (OSError, ScenarioSyntaxError) as exc:
        print(f"fixlab certify: {exc}", file=sys.stderr)
        return 2

    def say(text: str) -> None:
        print(text, flush=True)

    password: str | None = None
    if args.password_stdin:
        password = sys.stdin.readline().strip()
        if not password:
            print("fixlab certify: --password-stdin: stdin's first line is empty", file=sys.stderr)
            return 2
    elif args.listen not in LOOPBACK:
        password = secrets.token_urlsafe(12)  # one-time: this run's only

    inbox = Inbox()
    try:
        acceptor = CertAcceptor(args.comp, heartbeat_s=args.heartbeat, password=password, version=v).start()
        # The wire's names: what the session validates with (FIXT: its session level's too).
        names = load_version(v.name, str(dictionaries(v)[0]))
    except CertifyError as exc:
        print(f"fixlab certify: {exc}", file=sys.stderr)
        return 2
    loop = TapLoop("certify-tap").start()
    tap = Tap(loop, "127.0.0.1", acceptor.port,
              lambda _n, source, raw, withheld, ns: inbox.add(_Record(source, masked(raw), withheld, ns)),
              lambda reason: say(f"     connection: {reason}"))
    try:
        try:
            tap.open(args.port, args.listen)
        except OSError as exc:
            print(f"fixlab certify: cannot listen on {args.listen}:{args.port}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
        where = args.listen if args.listen not in ("0.0.0.0", "::") else "this machine's address"
        say(f"certify: point your client at {where}:{tap.port} as SenderCompID {args.comp}, "
            f"TargetCompID {SENDER}, {v.wire_name}; waiting up to {args.logon_timeout:g} s for its Logon")
        if password is not None and not args.password_stdin:
            say(f"certify: one-time password, for the Logon's {v.password_field}: {password}")
        started = datetime.now(UTC)
        certifier = Certifier(script, acceptor, inbox, tap.inject, names, run_id=new_run_id(), say=say,
                              logon_timeout_s=args.logon_timeout)
        t0 = time.monotonic()
        outcomes = certifier.run()
        logon_wait = 0.0
        with inbox.changed:
            if inbox.seen:
                logon_wait = max(0.0, (inbox.seen[0].ns / 1e9) - started.timestamp())
        seconds = time.monotonic() - t0 - logon_wait
    finally:
        if acceptor.logged_on:
            with contextlib.suppress(CertifyError):  # it may have logged out meanwhile
                acceptor.logout("certification over")
                acceptor.wait_logout(5)
        tap.close()
        loop.stop()
        # No acceptor.stop(): quickfix 1.16.0's SocketServer::close races the acceptor thread and
        # segfaulted here about one run in eight (as services/bench/baseline.py found); the process
        # ends with os._exit once the report is written, which closes the listening socket too.
    meta = {"comp_id": args.comp, "fix_version": v.name, "begin_string": v.begin_string, "script": label,
            "started": started.isoformat(timespec="seconds"), "seconds": round(seconds, 2)}
    counts = summary(outcomes)
    say(f"certify: {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped "
        f"({seconds:.1f} s after the Logon)")
    if args.report:
        Path(args.report).write_text(as_markdown(meta, outcomes))
    if args.json:
        Path(args.json).write_text(as_json(meta, outcomes))
    if args.html:
        Path(args.html).write_text(as_html(meta, outcomes))
    if not args.report and not args.json and not args.html:
        sys.stdout.write(as_markdown(meta, outcomes))
    if not acceptor.logons:  # nobody logged on: a Logon refused (password, 1137) is not one
        return 3
    return 1 if any(o.status == FAIL for o in outcomes) else 0


def run_and_exit(argv: list[str] | None = None) -> None:
    """Run the command and end the process (see the note on acceptor.stop in main)."""
    code = 1
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: --help, a bad option
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    run_and_exit()
