"""docker-compose.yml: valid Compose, and the same services, commands, variables and ports as `make run`.

Docker does not run on our machines, so these prove what can be proved without it: the file against
the Compose Specification's JSON schema, and against the local runner (services/stack.py) and the
settings each service really reads.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from services.stack import DEPENDS_ON, SERVICE_MODULES, SHARD_ENV, cluster_defaults, stack_specs
from shared.config import DEFAULT_INSTRUMENTS, common_settings
from shared.redis_server import DEFAULT_APPENDFSYNC

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SHARDS_OVERRIDE = ROOT / "deploy" / "compose.shards.yml"
CLUSTER = ROOT / "deploy" / "compose.cluster.yml"  # a file of its own: `make run-cluster` in containers
MODULE_OF = dict(SERVICE_MODULES)
INFRA = {"redis"}  # not started by the runner: `make run` starts its own redis-server
# Service publishing a port: (its variable, default, the service listening there). The TLS port's stunnel
# shares the gateway's network namespace, so the gateway publishes it; the plain FIX port stays inside.
PUBLISHED = {"gateway": ("FIXLAB_FIX_TLS_PORT", 9898, "tls"), "web": ("FIXLAB_WEB_PORT", 8000, "web")}
MAKE_RUN = {"FIXLAB_FIX_TLS_PORT": "9898"}  # what the Makefile's `run` sets
NOT_READ_BY_CODE = {"PYTHONUNBUFFERED"}  # the interpreter's, set by the runner too

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$\$")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default} and $$, over a loaded document."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, default = m.group(1), m.group(2), m.group(3) or ""
        current = env.get(name)
        if op == ":-":
            return current if current else default
        if op == "-":
            return default if current is None else current
        if op in (":?", "?"):
            if not current:
                raise AssertionError(f"compose requires {name}: {default}")
            return current
        return current or ""

    return _VAR.sub(sub, value)


def merge(base: Any, override: Any) -> Any:
    """Compose's merge of an override file, for the maps used here (scalars and lists replace)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    return copy.deepcopy(override)


