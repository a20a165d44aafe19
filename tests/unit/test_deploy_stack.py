"""The runner's service list: one matcher per shard of FIXLAB_SHARDS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.stack import SHARD_ENV, stack_specs
from shared.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_one_shard_is_one_service_named_matcher() -> None:
    specs = stack_specs(python="py", env={}, only_present=False)
    assert [(s.name, s.argv, s.env) for s in specs] == [
        ("matcher", ("py", "-m", "services.matcher"), {SHARD_ENV: "0"}),
        ("gateway", ("py", "-m", "services.gateway"), {}),
        ("web", ("py", "-m", "services.web"), {}),
        ("bots", ("py", "-m", "services.bots"), {}),
    ]


def test_two_shards_are_two_matchers_before_everything_else() -> None:
    env = {"FIXLAB_SHARDS": "BIRCH.LAB:b,ACORN.LAB:a"}
    specs = stack_specs(python="py", env=env, only_present=False)
    assert [(s.name, s.env) for s in specs[:2]] == [("matcher-a", {SHARD_ENV: "a"}),
                                                   ("matcher-b", {SHARD_ENV: "b"})]
    # An instrument left out of the map stays on shard 0, which then needs its own matcher.
    env = {"FIXLAB_SHARDS": "ACORN.LAB:a"}
    assert [s.name for s in stack_specs(env=env, only_present=False)][:2] == ["matcher-0", "matcher-a"]


def test_only_services_present_in_the_checkout_are_started() -> None:
    present = {s.name for s in stack_specs(env={})}
    assert present <= {s.name for s in stack_specs(env={}, only_present=False)}
    for spec in stack_specs(env={}):
        path = ROOT.joinpath(*spec.argv[2].split("."))
        assert (path / "__main__.py").is_file() or path.with_suffix(".py").is_file()


def test_a_module_counts_as_present_and_a_package_needs_a_main() -> None:
    from services.stack import _present

    assert _present("shared.health")  # a module: python -m runs it
    assert _present("services.bots")  # a package with a __main__
    assert not _present("shared")  # a package without one
    assert not _present("shared.nope")


@pytest.mark.parametrize("shards", ["ACORN.LAB", "NOPE.LAB:a", "ACORN.LAB:"])
def test_a_bad_shard_map_is_refused(shards: str) -> None:
    with pytest.raises(ConfigError):
        stack_specs(env={"FIXLAB_SHARDS": shards}, only_present=False)


def test_make_run_stops_on_a_bad_shard_map_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "FIXLAB_SHARDS": "NOPE.LAB:a", "FIXLAB_RUN_DIR": str(tmp_path)}
    env.pop("REDIS_URL", None)
    proc = subprocess.run([sys.executable, "-m", "services"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "fixlab: FIXLAB_PRO_RATA/FIXLAB_SHARDS name unknown instruments: ['NOPE.LAB']"]
    assert not (tmp_path / "redis").exists()  # refused before starting anything


def test_the_tls_port_is_a_service_after_the_gateway_only_when_set() -> None:
    assert "tls" not in {s.name for s in stack_specs(python="py", env={}, only_present=False)}
    specs = {s.name: s for s in stack_specs(python="py", env={"FIXLAB_FIX_TLS_PORT": "9898"},
                                            only_present=False)}
    assert specs["tls"].argv == ("py", "-m", "services.tls")
    assert specs["tls"].tier > specs["gateway"].tier  # stops before the gateway it leads to
