"""Several gateways (FIXLAB_GATEWAYS): the CompID pools cut into disjoint ranges, the runner's
gateway services, and where the bots connect. Pure: no process, no Redis."""

from __future__ import annotations

import itertools

import pytest

from services.gateway.config import gateway_settings
from services.gateway.sessions import cancel_on_disconnect_sessions, load_sessions, pool_sessions
from services.stack import cluster_defaults, gateway_instances, stack_specs
from shared.compids import (
    BENCH42_COMP_IDS,
    BENCH50_COMP_IDS,
    BENCH_COMP_IDS,
    BOT_COMP_IDS,
    CLIENT42_COMP_IDS,
    CLIENT50_COMP_IDS,
    CLIENT_COMP_IDS,
    LAB42_COMP_IDS,
    LAB50_COMP_IDS,
    LAB_COMP_IDS,
    MAX_GATEWAYS,
    bot_comp_ids,
    gateway_comp_ids,
    gateway_of,
    part,
)
from shared.config import ConfigError, parse_instruments

ENV = {"REDIS_URL": "redis://127.0.0.1:1/0"}
POOLS = (CLIENT_COMP_IDS, BENCH_COMP_IDS, BOT_COMP_IDS, LAB_COMP_IDS, CLIENT42_COMP_IDS, CLIENT50_COMP_IDS,
         BENCH42_COMP_IDS, BENCH50_COMP_IDS, LAB42_COMP_IDS, LAB50_COMP_IDS)


@pytest.mark.parametrize("count", range(1, MAX_GATEWAYS + 1))
def test_the_ranges_of_every_pool_are_disjoint_contiguous_and_cover_it(count: int) -> None:
    for pool in POOLS:
        ranges = [part(pool, k, count) for k in range(1, count + 1)]
        assert list(itertools.chain(*ranges)) == list(pool)  # in order, each CompID exactly once
        assert max(map(len, ranges)) - min(map(len, ranges)) <= 1
    for comp in itertools.chain(*POOLS):
        owners = [k for k in range(1, count + 1) if comp in gateway_comp_ids(k, count)]
        assert owners == [gateway_of(comp, count)]


def test_one_gateway_accepts_every_pool_whole_as_before() -> None:
    ids = gateway_comp_ids()
    assert ids.pools() == POOLS
    assert {s.target for s in pool_sessions()} == set(itertools.chain(*POOLS))
    assert bot_comp_ids(2) == ("BOT01", "BOT02")  # the bots make run always had


def test_two_gateways_split_each_pool_in_halves() -> None:
    one, two = gateway_comp_ids(1, 2), gateway_comp_ids(2, 2)
    assert one.summary() == "CLIENT01-08, BENCH001-112, BOT01-04, LAB001-024"
    assert two.summary() == "CLIENT09-16, BENCH113-224, BOT05-08, LAB025-048"
    assert one.lab_pools() == {"4.4": LAB_COMP_IDS[:24], "4.2": LAB42_COMP_IDS[:4],
                               "5.0SP2": LAB50_COMP_IDS[:4]}
    assert gateway_of("CLIENT09", 2) == 2 and gateway_of("LAB024", 2) == 1
    assert gateway_of("ACME", 2) is None  # a user's own session: in no pool
    # The bots are dealt to the gateways in turn, so each carries quotes.
    assert bot_comp_ids(2, 2) == ("BOT01", "BOT05")
    assert bot_comp_ids(3, 2) == ("BOT01", "BOT05", "BOT02")
    assert [gateway_of(c, 8) for c in bot_comp_ids(8, 8)] == list(range(1, 9))
    with pytest.raises(ValueError):
        bot_comp_ids(9, 2)
    with pytest.raises(ValueError):
        gateway_comp_ids(1, MAX_GATEWAYS + 1)


def test_a_gateway_accepts_and_sweeps_only_its_own_range() -> None:
    specs = load_sessions(None, gateway_comp_ids(2, 2))
    targets = {s.target for s in specs}
    assert targets == set(itertools.chain(*(part(p, 2, 2) for p in POOLS)))
    # The start-up sweep ends the CancelOnDisconnect sessions: gateway 2 never ends gateway 1's.
    assert cancel_on_disconnect_sessions(specs) == targets
    assert "CLIENT01" not in targets and "LAB001" not in targets


