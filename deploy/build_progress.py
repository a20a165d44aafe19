"""Turn `pip install -v quickfix` output into a progress line per compiled C++ file.

The quickfix build prints hundreds of compiler lines; this keeps the 9-minute wait visible without
flooding the terminal. Errors are shown in full.
"""

import re
import sys
import time

TOTAL = 93  # C++ sources in quickfix 1.16.0's build (approximate: it only sizes the bar)

start = time.monotonic()
count = 0
tail: list[str] = []
for line in sys.stdin:
    tail = (tail + [line])[-40:]
    match = re.search(r" -c (\S+\.cpp)", line)
    if match:
        count += 1
        name = match.group(1).rsplit("/", 1)[-1]
        mins, secs = divmod(int(time.monotonic() - start), 60)
        print(f"  quickfix build [{count:>3}/~{TOTAL}] {mins:02d}:{secs:02d} {name}", flush=True)
    elif "error:" in line.lower() and "warning" not in line.lower():
        print(line, end="", flush=True)
    elif line.startswith(("Successfully", "ERROR")):
        print(line, end="", flush=True)
if "Successfully installed" not in "".join(tail) and "already satisfied" not in "".join(tail):
    sys.stdout.write("".join(tail))
