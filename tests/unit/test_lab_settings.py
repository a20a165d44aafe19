"""The lab's settings from the environment, and the QuickFIX settings of one lab session."""

from __future__ import annotations

import pytest
import quickfix as fix

from services.gateway.lab.session import initiator_settings, message_fields
from services.gateway.lab.settings import LabSettings, default_dictionary
from shared.config import ConfigError


def test_defaults_follow_the_reference_lab() -> None:
    s = LabSettings.from_env({})
    assert (s.heartbeat_s, s.lifetime_s, s.max_sessions) == (6, 600.0, 20)
    assert s.data_dictionary == default_dictionary()
    assert default_dictionary().endswith("FIXLAB-FIX44.xml")  # the exchange's own, not the stock one


def test_values_from_the_environment() -> None:
    s = LabSettings.from_env({"FIXLAB_LAB_HEARTBEAT_S": "2", "FIXLAB_LAB_LIFETIME_S": "30",
                              "FIXLAB_LAB_MAX_SESSIONS": "5"})
    assert (s.heartbeat_s, s.lifetime_s, s.max_sessions) == (2, 30.0, 5)


@pytest.mark.parametrize(("env", "text"), [
    ({"FIXLAB_LAB_HEARTBEAT_S": "six"}, "FIXLAB_LAB_HEARTBEAT_S='six' is not a whole number"),
    ({"FIXLAB_LAB_HEARTBEAT_S": "0"}, "below its minimum"),
    ({"FIXLAB_LAB_MAX_SESSIONS": "65"}, "above its maximum 64"),
    ({"FIXLAB_LAB_LIFETIME_S": "-1"}, "below its minimum"),
    ({"FIXLAB_FIX44_XML": "/nonexistent/FIX44.xml"}, "no FIX 4.4 data dictionary"),
])
def test_bad_values_fail_with_one_clear_line(env: dict[str, str], text: str) -> None:
    with pytest.raises(ConfigError, match=text.replace("(", r"\(").replace(")", r"\)")):
        LabSettings.from_env(env)


def test_initiator_settings_of_a_lab_session() -> None:
    settings = initiator_settings("LAB007", 12345, LabSettings.from_env({"FIXLAB_LAB_HEARTBEAT_S": "3"}))
    (sid,) = list(settings.getSessions())
    assert sid.toString() == "FIX.4.4:LAB007->FIXLAB"
    d = settings.get(sid)
    assert d.getString("ConnectionType") == "initiator"
    assert d.getString("HeartBtInt") == "3"
    assert d.getString("ResetOnLogon") == "Y"
    assert d.getString("UseDataDictionary") == "Y"
    assert d.getString("DataDictionary") == default_dictionary()
    assert not d.has("AllowUnknownMsgFields")  # strict: the exchange's dictionary lists all it sends
    assert d.getString("SocketConnectHost") == "127.0.0.1"
    assert d.getString("SocketConnectPort") == "12345"


def test_message_fields_reads_every_tag_once() -> None:
    msg = fix.Message()
    msg.getHeader().setField(35, "8")
    msg.setField(11, "a")
    msg.setField(14, "3")
    f = message_fields(msg)
    assert (f[35], f[11], f[14]) == ("8", "a", "3")