def test_gateway_settings_read_its_index() -> None:
    s = gateway_settings({**ENV, "FIXLAB_GATEWAYS": "2", "FIXLAB_GATEWAY_INDEX": "2"})
    assert (s.gateways, s.gateway_index, s.comp_ids) == (2, 2, gateway_comp_ids(2, 2))
    assert gateway_settings(ENV).comp_ids == gateway_comp_ids()
    for bad in ({"FIXLAB_GATEWAYS": "2", "FIXLAB_GATEWAY_INDEX": "3"}, {"FIXLAB_GATEWAYS": "9"},
                {"FIXLAB_GATEWAY_INDEX": "0"}):
        with pytest.raises(ConfigError):
            gateway_settings({**ENV, **bad})


def test_the_runner_starts_one_gateway_service_per_gateway() -> None:
    assert gateway_instances({}) == [("gateway", {})]  # make run as ever
    env = {"FIXLAB_GATEWAYS": "2", "FIXLAB_FIX_PORT": "7000"}
    specs = stack_specs(python="py", env=env, only_present=False)
    gateways = [(s.name, s.env, s.tier) for s in specs if s.argv[-1] == "services.gateway"]
    assert gateways == [
        ("gateway-1", {"FIXLAB_GATEWAY_ID": "gw1", "FIXLAB_GATEWAY_INDEX": "1",
                       "FIXLAB_FIX_PORT": "7000"}, 1),
        ("gateway-2", {"FIXLAB_GATEWAY_ID": "gw2", "FIXLAB_GATEWAY_INDEX": "2", "FIXLAB_FIX_PORT": "7001",
                       "FIXLAB_FIX_SESSIONS_FILE": ""}, 1),
    ]
    assert [s.name for s in specs] == ["matcher", "gateway-1", "gateway-2", "web", "bots"]
    with pytest.raises(ConfigError):
        stack_specs(env={"FIXLAB_GATEWAYS": "2", "FIXLAB_FIX_PORT": "65535"}, only_present=False)


def test_the_cluster_run_defaults_to_two_shards_and_two_gateways() -> None:
    defaults = cluster_defaults({})
    assert defaults == {"FIXLAB_SHARDS": "ACORN.LAB:a,BIRCH.LAB:b", "FIXLAB_GATEWAYS": "2"}
    three = {"FIXLAB_INSTRUMENTS": "OAK.LAB:10.00,BIRCH.LAB:25.00,ELM.LAB:5.00"}
    shards = cluster_defaults(three)["FIXLAB_SHARDS"]
    assert shards == "OAK.LAB:a,BIRCH.LAB:b,ELM.LAB:a"
    assert {i.shard for i in parse_instruments({**three, "FIXLAB_SHARDS": shards})} == {"a", "b"}
    # What the environment says wins.
    assert cluster_defaults({"FIXLAB_SHARDS": "ACORN.LAB:x", "FIXLAB_GATEWAYS": "3"}) == {}
    names = [s.name for s in stack_specs(env=defaults, only_present=False)]
    assert names == ["matcher-a", "matcher-b", "gateway-1", "gateway-2", "web", "bots"]


def test_each_bot_connects_to_the_gateway_of_its_compid() -> None:
    import quickfix as fix

    from services.bots.config import bot_settings, session_settings

    env = {**ENV, "FIXLAB_GATEWAYS": "2", "FIXLAB_FIX_PORT": "9878", "FIXLAB_BOTS": "3",
           "FIXLAB_GATEWAY_HOSTS": "gateway-1,gateway-2"}
    s = bot_settings(env)
    assert s.comp_ids == ("BOT01", "BOT05", "BOT02")
    assert [s.address(c) for c in s.comp_ids] == [("gateway-1", 9878), ("gateway-2", 9879),
                                                  ("gateway-1", 9878)]
    settings = session_settings(s)
    for comp in s.comp_ids:
        d = settings.get(fix.SessionID("FIX.4.4", comp, "FIXLAB"))
        assert (d.getString("SocketConnectHost"), int(d.getString("SocketConnectPort"))) == s.address(comp)
    one = bot_settings({**ENV, "FIXLAB_FIX_PORT": "9878"})  # make run: both on the one gateway
    assert [one.address(c) for c in one.comp_ids] == [("127.0.0.1", 9878), ("127.0.0.1", 9878)]
    with pytest.raises(ConfigError):
        bot_settings({**env, "FIXLAB_GATEWAY_HOSTS": "a,b,c"})
