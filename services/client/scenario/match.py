"""Expected fields against a received FIX message. Pure: no I/O, no clock.

A message is its fields in wire order, ``(tag, value)`` pairs (``decode``). An expectation is a list
of field specs, all of which must hold:

- ``Exact(tag, value)``: some occurrence of ``tag`` has exactly this value (``$name`` filled in);
- ``Regex(tag, pattern)``: some occurrence's whole value matches (``re.fullmatch``);
- ``Absent(tag)``: the message has no ``tag``;
- ``Capture(tag, name)``: the message has ``tag``; its first value is bound to ``name``.

"Some occurrence" because repeating groups repeat tags (the entries of a W or an X): ``270=97.00``
holds when any entry has that price. Which entry held which value is not checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SOH = b"\x01"
Fields = tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class Var:
    name: str


@dataclass(frozen=True, slots=True)
class Template:
    """A value with ``$name`` references in it, filled in from the scenario's variables."""

    parts: tuple[str | Var, ...]

    def render(self, values: Mapping[str, str]) -> str:
        return "".join(p if isinstance(p, str) else values[p.name] for p in self.parts)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts if isinstance(p, Var))

    def __str__(self) -> str:
        return "".join(p.replace("$", "$$") if isinstance(p, str) else f"${p.name}" for p in self.parts)


@dataclass(frozen=True, slots=True)
class Exact:
    tag: int
    value: Template

    def __str__(self) -> str:
        return f"{self.tag}={self.value}"


@dataclass(frozen=True, slots=True)
class Regex:
    tag: int
    pattern: str

    def __str__(self) -> str:
        return f"{self.tag}~{self.pattern}"


@dataclass(frozen=True, slots=True)
class Absent:
    tag: int

    def __str__(self) -> str:
        return f"!{self.tag}"


@dataclass(frozen=True, slots=True)
class Capture:
    tag: int
    name: str

    def __str__(self) -> str:
        return f"{self.tag}=${self.name}"


FieldSpec = Exact | Regex | Absent | Capture


def decode(raw: bytes) -> Fields:
    """The fields of one whole FIX message, in order (values as latin-1 text: FIX is bytes)."""
    out: list[tuple[int, str]] = []
    for item in raw.split(SOH):
        if not item:
            continue
        tag, sep, value = item.partition(b"=")
        if sep and tag.isdigit():
            out.append((int(tag), value.decode("latin-1")))
    return tuple(out)


def values_of(fields: Fields, tag: int) -> list[str]:
    return [v for t, v in fields if t == tag]


def check(spec: FieldSpec, fields: Fields, variables: Mapping[str, str]) -> str | None:
    """None when ``spec`` holds for the message, else why not (one short phrase)."""
    got = values_of(fields, spec.tag)
    if isinstance(spec, Absent):
        return None if not got else f"{spec.tag} should be absent, is {'|'.join(got)}"
    if not got:
        return f"{spec.tag} missing"
    if isinstance(spec, Capture):
        return None
    if isinstance(spec, Exact):
        want = spec.value.render(variables)
        if want in got:
            return None
        return f"{spec.tag}={'|'.join(got)}, expected {want}"
    if any(re.fullmatch(spec.pattern, v) for v in got):
        return None
    return f"{spec.tag}={'|'.join(got)}, expected ~{spec.pattern}"


def match(specs: Sequence[FieldSpec], fields: Fields, variables: Mapping[str, str]) -> dict[str, str] | None:
    """The variables the message binds if every spec holds, else None."""
    if any(check(spec, fields, variables) is not None for spec in specs):
        return None
    return {s.name: values_of(fields, s.tag)[0] for s in specs if isinstance(s, Capture)}


def mismatches(specs: Sequence[FieldSpec], fields: Fields, variables: Mapping[str, str]) -> list[str]:
    """Every spec that does not hold for the message, each as a short phrase."""
    return [why for spec in specs if (why := check(spec, fields, variables)) is not None]


def closeness(specs: Sequence[FieldSpec], fields: Fields, variables: Mapping[str, str]) -> int:
    """How many specs hold: the nearest miss is the one worth showing on a failure."""
    return sum(check(spec, fields, variables) is None for spec in specs)


def show(fields: Fields, skip: frozenset[int] = frozenset({8, 9, 10})) -> str:
    """A message on one line, ``35=8|49=FIXLAB|...`` (BeginString, BodyLength, CheckSum left out)."""
    return "|".join(f"{t}={v}" for t, v in fields if t not in skip)
