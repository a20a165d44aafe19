"""Message bodies as (tag, value) lists with repeating groups nested: pure, no engine.

A body is built from strings and handed to an engine, which adds the header and trailer
(``shared.fix.initiator.set_fields`` puts one on a QuickFIX message).
"""

from __future__ import annotations

# A message body: (tag, value) in order; a repeating group is (count tag, [entry fields, ...]), the
# first field of each entry being the group's delimiter.
Fields = list[tuple[int, "str | list[Fields]"]]
