"""Read chosen fields of a whole FIX message: one regular-expression pass, converted values out.

``field_reader(((11, TEXT), (38, INT), (44, PRICE)))`` compiles, once, a reader for those fields:
called with a message's bytes it checks every field of it (ASCII, ``<digits>=<value><SOH>`` each, as
``codec.split_fields`` does, stricter in that no piece may be empty and the last ends with SOH),
finds the chosen tags in any order (a repeated tag keeps its last value, like ``split_fields``) and
converts them: TEXT as str, INT by ``int()``, PRICE to a fixed-point int at ``scale`` decimals
("1.08245" -> 108245 at scale 5; exact, no float), DIGIT (a FIX char field such as Side or OrdType
holding one ASCII digit) to that digit by a ten-entry table. A repeating group (``group=(268,
((269, DIGIT), (270, PRICE), (271, INT)))``) comes back as a tuple of entries after the other
values; its entries follow their count tag, each with the group's fields in that order, and there
must be as many as the count says. Whatever does not hold raises MalformedMessage naming the field.

Why not ``split_fields`` and a dict (measured on seed 004's messages, CPython 3.11, instructions
counted by cachegrind): on the NewOrderSingle, a dict of every tag costs ~12,000 instructions and the
split ~5,000-10,000 before a value is read, while the one ``fullmatch`` here checks the whole message
and hands back the chosen values for ~12,000-15,000, building nothing for the fields not asked for.
int() costs ~1,300 instructions a call (no vectorcall in 3.11), a table lookup ~100: hence DIGIT.
The conversions are generated as straight-line code, as ``collections.namedtuple`` generates its
class. The bench's checked parse: NewOrderSingle 26,000 instructions (split_fields and a dict:
62,000), ExecutionReport 31,000 (73,000), ten-level MarketDataSnapshot 188,000 (335,000).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from shared.fix.codec import MalformedMessage

TEXT = "s"
INT = "i"
PRICE = "p"
DIGIT = "d"  # a FIX char field holding one ASCII digit (Side, OrdType...), read as its int
KINDS = (TEXT, INT, PRICE, DIGIT)
_DIGITS = {str(d): d for d in range(10)}

Field = tuple[int, str]  # (tag, kind)
Reader = Callable[[bytes], tuple[object, ...]]

_OTHER = "[0-9]++=[^\x01]*+\x01"  # any other field: checked, not kept


def fixed_point(text: str, scale: int = 5) -> int:
    """A decimal price as an int at ``scale`` decimals ("1.08245" -> 108245 at 5); exact, no float."""
    whole, _, frac = text.partition(".")
    if not whole.isdigit() or len(frac) > scale or (frac and not frac.isdigit()):
        raise ValueError(f"not a price with at most {scale} decimals: {text!r}")
    return int(whole + frac) * 10 ** (scale - len(frac))


def _convert(kind: str, text: str | None, scale: int) -> object:
    if text is None:
        raise ValueError("missing")
    if kind == INT:
        return int(text)
    if kind == PRICE:
        return fixed_point(text, scale)
    if kind == DIGIT:
        return _DIGITS[text]
    return text


def _check_spec(fields: Sequence[Field]) -> None:
    tags = [tag for tag, _ in fields]
    if len(set(tags)) != len(tags):
        raise ValueError(f"a tag is asked for twice: {tags}")
    for tag, kind in fields:
        if kind not in KINDS or not isinstance(tag, int) or tag < 1:
            raise ValueError(f"not a (tag, kind) with kind in {KINDS}: {(tag, kind)!r}")


def field_reader(fields: Sequence[Field], group: tuple[int, Sequence[Field]] | None = None,
                 scale: int = 5) -> Reader:
    """Compile a reader of ``fields`` (and of one repeating group) for whole FIX messages as bytes.

    The reader returns the converted values in the order of ``fields``, then, with ``group``, the
    group's entries as a tuple of tuples; ``group``'s count tag must be one of ``fields`` (an INT).
    """
    _check_spec(fields)
    count_tag = None
    entry: Sequence[Field] = ()
    if group is not None:
        count_tag, entry = group
        _check_spec(entry)
        if (count_tag, INT) not in fields or not entry:
            raise ValueError(f"group count tag {count_tag} must be one of the fields, as an INT")
        if {t for t, _ in entry} & {t for t, _ in fields}:
            raise ValueError("a group's field is also asked for outside it")
    # The chosen tags as a digit tree: at each character the fields that cannot be chosen any more
    # leave for the "any other field" branch, and sre skips a branch whose first character differs
    # without entering it (measured: 7% fewer instructions in the match than one branch per tag).
    tree: dict[str, Any] = {}  # digit -> subtree; "" -> the tag that ends there
    for tag, _ in fields:
        node = tree
        for char in str(tag):
            node = node.setdefault(char, {})
        node[""] = tag
    order: list[int] = []  # the tags in the order their values are captured

    def branch(node: dict[str, Any], root: bool) -> str:
        alts = []
        if "" in node:
            tag = node[""]
            order.append(tag)
            alt = "=([^\x01]*+)\x01"
            if tag == count_tag:
                # The entries right after their count, each field in the group's order, as one string.
                alt += f"((?:{_entry(entry, scale, capture=False)})*+)"
            alts.append(alt)
        alts += [char + branch(child, False) for char, child in sorted(node.items()) if char]
        alts.append(_OTHER if root else _OTHER.replace("++", "*+", 1))
        return f"(?:{'|'.join(alts)})"

    pattern = re.compile(branch(tree, True) + "*+")
    position = {tag: i for i, (tag, _) in enumerate(fields)}
    captured = [position[tag] for tag in order]
    entry_pattern = re.compile(_entry(entry, scale, capture=True)) if entry else None
    return _generate(fields, entry, count_tag, pattern, entry_pattern, scale, captured)


def _entry(entry: Sequence[Field], scale: int, capture: bool) -> str:
    """One group entry's fields in order. A price is checked by the pattern itself (whole digits, then
    up to ``scale`` decimals): a malformed one ends the entries early, which the count then catches."""
    o = "(" if capture else "(?:"
    return "".join(f"{tag}={o}[0-9]++)(?:\\.{o}[0-9]{{0,{scale}}}+))?+\x01" if kind == PRICE
                   else f"{tag}={o}[^\x01]*+)\x01" for tag, kind in entry)


def _generate(fields: Sequence[Field], entry: Sequence[Field], count_tag: int | None,
              pattern: re.Pattern[str], entry_pattern: re.Pattern[str] | None, scale: int,
              captured: list[int]) -> Reader:
    """The reader as straight-line code: one local per value, each converted where it is used.

    ``captured``: the index in ``fields`` of each value ``pattern`` captures, in capture order.
    """
    names = [f"v{i}" for i in range(len(fields))]
    unpack = []
    for i in captured:
        unpack.append(names[i])
        if fields[i][0] == count_tag:
            unpack.append("block")
    lines = [
        "def read(raw):",
        # decode() then isascii() (a flag on a str) costs less than decode('ascii').
        "    try:",
        "        text = raw.decode()",
        "    except UnicodeDecodeError:",
        "        raise MalformedMessage('a FIX message is ASCII text') from None",
        "    if not text.isascii():",
        "        raise MalformedMessage('a FIX message is ASCII text')",
        "    m = fullmatch(text)",
        "    if m is None:",
        "        raise MalformedMessage(bad_piece(text))",
        f"    {', '.join(unpack)}, = m.groups()",
        "    try:",
    ]
    out = []
    for i, (_, kind) in enumerate(fields):
        v = names[i]
        if kind == TEXT:
            lines.append(f"        if {v} is None: raise ValueError")
            out.append(v)
        elif kind == INT:
            out.append(f"int({v})")
        elif kind == DIGIT:
            out.append(f"DIGITS[{v}]")
        else:
            # fixed_point, inlined (a call would cost more than the conversion): whole and fraction
            # digits checked at once; more than ``scale`` decimals index past SCALE (IndexError).
            lines += [f"        w{i}, _, f{i} = {v}.partition('.')",
                      f"        d{i} = w{i} + f{i}",
                      f"        if not w{i} or not d{i}.isdigit(): raise ValueError"]
            out.append(f"int(d{i}) * SCALE[len(f{i})]")
    if count_tag is None:
        lines.append(f"        return ({', '.join(out)},)")
    else:
        at = [t for t, _ in fields].index(count_tag)
        lines.append(f"        head = ({', '.join(out)},)")
        item = []
        unpack = []
        for j, (_, kind) in enumerate(entry):
            if kind == PRICE:
                unpack += [f"w{j}", f"f{j}"]
                item.append(f"int(w{j} + f{j}) * SCALE[len(f{j})]")
            else:
                unpack.append(f"e{j}")
                item.append(f"int(e{j})" if kind == INT else f"DIGITS[e{j}]" if kind == DIGIT else f"e{j}")
        lines += [f"        entries = tuple([({', '.join(item)},) "
                  f"for {', '.join(unpack)}, in findall(block)])",
                  f"        if len(entries) != head[{at}]: raise ValueError",
                  "        return (*head, entries)"]
    lines += ["    except (TypeError, AttributeError, ValueError, IndexError, KeyError):",
              f"        raise MalformedMessage(explain(({', '.join(names)},), "
              f"{'block' if count_tag is not None else 'None'})) from None"]

    def explain(values: tuple[str | None, ...], block: str | None) -> str:
        """Which field the generated code could not convert (the error path only)."""
        for (tag, kind), text in zip(fields, values, strict=False):
            try:
                _convert(kind, text, scale)
            except (TypeError, ValueError, KeyError):
                return f"tag {tag}: {'missing' if text is None else f'not a {_NAMES[kind]}: {text!r}'}"
        if count_tag is None or entry_pattern is None:
            return "unreadable"
        found = entry_pattern.findall(block or "")
        for n, captured in enumerate(found, 1):
            texts = iter(captured)
            for tag, kind in entry:
                text = next(texts)
                if kind == PRICE:
                    text += "." + next(texts)
                try:
                    _convert(kind, text, scale)
                except (TypeError, ValueError, KeyError):
                    return f"tag {tag} of entry {n}: not a {_NAMES[kind]}: {text!r}"
        count = values[[t for t, _ in fields].index(count_tag)]
        return (f"tag {count_tag}: {count} entries, but {len(found)} follow it "
                f"as {'/'.join(str(t) for t, _ in entry)}")

    namespace = {"fullmatch": pattern.fullmatch, "findall": entry_pattern.findall if entry_pattern else None,
                 "MalformedMessage": MalformedMessage, "bad_piece": _bad_piece, "explain": explain,
                 "SCALE": tuple(10 ** (scale - n) for n in range(scale + 1)), "DIGITS": _DIGITS}
    # Code built above from ints and fixed names only, as collections.namedtuple builds its class.
    exec("\n".join(lines), namespace)
    read: Reader = namespace["read"]  # type: ignore[assignment]
    read.__doc__ = f"Read tags {[t for t, _ in fields]} of a whole FIX message (shared.fix.reader)."
    return read


_NAMES = {TEXT: "text", INT: "whole number", PRICE: "price", DIGIT: "single digit"}
_FIELD = re.compile("[0-9]+=[^\x01]*\x01")


def _bad_piece(text: str) -> str:
    """Why ``text`` is not a run of ``<digits>=<value><SOH>`` fields (the error path only)."""
    pos = 0
    for m in _FIELD.finditer(text):
        if m.start() != pos:
            break
        pos = m.end()
    if pos == len(text):
        return "unreadable"
    piece = text[pos:].split("\x01", 1)[0]
    if pos + len(piece) == len(text):
        return f"the last field does not end with SOH: {piece[:40]!r}"
    return f"not a tag=value field: {piece[:40]!r}"
