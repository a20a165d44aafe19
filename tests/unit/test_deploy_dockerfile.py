"""deploy/Dockerfile: every file it copies exists and reaches the build context; the runtime stages
carry no build tools and run as a non-root user; the quickfix it builds is the one pyproject pins."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"  # BuildKit's per-Dockerfile ignore file
BUILD_TOOLS = ("build-essential", "gcc", "g++", "swig", "make ", "python3-dev")
# What the runtime may install from Debian's archive: the TLS port's stunnel4 and openssl, nothing else.
RUNTIME_PACKAGES = {"stunnel4", "openssl"}


@dataclass
class Stage:
    name: str
    base: str
    lines: list[str] = field(default_factory=list)


def instructions(text: str) -> list[str]:
    """Instructions with continuation lines joined and comments dropped."""
    out: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        out.append(current + line)
        current = ""
    return out


def stages(text: str) -> list[Stage]:
    out: list[Stage] = []
    for ins in instructions(text):
        m = re.match(r"FROM\s+(?:--\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", ins, re.IGNORECASE)
        if m:
            out.append(Stage(m.group(2) or str(len(out)), m.group(1)))
        elif out:
            out[-1].lines.append(ins)
    return out


def _pattern(p: str) -> re.Pattern[str]:
    rx = ""
    i = 0
    while i < len(p):
        if p.startswith("**", i):
            rx += ".*"
            i += 2
        elif p[i] == "*":
            rx += "[^/]*"
            i += 1
        elif p[i] == "?":
            rx += "[^/]"
            i += 1
        else:
            rx += re.escape(p[i])
            i += 1
    return re.compile(rx + r"\Z")


def ignored(path: str, rules: list[str]) -> bool:
    """Docker's .dockerignore: the last matching rule wins; a rule matching a folder covers its files."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for rule in rules:
        negate = rule.startswith("!")
        rx = _pattern(rule.lstrip("!").strip("/"))
        if any(rx.match(p) for p in prefixes):
            verdict = not negate
    return verdict


