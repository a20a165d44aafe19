"""Valid FIX 4.4 messages the exchange does not handle: answered with a BusinessMessageReject (380=3).

The acceptor validates with a dictionary of only the messages the exchange speaks (see
shared.fix.dictionary.acceptor_dictionary: QuickFIX copies the dictionary into every session, and the
whole of FIX 4.4 in 344 sessions took about 1 GiB). QuickFIX then refuses any other message type
before the application sees it, with a session Reject "Invalid MsgType" (373=11), where it answered a
BusinessMessageReject "Unsupported Message Type" (380=3) from fromApp when it knew the type. For a
type FIX 4.4 defines, ``as_business_reject`` turns that Reject, on its way out (toAdmin), into the
BusinessMessageReject QuickFIX builds itself (Session::generateBusinessReject), field for field. A
type FIX 4.4 does not define (35=ZZ) keeps its Reject 373=11, as before.

What differs, on purpose, for such a message (never for the messages the exchange speaks): its body
is no longer checked (a malformed QuoteRequest gets this 380=3, where it got a Reject naming the bad
field), and, as for every message QuickFIX rejects, it is answered before the sequence number,
SendingTime and CompID checks. A field FIX 4.4 defines but no kept message uses, sent in a kept
message, is now "Invalid tag number" (373=0) where it was 373=2, 5 or 6. The messages the exchange
only sends (ExecutionReport, OrderMassCancelReport, SecurityList, market data...) keep only the fields
it writes (shared.fix.dictionary.WRITTEN): a client that sends one of them with other fields gets a
session Reject naming the field where it got a BusinessMessageReject. What a client may send (D, F, G,
H, q, x, V) is kept whole and validates exactly as with the stock file.
"""

from __future__ import annotations

from collections.abc import Container

import quickfix as fix

REJECT = "3"
BUSINESS_REJECT = "j"
INVALID_MSGTYPE = "11"  # SessionRejectReason
UNSUPPORTED_MESSAGE_TYPE = "3"  # BusinessRejectReason
UNSUPPORTED_TEXT = "Unsupported Message Type"  # QuickFIX's BusinessRejectReason_UNSUPPORTED_MESSAGE_TYPE_TEXT
# Header fields a session Reject copies, reversed, from the rejected message (Message::reverseRoute);
# QuickFIX's BusinessMessageReject carries none of them.
_ROUTING = (115, 116, 128, 129, 144, 145)


def as_business_reject(message: fix.Message, fix44_types: Container[str]) -> bool:
    """Turn an outgoing "Invalid MsgType" Reject of a FIX 4.4 message type into a BusinessMessageReject.

    Return whether ``message`` was changed; any other message is left as it is.
    """
    header = message.getHeader()
    if header.getField(35) != REJECT or not message.isSetField(373) or not message.isSetField(372):
        return False
    if message.getField(373) != INVALID_MSGTYPE or message.getField(372) not in fix44_types:
        return False
    header.setField(35, BUSINESS_REJECT)
    for tag in _ROUTING:
        header.removeField(tag)
    message.removeField(373)
    message.setField(58, UNSUPPORTED_TEXT)
    message.setField(380, UNSUPPORTED_MESSAGE_TYPE)
    return True
