"""`python -m shared.health SERVICE [INSTANCE]`, the compose healthchecks, on one Redis and on a Redis
Cluster (deploy/compose.cluster.yml checks each matcher and gateway by its own instance)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shared.health import HealthReporter
from shared.redis_cluster import LocalCluster, connect_any
from tests.gateway_stack import ROOT
from tests.helpers import eventually

pytestmark = pytest.mark.integration


def health(url: str, *args: str) -> int:
    env = {**os.environ, "REDIS_URL": url}
    return subprocess.run([sys.executable, "-m", "shared.health", *args], cwd=ROOT, env=env,
                          capture_output=True, timeout=60, check=False).returncode


def _check(url: str) -> None:
    reporter = HealthReporter(connect_any(url), "gateway", "gw2", lambda: {}, interval_s=0.5).start()
    try:
        eventually(lambda: health(url, "gateway", "gw2") == 0, timeout=20, what="gw2 reported healthy")
        assert health(url, "gateway") == 0  # any gateway
        assert health(url, "gateway", "gw1") == 1  # not this one: it never reported
        assert health(url, "matcher") == 1
    finally:
        reporter.stop()


def test_the_healthcheck_names_one_instance_on_one_redis(redis_url: str) -> None:
    _check(redis_url)


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is needed to build a cluster")
def test_the_healthcheck_works_on_a_cluster(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", masters=3) as cluster:
        _check(cluster.url)  # every node named, as compose.cluster.yml's REDIS_URL does
