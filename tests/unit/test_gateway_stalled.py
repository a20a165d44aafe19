"""The stalled-reader rule (services/gateway/stalled.py): pure observations in, sockets to cut out."""

from __future__ import annotations

from services.gateway.stalled import StallTracker, parse_proc_tcp

PROC = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:2676 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1
   1: 0100007F:2676 0100007F:D431 01 00020000:00000000 01:00000014 00000000  1000        0 222 1
   2: 0100007F:2676 0100007F:D432 01 00000010:00000000 00:00000000 00000000  1000        0 333 1
   3: 0100007F:D433 0100007F:2676 01 00090000:00000000 00:00000000 00000000  1000        0 444 1
   4: 0100007F:1F90 0100007F:D434 01 00090000:00000000 00:00000000 00000000  1000        0 555 1
"""


def test_parse_keeps_established_sockets_on_the_port_only() -> None:
    # 0x2676 = 9846: the listener (0A) and the connection whose *remote* port it is are left out.
    assert parse_proc_tcp(PROC, 0x2676) == {222: (0x20000, "0100007F:54321"), 333: (0x10, "0100007F:54322")}


def test_a_socket_is_cut_after_holding_the_limit_for_the_whole_time() -> None:
    t = StallTracker(limit_bytes=1000, seconds=5)
    assert t.update(0, {1: 5000, 2: 5000}) == []
    assert t.update(3, {1: 5000, 2: 10}) == []  # 2 read something: its clock starts again
    assert t.update(4, {1: 5000, 2: 5000}) == []
    assert t.update(5, {1: 5000, 2: 5000}) == [1]
    assert t.update(9, {2: 5000}) == [2]
    assert t.since == {}


def test_a_closed_socket_is_forgotten() -> None:
    t = StallTracker(limit_bytes=1000, seconds=5)
    t.update(0, {1: 5000})
    t.update(1, {})
    assert t.update(6, {1: 5000}) == []
