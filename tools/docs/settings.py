"""The settings reference, read from the code: every environment variable a service reads.

The services read their settings through ``shared.config``'s helpers (``env_int(env, NAME, default,
lo=, hi=)`` and the like) or ``os.environ`` / ``os.getenv``; this module walks the source with ``ast``
and lists each name with its type, default and bounds, so the site's reference cannot drift from the
code (tools/docs/hooks.py renders it at build time). What each one means is tools/docs/meanings.py's.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tools.docs.meanings import MEANINGS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "services")
HELPERS = {
    "env_str": "text", "env_opt_str": "text (optional)", "env_int": "whole number",
    "env_float": "number", "env_bool": "true / false", "env_time": "time of day HH:MM",
}


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str
    default: str
    bounds: str
    where: str


def _literal(node: ast.expr | None, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # ENV_PREFIX + "TICK"
        left, right = _literal(node.left, consts), _literal(node.right, consts)
        return left + right if left is not None and right is not None else None
    return None


def _is_setting(name: str) -> bool:
    return name.startswith("FIXLAB_") or name == "REDIS_URL"


def _is_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _settings_of(path: Path) -> list[Setting]:
    where = str(path.relative_to(ROOT))
    found: list[Setting] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    consts = {"ENV_PREFIX": "FIXLAB_"}
    for assign in ast.walk(tree):  # NAME = "FIXLAB_GC", name = ENV_PREFIX + "INSTRUMENTS"
        if isinstance(assign, ast.Assign) and (value := _literal(assign.value, consts)):
            consts.update((t.id, value) for t in assign.targets if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if fname in HELPERS and len(node.args) >= 2 and (name := _literal(node.args[1], consts)):
                default = ast.unparse(node.args[2]) if len(node.args) >= 3 else "(none)"
                bounds = ", ".join(f"{k.arg} {ast.unparse(k.value)}" for k in node.keywords if k.arg)
                found.append(Setting(name, HELPERS[fname], default, bounds, where))
            elif fname in ("getenv", "get") and node.args:
                name = _literal(node.args[0], consts)
                if name and (fname == "getenv" or _is_setting(name)):
                    default = ast.unparse(node.args[1]) if len(node.args) >= 2 else "(none)"
                    found.append(Setting(name, "text", default, "", where))
        elif (isinstance(node, ast.Subscript) and _is_environ(node.value)
              and isinstance(node.ctx, ast.Load) and (name := _literal(node.slice, consts))):
            found.append(Setting(name, "text", "(required)", "", where))
    return found


def settings() -> list[Setting]:
    """Every (name, first place read) in shared/ and services/, sorted by name."""
    first: dict[str, Setting] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for s in _settings_of(path):
                first.setdefault(s.name, s)
    return [first[n] for n in sorted(first)]


def markdown() -> str:
    lines = [
        "# Settings reference",
        "",
        "Generated at build time from the code that reads each variable (tools/docs/settings.py);",
        "a test fails when the code reads a variable this page does not list.",
        "",
        "| Variable | Meaning | Type | Default | Valid values | Read in |",
        "|---|---|---|---|---|---|",
    ]
    for s in settings():
        cell = s.default.replace("|", "\\|")
        meaning = MEANINGS.get(s.name, "").replace("|", "\\|")
        lines.append(f"| `{s.name}` | {meaning} | {s.kind} | `{cell}` | {s.bounds or 'any'} | `{s.where}` |")
    return "\n".join(lines) + "\n"
