"""``fixlab admin``: the operator's commands, each signed with the operator's token and sent on the bus.

    fixlab admin kill COMPID      cancel every open order of a session and refuse its new ones
    fixlab admin unkill COMPID    let it trade again
    fixlab admin killed           the CompIDs killed now
    fixlab admin phase SYMBOL PHASE [REASON]   an instrument's trading phase (services/admin/phases.py)
    fixlab admin halt SYMBOL [REASON]          halt it: a call until resume
    fixlab admin resume SYMBOL                 its resume auction, then continuous trading

Subcommands come from the modules in MODULES, each with ``register(subparsers)`` adding its parsers
with ``set_defaults(run=FUNCTION)``; FUNCTION(args, ctx) returns the exit code. Without a token it
says so and exits 2, having sent nothing; the services check each command's signature themselves.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from services.admin import killswitch, phases
from shared import redis_cluster
from shared.bus import REDIS_ERRORS
from shared.config import ConfigError
from shared.operator import DEFAULT_TOKEN_FILE, TOKEN_ENV, TOKEN_FILE_ENV, Token, load_token

# Modules that register subcommands (add one per module).
MODULES: tuple[Any, ...] = (killswitch, phases)

EXIT_REFUSED = 1  # a service refused, or nobody answered in time
EXIT_NO_TOKEN = 2


@dataclass(slots=True)
class Context:
    """What a subcommand gets: Redis, the token, the deadline and where to write."""

    r: Any
    token: Token
    deadline_s: float
    out: TextIO


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fixlab admin",
                                description="The operator's commands to the running exchange.")
    p.add_argument("--url", help="Redis URL (default: $REDIS_URL)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="how long to wait for the services' answers (default 5)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in MODULES:
        module.register(sub)
    return p


def main(argv: list[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    args = parser().parse_args(argv)
    try:
        token = load_token()
    except ConfigError as exc:
        err.write(f"fixlab admin: {exc}\n")
        return EXIT_NO_TOKEN
    if token is None:
        err.write(f"fixlab admin: refused: no operator token (set {TOKEN_ENV}, or {TOKEN_FILE_ENV} to a file "
                  f"holding it; default {DEFAULT_TOKEN_FILE}, which make run creates): nothing was sent\n")
        return EXIT_NO_TOKEN
    url = args.url or os.environ.get("REDIS_URL")
    if not url:
        err.write("fixlab admin: give --url or set REDIS_URL (e.g. redis://127.0.0.1:6379/0)\n")
        return EXIT_NO_TOKEN
    try:
        r = redis_cluster.connect_any(url, timeout_s=max(2.0, args.timeout))
        code: int = args.run(args, Context(r=r, token=token, deadline_s=args.timeout, out=out))
        return code
    except REDIS_ERRORS as exc:
        err.write(f"fixlab admin: redis unavailable: {exc}\n")
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