def load(*files: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for f in files:
        doc = merge(doc, yaml.safe_load(f.read_text()))
    return interpolate(doc, env or {})


def is_redis(name: str) -> bool:
    """Redis itself: `redis`, or the cluster's nodes and its create job (`redis-1`, ...)."""
    return name in INFRA or name.startswith("redis-")


def lab_services(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What `docker compose up` starts: every service without a profile."""
    return {n: s for n, s in doc["services"].items() if not s.get("profiles")}


def service_env(svc: Mapping[str, Any]) -> dict[str, str]:
    env = svc.get("environment", {})
    assert isinstance(env, dict), "environment is written as a map"
    return {k: "" if v is None else str(v) for k, v in env.items()}


# --------------------------------------------------------------------------- the Compose Specification

@pytest.fixture(scope="module")
def compose_schema(shared_reference: Path) -> dict[str, Any]:
    return json.loads((shared_reference / "compose" / "compose-spec.json").read_text())


def _errors(schema: dict[str, Any], doc: Any) -> list[str]:
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("path", [COMPOSE, SHARDS_OVERRIDE, CLUSTER], ids=lambda p: p.name)
def test_compose_files_follow_the_compose_specification(compose_schema: dict[str, Any], path: Path) -> None:
    assert _errors(compose_schema, yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize("breakage", ["misspelled key", "bad restart type", "bad depends_on"])
def test_the_schema_check_catches_broken_files(compose_schema: dict[str, Any], breakage: str) -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    if breakage == "misspelled key":
        doc["services"]["matcher"]["healthchek"] = doc["services"]["matcher"].pop("healthcheck")
    elif breakage == "bad restart type":
        doc["services"]["web"]["restart"] = ["always"]
    else:
        doc["services"]["gateway"]["depends_on"] = {"matcher": {"condition": 3}}
    assert _errors(compose_schema, doc)


# --------------------------------------------------------------------------- the same stack as make run

def _runner_view(env: Mapping[str, str]) -> list[tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]:
    specs = stack_specs(python="python", env=env, only_present=False)
    return sorted((spec.argv, tuple(sorted(spec.env.items()))) for spec in specs)


def _compose_view(doc: Mapping[str, Any]) -> list[tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]:
    out = []
    for name, svc in lab_services(doc).items():
        if name in INFRA:
            continue
        env = service_env(svc)
        extra = ((SHARD_ENV, env[SHARD_ENV]),) if SHARD_ENV in env else ()
        out.append((tuple(svc["command"]), extra))
    return sorted(out)


def test_docker_compose_up_starts_what_make_run_starts_with_the_same_commands() -> None:
    doc = load(COMPOSE)
    assert _compose_view(doc) == _runner_view(MAKE_RUN)
    assert set(lab_services(doc)) - INFRA == {name for name, _ in SERVICE_MODULES}


def test_the_shards_override_starts_what_make_run_starts_for_two_shards() -> None:
    shards = {"FIXLAB_SHARDS": "ACORN.LAB:a,BIRCH.LAB:b"}
    # The override's own default and the variable set in the shell give the same stack.
    for env in ({}, shards):
        doc = load(COMPOSE, SHARDS_OVERRIDE, env=env)
        assert _compose_view(doc) == _runner_view({**shards, **MAKE_RUN})
    runner_names = [s.name for s in stack_specs(env=shards, only_present=False)]
    assert runner_names[:2] == ["matcher-a", "matcher-b"]


@pytest.mark.parametrize("files", [(COMPOSE,), (COMPOSE, SHARDS_OVERRIDE), (CLUSTER,)],
                         ids=["default", "shards", "cluster"])
@pytest.mark.parametrize("env", [{}, {"FIXLAB_INSTRUMENTS": "OAK.LAB:10.00,BIRCH.LAB:25.00",
                                      "FIXLAB_SHARDS": "OAK.LAB:a,BIRCH.LAB:b", "FIXLAB_TICK": "0.05"}],
                         ids=["defaults", "from-the-shell"])
def test_every_service_sees_one_market_and_valid_settings(files: tuple[Path, ...],
                                                         env: dict[str, str]) -> None:
    doc = load(*files, env=env)
    apps = {n: s for n, s in doc["services"].items() if not is_redis(n)}
    # FIXLAB_GATEWAYS too: the gateways cut the CompID pools by it, and the bots find theirs by it.
    common = {"FIXLAB_INSTRUMENTS", "FIXLAB_SHARDS", "FIXLAB_TICK", "FIXLAB_PRO_RATA", "REDIS_URL",
              "FIXLAB_GATEWAYS"}
    views = {n: {k: v for k, v in service_env(s).items() if k in common} for n, s in apps.items()}
    first = next(iter(views.values()))
    # One map for all: a gateway routing to a shard no matcher reads would lose orders.
    assert all(v == first for v in views.values()), views
    settings = common_settings(first)
    if files == (COMPOSE,) and not env:
        assert first["FIXLAB_INSTRUMENTS"] == DEFAULT_INSTRUMENTS
    matcher_shards = sorted(service_env(s)[SHARD_ENV] for n, s in apps.items()
                            if s["command"][-1] == "services.matcher")
    assert matcher_shards == list(settings.shards)  # every shard has exactly one matcher


def _names_read(paths: list[Path]) -> set[str]:
    """Environment variable names the code reads: "FIXLAB_X", ENV_PREFIX + "X", "REDIS_URL"."""
    names: set[str] = set()
    for path in paths:
        for f in path.rglob("*.py") if path.is_dir() else [path]:
            text = f.read_text()
            names |= set(re.findall(r"[\"']((?:FIXLAB|REDIS)_[A-Z0-9_]+)[\"']", text))
            names |= {"FIXLAB_" + n for n in re.findall(r"ENV_PREFIX\s*\+\s*[\"']([A-Z0-9_]+)[\"']", text)}
    return names


def _source_of(module: str) -> Path | None:
    """The folder of the code ``python -m module`` runs: its package (or the package holding it)."""
    path = ROOT.joinpath(*module.split("."))
    if (path / "__main__.py").is_file():
        return path
    if path.with_suffix(".py").is_file():
        return path.parent
    return None


@pytest.mark.parametrize(("files", "name"), [
    *(((COMPOSE, SHARDS_OVERRIDE), n) for n in ["matcher", "gateway", "web", "bots", "tls", "bench"]),
    *(((CLUSTER,), n) for n in ["matcher-a", "matcher-b", "gateway-1", "gateway-2", "web", "bots"]),
], ids=lambda v: v if isinstance(v, str) else "+".join(p.stem for p in v))
def test_every_variable_compose_sets_is_one_the_service_reads(files: tuple[Path, ...], name: str) -> None:
    doc = load(*files)
    module = doc["services"][name]["command"][2]
    source = _source_of(module)
    if source is None:
        pytest.skip(f"{module} has not landed in this checkout yet: nothing to compare with")
    read = _names_read([ROOT / "shared", ROOT / "services" / "__main__.py", source])
    unknown = set(service_env(doc["services"][name])) - read - NOT_READ_BY_CODE
    assert not unknown, f"{name} is given variables its code never reads: {sorted(unknown)}"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
@pytest.mark.parametrize("port", [None, "19999"])
def test_published_ports_are_the_runners_ports(name: str, port: str | None) -> None:
    variable, default, listener = PUBLISHED[name]
    env = {variable: port} if port else {}
    doc = load(COMPOSE, env=env)
    svc = doc["services"][name]
    expected = port or str(default)
    (mapping,) = svc["ports"]
    host_ip, host_port, container_port = mapping.split(":")
    assert (host_ip, host_port, container_port) == ("127.0.0.1", expected, expected)
    # The service listens where compose publishes (in the publishing service's network namespace).
    listening = doc["services"][listener]
    assert service_env(listening)[variable] == expected
    assert listener == name or listening["network_mode"] == f"service:{name}"


def test_only_the_web_and_fix_ports_are_published_and_redis_stays_inside() -> None:
    doc = load(COMPOSE, SHARDS_OVERRIDE)
    assert {n for n, s in doc["services"].items() if s.get("ports")} == set(PUBLISHED)
    assert doc["networks"]["bus"]["internal"] is True
    assert doc["services"]["redis"]["networks"] == ["bus"]
    for name, svc in doc["services"].items():
        # The bots reach the FIX port on the gateway's own loopback, as under make run.
        # The tls service's stunnel too, from its own 127.0.0.3 (docs/security.md).
        assert "bus" in svc["networks"] if name not in ("bots", "tls") else \
            svc["network_mode"] == "service:gateway"
    # The plain FIX port is not published: outside compose, FIX is over TLS only.
    assert all("9878" not in p for s in doc["services"].values() for p in s.get("ports", []))
    assert "bus" in doc["services"]["gateway"]["networks"]
    assert load(COMPOSE, env={"FIXLAB_BIND": "0.0.0.0"})["services"]["web"]["ports"] == ["0.0.0.0:8000:8000"]


def test_health_restart_and_start_order() -> None:
    doc = load(COMPOSE, SHARDS_OVERRIDE)
    services = doc["services"]
    for name, svc in services.items():
        assert svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        assert svc["restart"] == ("no" if name == "bench" else "unless-stopped"), name
        for dep, cond in svc.get("depends_on", {}).items():
            assert dep in services and cond == {"condition": "service_healthy"}, (name, dep)
        health = svc["healthcheck"]["test"]
        source = _source_of(svc["command"][2]) if name not in INFRA else None
        if source is None:
            continue
        code = "\n".join(f.read_text() for f in source.rglob("*.py"))
        if health[1:4] == ["python", "-m", "shared.health"]:
            # The service reports under the name its healthcheck asks about.
            assert re.search(rf'HealthReporter\(.{{0,80}}?"{health[4]}"', code, re.DOTALL), name
        elif "health_key('matcher'" in " ".join(health):
            assert re.search(r'HealthReporter\(.{0,80}?"matcher", self\.shard', code, re.DOTALL), name
        elif "urlopen" in " ".join(health):
            path = re.search(r"http://127\.0\.0\.1:%s(/[\w/]*)", " ".join(health))
            assert path and f'"{path.group(1)}"' in code, f"{name}: the web serves no {path}"
    # Nothing starts before what it talks to is healthy.
    needs = {"matcher": {"redis"}, "matcher-b": {"redis"}, "gateway": {"redis", "matcher", "matcher-b"},
             "web": {"redis", "gateway"}, "bots": {"gateway"}, "bench": {"gateway", "matcher"}}
    for name, deps in needs.items():
        assert deps <= set(services[name]["depends_on"]), name


def test_compose_stops_in_the_runners_order() -> None:
    # Compose stops a service before what it depends on: the app services' depends_on (Redis aside)
    # must be the runner's DEPENDS_ON, whose reverse order `make run` stops in.
    services = lab_services(load(COMPOSE))
    for name, deps in DEPENDS_ON.items():
        assert set(services[name].get("depends_on", {})) - INFRA == set(deps), name
    # Everything that writes to the bus stops before Redis (compose: it depends on redis, or on a
    # service that does).
    for name in DEPENDS_ON:
        reach, todo = set(), [name]
        while todo:
            for dep in services[todo.pop()].get("depends_on", {}):
                if dep not in reach:
                    reach.add(dep)
                    todo.append(dep)
        assert "redis" in reach, name
    # The runner's tiers: web and bots, then the gateway, then the matchers.
    tiers = {s.name: s.tier for s in stack_specs(env={}, only_present=False)}
    assert tiers == {"matcher": 0, "gateway": 1, "web": 2, "bots": 2}


def test_redis_keeps_an_append_only_file_with_make_runs_fsync_policy() -> None:
    cmd = load(COMPOSE)["services"]["redis"]["command"]
    assert cmd[0] == "redis-server"
    opts = dict(zip(cmd[1::2], cmd[2::2], strict=True))
    # The same default as `make run` (issue 13: an acknowledged order is on disk), and the same
    # variable to change it.
    assert opts["--appendonly"] == "yes" and opts["--appendfsync"] == DEFAULT_APPENDFSYNC
    cmd = load(COMPOSE, env={"FIXLAB_REDIS_APPENDFSYNC": "everysec"})["services"]["redis"]["command"]
    assert cmd[cmd.index("--appendfsync") + 1] == "everysec"
    assert any(v["target"] == "/data" if isinstance(v, dict) else v.endswith(":/data")
               for v in load(COMPOSE)["services"]["redis"]["volumes"])


def test_the_bench_profile_runs_the_bench_cli_as_four_instances_of_one_run() -> None:
    doc = load(COMPOSE)
    bench = doc["services"]["bench"]
    assert bench["profiles"] == ["bench"]
    assert "bench" not in lab_services(doc)
    assert bench["command"][:3] == ["python", "-m", "services.bench"]
    if importlib.util.find_spec("services.bench.__main__") is None:
        pytest.skip("services.bench has not landed: its CLI cannot check the arguments")
    from services.bench.__main__ import parser

    args = parser().parse_args(bench["command"][3:])
    assert args.instances == 4  # `--scale bench=4`
    assert args.addr == ("gateway", 9878)
    assert str(args.out).startswith("/data/bench/")
    assert service_env(bench)["FIXLAB_BENCH_RUN_ID"]  # shared by the instances: required by the CLI
    run = load(COMPOSE, env={"FIXLAB_BENCH_INSTANCES": "2", "FIXLAB_BENCH_RUN_ID": "r7"})["services"]["bench"]
    args = parser().parse_args(run["command"][3:])
    assert args.instances == 2 and args.out.name == "r7.json"


def test_every_app_service_runs_the_one_image_built_from_deploy() -> None:
    doc = load(COMPOSE, SHARDS_OVERRIDE)
    images = set()
    for name, svc in doc["services"].items():
        if name in INFRA:
            continue
        assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file(), name
        images.add((svc["image"], svc["build"]["dockerfile"], svc["build"]["target"]))
        module = svc["command"][2]
        assert module in MODULE_OF.values() or module == "services.bench", name
    assert images == {("fixlab:local", "deploy/Dockerfile", "app")}


# --------------------------------------------------------------------------- the cluster file

def test_the_cluster_file_starts_what_make_run_cluster_starts() -> None:
    doc = load(CLUSTER)
    apps = {n: s for n, s in lab_services(doc).items() if not is_redis(n)}
    specs = {s.name: s for s in stack_specs(python="python", env=cluster_defaults({}), only_present=False)}
    assert set(apps) == set(specs)  # matcher-a, matcher-b, gateway-1, gateway-2, web, bots
    for name, spec in specs.items():
        assert tuple(apps[name]["command"]) == spec.argv, name
        env = service_env(apps[name])
        # Each instance gets the runner's own variables: shard, gateway id, CompID range, FIX port.
        assert {k: env.get(k) for k in spec.env} == spec.env, name
        assert env["FIXLAB_GATEWAYS"] == cluster_defaults({})["FIXLAB_GATEWAYS"]
    # The published FIX ports are the gateways' own, and the bots are told where each gateway is.
    for k in (1, 2):
        gw = apps[f"gateway-{k}"]
        port = service_env(gw)["FIXLAB_FIX_PORT"]
        assert gw["ports"] == [f"127.0.0.1:{port}:{port}"]
    bots = service_env(apps["bots"])
    assert bots["FIXLAB_GATEWAY_HOSTS"] == "gateway-1,gateway-2"
    assert bots["FIXLAB_FIX_PORT"] == service_env(apps["gateway-1"])["FIXLAB_FIX_PORT"]


def test_the_cluster_file_runs_three_redis_nodes_joined_once_before_any_service() -> None:
    doc = load(CLUSTER)
    services = doc["services"]
    nodes = sorted(n for n in services if re.fullmatch(r"redis-\d", n))
    assert nodes == ["redis-1", "redis-2", "redis-3"]
    url = service_env(services["web"])["REDIS_URL"]
    assert url.split(",") == [f"redis://{n}:6379/0" for n in nodes]  # every node named
    for n in nodes:
        cmd = services[n]["command"]
        opts = dict(zip(cmd[1::2], cmd[2::2], strict=True))
        assert opts["--cluster-enabled"] == "yes" and opts["--appendonly"] == "yes"
        assert opts["--appendfsync"] == DEFAULT_APPENDFSYNC
        assert services[n]["networks"] == ["bus"] and not services[n].get("ports")
    create = services["redis-cluster-create"]
    assert create["restart"] == "no"
    script = create["command"][-1]
    assert "redis-cli --cluster create" in script and "--cluster-replicas 0" in script
    assert set(create["depends_on"]) == set(nodes)
    # Start order (and, reversed, the stop): create job, matchers, gateways, then web and bots.
    needs = {"matcher-a": {"redis-cluster-create"}, "matcher-b": {"redis-cluster-create"},
             "gateway-1": {"matcher-a", "matcher-b"}, "gateway-2": {"matcher-a", "matcher-b"},
             "web": {"gateway-1", "gateway-2"}, "bots": {"gateway-1", "gateway-2"}}
    for name, deps in needs.items():
        assert deps <= set(services[name]["depends_on"]), name
    assert services["matcher-a"]["depends_on"]["redis-cluster-create"] == {
        "condition": "service_completed_successfully"}
    tiers = {s.name: s.tier for s in stack_specs(env=cluster_defaults({}), only_present=False)}
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            if dep in tiers and name in tiers:
                assert tiers[dep] < tiers[name], (name, dep)
    # Each matcher and gateway checks its own health report (shared.health SERVICE INSTANCE).
    for name, key in (("matcher-a", "FIXLAB_MATCHER_SHARD"), ("matcher-b", "FIXLAB_MATCHER_SHARD"),
                      ("gateway-1", "FIXLAB_GATEWAY_ID"), ("gateway-2", "FIXLAB_GATEWAY_ID")):
        test = services[name]["healthcheck"]["test"]
        assert test[0] == "CMD-SHELL" and f"python -m shared.health {name.split('-')[0]} \"${key}\"" \
            == test[1], name
    assert doc["networks"]["bus"]["internal"] is True
    for name, svc in services.items():
        if svc.get("ports"):
            assert name in ("gateway-1", "gateway-2", "web"), name
    for name, svc in services.items():
        if not is_redis(name):
            assert (CLUSTER.parent / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file(), name
