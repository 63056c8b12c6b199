#!/usr/bin/env bash
# Larder against "MySQL as a key-value store": MariaDB (InnoDB, and MEMORY in
# experiment B) read by primary key, next to Larder and memcached read by key,
# in one run on this machine.
#
#   Experiment A: two tables (users, orders) of ROWS_A rows each, every row
#     about 100 bytes as comma-delimited text. Larder and memcached hold each
#     row as one value under "users:<id>" / "orders:<id>"; MariaDB holds them
#     as real columns. THREADS_A client threads read random rows (table and
#     id uniform) for DURATION seconds; RUNS runs, median reported.
#   Experiment B: one table (id bigint primary key, value1 int, value2
#     double) of ROWS_B rows; Larder and memcached hold key = id, value =
#     "value1,value2". THREADS_B client threads read the ids of a file of
#     IDS_B random ids ROUNDS times over (each id read ROUNDS times in all).
#     Rows read per second for Larder, memcached, MariaDB InnoDB and MariaDB
#     MEMORY. Target: Larder >= 5x MariaDB InnoDB.
#
# Clients: Larder and memcached are read with `larder bench` (memcached text
# protocol, one get per row, one request in flight per connection); MariaDB
# with sysbench and benchmarks/sysbench/kv_point_select.lua (one prepared
# primary-key SELECT per row, one connection per thread). The clients differ;
# the number of client threads and connections is the same (see
# KV_CLIENT_THREADS_*), and each run records the CPU time of client and
# server so the cost of the client can be seen.
#
# Usage: benchmarks/sql_experiments.sh          (full size, for a quiet machine)
#        SMOKE=1 benchmarks/sql_experiments.sh  (tiny sizes, about a minute)
#
# Settings (environment variables, defaults in brackets; SMOKE=1 changes the
# defaults marked *, an explicit value always wins):
#   SMOKE [0]                 1: tiny sizes, results in a temporary directory
#   EXPERIMENTS ["A B"]       which experiments to run
#   SERVERS_A ["larder memcached mariadb-innodb"]
#   SERVERS_B ["larder memcached mariadb-innodb mariadb-memory"]
#   ROWS_A [2000000]*         rows in each of the two tables
#   KEYS_A [2 x ROWS_A]*      random keys in larder bench's key file for A
#   THREADS_A [32]            client threads (= connections)
#   DURATION [20]*            seconds measured per run of A
#   WARMUP [5]*               seconds of reads before each measured run of A
#   RUNS [3]*                 runs of A per server; the report shows the median
#   ROWS_B [1000000]*         rows in the table of B
#   IDS_B [ROWS_B]*           ids in B's id file (drawn uniformly, with repeats)
#   THREADS_B [100]           client threads (= connections)
#   ROUNDS [10]*              passes over B's id file per run
#   RUNS_B [1]                runs of B per server (each of ROUNDS passes)
#   KV_CLIENT_THREADS_A [THREADS_A], KV_CLIENT_THREADS_B [THREADS_B]
#                             larder bench worker threads; the connections
#                             (THREADS_*) are spread over them, so it must
#                             divide THREADS_*. The default gives one thread
#                             per connection, as sysbench has.
#   TRANSPORT [tcp]           tcp: every client connects over TCP to
#                             127.0.0.1; unix: over each server's Unix
#                             domain socket (larder -s, memcached -s,
#                             sysbench --mysql-socket), the cheaper way
#                             for clients on the same machine
#   SERVER_THREADS [2]        larder -t, memcached -t (MariaDB: a thread per
#                             connection, its default)
#   LARDER_THREADS [SERVER_THREADS]  larder -t alone
#   LARDER_IO [auto]          larder --io: auto (its default: rings where
#                             the kernel allows them), epoll, or uring (a
#                             ring per thread: give it one thread per CPU it
#                             has, e.g. LARDER_THREADS=1 with SERVER_CPUS=1)
#   LARDER_IDLE_POLL_US [unset]  larder --idle-poll-us (unset: its default)
#   SERVER_CPUS, CLIENT_CPUS [unset]  CPU lists (taskset -c) to pin every
#                             server and every measured client to, e.g.
#                             SERVER_CPUS=1 CLIENT_CPUS=0: each side then has
#                             its own cores, as when clients run on other
#                             machines. Unset: both share all cores.
#   MEMORY_MB [4096]          larder -m, memcached -m: room for all values
#   INNODB_BUFFER_POOL [2G]*  innodb_buffer_pool_size: holds all the data
#   INNODB_AHI [ON]           innodb_adaptive_hash_index (a hash over hot
#                             B-tree pages: MariaDB's best case for point reads)
#   MAX_HEAP_TABLE [1G]       max_heap_table_size, for the MEMORY table
#   MARIADB_THREAD_HANDLING [one-thread-per-connection]  or pool-of-threads
#   FLUSH_WAIT_MAX [300]      seconds to wait for InnoDB to write back the
#                             pages dirtied by loading before measuring
#   SEED [1]                  data, key files and client seeds
#   LARDER [target/release/larder]  when not given, cargo build --release
#                             -p larder runs first
#   RESULTS_DIR [benchmarks/results/<date>; with SMOKE=1 a new temporary
#                directory]    gets sql-experiments.{md,json} and sql-raw/
#   WORK_DIR [mktemp -d]      data dirs, generated CSVs, logs; removed at exit
#                             when the script made it
#   INSTALL [1]               0: never apt-get; fail if something is missing
#
# Every server has its own data directory under WORK_DIR, listens on
# 127.0.0.1 on a free port (with TRANSPORT=unix, Larder and memcached on a
# socket in that directory instead; MariaDB on both), and is stopped by its
# PID (a trap stops whatever is still running on exit). MariaDB runs as
# mariadbd started here on a datadir made by mariadb-install-db, never the
# system service. Within an experiment every server is started and loaded
# first; then the runs are interleaved (run 1 of every server, then run 2,
# ...) so slow drift of the machine spreads over all servers.

