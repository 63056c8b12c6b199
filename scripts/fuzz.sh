#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time, starting from the seed
# corpus checked in under fuzz/corpus/<target>. A crash fails the script and
# leaves the input under fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh              10 seconds per target (the test command's run)
#   scripts/fuzz.sh 3600         the long run
#
# cargo-fuzz needs a nightly toolchain (for the sanitizer flags); without one
# the script says so and exits 0. It installs cargo-fuzz itself if missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SECONDS_PER_TARGET=${1:-10}
CARGO_FUZZ_VERSION=0.13.2
TARGETS=(protocol_parse binary_parse record_decode recovery)

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz: skipped: no nightly toolchain here (cargo-fuzz needs one)"
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
    # Unoptimised: it only drives cargo and the fuzzer, and builds in 31 s
    # instead of 50.
    cargo install --quiet --locked --debug cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
for target in "${TARGETS[@]}"; do
    # Work on a copy so a run never rewrites the checked-in seeds.
    work=$(mktemp -d)
    cp "fuzz/corpus/$target"/* "$work"/
    echo "fuzz: $target for ${SECONDS_PER_TARGET}s"
    log="$work.log"
    status=0
    cargo +nightly fuzz run --fuzz-dir fuzz "$target" "$work" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E "^stat::(number_of_executed_units|peak_rss_mb)" "$log" || true
    rm -rf "$work"
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$log"
        echo "fuzz: $target FAILED (exit $status); the input is under fuzz/artifacts/$target/"
        exit 1
    fi
    rm -f "$log"
done
echo "fuzz: all targets ran clean"
