"""Flat ``tag=value`` fields to the nested form a QuickFIX message is built from. Pure: no I/O.

A scenario writes a repeating group as it goes on the wire: the count, then each entry's fields,
each entry starting with the group's first field (``267=2 269=0 269=1``). QuickFIX keeps one value
per tag in a message, so the fields of a group must become entries (``services.client.session``:
``(count tag, [entry fields, ...])``); QuickFIX writes the count itself, so the count given is
checked against the entries that follow it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

Nested = list[tuple[int, "str | list[Nested]"]]


class GroupShape(Protocol):
    """``shared.fix.dictionary.GroupDef``: what the nesting needs of a group's definition."""

    @property
    def delimiter(self) -> int: ...
    @property
    def fields(self) -> frozenset[int]: ...
    @property
    def groups(self) -> Mapping[int, GroupShape]: ...


class GroupError(ValueError):
    """A group whose count does not say how many entries follow."""


def nest(flat: Sequence[tuple[int, str]], groups: Mapping[int, GroupShape]) -> Nested:
    """Nest ``flat`` (a message's fields in order) by ``groups`` (its count tags' definitions)."""
    return _take(flat, 0, groups, None)[0]


def _take(flat: Sequence[tuple[int, str]], i: int, groups: Mapping[int, GroupShape],
          members: frozenset[int] | None) -> tuple[Nested, int]:
    """Fields from ``i`` while they belong here (``members``; None: everything); returns where it stopped."""
    out: Nested = []
    seen: set[int] = set()
    while i < len(flat):
        tag, value = flat[i]
        if members is not None and (tag not in members or tag in seen):
            break  # a field of the enclosing level, or the next entry's delimiter
        seen.add(tag)
        group = groups.get(tag)
        if group is None:
            out.append((tag, value))
            i += 1
            continue
        i += 1
        entries: list[Nested] = []
        while i < len(flat) and flat[i][0] == group.delimiter:
            entry, i = _take(flat, i, group.groups, group.fields)
            entries.append(entry)
        if not value.isdigit() or int(value) != len(entries):
            raise GroupError(f"{tag}={value} but {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} "
                             f"follow (each starts with {group.delimiter}=)")
        out.append((tag, entries))
    return out, i
