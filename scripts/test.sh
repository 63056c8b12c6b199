#!/usr/bin/env bash
# The project's test command: run it on a fresh Debian machine (as root, or
# with sudo) from anywhere in the repository.
#
#   scripts/test.sh                  everything: deps, fmt, clippy, cargo test,
#                                    release build, black-box Python tests
#   scripts/test.sh -k wire          extra arguments go to pytest
#
# Environment:
#   LARDER_TEST_SKIP_LINT=1    skip cargo fmt --check and clippy (quick local runs)
#   LARDER_TEST_SKIP_FUZZ=1    skip the bounded fuzz run (FUZZ_SECONDS per target, default 10)
#   LARDER_TEST_SKIP_CARGO=1   skip cargo test and the release build (for work on
#                              the Python harness; needs target/release/larder or LARDER_BIN)
#   LARDER_BIN=/path/larder    binary the Python tests start (default target/release/larder)
#   PYTEST_TIMEOUT_S=900       bound on the whole Python test run
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO="$(pwd)"

PYMEMCACHE_VERSION=4.0.0
PYTEST_VERSION=9.2.0
BMEMCACHED_VERSION=0.33.0
# Prometheus' own parser of its text format, for the metrics endpoint's test.
PROMETHEUS_CLIENT_VERSION=0.21.1
APT_PACKAGES=(memcached libmemcached-tools python3-venv mariadb-server mariadb-client sysbench time valgrind strace)

STARTED=$SECONDS
section() {
    printf '\n==== %s  [+%ds]\n' "$*" "$((SECONDS - STARTED))"
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        echo "need root (or sudo) to run: $*" >&2
        return 1
    fi
}

# Installs Debian packages, quietly.
apt_install() {
    echo "installing: $*"
    as_root apt-get update -qq </dev/null
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Use-Pty=0 "$@" </dev/null >/dev/null
}

section "system packages: ${APT_PACKAGES[*]}"
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$pkg")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
else
    echo "all present"
fi
for tool in /usr/bin/memcached memccapable cargo; do
    command -v "$tool" >/dev/null 2>&1 || { echo "missing tool: $tool" >&2; exit 1; }
done

# tests/python/test_other_clients.py builds memcached clients in Go, Java and
# Node.js; the machines this runs on come with these toolchains, and Debian's
# packages stand in for any that is missing.
section "toolchains for the Go, Java and Node.js clients"
declare -A TOOL_PACKAGES=([go]=golang-go [java]=default-jdk-headless [mvn]=maven [node]=nodejs [npm]=npm)
missing=()
for tool in "${!TOOL_PACKAGES[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("${TOOL_PACKAGES[$tool]}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
fi
echo "$(go version) | $(java -version 2>&1 | head -n 1) | maven $(mvn -B -v 2>/dev/null | head -n 1 | awk '{print $3}') | node $(node --version) | npm $(npm --version)"

section "python venv (.venv): pymemcache==$PYMEMCACHE_VERSION python-binary-memcached==$BMEMCACHED_VERSION pytest==$PYTEST_VERSION prometheus-client==$PROMETHEUS_CLIENT_VERSION"
# Debian's python3 (python3-venv is installed for it); any python3 otherwise.
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
if ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
    rm -rf .venv
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check \
    "pymemcache==$PYMEMCACHE_VERSION" "python-binary-memcached==$BMEMCACHED_VERSION" \
    "pytest==$PYTEST_VERSION" "prometheus-client==$PROMETHEUS_CLIENT_VERSION" </dev/null
.venv/bin/python -c 'import pymemcache, bmemcached, pytest, prometheus_client; print("pymemcache", pymemcache.__version__, "pytest", pytest.__version__)'

if [ "${LARDER_TEST_SKIP_LINT:-0}" != 1 ]; then
    section "cargo fmt --all -- --check"
    cargo fmt --all -- --check

    section "cargo clippy --workspace --all-targets -- -D warnings"
    cargo clippy --workspace --all-targets -- -D warnings
else
    section "lint skipped (LARDER_TEST_SKIP_LINT=1)"
fi

# Whether this kernel lets a process set up an io_uring ring (a container's
# seccomp profile may refuse it). Where it does, the default (--io auto)
# serves connections on rings, and the suites that talk to the server run
# again with them on epoll (--io epoll); where it does not, the default is
# epoll already.
uring_available() {
    "$PYTHON" - <<'PY'
import ctypes, sys
params = ctypes.create_string_buffer(120)  # struct io_uring_params
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(425, 2, params)  # io_uring_setup(2, &params)
if fd < 0:
    sys.exit(1)
libc.close(fd)
PY
}
if uring_available; then
    URING=1
else
    URING=0
    echo "warning: this kernel refuses io_uring: every run serves on epoll, and none on rings" >&2
fi

if [ "${LARDER_TEST_SKIP_CARGO:-0}" != 1 ]; then
    section "cargo test --workspace"
    cargo test --workspace

    if [ "$URING" = 1 ]; then
        # The server's integration tests, named one by one: `-p larder-server`
        # would resolve the dependencies' features for that package alone and
        # build them all again (44 s), where `--workspace` reuses the build.
        server_tests=()
        for file in crates/server/tests/*.rs; do
            server_tests+=(--test "$(basename "$file" .rs)")
        done
        section "cargo test: larder-server's integration tests, connections on epoll (LARDER_TEST_IO=epoll)"
        LARDER_TEST_IO=epoll cargo test --workspace "${server_tests[@]}"
    fi

    section "cargo build --release -p larder"
    cargo build --release -p larder
else
    section "cargo test and release build skipped (LARDER_TEST_SKIP_CARGO=1)"
fi

if [ "${LARDER_TEST_SKIP_FUZZ:-0}" != 1 ]; then
    section "fuzz: every cargo-fuzz target, ${FUZZ_SECONDS:-10}s each (scripts/fuzz.sh)"
    scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
else
    section "fuzz skipped (LARDER_TEST_SKIP_FUZZ=1)"
fi

export LARDER_BIN="${LARDER_BIN:-$REPO/target/release/larder}"
[ -x "$LARDER_BIN" ] || { echo "no larder binary at $LARDER_BIN" >&2; exit 1; }

section "pytest tests/python (LARDER_BIN=$LARDER_BIN)"
# SIGINT first so that pytest runs its fixture teardown and stops the servers.
PYTHONDONTWRITEBYTECODE=1 timeout -s INT -k 30 "${PYTEST_TIMEOUT_S:-900}" \
    .venv/bin/pytest -q -rfEx -p no:cacheprovider tests/python "$@" </dev/null

if [ "$URING" = 1 ]; then
    # Without the tests that talk to memcached alone (tests/python/conftest.py).
    section "pytest: the wire, client and restart suites again, connections on epoll (LARDER_TEST_IO=epoll)"
    LARDER_TEST_IO=epoll PYTHONDONTWRITEBYTECODE=1 timeout -s INT -k 30 "${PYTEST_TIMEOUT_S:-900}" \
        .venv/bin/pytest -q -rfEx -p no:cacheprovider "$@" \
        tests/python/test_wire_compat.py tests/python/test_binary_protocol.py tests/python/test_pymemcache.py \
        tests/python/test_other_clients.py tests/python/test_unix_socket.py \
        tests/python/test_memccapable.py tests/python/test_restart.py \
        tests/python/test_crash_loop.py tests/python/test_hostile_memory.py \
        tests/python/test_open_files.py </dev/null
fi

section "all tests passed"
