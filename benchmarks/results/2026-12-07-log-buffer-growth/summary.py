#!/usr/bin/env python3
"""Usage: summary.py TRACE CLIENT_JSON (trace.sh's trace.txt and
bench.json; a trace may be gzipped). Prints what the HISTORY section
"The log buffer's growth" quotes.

offcpu.bt traces: the ring threads' futex waits of 20 ms or more, each
with every other stretch off the CPU of 2 ms or more that overlapped it.
holder.bt traces: the samples taken while a ring thread waited, counted
by second and by the first frames of the sampled thread's stacks.
Also the client's intervals whose longest wait was 30 ms or more."""
import collections
import gzip
import json
import re
import sys
from pathlib import Path

trace, client = Path(sys.argv[1]), Path(sys.argv[2])
report = json.loads(client.read_text())
print("client: %.0f sets/s, longest wait %.1f ms" % (
    report["ops_per_second"], report["latency"]["all"]["max_us"] / 1000))
for interval in report["intervals"]:
    if interval["max_us"] >= 30000:
        print("  interval %d (%.0f-%.0f s): longest wait %.1f ms" % (
            interval["index"], interval["start_seconds"], interval["end_seconds"],
            interval["max_us"] / 1000))
opener = gzip.open if trace.suffix == ".gz" else open
with opener(trace, "rt") as f:
    text = f.read()


def frames(lines):
    return [line.strip().split("+")[0] for line in lines if line.strip()]


if "SAMPLE " in text:
    counts = collections.Counter()
    for sample in text.split("SAMPLE ")[1:]:
        lines = sample.split("\n")
        ms, thread = lines[0].split()[:2]
        shown = [f for f in frames(lines[1:]) if "larder" in f or "alloc" in f
                 or "fault" in f or "zero" in f or "memmove" in f][:6]
        counts[(int(ms) // 1000, thread, " < ".join(shown))] += 1
    for (second, thread, stack), n in sorted(counts.items()):
        print("%4d samples at %d s, %s: %s" % (n, second, thread, stack))
else:
    stretches = []
    blocks = re.split(r"^OFF ", text, flags=re.M)[1:]
    for block in blocks:
        lines = block.split("\n")
        m = re.match(r"(\d+)\.(\d+) (\S+) (\d+) us state (\d+)", lines[0])
        end = int(m.group(1)) / 1000 + int(m.group(2)) / 1e6
        length = int(m.group(4)) / 1e6
        stretches.append((end - length, end, m.group(3), int(m.group(5)), frames(lines[1:])))
    for start, end, thread, state, stack in stretches:
        if "ring" in thread and end - start >= 0.02 and "futex_wait" in stack:
            print("%.3f-%.3f s %s waited on a futex %.1f ms; meanwhile:" % (
                start, end, thread, (end - start) * 1000))
            for other in stretches:
                # Threads idle the whole run (the accept loop) say nothing.
                if other[2] != thread and other[0] < end and other[1] > start \
                        and other[1] - other[0] < 5:
                    print("    %.3f-%.3f %s off %.1f ms, state %d, %s" % (
                        other[0], other[1], other[2], (other[1] - other[0]) * 1000,
                        other[3], " < ".join(other[4][2:5])))
