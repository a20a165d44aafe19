"""An outgoing "Invalid MsgType" Reject of a FIX 4.4 message type becomes QuickFIX's own
BusinessMessageReject (services/gateway/unsupported.py); anything else is left alone."""

from __future__ import annotations

import quickfix as fix

from services.gateway.unsupported import as_business_reject

FIX44 = frozenset({"AF", "R", "H", "D"})
HEAD = "8=FIX.4.4\x019=0\x0135=3\x0134=7\x0149=FIXLAB\x0152=20240102-10:00:00.000\x0156=C1\x01"


def wire(message: fix.Message) -> str:
    return message.toString().replace("\x01", "|")


def test_invalid_msgtype_of_a_fix44_type_becomes_the_engines_business_reject() -> None:
    m = fix.Message(HEAD + "128=B\x0145=5\x0158=Invalid MsgType\x01372=AF\x01373=11\x0110=000\x01", False)
    assert as_business_reject(m, FIX44)
    # As Session::generateBusinessReject writes it (conformance 2r_UnregisteredMsgType): no routing back.
    assert wire(m).startswith("8=FIX.4.4|9=97|35=j|34=7|49=FIXLAB|52=20240102-10:00:00.000|56=C1|"
                              "45=5|58=Unsupported Message Type|372=AF|380=3|10=")


def test_other_rejects_are_left_alone() -> None:
    for body in ("45=5\x0158=Invalid MsgType\x01372=ZZ\x01373=11\x01",  # not FIX 4.4: stays 373=11
                 "45=5\x0158=Value is incorrect (out of range) for this tag\x01371=54\x01372=D\x01373=5\x01",
                 "45=5\x0158=Invalid tag number\x01371=999\x01373=0\x01"):
        m = fix.Message(HEAD + body + "10=000\x01", False)
        before = wire(m)
        assert not as_business_reject(m, FIX44)
        assert wire(m) == before
    heartbeat = fix.Message(HEAD.replace("35=3", "35=0") + "10=000\x01", False)
    assert not as_business_reject(heartbeat, FIX44)