set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"

SMOKE="${SMOKE:-0}"
if [[ "$SMOKE" == 1 ]]; then
    : "${ROWS_A:=20000}" "${ROWS_B:=10000}" "${DURATION:=3}" "${WARMUP:=1}"
    : "${RUNS:=1}" "${ROUNDS:=2}" "${INNODB_BUFFER_POOL:=256M}"
fi
EXPERIMENTS="${EXPERIMENTS:-A B}"
SERVERS_A="${SERVERS_A:-larder memcached mariadb-innodb}"
SERVERS_B="${SERVERS_B:-larder memcached mariadb-innodb mariadb-memory}"
ROWS_A="${ROWS_A:-2000000}"
KEYS_A="${KEYS_A:-$((2 * ROWS_A))}"
THREADS_A="${THREADS_A:-32}"
DURATION="${DURATION:-20}"
WARMUP="${WARMUP:-5}"
RUNS="${RUNS:-3}"
ROWS_B="${ROWS_B:-1000000}"
IDS_B="${IDS_B:-$ROWS_B}"
THREADS_B="${THREADS_B:-100}"
ROUNDS="${ROUNDS:-10}"
RUNS_B="${RUNS_B:-1}"
KV_CLIENT_THREADS_A="${KV_CLIENT_THREADS_A:-$THREADS_A}"
KV_CLIENT_THREADS_B="${KV_CLIENT_THREADS_B:-$THREADS_B}"
TRANSPORT="${TRANSPORT:-tcp}"
SERVER_THREADS="${SERVER_THREADS:-2}"
LARDER_THREADS="${LARDER_THREADS:-$SERVER_THREADS}"
LARDER_IO="${LARDER_IO:-auto}"
LARDER_IDLE_POLL_US="${LARDER_IDLE_POLL_US:-}"
MEMORY_MB="${MEMORY_MB:-4096}"
INNODB_BUFFER_POOL="${INNODB_BUFFER_POOL:-2G}"
INNODB_AHI="${INNODB_AHI:-ON}"
MAX_HEAP_TABLE="${MAX_HEAP_TABLE:-1G}"
MARIADB_THREAD_HANDLING="${MARIADB_THREAD_HANDLING:-one-thread-per-connection}"
FLUSH_WAIT_MAX="${FLUSH_WAIT_MAX:-300}"
SEED="${SEED:-1}"
LARDER_GIVEN="${LARDER:-}"
LARDER="${LARDER:-$REPO/target/release/larder}"
INSTALL="${INSTALL:-1}"
PYTHON="${PYTHON:-python3}"
LUA_SCRIPT="$SCRIPT_DIR/sysbench/kv_point_select.lua"
SERVER_CPUS="${SERVER_CPUS:-}"
CLIENT_CPUS="${CLIENT_CPUS:-}"

