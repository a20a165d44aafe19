"""``fixlab client`` / ``python -m services.client``: a FIX initiator in the terminal (4.4 by default).

    fixlab client                          the exchange `make run` starts (127.0.0.1:9878, FIXLAB),
                                           the first free CLIENT01..CLIENT16
    fixlab client --comp-id CLIENT05 --host 10.0.0.2 --port 9878 --target FIXLAB --heartbeat 30
    fixlab client --store ~/.fixlab/store  sequence numbers survive a restart (QuickFIX FileStore)
    fixlab client --plain                  one decoded line per message; commands from stdin
    fixlab client --tls                    over TLS to the TLS port (127.0.0.1:9898, stunnel), verifying the
                                           certificate with FIXLAB_TLS_CA or a local run's .run/tls/cert.pem
    fixlab client --tls --tls-insecure     ... accepting any certificate (knowingly: a self-signed one)
    fixlab client --fix-version 4.2        FIX 4.2 (CLIENT42-01..08), or 5.0SP2 (FIXT.1.1, CLIENT50-01..08)

Exit status: 0 quit (or the end of stdin in --plain); 1 could not log on, or the session ended
without being asked to (the reason on stderr, one line); 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from services.client.commands import CommandError, parse
from services.client.core import QUIT, Client, Decoded
from services.client.session import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    LOGGED_OUT,
    ClientSession,
    SessionError,
    connect_free,
)
from shared.compids import CLIENT42_COMP_IDS, CLIENT50_COMP_IDS, CLIENT_COMP_IDS, EXCHANGE_COMP_ID
from shared.config import ConfigError, env_int
from shared.fix import dictionary
from shared.fix.versions import VERSIONS, version
from shared.tls import DEFAULT_TLS_PORT, TLS_PORT_ENV, client_context, default_ca_file

PROG = "fixlab client"
# The CompIDs tried in turn when none is named, per version.
COMP_IDS = {"4.4": CLIENT_COMP_IDS, "4.2": CLIENT42_COMP_IDS, "5.0SP2": CLIENT50_COMP_IDS}


def arguments(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="A FIX initiator in the terminal, behind its tap.")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"the exchange's host (default {DEFAULT_HOST})")
    p.add_argument("--port", type=int, help=f"its FIX port (default {DEFAULT_PORT}; with --tls its TLS port, "
                                            f"FIXLAB_FIX_TLS_PORT or {DEFAULT_TLS_PORT})")
    p.add_argument("--tls", action="store_true",
                   help="speak TLS 1.2+ to the exchange's TLS port (stunnel in front of its acceptor)")
    p.add_argument("--tls-ca", type=Path,
                   help="--tls: the CA file to verify the exchange's certificate with (default "
                        "FIXLAB_TLS_CA, "
                        "else a local run's self-signed FIXLAB_RUN_DIR/tls/cert.pem, else the system's CAs)")
    p.add_argument("--tls-insecure", action="store_true",
                   help="--tls: accept any certificate, unverified (a local run's self-signed one)")
    p.add_argument("--fix-version", default="4.4", metavar="|".join(VERSIONS),
                   help="the session's FIX version (default 4.4): 4.2 (FIX.4.2), 4.4, 5.0SP2 (FIXT.1.1)")
    p.add_argument("--comp-id", help="your SenderCompID (default: the first the exchange takes of "
                                     "CLIENT01..16; 4.2: CLIENT42-01..08; 5.0SP2: CLIENT50-01..08)")
    p.add_argument("--target", default=EXCHANGE_COMP_ID,
                   help=f"the exchange's CompID (default {EXCHANGE_COMP_ID})")
    p.add_argument("--heartbeat", type=int, default=30, help="HeartBtInt, seconds (default 30)")
    p.add_argument("--store", type=Path, help="a FileStore directory: sequence numbers survive restarts")
    p.add_argument("--dictionary", type=Path,
                   help="data dictionary (default: the quickfix package's FIX44.xml, FIX42.xml or "
                        "FIX50SP2.xml with FIXT11.xml)")
    p.add_argument("--logon-timeout", type=float, default=5.0,
                   help="seconds to wait for the Logon (default 5)")
    p.add_argument("--plain", action="store_true", help="one decoded line per message, commands from stdin")
    p.add_argument("--linger", type=float, default=1.0,
                   help="--plain: seconds to keep reading the wire after stdin ends (default 1)")
    args = p.parse_args(argv)
    try:
        args.fix_version = version(args.fix_version).name
    except ValueError as exc:
        p.error(f"--fix-version: {exc}")
    if (args.tls_ca or args.tls_insecure) and not args.tls:
        p.error("--tls-ca and --tls-insecure go with --tls")
    args.tls_context = None
    try:
        if args.port is None:
            args.port = DEFAULT_PORT if not args.tls else \
                env_int(os.environ, TLS_PORT_ENV, 0, lo=0, hi=65535) or DEFAULT_TLS_PORT
        if args.tls:
            args.tls_context = client_context(args.tls_ca or default_ca_file(os.environ),
                                              insecure=args.tls_insecure)
    except ConfigError as exc:
        p.error(str(exc))
    if not 1 <= args.port <= 65535:
        p.error(f"--port {args.port}: 1 to 65535")
    if not 1 <= args.heartbeat <= 3600:
        p.error(f"--heartbeat {args.heartbeat}: 1 to 3600 seconds")
    return args


def connect(args: argparse.Namespace) -> Client:
    """Start and log on: the Client of the session that logged on (it saw every record of it)."""
    v = version(args.fix_version)
    # The wire's names: the version's own (FIXT: its session level's and FIX 5.0 SP2's), or --dictionary's.
    if args.dictionary:
        names = (dictionary.load(str(args.dictionary)) if not v.fixt else dictionary.load_version(v.name))
    else:  # what the session validates with (FIX 5.0 SP2: the cut of FIX50SP2.xml, ClientSession's)
        cut = str(dictionary.client_dictionary_file(v.app_dictionary())) if v.client_cut else None
        names = dictionary.load_version(v.name, cut)
    clients: dict[str, Client] = {}

    def make(comp_id: str) -> ClientSession:
        session = ClientSession(comp_id, host=args.host, port=args.port, target=args.target,
                                begin=v.begin_string, heartbeat_s=args.heartbeat, store_dir=args.store,
                                dictionary=args.dictionary, tls=args.tls_context)
        client = clients[comp_id] = Client(session, names)
        session.on_record = client.on_record
        return session

    if args.comp_id:
        session = make(args.comp_id).start()
        try:
            session.wait_logon(args.logon_timeout)
        except BaseException:
            session.stop()
            raise
    else:
        session = connect_free(COMP_IDS[v.name], timeout=args.logon_timeout, make=make)
    return clients[session.comp_id]


class LineReader:
    """stdin's lines read straight from its file descriptor into our own buffer.

    ``select()`` on the descriptor and a buffered ``readline`` do not mix: two lines that arrive
    together are both in Python's buffer after the first ``readline``, and ``select()`` then waits for
    more input before the second is seen. Here what has been read but not yet returned is ours to see.
    """

    CHUNK = 65536

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.ended = False

    def line(self, timeout_s: float) -> str | None:
        """The next line (its newline kept; the last may have none), "" at the end of input, or None
        if no whole line came within timeout_s."""
        if b"\n" not in self.buffer and not self.ended:
            ready, _, _ = select.select([self.fd], [], [], timeout_s)
            if ready:
                chunk = os.read(self.fd, self.CHUNK)
                self.buffer += chunk
                self.ended = not chunk
        cut = self.buffer.find(b"\n") + 1
        if not cut and self.ended:
            cut = len(self.buffer)
        if not cut:
            return None if not self.ended else ""
        head, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return head.decode("utf-8", errors="replace")


def run_plain(client: Client, stdin: TextIO, out: TextIO, err: TextIO, linger_s: float) -> int:
    """Line mode: print each decoded message as it comes; carry out each stdin line."""
    lock = threading.Lock()

    def emit(text: str) -> None:
        with lock:
            out.write(text + "\n")
            out.flush()

    def on_decoded(d: Decoded) -> None:
        emit(f"{d.rec.n} {d.text}")

    session = client.session
    reader = LineReader(stdin.fileno())
    for d in client.follow(on_decoded):  # what came before this point, then the rest as it comes
        on_decoded(d)
    while True:
        if client.lost:
            err.write(f"{PROG}: {session.text}\n")
            return 1
        text = reader.line(0.1)
        if text is None:
            continue
        if not text:  # end of input: let the answers to the last commands arrive
            deadline = time.monotonic() + linger_s
            while time.monotonic() < deadline and session.status != LOGGED_OUT:
                time.sleep(0.05)
            if client.lost:
                err.write(f"{PROG}: {session.text}\n")
                return 1
            return 0
        try:
            cmd = parse(text)
            if cmd is None:
                continue
            if cmd.verb == QUIT:
                return 0
            for answer in client.execute(cmd):
                emit(f"= {answer}")
        except CommandError as exc:
            emit(f"error: {exc}")


def main(argv: list[str] | None = None) -> int:
    args = arguments(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    try:
        client = connect(args)
    except (SessionError, dictionary.DictionaryError) as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 1
    session = client.session
    try:
        if args.plain:
            return run_plain(client, sys.stdin, sys.stdout, sys.stderr, args.linger)
        from services.client.tui import ClientApp  # Textual loads only for the full screen

        ClientApp(client).run()
        if client.lost:  # the screen said why; the shell gets it too, and a non-zero status
            sys.stderr.write(f"{PROG}: {session.text}\n")
            return 1
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        session.stop()


if __name__ == "__main__":
    sys.exit(main())
