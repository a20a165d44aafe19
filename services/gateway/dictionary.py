"""The exchange's own FIX 4.4 dictionary: the installed FIX44.xml plus TrdMatchID (880) in ExecutionReport.

Stock FIX44.xml defines field 880 but does not list it in ExecutionReport (35=8), where the exchange
sends it on every Trade report (FIX 5.0 added it there). Real exchanges publish their own dictionary
for exactly this; ours is derived at run time from the installed file, never copied into the repo:

    python -m services.gateway.dictionary --out FIXLAB-FIX44.xml

The derivation is one added line; everything else stays byte for byte as QuickFIX installed it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

FILE_NAME = "FIXLAB-FIX44.xml"
TRD_MATCH_ID = 880

_ROOT = re.compile(r"""<fix\s[^>]*major=(['"])4\1[^>]*minor=(['"])4\2""")
_MESSAGE = re.compile(r"""<message\s+name=(['"])ExecutionReport\1[^>]*>""")
_FIELD_DEF = re.compile(r"""<field\s+number=(['"])880\1\s+name=(['"])TrdMatchID\2""")
_LISTED = re.compile(r"""<field\s+name=(['"])TrdMatchID\1""")
_LAST_PX = re.compile(r"""^([ \t]*)<field\s+name=(['"])LastPx\2[^>]*/>[ \t]*\r?\n""", re.MULTILINE)


class DictionaryError(ValueError):
    """The source is not a FIX 4.4 dictionary this derivation understands."""


def installed_dictionary() -> Path:
    """The FIX 4.4 dictionary the quickfix package installs."""
    return Path(sys.prefix) / "share" / "quickfix" / "FIX44.xml"


def exchange_dictionary(xml: str) -> str:
    """Return ``xml`` (a QuickFIX FIX44.xml) with TrdMatchID listed, optional, in ExecutionReport.

    A dictionary that already lists it comes back unchanged.
    """
    if not _ROOT.search(xml):
        raise DictionaryError("not a QuickFIX FIX 4.4 dictionary (no <fix major='4' minor='4'>)")
    if not _FIELD_DEF.search(xml):
        raise DictionaryError("the dictionary does not define field 880 TrdMatchID")
    head = _MESSAGE.search(xml)
    if head is None:
        raise DictionaryError("the dictionary has no ExecutionReport message")
    end = xml.find("</message>", head.end())
    if end < 0:
        raise DictionaryError("the ExecutionReport message is not closed")
    body = xml[head.end():end]
    if _LISTED.search(body):
        return xml
    anchor = _LAST_PX.search(body)
    if anchor is not None:
        # Next to LastPx/LastQty, where a reader of the file looks for the trade's fields.
        indent, quote = anchor.group(1), anchor.group(2)
        at = head.end() + anchor.end()
    else:
        line_start = xml.rfind("\n", 0, end) + 1
        indent, quote, at = xml[line_start:end] + " ", "'", line_start
    line = f"{indent}<field name={quote}TrdMatchID{quote} required={quote}N{quote} />\n"
    return xml[:at] + line + xml[at:]


def write_exchange_dictionary(dest: Path, source: Path | None = None) -> Path:
    """Derive the exchange's dictionary from ``source`` (default: the installed one) into ``dest``.

    The file is replaced atomically, and only when its content changes, so that several processes
    may derive it into the same place at once.
    """
    source = installed_dictionary() if source is None else source
    try:
        text = exchange_dictionary(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DictionaryError(f"cannot read the FIX 4.4 dictionary {source}: {exc.strerror}") from None
    try:
        if dest.read_text(encoding="utf-8") == text:
            return dest
    except OSError:
        pass
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def exchange_dictionary_file(directory: Path | None = None) -> Path:
    """The exchange's dictionary as a file in ``directory`` (default: a per-user cache folder)."""
    if directory is None:
        directory = Path(tempfile.gettempdir()) / f"fixlab-{os.getuid()}"
    return write_exchange_dictionary(directory / FILE_NAME)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.gateway.dictionary",
        description="Write the exchange's FIX 4.4 dictionary (QuickFIX's FIX44.xml with TrdMatchID 880 "
                    "in ExecutionReport). Validate what the exchange sends with it.")
    parser.add_argument("--out", required=True, help="file to write, or - for standard output")
    parser.add_argument("--source", type=Path, default=None,
                        help=f"the FIX44.xml to start from (default: {installed_dictionary()})")
    args = parser.parse_args(argv)
    try:
        if args.out == "-":
            source = args.source or installed_dictionary()
            sys.stdout.write(exchange_dictionary(source.read_text(encoding="utf-8")))
            return 0
        path = write_exchange_dictionary(Path(args.out), args.source)
    except (DictionaryError, OSError) as exc:
        print(f"dictionary: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