log() { printf '[sql %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- settings
positive() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 must be a positive integer, not '$2'"; }
for name in ROWS_A KEYS_A THREADS_A DURATION RUNS ROWS_B IDS_B THREADS_B ROUNDS RUNS_B \
    KV_CLIENT_THREADS_A KV_CLIENT_THREADS_B SERVER_THREADS LARDER_THREADS MEMORY_MB FLUSH_WAIT_MAX; do
    positive "$name" "${!name}"
done
case "$LARDER_IO" in auto|epoll|uring) ;; *) die "LARDER_IO must be auto, epoll or uring, not '$LARDER_IO'";; esac
[[ -z "$LARDER_IDLE_POLL_US" || "$LARDER_IDLE_POLL_US" =~ ^[0-9]+$ ]] \
    || die "LARDER_IDLE_POLL_US must be a number of microseconds, not '$LARDER_IDLE_POLL_US'"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "WARMUP must be a whole number of seconds, not '$WARMUP'"
[[ "$SEED" =~ ^[0-9]+$ ]] || die "SEED must be a non-negative integer, not '$SEED'"
[[ "$SMOKE" == 0 || "$SMOKE" == 1 ]] || die "SMOKE must be 0 or 1, not '$SMOKE'"
[[ "$INNODB_BUFFER_POOL" =~ ^[1-9][0-9]*[KMG]?$ ]] || die "bad INNODB_BUFFER_POOL '$INNODB_BUFFER_POOL'"
[[ "$MAX_HEAP_TABLE" =~ ^[1-9][0-9]*[KMG]?$ ]] || die "bad MAX_HEAP_TABLE '$MAX_HEAP_TABLE'"
case "$INNODB_AHI" in ON|OFF) ;; *) die "INNODB_AHI must be ON or OFF";; esac
case "$MARIADB_THREAD_HANDLING" in
    one-thread-per-connection|pool-of-threads) ;;
    *) die "MARIADB_THREAD_HANDLING must be one-thread-per-connection or pool-of-threads";;
esac
(( THREADS_A % KV_CLIENT_THREADS_A == 0 )) || die "KV_CLIENT_THREADS_A ($KV_CLIENT_THREADS_A) must divide THREADS_A ($THREADS_A)"
(( THREADS_B % KV_CLIENT_THREADS_B == 0 )) || die "KV_CLIENT_THREADS_B ($KV_CLIENT_THREADS_B) must divide THREADS_B ($THREADS_B)"
(( KV_CLIENT_THREADS_A <= 256 && KV_CLIENT_THREADS_B <= 256 )) || die "larder bench takes at most 256 threads"
[[ "$TRANSPORT" == tcp || "$TRANSPORT" == unix ]] || die "TRANSPORT must be tcp or unix, not $TRANSPORT"
SERVER_PIN=() CLIENT_PIN=()   # taskset prefixes, empty when not pinned
cpu_pin SERVER_PIN "$SERVER_CPUS"
cpu_pin CLIENT_PIN "$CLIENT_CPUS"
for e in $EXPERIMENTS; do case "$e" in A|B) ;; *) die "unknown experiment '$e' (A, B)";; esac; done
for s in $SERVERS_A; do
    case "$s" in larder|memcached|mariadb-innodb) ;; *) die "unknown server '$s' in SERVERS_A";; esac
done
for s in $SERVERS_B; do
    case "$s" in larder|memcached|mariadb-innodb|mariadb-memory) ;; *) die "unknown server '$s' in SERVERS_B";; esac
done

# ------------------------------------------------------------ dependencies
# The Debian packages may start their own services where systemd runs; ours
# use their own ports and data directories, so those are left alone.
install_packages mariadb-server mariadb-client sysbench memcached time
MARIADBD="$(command -v mariadbd || command -v mysqld || true)"
[[ -z "$MARIADBD" && -x /usr/sbin/mariadbd ]] && MARIADBD=/usr/sbin/mariadbd
[[ -n "$MARIADBD" ]] || die "no mariadbd binary"
command -v mariadb-install-db >/dev/null || die "no mariadb-install-db"
command -v "$PYTHON" >/dev/null || die "python3 is needed for the data and the report"

if [[ -z "$LARDER_GIVEN" ]]; then
    # Build (a no-op when up to date) so the binary measured is the tree's.
    log "building larder (cargo build --release -p larder)"
    (cd "$REPO" && cargo build --release -p larder)
fi
[[ -x "$LARDER" ]] || die "no larder binary at $LARDER"

want_descriptors 4096

# ------------------------------------------------------------- directories
DATE="$(date +%Y-%m-%d)"
if [[ -z "${RESULTS_DIR:-}" ]]; then
    if [[ "$SMOKE" == 1 ]]; then
        # Smoke figures mean nothing; keep them out of benchmarks/results.
        RESULTS_DIR="$(mktemp -d "${TMPDIR:-/tmp}/larder-sql-smoke.XXXXXX")"
    else
        RESULTS_DIR="$SCRIPT_DIR/results/$DATE"
        n=2
        while [[ -e "$RESULTS_DIR/sql-experiments.md" || -e "$RESULTS_DIR/sql-raw" ]]; do
            RESULTS_DIR="$SCRIPT_DIR/results/$DATE-$n"
            n=$((n + 1))
        done
    fi
