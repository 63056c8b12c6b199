#!/usr/bin/env bash
# Alternating runs of two `larder bench` builds against one Larder
# (`-t 2`, everysec) on a Unix domain socket, preloaded with 1M keys of 30
# bytes: gets only, T threads x C connections, D each (+500 ms warm-up).
# Prints each run's rate, p50 and p99 (µs), the client's user and system
# CPU per request (/usr/bin/time) and the server's CPU per request
# (/proc/PID/stat).
#
# Usage: ab.sh OLD_BINARY NEW_BINARY   (T [100], C [1], D [5s], PAIRS [5])
# The server is NEW_BINARY's.
set -euo pipefail
OLD=$1; NEW=$2
PAIRS=${PAIRS:-5}; T=${T:-100}; C=${C:-1}; D=${D:-5s}
WORK=$(mktemp -d); SOCK=$WORK/larder.sock
"$NEW" serve --data-dir "$WORK/data" -s "$SOCK" -t 2 -m 2048 -c 4096 --durability everysec \
    > "$WORK/log" 2>&1 &
PID=$!
trap 'kill "$PID"; wait "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
"$NEW" bench -s "$SOCK" -t 2 -c 4 -k 1000000 -v 30 --ratio 0:1 -n 1 --preload -q > /dev/null
one() { # LABEL BINARY
    local before after
    before=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    /usr/bin/time -f "%U %S" -o "$WORK/time" "$2" bench -s "$SOCK" -t "$T" -c "$C" \
        -k 1000000 --ratio 1:0 -d "$D" --warmup 500ms --json -q > "$WORK/out.json"
    after=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    python3 - "$1" "$WORK/out.json" "$WORK/time" "$before" "$after" <<'PY'
import json, sys
label, out, times, before, after = sys.argv[1:]
report = json.load(open(out))
user, system = map(float, open(times).read().split()[-2:])
n = report["requests"]
latency = report["latency"]["all"]
print(f"{label} ops/s {report['ops_per_second']:9.0f} p50 {latency['p50_us']:7.0f} "
      f"p99 {latency['p99_us']:7.0f} client us/req user {user * 1e6 / n:.2f} "
      f"sys {system * 1e6 / n:.2f} server us/req {(int(after) - int(before)) * 1e4 / n:.2f}")
PY
}
for _ in $(seq "$PAIRS"); do one old "$OLD"; one new "$NEW"; done
