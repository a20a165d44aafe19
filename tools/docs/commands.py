"""The ``fixlab`` commands' reference: each subcommand's options as its own argparse parser prints them.

Every subcommand of services/cli.py's SUBCOMMANDS (and the bus inspector, ``fixlab --help``) is run
with ``--help`` at build time, so the page is what the parsers say today.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from services.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]


def help_of(args: list[str]) -> str:
    """``fixlab ARGS --help``'s output (argparse's own text, 100 columns)."""
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from services.cli import main; sys.exit(main(sys.argv[1:]))",
         *args, "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT)},
    )
    if result.returncode != 0:
        raise RuntimeError(f"fixlab {' '.join(args)} --help failed: {result.stderr}")
    return result.stdout


def markdown() -> str:
    lines = ["# The `fixlab` commands", "",
             "Generated at build time from each command's argument parser (tools/docs/commands.py).", "",
             "## fixlab", "", "```text", help_of([]).rstrip(), "```", ""]
    for name, (_module, what) in SUBCOMMANDS.items():
        lines += [f"## fixlab {name}", "", what, "", "```text", help_of([name]).rstrip(), "```", ""]
    return "\n".join(lines)