fi
RAW="$RESULTS_DIR/sql-raw"
mkdir -p "$RAW"
COMMANDS="$RAW/commands.txt"
: >"$COMMANDS"

use_work_dir sql

# ------------------------------------------------------- server lifecycle
declare -A SERVER_PID=()    # process name -> pid
declare -A SERVER_PORT=()   # process name -> port
declare -A SERVER_TARGET=() # larder, memcached -> host:port or socket path
declare -A SERVER_DIR=()    # process name -> its directory under WORK_DIR
SYSBENCH=()                 # the command sysbench_cmd built last

stop_server() {
    # MariaDB may write back dirty pages on shutdown; give it 60 s.
    local grace=150
    [[ "$1" == mariadb ]] && grace=600
    stop_pid "${SERVER_PID[$1]:-}" "$1" "$grace"
    unset 'SERVER_PID[$1]'
}

on_exit_stop stop_all_servers

start_kv() {
    # start_kv larder|memcached EXPERIMENT
    local name="$1" exp="$2" port dir pid
    port="$(free_port)"
    dir="$WORK_DIR/$exp-$name"
    mkdir -p "$dir/data"
    local cmd listen=(-l 127.0.0.1 -p "$port") target="127.0.0.1:$port"
    if [[ "$TRANSPORT" == unix ]]; then
        target="$dir/server.sock"
        listen=(-s "$target")
    fi
    case "$name" in
        larder)
            cmd=("$LARDER" serve "${listen[@]}" -t "$LARDER_THREADS" --io "$LARDER_IO" -m "$MEMORY_MB"
                -c 4096 --data-dir "$dir/data" --durability everysec
                ${LARDER_IDLE_POLL_US:+--idle-poll-us "$LARDER_IDLE_POLL_US"})
            ;;
        memcached)
            cmd=(memcached "${listen[@]}" -U 0 -t "$SERVER_THREADS" -m "$MEMORY_MB"
                -c 4096 -u "$(id -un)")
            ;;
    esac
    cmd=("${SERVER_PIN[@]}" "${cmd[@]}")
    record "$exp start $name" "${cmd[@]}"
    "${cmd[@]}" >"$dir/server.log" 2>&1 &
    pid=$!
    SERVER_PID[$name]=$pid
    SERVER_PORT[$name]=$port
    SERVER_TARGET[$name]=$target
    SERVER_DIR[$name]=$dir
    local listening=1
    if [[ "$TRANSPORT" == unix ]]; then
        wait_for_socket "$target" "$pid" || listening=0
    else
        wait_for_port "$port" "$pid" || listening=0
    fi
    if [[ "$listening" == 0 ]]; then
        tail -n 20 "$dir/server.log" >&2 || true
        die "$name did not start listening on $target"
    fi
    [[ "$name" == larder ]] && note_larder_io larder "$dir/server.log" "$RAW/machine.txt"
    log "$exp: $name on $target (pid $pid)"
}

