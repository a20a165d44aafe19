"""The N-shard model of benchmarks.shards_stack: part costs, capacities and the predicted rows (pure)."""

from __future__ import annotations

from benchmarks.shards_stack import capacities, model_rows, part_costs


def test_part_costs_sum_each_parts_processes() -> None:
    us = {"matcher-a": 20.0, "matcher-b": 22.0, "gateway-1": 60.0, "gateway-2": 62.0,
          "gateway-1 publisher": 10.0, "gateway-2 publisher": 11.0, "redis-server": 15.0,
          "redis-server 1": 5.0, "bench": 100.0, "web": 3.0, "run": 0.1}
    assert part_costs(us) == {"matcher": 42.0, "gateway": 122.0, "publisher": 21.0, "redis": 20.0}
    assert part_costs({"gateway": 100.0, "gateway publisher": 25.0, "matcher": 40.0}) == {
        "gateway": 100.0, "publisher": 25.0, "matcher": 40.0}


def test_capacity_is_one_core_over_the_cost_and_a_gateway_is_its_slower_process() -> None:
    cap = capacities({"matcher": 40.0, "gateway": 100.0, "publisher": 25.0, "redis": 20.0})
    assert cap == {"matcher": 25_000.0, "gateway": 10_000.0, "redis": 50_000.0}
    assert capacities({"gateway": 10.0, "publisher": 50.0})["gateway"] == 20_000.0


def test_model_rows_take_the_smallest_cap_and_name_it() -> None:
    rows = model_rows(matcher=25_000, gateway=10_000, redis=50_000, cluster_node=40_000,
                      shard_counts=(1, 2, 4, 8), gateways=2, nodes=3)
    assert [r["shards"] for r in rows] == [1, 2, 4, 8]
    one = rows[0]
    caps = (one["matchers"], one["gateways"], one["redis"], one["cluster"])
    assert caps == (25_000, 20_000, 50_000, 120_000)
    assert (one["one_redis_orders_per_s"], one["one_redis_limit"]) == (20_000, "gateways")
    assert [r["scaled_cluster_gateways"] for r in rows] == [3, 5, 10, 12]
    assert [(r["scaled_one_redis_orders_per_s"], r["scaled_one_redis_limit"]) for r in rows] == [
        (25_000, "matchers"), (50_000, "matchers"), (50_000, "redis"), (50_000, "redis")]
    # More gateways than two never come in this model: two gateways cap every N.
    assert {r["cluster_orders_per_s"] for r in rows} == {20_000}
    fast_gateways = model_rows(25_000, 100_000, 50_000, 40_000, (1, 2, 4, 8), 2, 3)
    assert [(r["one_redis_orders_per_s"], r["one_redis_limit"]) for r in fast_gateways] == [
        (25_000, "matchers"), (50_000, "matchers"), (50_000, "redis"), (50_000, "redis")]
    assert [(r["cluster_orders_per_s"], r["cluster_limit"]) for r in fast_gateways] == [
        (25_000, "matchers"), (50_000, "matchers"), (100_000, "matchers"), (120_000, "cluster")]
