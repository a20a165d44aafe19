"""The certification report: Markdown for people, JSON for tools. Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from services.client.certify.run import FAIL, PASS, SKIP, Outcome

MARK = {PASS: "PASS", FAIL: "FAIL", SKIP: "skip"}


def summary(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {s: sum(o.status == s for o in outcomes) for s in (PASS, FAIL, SKIP)}


def as_json(meta: dict[str, Any], outcomes: Sequence[Outcome]) -> str:
    return json.dumps({**meta, "summary": summary(outcomes), "checks": [asdict(o) for o in outcomes]},
                      indent=2) + "\n"


def as_markdown(meta: dict[str, Any], outcomes: Sequence[Outcome]) -> str:
    s = summary(outcomes)
    out = [f"# FIX certification of {meta['comp_id']}", "",
           f"Script `{meta['script']}`, started {meta['started']}, {meta['seconds']:.1f} s. "
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