# wait_for_socket PATH PID: until the Unix domain socket at PATH accepts a
# connection (10 s at most); fails at once if PID has exited.
wait_for_socket() {
    local path="$1" pid="$2" i
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        "$PYTHON" -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' \
            "$path" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

mariadb_sql() {
    # mariadb_sql SQL...: run statements as root over the server's socket.
    mariadb --no-defaults --protocol=socket -S "${SERVER_DIR[mariadb]}/mariadb.sock" -u root \
        --batch --skip-column-names "$@"
}

start_mariadb() {
    local exp="$1" port dir pid
    port="$(free_port)"
    dir="$WORK_DIR/$exp-mariadb"
    mkdir -p "$dir/data" "$dir/tmp"
    SERVER_DIR[mariadb]=$dir
    local install=(mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$dir/data"
        --auth-root-authentication-method=normal --skip-test-db)
    record "$exp install mariadb" "${install[@]}"
    "${install[@]}" >"$dir/install.log" 2>&1 || {
        tail -n 20 "$dir/install.log" >&2
        die "mariadb-install-db failed"
    }
    local cmd=("${SERVER_PIN[@]}" "$MARIADBD" --no-defaults --user="$(id -un)" --datadir="$dir/data"
        --socket="$dir/mariadb.sock" --port="$port" --bind-address=127.0.0.1
        --pid-file="$dir/mariadb.pid" --log-error="$dir/error.log" --tmpdir="$dir/tmp"
        --skip-name-resolve --skip-log-bin --local-infile=1
        --max-connections=1000 --thread-handling="$MARIADB_THREAD_HANDLING"
        --innodb-buffer-pool-size="$INNODB_BUFFER_POOL" --innodb-log-file-size=512M
        --innodb-log-buffer-size=64M --innodb-flush-log-at-trx-commit=2
        --innodb-adaptive-hash-index="$INNODB_AHI"
        --max-heap-table-size="$MAX_HEAP_TABLE" --tmp-table-size="$MAX_HEAP_TABLE"
        --performance-schema=OFF --query-cache-type=0 --query-cache-size=0)
    record "$exp start mariadb" "${cmd[@]}"
    "${cmd[@]}" >"$dir/server.log" 2>&1 &
    pid=$!
    SERVER_PID[mariadb]=$pid
    SERVER_PORT[mariadb]=$port
    if ! wait_for_port "$port" "$pid" 1200; then
        tail -n 20 "$dir/error.log" >&2 || true
        die "mariadbd did not start listening on 127.0.0.1:$port"
    fi
    local i
    for ((i = 0; i < 100; i++)); do
        mariadb_sql -e 'SELECT 1' >/dev/null 2>&1 && break
        sleep 0.1
    done
    mariadb_sql -e "CREATE DATABASE kv;
        CREATE USER 'bench'@'127.0.0.1' IDENTIFIED BY 'bench';
        GRANT ALL ON kv.* TO 'bench'@'127.0.0.1';
        CREATE USER 'bench'@'localhost' IDENTIFIED BY 'bench';
        GRANT ALL ON kv.* TO 'bench'@'localhost';" || die "cannot set up MariaDB"
    log "$exp: mariadbd on 127.0.0.1:$port (pid $pid)"
}

# Load one CSV into a MariaDB table and check the row count.
mariadb_load() {
    local exp="$1" table="$2" csv="$3" rows="$4" started count
    started=$(date +%s.%N)
    local sql="LOAD DATA LOCAL INFILE '$csv' INTO TABLE $table FIELDS TERMINATED BY ','"
    local cmd=(mariadb --no-defaults --protocol=socket -S "${SERVER_DIR[mariadb]}/mariadb.sock" -u root
        --batch --skip-column-names --local-infile=1 --show-warnings kv -e "$sql")
    record "$exp load mariadb $table" "${cmd[@]}"
    "${cmd[@]}" >"$RAW/$exp/load-mariadb-$table.warnings" || die "LOAD DATA into $table failed"
    count="$(mariadb_sql kv -e "SELECT COUNT(*) FROM $table")"
    [[ "$count" == "$rows" ]] || die "$table holds $count rows after loading, not $rows"
    [[ -s "$RAW/$exp/load-mariadb-$table.warnings" ]] && log "warning: LOAD DATA into $table gave warnings (see sql-raw/$exp)"
    awk -v s="$started" -v e="$(date +%s.%N)" -v r="$rows" -v t="$table" \
        'BEGIN { printf "{\"server\": \"mariadb\", \"table\": \"%s\", \"rows\": %d, \"seconds\": %.3f}\n", t, r, e - s }' \
        >>"$RAW/$exp/load.jsonl"
}

# Wait until InnoDB has written back the pages that loading dirtied, so that
# its page cleaner does not take CPU from the measured runs.
mariadb_settle() {
    local deadline=$((SECONDS + FLUSH_WAIT_MAX)) dirty
    mariadb_sql -e "SET GLOBAL innodb_max_dirty_pages_pct = 0"
    while true; do
        dirty="$(mariadb_sql -e "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'" | awk '{print $2}')"
        [[ "$dirty" == 0 ]] && break
        if (( SECONDS >= deadline )); then
            log "warning: $dirty dirty InnoDB pages left after $FLUSH_WAIT_MAX s; measuring anyway"
            break
        fi
        sleep 1
    done
    mariadb_sql -e "SET GLOBAL innodb_max_dirty_pages_pct = DEFAULT"
}

kv_load() {
    local exp="$1" name="$2" csv="$3" prefix="$4" value="$5"
    local where=(--port "${SERVER_PORT[$name]}")
    [[ "$TRANSPORT" == unix ]] && where=(--socket "${SERVER_TARGET[$name]}")
    local cmd=("$PYTHON" "$SCRIPT_DIR/sql_data.py" load "${where[@]}"
        --csv "$csv" --key-prefix "$prefix" --value "$value")
    record "$exp load $name" "${cmd[@]}"
    "${cmd[@]}" | "$PYTHON" -c '
import json, sys
doc = json.loads(sys.stdin.read())
doc.update(server=sys.argv[1], table=sys.argv[2])
print(json.dumps(doc))' "$name" "$(basename "$csv" .csv)" >>"$RAW/$exp/load.jsonl" \
        || die "loading $csv into $name failed"
}

# --------------------------------------------------------------- clients
# run_cell EXP CELL RUN OUT_BASE COMMAND...: run one measured client run,
# recording the exact command, the client's CPU time (GNU time) and the
# server's CPU time over the run, each with the part spent in the kernel.
run_cell() {
    local exp="$1" cell="$2" run="$3" out="$4"
    shift 4
    set -- "${CLIENT_PIN[@]}" "$@"
    local process="$cell"
    [[ "$cell" == mariadb-* ]] && process=mariadb
    local pid="${SERVER_PID[$process]}" before after total_before system_before total_after system_after
    record "$exp $cell run$run" "$@"
    if ! before="$(cpu_split "$pid")"; then
        log "$exp $cell run $run not started: cannot read the CPU time of $process (pid $pid)"
        return 1
    fi
    if ! /usr/bin/time -f '{"elapsed_s": %e, "user_s": %U, "system_s": %S}' -o "$out.client-cpu" \
        "$@" >"$out.out" 2>"$out.err"; then
        log "$exp $cell run $run failed: $(tail -n 3 "$out.err" | tr '\n' ' ')"
        mv "$out.out" "$out.failed"
        return 1
    fi
    # Without a second reading the run keeps no server CPU rather than a
    # wrong one (the report then leaves those figures out).
    if after="$(cpu_split "$pid")"; then
        read -r total_before system_before <<<"$before"
        read -r total_after system_after <<<"$after"
        printf '{"cpu_s": %s, "system_s": %s}\n' "$(seconds_between "$total_before" "$total_after")" \
            "$(seconds_between "$system_before" "$system_after")" >"$out.server-cpu"
    else
        log "$exp $cell run $run: cannot read the CPU time of $process (pid $pid) after the run"
    fi
    [[ -s "$out.err" ]] || rm -f "$out.err"
    log "  $exp $cell run $run: $("$PYTHON" "$SCRIPT_DIR/sql_report.py" --line "$out.out")"
}

sysbench_cmd() {
    # sysbench_cmd THREADS EXTRA...: sets SYSBENCH to a whole sysbench command
    # (unpinned: run_cell adds CLIENT_PIN).
    local threads="$1"
    shift
    local where=(--mysql-host=127.0.0.1 --mysql-port="${SERVER_PORT[mariadb]}")
    [[ "$TRANSPORT" == unix ]] && where=(--mysql-socket="${SERVER_DIR[mariadb]}/mariadb.sock")
    SYSBENCH=(sysbench "$LUA_SCRIPT" --db-driver=mysql "${where[@]}" --mysql-user=bench --mysql-password=bench
        --mysql-db=kv --threads="$threads" --percentile=99 "$@" run)
}

measure_a() {
    local cell="$1" run="$2" out="$RAW/A/$cell/run$run" seed=$((SEED + run))
    mkdir -p "$RAW/A/$cell"
    case "$cell" in
        larder|memcached)
            run_cell A "$cell" "$run" "$out" "$LARDER" bench -s "${SERVER_TARGET[$cell]}" \
                --protocol memcached -t "$KV_CLIENT_THREADS_A" -c $((THREADS_A / KV_CLIENT_THREADS_A)) \
                -P 1 --ratio 1:0 --key-file "$DATA/keys_a.txt" --key-prefix '' \
                -d "${DURATION}s" --warmup "${WARMUP}s" --seed "$seed" --json -q
            ;;
        mariadb-innodb)
            local common=(--tables=users,orders --columns='*' --rows="$ROWS_A" --rand-seed="$seed")
            if (( WARMUP > 0 )); then
                # sysbench 1.0 has no warm-up phase: a separate short run is one.
                sysbench_cmd "$THREADS_A" "${common[@]}" --time="$WARMUP" --events=0
                local warmup=("${CLIENT_PIN[@]}" "${SYSBENCH[@]}")
                record "A $cell warm-up before run$run" "${warmup[@]}"
                "${warmup[@]}" >/dev/null 2>&1 || log "warning: sysbench warm-up failed"
            fi
            sysbench_cmd "$THREADS_A" "${common[@]}" --time="$DURATION" --events=0
            run_cell A "$cell" "$run" "$out" "${SYSBENCH[@]}"
            ;;
    esac
}

