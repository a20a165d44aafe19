"""The FIX course's wire excerpts (docs/course/): each lesson's scenario played against a fresh stack.

    python -m tools.course            # start a stack of scenarios/stack.env, play, write docs/course/wire/
    python -m tools.course --port N   # against a stack already running with scenarios/stack.env

A lesson page names its scenario on a line ``<!-- wire: 02-partial-fill -->``; the mkdocs hook
(tools/docs/hooks.py) puts ``docs/course/wire/02-partial-fill.wire`` there as a code block. Each
excerpt is the scenario runner's transcript (``fixlab scenario --transcript``): the messages its
steps sent and took, as on the wire. ``tests/e2e/test_course.py`` plays them again and fails when an
excerpt no longer says what the exchange says: ``comparable`` masks what changes from run to run
(times, lengths, checksums, ids the exchange allocates, the run's own ``$run``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape
from pathlib import Path

from tools import stack

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "docs" / "course"
WIRE = COURSE / "wire"
SCENARIOS = ROOT / "scenarios"
MARKER = re.compile(r"^<!-- wire: (?P<name>[\w.-]+) -->$", re.MULTILINE)
COMMAND = re.compile(r"fixlab scenario -v (?P<path>scenarios/[\w.-]+\.scenario)")
# Tags whose values differ from one run to the next: BodyLength and CheckSum (a ClOrdID's length
# moves them), the clocks (SendingTime, TransactTime, OrigSendingTime), and what the exchange
# numbers (OrderID, ExecID, the match id 527).
VOLATILE = frozenset({9, 10, 52, 60, 122, 37, 17, 527})


@dataclass(frozen=True)
class Lesson:
    page: Path
    scenario: str  # the scenario's file name without .scenario: the excerpt is WIRE/<scenario>.wire

    @property
    def scenario_file(self) -> Path:
        return SCENARIOS / f"{self.scenario}.scenario"

    @property
    def wire_file(self) -> Path:
        return WIRE / f"{self.scenario}.wire"


def lessons() -> list[Lesson]:
    """Every lesson page's excerpt, in page order."""
    out: list[Lesson] = []
    for page in sorted(COURSE.glob("*.md")):
        out += [Lesson(page, m.group("name")) for m in MARKER.finditer(page.read_text(encoding="utf-8"))]
    return out


def run_id(text: str) -> str:
    m = re.search(r"^# .*\$run=(\w+)$", text, re.MULTILINE)
    return m.group(1) if m else ""


def comparable(text: str) -> list[str]:
    """An excerpt's lines with what changes from run to run masked: ``52=*``, ``11=$run-1``."""
    rid = run_id(text)
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        session, mark, message = [*line.split(" ", 2), "", ""][:3]
        fields = []
        for item in message.split("|"):
            tag, sep, value = item.partition("=")
            if not sep:
                fields.append(item)
            elif tag.isdigit() and int(tag) in VOLATILE:
                fields.append(f"{tag}=*")
            else:
                fields.append(f"{tag}={value.replace(rid, '$run') if rid else value}")
        out.append(f"{session} {mark} {'|'.join(fields)}")
    return out


def stale(committed: str, fresh: str) -> list[str]:
    """The lines where two excerpts differ beyond what changes from run to run (a diff, unified)."""
    import difflib

    a, b = comparable(committed), comparable(fresh)
    return [] if a == b else list(difflib.unified_diff(a, b, "committed", "fresh", lineterm=""))


def code_block(lesson_wire: str) -> str:
    """The excerpt as the page shows it: a block of one message a line, SOH written as ``|``,
    wrapped rather than scrolled (docs/stylesheets/course.css)."""
    lines = [escape(x) for x in lesson_wire.splitlines() if not x.startswith("#")]
    return '<pre class="wire"><code>' + "\n".join(lines) + "</code></pre>\n"


def stack_env() -> dict[str, str]:
    """scenarios/stack.env as a mapping, its sessions file made absolute."""
    env = {}
    for line in (SCENARIOS / "stack.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = str(ROOT / value) if key == "FIXLAB_FIX_SESSIONS_FILE" else value
    return env


@contextmanager
def fresh_stack(run_dir: Path) -> Iterator[int]:
    """``python -m services`` with scenarios/stack.env on free ports; yields its FIX port."""
    with stack.fresh_stack(run_dir, stack_env()) as running:
        yield running.fix_port


def play(port: int, names: Sequence[str], out: Path) -> subprocess.CompletedProcess[str]:
    """``fixlab scenario --transcript OUT`` of the named scenarios, one after the other."""
    files = [str(SCENARIOS / f"{n}.scenario") for n in names]
    return subprocess.run([sys.executable, "-m", "services.client.scenario", "--port", str(port),
                           "--transcript", str(out), *files], cwd=ROOT, capture_output=True, text=True,
                          timeout=60 + 30 * len(files), check=False)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.course", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, help="a running stack's FIX port (default: start a fresh one)")
    args = p.parse_args(argv)
    names = sorted({lesson.scenario for lesson in lessons()})
    with tempfile.TemporaryDirectory(prefix="fixlab-course-") as tmp:
        out = Path(tmp) / "wire"
        if args.port:
            done = play(args.port, names, out)
        else:
            with fresh_stack(Path(tmp) / "run") as port:
                done = play(port, names, out)
        print(done.stdout, end="")
        if done.returncode != 0:
            print(done.stderr, end="", file=sys.stderr)
            return done.returncode
        WIRE.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(out / f"{name}.wire", WIRE / f"{name}.wire")
            print(f"wrote {(WIRE / f'{name}.wire').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
