"""The FIX fuzzer's long run against the live acceptor (a benchmark, not a test).

    python -m benchmarks.fuzz [--inputs 100000] [--out benchmarks/results/fuzz.json]

Runs tests/fuzz/test_fix_fuzz.py (a real redis-server, matcher and gateway, a stock QuickFIX client
trading beside the fuzzer) with FIXLAB_FUZZ_INPUTS set, so the long run checks exactly what CI's
10,000 inputs check: the gateway never dies, the stock sessions stay up and trade, what the gateway
published decodes, and the books rebuilt the matcher's way are valid and agree with the client.
Writes the run's counts, its duration and the gateway's resident memory before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from shared import machine

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/fuzz/test_fix_fuzz.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fuzz.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fixlab-fuzz-") as tmp:
        report = Path(tmp) / "report.json"
        env = {**os.environ, "FIXLAB_FUZZ_INPUTS": str(args.inputs), "FIXLAB_FUZZ_REPORT": str(report)}
        argv = [sys.executable, "-m", "pytest", TEST, "-x", "-q", "-s", "-p", "no:cacheprovider"]
        proc = subprocess.run(argv, cwd=ROOT, env=env, check=False)
        if proc.returncode != 0 or not report.exists():
            print(f"the fuzz run failed (pytest exit {proc.returncode}); nothing written", file=sys.stderr)
            return 1
        result = json.loads(report.read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip()
    out = {"benchmark": "fix fuzz (Hypothesis, live acceptor)", "command": f"python -m benchmarks.fuzz "
           f"--inputs {args.inputs}", "commit": commit, **result, **machine.describe()}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
