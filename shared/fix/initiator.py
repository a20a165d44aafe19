"""What QuickFIX initiators on this side of the exchange share: the lab's sessions (gateway) and the
terminal client (services/client).

Bodies go onto a QuickFIX message as strings (``set_fields``): the typed field API costs ~40x more per
field (see QUICKFIX.md).
"""

from __future__ import annotations

from typing import Any

import quickfix as fix

from shared.fix.message import Fields


def set_fields(target: Any, body: Fields) -> None:
    """Set ``body`` on a QuickFIX message or group, repeating groups as fix.Group entries."""
    for tag, value in body:
        if isinstance(value, str):
            target.setField(tag, value)
            continue
        for entry in value:
            first = entry[0][0]
            group = fix.Group(tag, first)
            set_fields(group, entry)
            target.addGroup(group)
