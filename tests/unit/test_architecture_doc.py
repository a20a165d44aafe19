"""docs/ARCHITECTURE.md stays true: every stream or key it names is one that shared.streams spells."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from shared import streams

DOC = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"
NAME = re.compile(r"fixlab:[^\s`|,)]+")


def known_names() -> set[str]:
    """Every name shared.streams can spell, with each argument written as ``<parameter name>``."""
    out = {v for v in vars(streams).values() if isinstance(v, str) and v.startswith(streams.PREFIX + ":")}
    for name, fn in vars(streams).items():
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != streams.__name__:
            continue
        params = inspect.signature(fn).parameters
        if params and all(p.annotation in ("str", str) for p in params.values()):
            out.add(fn(*(f"<{p}>" for p in params)))
    return out


def test_every_name_in_the_architecture_doc_is_spelled_by_shared_streams() -> None:
    named = set(NAME.findall(DOC.read_text()))
    assert len(named) >= 8  # the doc names the streams: an empty match would prove nothing
    assert named - known_names() == set()


def test_a_name_that_streams_does_not_spell_is_caught() -> None:
    assert "fixlab:{shard-<shard>}:orders" in known_names()
    assert "fixlab:{shard-<shard>}:ordres" not in known_names()
