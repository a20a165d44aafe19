"""The certification report: Markdown and a page (HTML) for people, JSON for tools. Pure."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from services.client.certify.run import FAIL, PASS, SKIP, Outcome

MARK = {PASS: "PASS", FAIL: "FAIL", SKIP: "skip"}


def version_text(meta: dict[str, Any]) -> str:
    """The run's FIX version as the report says it: ``FIX 5.0SP2 (FIXT.1.1)``."""
    name, begin = meta.get("fix_version", "4.4"), meta.get("begin_string", "FIX.4.4")
    return f"FIX {name} ({begin})"


def summary(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {s: sum(o.status == s for o in outcomes) for s in (PASS, FAIL, SKIP)}


def as_json(meta: dict[str, Any], outcomes: Sequence[Outcome]) -> str:
    return json.dumps({**meta, "summary": summary(outcomes), "checks": [asdict(o) for o in outcomes]},
                      indent=2) + "\n"


def as_markdown(meta: dict[str, Any], outcomes: Sequence[Outcome]) -> str:
    s = summary(outcomes)
    out = [f"# FIX certification of {meta['comp_id']}", "",
           f"{version_text(meta)}, script `{meta['script']}`, started {meta['started']}, "
           f"{meta['seconds']:.1f} s. "
           f"**{s[PASS]} passed, {s[FAIL]} failed, {s[SKIP]} skipped.**", "",
           "| result | check | what |", "| --- | --- | --- |"]
    out += [f"| {MARK[o.status]} | `{o.name}` | {o.title}"
            f"{' (' + o.lines[0] + ')' if o.status == SKIP and o.lines else ''} |" for o in outcomes]
    for o in outcomes:
        if o.status != FAIL:
            continue
        out += ["", f"## FAIL `{o.name}`: {o.title}", "", f"At {o.where}: `{o.step}`", "", "```",
                *o.lines, "```", "", "The check's wire (`client ->` what the client sent, `exchange <-` "
                "what the exchange sent):", "", "```", *(o.wire or ["(no message)"]), "```"]
    return "\n".join(out) + "\n"


_STYLE = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}"
    "table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}"
    ".pass{color:#17631b;font-weight:600}.fail{color:#b3261e;font-weight:600}.skip{color:#777}"
    "pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap}code{font-size:13px}")
WIRE_KEY = ("<p>The check's wire (<code>client -&gt;</code> what the client sent, "
            "<code>exchange &lt;-</code> what the exchange sent):</p>")


def _row(o: Outcome) -> str:
    e = html.escape
    why = f"<br><small>{e(o.lines[0])}</small>" if o.status == SKIP and o.lines else ""
    return (f"<tr><td class='{o.status}'>{MARK[o.status]}</td>"
            f"<td><a href='#{e(o.name)}'><code>{e(o.name)}</code></a></td><td>{e(o.title)}{why}</td></tr>")


def _failure(o: Outcome) -> str:
    e = html.escape
    return (f"<section id='{e(o.name)}'><h2 class='fail'>FAIL <code>{e(o.name)}</code></h2>"
            f"<p>{e(o.title)}</p>"
            f"<p>At {e(o.where)}: <code>{e(o.step)}</code></p><pre>{e(chr(10).join(o.lines))}</pre>"
            f"{WIRE_KEY}<pre>{e(chr(10).join(o.wire) or '(no message)')}</pre></section>")


def as_html(meta: dict[str, Any], outcomes: Sequence[Outcome]) -> str:
    """The report as one self-contained page: every check, then each failure with its wire."""
    s = summary(outcomes)
    e = html.escape
    rows = "".join(_row(o) for o in outcomes)
    failures = "".join(_failure(o) for o in outcomes if o.status == FAIL)
    title = f"FIX certification of {meta['comp_id']}"
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{e(title)}</h1>"
            f"<p>{e(version_text(meta))}, script <code>{e(str(meta['script']))}</code>, "
            f"started {e(str(meta['started']))}, "
            f"{float(meta['seconds']):.1f} s. <strong>{s[PASS]} passed, {s[FAIL]} failed, {s[SKIP]} skipped."
            f"</strong></p><table><tr><th>result</th><th>check</th><th>what</th></tr>{rows}</table>"
            f"{failures}</body></html>\n")
