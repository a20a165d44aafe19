"""What a benchmark run writes: its JSON (with command, date and machine) and its Markdown beside it."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared import machine


def head(benchmark: str, module: str, argv: Sequence[str] | None) -> dict[str, Any]:
    """The fields every result starts with: what ran, the command that reproduces it, when, where."""
    return {"benchmark": benchmark,
            "command": f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv),
            "date": datetime.now(UTC).isoformat(timespec="seconds"), **machine.describe()}


def write(out: Path | None, result: dict[str, Any], text: str) -> None:
    """``result`` as JSON at ``out`` and ``text`` beside it (.md), when ``out`` is given; ``text`` printed."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        out.with_suffix(".md").write_text(text)
    print(text)
