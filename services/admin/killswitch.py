"""``fixlab admin kill|unkill|killed``: the kill switch (the gateways act on it: gateway/killswitch.py)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from services.admin.bus import from_each, live_instances, send
from shared import streams
from shared.operator import sign

OPS = ("kill", "unkill")
COMP_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,32}")


def _comp_id(text: str) -> str:
    if not COMP_ID_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a CompID: {text!r}")
    return text


def register(sub: Any) -> None:
    for op, what in (("kill", "cancel every open order of COMPID and refuse its new orders until unkill"),
                     ("unkill", "let COMPID trade again")):
        p = sub.add_parser(op, help=what, description=what)
        p.add_argument("comp_id", metavar="COMPID", type=_comp_id)
        p.set_defaults(run=run_op, op=op)
    p = sub.add_parser("killed", help="the CompIDs killed now", description="the CompIDs killed now")
    p.set_defaults(run=run_killed)


def run_op(args: argparse.Namespace, ctx: Any) -> int:
    gateways = live_instances(ctx.r, "gateway")
    if not gateways:
        ctx.out.write("no gateway is running: nothing was done\n")
        return 1
    cmd = sign(ctx.token, args.op, args.comp_id)
    answers = send(ctx.r, cmd, enough=from_each(gateways), deadline_s=ctx.deadline_s)
    for a in answers:
        ctx.out.write(f"{a.source}: {'ok' if a.ok else 'refused'}: {a.text}\n")
    silent = sorted(set(gateways) - {a.source.split(' ', 1)[-1] for a in answers if not a.more})
    for name in silent:
        ctx.out.write(f"gateway {name}: no (final) answer in {ctx.deadline_s:g} s\n")
    if silent or any(not a.ok for a in answers):
        return 1
    return 0


def run_killed(args: argparse.Namespace, ctx: Any) -> int:
    killed = sorted(m.decode() for m in ctx.r.smembers(streams.KILLED_KEY))
    ctx.out.write("".join(f"{c}\n" for c in killed) or "none\n")
    return 0
