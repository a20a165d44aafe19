"""The codec bench (benchmarks/codec): its oracle, and that every adapter reads what it must.

Seed 004's pinned messages are read from ../shared/fixtures/codec/ (skipped where it is absent);
the oracle's own tests build their messages here. No test looks at a speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.codec import oracle
from benchmarks.codec.__main__ import main, probe, timed_by
from benchmarks.codec.adapters import FixLabCodec, adapters
from benchmarks.codec.report import markdown
from shared.fix.codec import encode

needs_fixtures = pytest.mark.skipif(not (oracle.FIXTURES / oracle.FILES["D"]).is_file(),
                                    reason=f"seed 004's pinned messages are not at {oracle.FIXTURES}")


def test_fixed_point_prices_are_exact() -> None:
    assert oracle.fixed5("1.08245") == 108245
    assert oracle.fixed5("0.00000") == 0 and oracle.fixed5("0") == 0 and oracle.fixed5("12.5") == 1250000
    assert oracle.price_text(108245) == "1.08245" and oracle.price_text(0) == "0.00000"
    for bad in ("1.082451", "-1.0", "1e5", "", ".", "1.2.3", "abc"):
        with pytest.raises(ValueError):
            oracle.fixed5(bad)


def test_the_field_work_hash_marks_types() -> None:
    # FNV-1a of b"i" + 8 bytes little-endian + b"\x01": worked out by hand from the definition.
    h = 0x811C9DC5
    for byte in b"i" + (7).to_bytes(8, "little") + b"\x01":
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    assert oracle.fnv1a((7,), "i") == h
    assert oracle.fnv1a((7,), "i") != oracle.fnv1a((7,), "p") != oracle.fnv1a(("7",), "s")
    assert oracle.fnv1a((1, "a"), "is") != oracle.fnv1a(("a", 1), "si")


def test_a_message_of_our_own_proves_its_values(tmp_path: Path) -> None:
    values = ("ORD1", 1, "ACORN", 2, "20260101-00:00:00.000", 5, 2, 1250000, 0)
    hashed = oracle.fnv1a(values, "sisisiipi")
    body = ("35=D\x0149=A\x0156=B\x0134=1\x0152=20260101-00:00:00.000\x0111=ORD1\x0121=1\x0155=ACORN\x0154=2"
            f"\x0160=20260101-00:00:00.000\x0138=5\x0140=2\x0144=12.5\x0159=0\x019002={hashed}\x01")
    (tmp_path / oracle.FILES["D"]).write_bytes(encode(body.encode(), b"FIX.4.2"))
    assert oracle.load("D", tmp_path).values == values
    changed = body.replace("44=12.5", "44=12.6").encode()
    (tmp_path / oracle.FILES["D"]).write_bytes(encode(changed, b"FIX.4.2"))
    with pytest.raises(ValueError, match="9002"):
        oracle.load("D", tmp_path)


@needs_fixtures
def test_the_pinned_messages_hash_to_the_seeds_values() -> None:
    for kind in oracle.FILES:
        pinned = oracle.load(kind)
        assert len(oracle.mutated(pinned)) == len(oracle.PROBES[kind])
    w = oracle.load("W").values
    assert w[2] == 20 and len(w[3]) == 20  # type: ignore[arg-type]


@needs_fixtures
def test_every_adapter_passes_every_probe() -> None:
    for adapter in adapters():
        for kind in oracle.FILES:
            assert probe(adapter, oracle.load(kind)) == [], (adapter.name, kind)


class TopOfBookOnly(FixLabCodec):
    """A lazy parse: W's first two entries read, the other 18 assumed."""

    def parse(self, p: oracle.Pinned):  # type: ignore[no-untyped-def]
        real = super().parse(p)
        if p.kind != "W":
            return real

        def lazy(raw: bytes) -> oracle.Values:
            got = real(p.raw)  # the pinned values, whatever the bytes say below the top
            top = oracle.values_of("W", raw)
            values = (*top[:3], (*top[3][:2], *got[3][2:]))  # type: ignore[index]
            if values != p.values:
                raise oracle.Mismatch("W")
            return values
        return lazy


@needs_fixtures
def test_a_parse_that_skips_deeper_levels_is_caught() -> None:
    failures = probe(TopOfBookOnly(), oracle.load("W"))
    assert any("second level" in f and "not detected" in f for f in failures)
    assert not any("symbol" in f for f in failures)  # the top of book is read


@needs_fixtures
def test_a_short_run_writes_the_tables(tmp_path: Path) -> None:
    assert main(["--samples", "200", "--warmup", "10", "--adapter", "FIX Lab", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "codec.json").read_text())
    assert {(r["message"], r["operation"]) for r in result["rows"]} == {
        (k, op) for k in "D8W" for op in ("encode", "checked parse", "parse + extract")}
    assert result["not_ranked"] == {}
    md = (tmp_path / "codec.md").read_text()
    assert "QuickFIX/Go, another machine" in md and "FIX Lab shared.fix.codec" in md
    assert (tmp_path / "codec.svg").read_text().startswith("<svg")


def test_a_merge_drops_the_runs_whose_rows_are_all_replaced() -> None:
    names = ["QuickFIX Python, typed fields", "simplefix", "FIX Lab shared.fix.codec"]
    assert timed_by({"command": "python -m benchmarks.codec --samples 2000"}, names) == names
    assert timed_by({"command": "python -m benchmarks.codec --adapter 'FIX Lab' --merge"}, names) == [
        "FIX Lab shared.fix.codec"]
    assert timed_by({"command": "python -m benchmarks.codec --adapter Quick --adapter simple"}, names) == [
        "QuickFIX Python, typed fields", "simplefix"]
    assert timed_by({"command": "python -m benchmarks.codec --probes-only"}, names) == []
    assert timed_by({"command": "anything", "timed": ["simplefix"]}, names) == ["simplefix"]


def test_the_table_says_whether_the_target_is_met() -> None:
    def row(op: str, p50: float) -> dict[str, object]:
        return {"adapter": "FIX Lab shared.fix.codec", "message": "D", "operation": op, "p50": p50,
                "p90": p50, "p99": p50, "p99.9": p50, "samples": 10, "warmup": 1}

    md = markdown({"runs": [], "adapters": {}, "rows": [row("encode", 4000), row("checked parse", 5000)]})
    assert ("D encode p50 4,000 ns against QuickFIX/Go's 11,626: met; "
            "D checked parse p50 5,000 ns against QuickFIX/Go's 3,521: not met.") in md


def test_the_target_takes_the_project_row_with_the_fastest_checked_parse() -> None:
    def row(adapter: str, op: str, p50: float) -> dict[str, object]:
        return {"adapter": adapter, "message": "D", "operation": op, "p50": p50,
                "p90": p50, "p99": p50, "p99.9": p50, "samples": 10, "warmup": 1}

    old, new = "FIX Lab shared.fix.codec", "FIX Lab shared.fix.reader"
    rows = [row(old, "encode", 2000), row(old, "checked parse", 8000), row(new, "encode", 2500),
            row(new, "checked parse", 3000), row(new, "parse + extract", 3600)]
    md = markdown({"runs": [], "adapters": {}, "rows": rows})
    assert ("D encode p50 2,500 ns against QuickFIX/Go's 11,626: met; D checked parse p50 3,000 ns against "
            "QuickFIX/Go's 3,521: met; D parse + extract p50 3,600 ns against QuickFIX/Go's 3,520: not met. "
            "Row: FIX Lab shared.fix.reader.") in md
