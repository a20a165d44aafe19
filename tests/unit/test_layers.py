"""The house's layers, read from every module's imports (an AST scan, nothing imported or run).

- ``shared`` imports no service;
- no service imports another (services/<name>/ holds what that service's process runs); the runner
  (the modules directly in services/) names services only as strings;
- nothing in shared/ or services/ imports benchmarks/, tools/ or tests/ (they sit beside, on top);
- no importlib of project code, which would hide an edge from this very check.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ON_TOP = ("benchmarks", "tools", "tests")


def modules(folder: str) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / folder).rglob("*.py")):
        yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def imported(tree: ast.Module) -> Iterator[str]:
    """Every absolute module name the file imports (relative imports stay inside their package)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


RUNNER = "(runner)"  # the modules directly in services/: `python -m services` and its stack list


def service_of(name: str) -> str | None:
    """The service a module name belongs to; the runner's modules count as one unit."""
    parts = name.split(".")
    if parts[0] != "services" or len(parts) < 2:
        return None
    return parts[1] if (ROOT / "services" / parts[1]).is_dir() else RUNNER


def dynamic_imports(tree: ast.Module) -> list[str]:
    """Calls of importlib.import_module / __import__ with a project module name."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in ("import_module", "__import__") or not node.args:
            continue
        arg = node.args[0]
        if not isinstance(arg, ast.Constant) or not isinstance(arg.value, str):
            found.append(f"{name}(<computed>)")
        elif arg.value.split(".")[0] in ("shared", "services", *ON_TOP):
            found.append(f"{name}({arg.value!r})")
    return found


def test_shared_imports_no_service_and_nothing_on_top() -> None:
    bad = [f"{path}: {name}" for path, tree in modules("shared") for name in imported(tree)
           if name.split(".")[0] in ("services", *ON_TOP)]
    assert bad == []


def test_no_service_imports_another_or_what_sits_on_top() -> None:
    bad = []
    for path, tree in modules("services"):
        parts = Path(path).parts
        own = parts[1] if len(parts) > 2 else RUNNER  # services/<own>/... or services/<file>.py
        for name in imported(tree):
            other = service_of(name)
            if name.split(".")[0] in ON_TOP or (other is not None and other != own):
                bad.append(f"{path}: {name}")
    assert bad == []


def test_no_importlib_of_project_code() -> None:
    bad = [f"{path}: {call}" for folder in ("shared", "services") for path, tree in modules(folder)
           for call in dynamic_imports(tree)]
    assert bad == []


def test_the_scan_sees_a_violation() -> None:
    # The checks above would pass on a scan that reads nothing: prove the readers find each kind.
    tree = ast.parse("import services.gateway.x\nfrom services.web import y\nfrom . import z\n"
                     "importlib.import_module('services.gateway.lab')\n")
    assert list(imported(tree)) == ["services.gateway.x", "services.web"]
    assert service_of("services.gateway.x") == "gateway"
    assert dynamic_imports(tree) == ["import_module('services.gateway.lab')"]
