"""The course's wire excerpts are not stale: every lesson's scenario played again against a fresh
stack of scenarios/stack.env (``tools.course``, as ``python -m tools.course`` writes them), and each
transcript compared with the committed docs/course/wire/NAME.wire, masking only what changes from run
to run (tools/course.py ``comparable``). Regenerate with ``python -m tools.course``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import course

pytestmark = pytest.mark.e2e


def test_every_lesson_excerpt_matches_a_fresh_run(tmp_path: Path) -> None:
    names = sorted({lesson.scenario for lesson in course.lessons()})
    assert len(names) >= 8, names
    with course.fresh_stack(tmp_path / "run") as port:
        done = course.play(port, names, tmp_path / "wire")
    assert done.returncode == 0, done.stdout + done.stderr
    stale = {}
    for name in names:
        committed = (course.WIRE / f"{name}.wire").read_text(encoding="latin-1")
        fresh = (tmp_path / "wire" / f"{name}.wire").read_text(encoding="latin-1")
        if diff := course.stale(committed, fresh):
            stale[name] = "\n".join(diff)
    assert not stale, "stale excerpts (python -m tools.course rewrites them):\n" + "\n\n".join(
        f"{k}:\n{v}" for k, v in stale.items())