measure_b() {
    local cell="$1" run="$2" out="$RAW/B/$cell/run$run" reads=$((ROUNDS * IDS_B))
    mkdir -p "$RAW/B/$cell"
    case "$cell" in
        larder|memcached)
            run_cell B "$cell" "$run" "$out" "$LARDER" bench -s "${SERVER_TARGET[$cell]}" \
                --protocol memcached -t "$KV_CLIENT_THREADS_B" -c $((THREADS_B / KV_CLIENT_THREADS_B)) \
                -P 1 --ratio 1:0 --key-file "$DATA/ids_b.txt" --key-prefix '' -n "$reads" \
                --seed "$((SEED + run))" --json -q
            ;;
        mariadb-innodb|mariadb-memory)
            local table=kv_b
            [[ "$cell" == mariadb-memory ]] && table=kv_b_mem
            sysbench_cmd "$THREADS_B" --tables="$table" --columns=value1,value2 \
                --id-file="$DATA/ids_b.txt" --time=0 --events="$reads"
            run_cell B "$cell" "$run" "$out" "${SYSBENCH[@]}"
            ;;
    esac
}

# ------------------------------------------------------------ machine info
server_versions() {
    echo "memcached: $(memcached -V 2>/dev/null || echo n/a)"
    echo "mariadb: $("$MARIADBD" --version 2>/dev/null | sed 's/^.*Ver //' || echo n/a)"
    echo "sysbench: $(sysbench --version 2>/dev/null || echo n/a)"
    echo "larder: $("$LARDER" --version), binary built $(date -u -r "$LARDER" +%Y-%m-%dT%H:%M:%SZ), sha256 $(sha256sum "$LARDER" | cut -c1-16)"
}
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "smoke: $SMOKE"
    echo "nproc: $(nproc)"
    echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
    echo "memory: $(free -h | awk '/^Mem:/ {print $2}')"
    echo "kernel: $(uname -sr)"
    echo "work_dir_fs: $(df -T "$WORK_DIR" | awk 'NR==2 {print $1" "$2}')"
    server_versions
    echo "settings: EXPERIMENTS='$EXPERIMENTS' ROWS_A=$ROWS_A KEYS_A=$KEYS_A THREADS_A=$THREADS_A DURATION=$DURATION WARMUP=$WARMUP RUNS=$RUNS ROWS_B=$ROWS_B IDS_B=$IDS_B THREADS_B=$THREADS_B ROUNDS=$ROUNDS RUNS_B=$RUNS_B KV_CLIENT_THREADS_A=$KV_CLIENT_THREADS_A KV_CLIENT_THREADS_B=$KV_CLIENT_THREADS_B SERVER_THREADS=$SERVER_THREADS LARDER_THREADS=$LARDER_THREADS LARDER_IO=$LARDER_IO LARDER_IDLE_POLL_US=${LARDER_IDLE_POLL_US:-default} MEMORY_MB=$MEMORY_MB SEED=$SEED SERVER_CPUS=${SERVER_CPUS:-all} CLIENT_CPUS=${CLIENT_CPUS:-all} TRANSPORT=$TRANSPORT"
    echo "mariadb_config: innodb_buffer_pool_size=$INNODB_BUFFER_POOL innodb_adaptive_hash_index=$INNODB_AHI innodb_log_file_size=512M innodb_flush_log_at_trx_commit=2 (loading only; reads do not write) max_heap_table_size=$MAX_HEAP_TABLE thread_handling=$MARIADB_THREAD_HANDLING max_connections=1000 performance_schema=OFF query_cache_type=0 skip_name_resolve skip_log_bin"
    echo "servers_a: $SERVERS_A"
    echo "servers_b: $SERVERS_B"
} >"$RAW/machine.txt"
log "machine: $(tr '\n' '|' <"$RAW/machine.txt")"
log "results in $RESULTS_DIR"

