"""Turn `pip install -v quickfix` output into a progress line per compiled C++ file.

The quickfix build prints hundreds of compiler lines; this keeps the 9-minute wait visible without
flooding the terminal. Errors are shown in full.
"""

import collections
import re
import sys
import time

TOTAL = 54  # C++ sources compiled by quickfix 1.16.0's build here (it only sizes the progress line)

start = time.monotonic()
count = 0
tail: collections.deque[str] = collections.deque(maxlen=40)
for line in sys.stdin:
    tail.append(line)
    match = re.search(r" -c (\S+\.cpp)", line)
    if match:
        count += 1
        name = match.group(1).rsplit("/", 1)[-1]
        mins, secs = divmod(int(time.monotonic() - start), 60)
        print(f"  quickfix build [{count:>3}/~{TOTAL}] {mins:02d}:{secs:02d} {name}", flush=True)
    elif ("error:" in line.lower() and "warning" not in line.lower()) or line.startswith(
        ("Successfully", "ERROR")
    ):
        print(line, end="", flush=True)
text = "".join(tail)
if "Successfully installed" not in text and "already satisfied" not in text:
    sys.stdout.write(text)
