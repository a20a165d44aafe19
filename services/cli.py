"""``fixlab``: one console command, its subcommands dispatched to the module that owns each.

    fixlab list|tail|show|pending ...   the bus inspector (shared/streams/__main__.py), unchanged
    fixlab client ...                   the terminal FIX client (python -m services.client)
    fixlab scenario FILE...             play scenarios (python -m services.client.scenario)
    fixlab certify --comp CERT01        certify a FIX client (python -m services.client.certify)
    fixlab admin kill COMPID ...        the operator's commands, with its token (python -m services.admin)
    fixlab passwd COMPID                set a CompID's logon password (python -m shared.credentials)

A subcommand that belongs to a service runs that service's module as ``python -m`` would (``runpy``),
named by a string as the runner names the services it starts: this module imports no service
(tests/unit/test_layers.py). Add a subcommand by adding a line to SUBCOMMANDS.
"""

from __future__ import annotations

import runpy
import sys

from shared.streams.__main__ import run as streams

# subcommand: (module run as __main__, what it does)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "client": ("services.client", "a FIX initiator in the terminal: 4.4, 4.2, 5.0SP2 (fixlab client --help)"),
    "scenario": ("services.client.scenario", "play scenario files against the exchange (docs/scenarios.md)"),
    "certify": ("services.client.certify", "certify a FIX client: the exchange plays a script at it"),
    "admin": ("services.admin", "the operator's commands (kill, unkill, ...): needs the operator's token"),
    "passwd": ("shared.credentials", "set a logon password in $FIXLAB_CREDENTIALS (prompted or stdin)"),
}


def main(argv: list[str] | None = None) -> int:
    """The ``fixlab`` console script."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in SUBCOMMANDS:
        module = SUBCOMMANDS[args[0]][0]
        saved = sys.argv
        sys.argv = [f"fixlab {args[0]}", *args[1:]]
        # A module imported already (a test, a tool that read its names) would be run again beside
        # its imported copy, which runpy warns of: run it afresh.
        sys.modules.pop(module, None)
        sys.modules.pop(f"{module}.__main__", None)  # a package runs its __main__
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code
            return code if isinstance(code, int) else (0 if code is None else 1)
        finally:
            sys.argv = saved
        return 0
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write("fixlab: the bus inspector (list, tail, show, pending) and:\n")
        for name, (_module, what) in SUBCOMMANDS.items():
            sys.stdout.write(f"  fixlab {name}  {what}\n")
    return streams(args)


if __name__ == "__main__":
    sys.exit(main())