DATA="$WORK_DIR/data"
mkdir -p "$DATA"

# ------------------------------------------------------------ experiment A
# The typed tables of A; the CSV columns in sql_data.py's order.
SCHEMA_A="CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(40) NOT NULL,\
 email VARCHAR(80) NOT NULL, phone VARCHAR(20) NOT NULL, score INT NOT NULL, city VARCHAR(24) NOT NULL,\
 country CHAR(2) NOT NULL, created DATETIME NOT NULL) ENGINE=InnoDB;\
 CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, user_id BIGINT NOT NULL, sku VARCHAR(20) NOT NULL,\
 quantity INT NOT NULL, price DECIMAL(10,2) NOT NULL, currency CHAR(3) NOT NULL, status VARCHAR(12) NOT NULL,\
 channel VARCHAR(8) NOT NULL, warehouse VARCHAR(24) NOT NULL, created DATETIME NOT NULL,\
 note VARCHAR(40) NOT NULL) ENGINE=InnoDB;"

experiment_a() {
    mkdir -p "$RAW/A"
    : >"$RAW/A/load.jsonl"
    log "A: generating 2 x $ROWS_A rows and $KEYS_A keys"
    "$PYTHON" "$SCRIPT_DIR/sql_data.py" gen-a --rows "$ROWS_A" --keys "$KEYS_A" --seed "$SEED" --out "$DATA"
    local cell
    for cell in $SERVERS_A; do
        case "$cell" in
            larder|memcached)
                start_kv "$cell" A
                kv_load A "$cell" "$DATA/users.csv" users: row
                kv_load A "$cell" "$DATA/orders.csv" orders: row
                ;;
            mariadb-innodb)
                start_mariadb A
                record "A create tables" mariadb kv -e "$SCHEMA_A"
                mariadb_sql kv -e "$SCHEMA_A"
                mariadb_load A users "$DATA/users.csv" "$ROWS_A"
                mariadb_load A orders "$DATA/orders.csv" "$ROWS_A"
                # Read every page once so the buffer pool holds both tables.
                mariadb_sql kv -e "CHECKSUM TABLE users, orders" >/dev/null
                mariadb_settle
                ;;
        esac
    done
    local run
    for ((run = 1; run <= RUNS; run++)); do
        for cell in $SERVERS_A; do measure_a "$cell" "$run" || true; done
    done
    record_footprint A
    stop_all_servers
}