def ignore_rules() -> list[str]:
    return [ln.strip() for ln in IGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def copy_sources(stage: Stage) -> list[str]:
    out = []
    for ins in stage.lines:
        if not ins.upper().startswith(("COPY", "ADD")):
            continue
        words = [w for w in ins.split()[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in ins.split()):
            continue
        out.extend(words[:-1])
    return out


@pytest.fixture(scope="module")
def parsed() -> list[Stage]:
    return stages(DOCKERFILE.read_text())


def test_every_copied_file_exists_and_is_in_the_build_context(parsed: list[Stage]) -> None:
    sources = [src for stage in parsed for src in copy_sources(stage)]
    assert "shared" in sources and "services" in sources
    rules = ignore_rules()
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: no such file in the repository"
        assert not ignored(src, rules), f"COPY {src}: excluded by {IGNORE.name}"
    # And the context stays small: the venv, run folder and git history never go to the builder.
    for heavy in (".venv/bin/python", ".run/redis/appendonly.aof", ".git/HEAD", "tests/conftest.py",
                  "services/web/__pycache__/app.cpython-311.pyc"):
        assert ignored(heavy, rules), heavy


def test_the_ignore_matcher_follows_docker_rules() -> None:
    rules = ["**", "!shared", "shared/secret.txt", "**/*.pyc"]
    assert ignored("README.md", rules)
    assert not ignored("shared/config.py", rules)
    assert ignored("shared/secret.txt", rules)
    assert ignored("shared/x/y.pyc", rules)


def test_stages_build_once_and_the_runtime_has_no_build_tools(parsed: list[Stage]) -> None:
    names = [s.name for s in parsed]
    assert names == ["wheels", "base", "app"]
    wheels, base, app = parsed
    assert base.base == wheels.base == "${PYTHON_IMAGE}"  # the same Python in build and runtime
    assert app.base == "base"
    assert any("build-essential" in ins for ins in wheels.lines)
    for stage in (base, app):
        for ins in stage.lines:
            assert not any(tool in ins for tool in BUILD_TOOLS), f"{stage.name}: {ins}"
            for step in ins.split("&&"):
                if "apt-get install" in step:
                    packages = {w for w in step.split("install", 1)[1].split() if not w.startswith("-")}
                    assert packages == RUNTIME_PACKAGES, f"{stage.name}: {step}"
                    assert "rm -rf /var/lib/apt/lists/*" in ins, f"{stage.name}: apt lists left in the layer"
    assert any("stunnel4" in ins for ins in base.lines)
    # The runtime gets only the wheels from the build stage, and installs them without an index.
    refs = re.findall(r"from=(\w+)", " ".join(base.lines + app.lines))
    assert set(refs) == {"wheels"}
    assert any("--no-index" in ins for ins in base.lines)


def test_the_quickfix_wheel_is_the_pinned_one_in_a_layer_of_its_own(parsed: list[Stage]) -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if d.startswith("quickfix")]
    wheels = parsed[0]
    (build,) = [i for i in wheels.lines if "pip wheel" in i and "quickfix" in i]
    assert pin in build
    # Only build_progress.py is copied before it: code changes never recompile quickfix.
    before = wheels.lines[: wheels.lines.index(build)]
    assert [src for ins in before if ins.startswith("COPY") for src in ins.split()[1:-1]] == \
        ["deploy/build_progress.py"]


def test_the_app_runs_as_a_non_root_user(parsed: list[Stage]) -> None:
    app = parsed[-1]
    users = [ins.split()[1] for ins in app.lines if ins.upper().startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert any("useradd" in ins and users[-1] in ins for ins in parsed[1].lines)


def test_compose_builds_a_stage_that_exists(parsed: list[Stage]) -> None:
    # Paths are relative to the project folder: the first file's (the shards file overrides
    # docker-compose.yml; the cluster file stands alone in deploy/).
    for f, project in ((ROOT / "docker-compose.yml", ROOT), (ROOT / "deploy" / "compose.shards.yml", ROOT),
                       (ROOT / "deploy" / "compose.cluster.yml", ROOT / "deploy")):
        for name, svc in yaml.safe_load(f.read_text())["services"].items():
            build = svc.get("build")
            if build:
                assert (project / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE, name
                assert build["target"] in {s.name for s in parsed}, name


def test_build_progress_turns_compiler_lines_into_a_counter() -> None:
    log = "".join([
        "Building wheel for quickfix\n",
        "g++ -O2 -c src/C++/Session.cpp -o build/Session.o\n",
        "g++ -O2 -c src/C++/Message.cpp -o build/Message.o\n",
        "warning: unused variable\n",
        "Successfully installed quickfix-1.16.0\n",
    ])
    out = subprocess.run([sys.executable, str(ROOT / "deploy" / "build_progress.py")], input=log,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("  quickfix build [  1/") and out[0].endswith("Session.cpp")
    assert out[1].startswith("  quickfix build [  2/") and out[1].endswith("Message.cpp")
    assert out[-1] == "Successfully installed quickfix-1.16.0"
    assert not any("warning" in line for line in out)


def test_build_progress_shows_the_tail_when_the_build_fails() -> None:
    log = "g++ -c a.cpp\nsrc/a.cpp:1: error: boom\nsomething else\n"
    out = subprocess.run([sys.executable, str(ROOT / "deploy" / "build_progress.py")], input=log,
                         capture_output=True, text=True, check=True).stdout
    assert "src/a.cpp:1: error: boom" in out
    assert out.rstrip().endswith("something else")


def _run_lines(stage: Stage) -> list[str]:
    return [ins for ins in stage.lines if ins.startswith("RUN ")]


def test_the_requirements_step_lists_pyprojects_dependencies(parsed: list[Stage], tmp_path: Path) -> None:
    # Run the Dockerfile's own one-liner on the repository's pyproject.toml.
    (step,) = [ins for ins in _run_lines(parsed[0]) if "tomllib" in ins]
    code = re.search(r"python -c '([^']+)'", step)
    assert code is not None
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    out = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def test_the_fixlab_command_in_the_image_runs_the_inspector(parsed: list[Stage], tmp_path: Path) -> None:
    (step,) = [ins for ins in _run_lines(parsed[-1]) if "/usr/local/bin/fixlab" in ins]
    printf = re.search(r"(printf '[^']*')", step)
    assert printf is not None
    script = tmp_path / "fixlab"
    subprocess.run(["sh", "-c", f"{printf.group(1)} > {script} && chmod 0755 {script}"], check=True)
    # `python` in the image is the interpreter with the packages: here, this one.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    python = bindir / "python"  # a wrapper, not a symlink: a venv's python finds its venv by its path
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(script), "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "list" in done.stdout and "pending" in done.stdout
