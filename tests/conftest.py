"""Fixtures shared by every tier: a real Redis server, the reference folder, an output folder."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from shared.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
SHARED_REFERENCE = ROOT.parent / "shared"
TEST_OUTPUT = ROOT / "test-output"


REDIS_IMAGE = "redis:7.0"


def pytest_itemcollected(item: pytest.Item) -> None:
    """Under ``pytest -n N --dist loadgroup`` (``make test``), keep each module on one worker.

    A test with no ``xdist_group`` of its own joins its module's group, so a module-scoped stack
    starts once, not once per worker. Modules marked ``xdist_group("serial")`` (benchmarks run as
    tests, chaos, slow consumers, browsers, clusters, Docker) form one group, run one after another
    on one worker, beside the other worker's modules."""
    if getattr(item.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group") is None:
        item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test the ``@group`` suffix that ``--dist loadgroup`` schedules by.

    pytest-xdist 3.8's own hook writes it to ``item._nodeid``, which pytest 9.2 no longer reads (a
    node's id is ``item._id`` there): without this every module was split across both workers."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if "@" in item.nodeid.rpartition("]")[2]:
            continue  # an xdist whose own hook worked
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        suffixed = f"{item.nodeid}@{'_'.join(groups)}"
        if hasattr(item, "_id"):  # pytest >= 9.2
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(suffixed)
        else:
            setattr(item, "_nodeid", suffixed)  # noqa: B010 (not declared on Item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used a stack (tests/gateway_stack.py's Stack, as the ``stack`` fixture)
    carries the tail of each of that stack's process logs in its report: a module-scoped stack is
    gone by the time anyone reads the failure, and the log is what explains it."""
    report = yield
    if report.failed and call.when == "call":
        stack = getattr(item, "funcargs", {}).get("stack")
        log_dir = getattr(stack, "log_dir", None)
        if isinstance(log_dir, Path) and log_dir.is_dir():
            for log in sorted(log_dir.glob("*.log")):
                text = log.read_text(errors="replace")[-8000:]
                report.sections.append((f"stack {log.name} (last 8,000 characters)", text))
    return report


def _docker_redis_image() -> bool:
    """Whether a Docker engine runs here and already holds ``REDIS_IMAGE``.

    No registry may be reachable (these machines reach none), so an engine alone is not enough:
    testcontainers would try to pull the image and fail the whole run."""
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "image", "inspect", REDIS_IMAGE], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis for the whole run: testcontainers' Redis where a Docker engine runs with the
    image at hand, else a redis-server process of our own on a free port."""
    if _docker_redis_image():
        with warnings.catch_warnings():  # testcontainers.redis warns of its own API on import
            warnings.simplefilter("ignore", DeprecationWarning)
            from testcontainers.redis import RedisContainer

        with RedisContainer(REDIS_IMAGE) as container:
            host = container.get_container_host_ip()
            port = container.get_exposed_port(6379)
            yield f"redis://{host}:{port}/0"
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The session's Redis, emptied before each test."""
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    client.close()
    yield redis_server


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, for tests that kill or restart it."""
    server = RedisServer(tmp_path / "redis", appendonly=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_reference() -> Path:
    """../shared beside the repository (reference data); tests that need it skip without it."""
    if not SHARED_REFERENCE.is_dir():
        pytest.skip(f"reference folder {SHARED_REFERENCE} is absent (it is laid beside the repo in CI)")
    return SHARED_REFERENCE


@pytest.fixture(scope="session")
def test_output() -> Path:
    TEST_OUTPUT.mkdir(exist_ok=True)
    return TEST_OUTPUT