# ------------------------------------------------------------ experiment B
experiment_b() {
    mkdir -p "$RAW/B"
    : >"$RAW/B/load.jsonl"
    log "B: generating $ROWS_B rows and $IDS_B ids"
    "$PYTHON" "$SCRIPT_DIR/sql_data.py" gen-b --rows "$ROWS_B" --ids "$IDS_B" --threads "$THREADS_B" \
        --seed "$SEED" --out "$DATA"
    local cell started_mariadb=0
    for cell in $SERVERS_B; do
        case "$cell" in
            larder|memcached)
                start_kv "$cell" B
                kv_load B "$cell" "$DATA/kv_b.csv" '' rest
                ;;
            mariadb-innodb|mariadb-memory)
                if [[ "$started_mariadb" == 0 ]]; then
                    start_mariadb B
                    started_mariadb=1
                fi
                local table=kv_b engine=InnoDB
                [[ "$cell" == mariadb-memory ]] && table=kv_b_mem engine=MEMORY
                # MEMORY's primary key is a hash index by default.
                local schema="CREATE TABLE $table (id BIGINT NOT NULL PRIMARY KEY, value1 INT NOT NULL, value2 DOUBLE NOT NULL) ENGINE=$engine"
                record "B create table $table" mariadb kv -e "$schema"
                mariadb_sql kv -e "$schema"
                mariadb_load B "$table" "$DATA/kv_b.csv" "$ROWS_B"
                mariadb_sql kv -e "CHECKSUM TABLE $table" >/dev/null
                ;;
        esac
    done
    [[ "$started_mariadb" == 1 ]] && mariadb_settle
    local run
    for ((run = 1; run <= RUNS_B; run++)); do
        for cell in $SERVERS_B; do measure_b "$cell" "$run" || true; done
    done
    record_footprint B
    stop_all_servers
}

# Data directory size and resident memory of every server of an experiment,
# after its runs.
record_footprint() {
    local exp="$1" name kib rss
    for name in "${!SERVER_PID[@]}"; do
        # memcached keeps nothing on disk.
        kib=null
        [[ "$name" == memcached ]] || kib="$(du -sk "${SERVER_DIR[$name]}/data" | awk '{print $1}')"
        rss="$(ps -o rss= -p "${SERVER_PID[$name]}" | tr -d ' ')"
        printf '{"server": "%s", "data_dir_kib": %s, "rss_kib": %s}\n' "$name" "$kib" "${rss:-null}" \
            >>"$RAW/$exp/footprint.jsonl"
    done
}

start_time=$SECONDS
for exp in $EXPERIMENTS; do
    case "$exp" in
        A) experiment_a;;
        B) experiment_b;;
    esac
done
log "experiments took $(( (SECONDS - start_time) / 60 )) min $(( (SECONDS - start_time) % 60 )) s"

"$PYTHON" "$SCRIPT_DIR/sql_report.py" "$RESULTS_DIR"
log "report: $RESULTS_DIR/sql-experiments.md"
