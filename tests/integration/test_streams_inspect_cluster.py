"""The stream inspector (``fixlab list/tail/show/pending``) on a real three-master Redis Cluster: streams
on every node are listed and read, whichever node or node list REDIS_URL names (issue 16)."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator

import pytest
from redis.cluster import ClusterNode, RedisCluster

from shared import streams
from shared.bus import ensure_group, publish
from shared.redis_cluster import LocalCluster, connect_any, is_cluster_url
from shared.schema import NewOrder
from shared.streams.__main__ import run

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("faults")]

if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
    pytest.skip("redis-server and redis-cli are needed to build a cluster", allow_module_level=True)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("inspect-cluster"), masters=3) as cluster:
        yield cluster


def _fill(local: LocalCluster) -> tuple[list[str], set[str]]:
    """One orders stream per shard until the streams sit on every master; returns names and node names."""
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", local.first_port)])
    names: list[str] = []
    nodes: set[str] = set()
    try:
        for i in range(64):
            name = streams.orders_stream(f"s{i}")
            publish(client, name, [NewOrder("C1", f"c{i}", "ACORN.LAB", 1, 100, 1, 0, "gw1", i, i)], 1000)
            ensure_group(client, name, streams.MATCHER_GROUP)  # type: ignore[arg-type]
            names.append(name)
            nodes.add(client.get_node_from_key(name).name)
            if len(nodes) == 3 and len(names) >= 6:
                break
    finally:
        client.close()
    return names, nodes


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return run(argv, out, err), out.getvalue(), err.getvalue()


def test_a_node_list_or_one_node_is_recognised_as_a_cluster(local: LocalCluster) -> None:
    assert is_cluster_url(local.url)
    one = f"redis://127.0.0.1:{local.nodes[1].port}/0"
    assert is_cluster_url(one)
    assert isinstance(connect_any(one), RedisCluster)


def test_list_covers_every_master(local: LocalCluster) -> None:
    names, nodes = _fill(local)
    assert len(nodes) == 3  # the streams really are spread over the three masters
    for url in (local.url, f"127.0.0.1:{local.nodes[2].port}"):
        status, out, err = _run(["--url", url, "list", "--json"])
        assert status == 0, err
        listed = {row["stream"]: row for row in json.loads(out)}
        assert set(names) <= set(listed)
        assert all(listed[n]["length"] == 1 and listed[n]["groups"][0]["name"] == streams.MATCHER_GROUP
                   for n in names)


def test_tail_show_and_pending_read_streams_on_other_nodes(local: LocalCluster) -> None:
    names, _ = _fill(local)
    url = f"redis://127.0.0.1:{local.first_port}/0"
    for name in names:
        status, out, err = _run(["--url", url, "tail", name, "-n", "1"])
        assert status == 0, err
        entry = json.loads(out)
        assert entry["messages"][0]["type"] == "NewOrder"
        status, out, err = _run(["--url", url, "show", name, entry["id"]])
        assert status == 0 and json.loads(out)["id"] == entry["id"], err
    status, out, err = _run(["--url", url, "pending", streams.MATCHER_GROUP])
    assert status == 0, err
    assert {row["stream"] for row in json.loads(out)} >= set(names)
