#!/usr/bin/env python3
"""Tables for benchmarks/instructions.sh: instructions and system calls per
request, for each server and workload, against the first server named.

Usage: instructions_report.py RESULTS_DIR

Reads RESULTS_DIR/raw/<server>/<workload>/ (instructions.txt,
instructions-requests.txt, strace.txt, syscalls-requests.txt, server.txt)
and writes RESULTS_DIR/instructions.md and instructions.json.
"""

import json
import sys
from pathlib import Path

# System calls grouped as the report shows them; any other call counts in
# "other".
GROUPS = {
    "receive": ("read", "recvfrom", "recvmsg", "readv"),
    "send": ("write", "sendto", "sendmsg", "writev"),
    "epoll_wait": ("epoll_wait", "epoll_pwait", "epoll_pwait2"),
    "futex": ("futex",),
    # Opening and closing the client's connections: paid once per
    # connection, not per request.
    "connections": ("accept", "accept4", "close", "shutdown", "setsockopt", "getpeername",
                    "epoll_ctl"),
    # Timer threads sleeping; they wake more often the longer the run takes,
    # and a run under strace takes longer.
    "sleep": ("clock_nanosleep", "nanosleep", "restart_syscall"),
}


def read_int(path):
    text = path.read_text().strip()
    if not text.isdigit():
        raise SystemExit(f"{path}: expected a count, found {text!r}")
    return int(text)


def strace_counts(path):
    """Calls per system call from `strace -c` output."""
    calls = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(fields) < 5 or not fields[3].isdigit():
            continue
        name = fields[-1]
        if name == "total":
            continue
        calls[name] = calls.get(name, 0) + int(fields[3])
    if not calls:
        raise SystemExit(f"{path}: no system calls found")
    return calls


def cell(raw):
    """One server's figures for one workload."""
    instructions = read_int(raw / "instructions.txt")
    instruction_requests = read_int(raw / "instructions-requests.txt")
    calls = strace_counts(raw / "strace.txt")
    syscall_requests = read_int(raw / "syscalls-requests.txt")
    if instruction_requests == 0 or syscall_requests == 0:
        raise SystemExit(f"{raw}: no requests were answered")
    grouped = {group: sum(calls.get(name, 0) for name in names) for group, names in GROUPS.items()}
    grouped["other"] = sum(calls.values()) - sum(grouped.values())
    return {
        "server": (raw / "server.txt").read_text().strip(),
        "requests": instruction_requests,
        "instructions": instructions,
        "instructions_per_request": instructions / instruction_requests,
        "syscall_requests": syscall_requests,
        "syscalls_per_request": sum(calls.values()) / syscall_requests,
        "syscalls_by_group_per_request": {
            group: count / syscall_requests for group, count in grouped.items()
        },
        "syscalls": calls,
    }


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: instructions_report.py RESULTS_DIR")
    results = Path(sys.argv[1])
    report = {"workloads": {}}
    for workload_dir in sorted(p for p in (results / "raw").glob("*/*") if p.is_dir()):
        workload = workload_dir.name
        report["workloads"].setdefault(workload, []).append(cell(workload_dir))
    if not report["workloads"]:
        raise SystemExit(f"{results}/raw holds no counts")
    lines = [
        "# Instructions and system calls per request",
        "",
        "Counted, not timed (`benchmarks/instructions.sh`): user-space instructions",
        "under callgrind, system calls under `strace -c`, each over its own run of",
        "the same load. The first server named is the reference.",
        "",
    ]
    machine = results / "machine.txt"
    if machine.exists():
        lines += ["```", machine.read_text().rstrip(), "```", ""]
    named = [line.split(": ", 1)[0][len("start "):]
             for line in (results / "commands.txt").read_text().splitlines() if line.startswith("start ")]
    rank = {name: index for index, name in enumerate(dict.fromkeys(named))}
    for workload, cells in report["workloads"].items():
        cells.sort(key=lambda c: rank.get(c["server"], len(rank)))
        reference = cells[0]
        for c in cells:
            c["instructions_vs_first"] = c["instructions_per_request"] / reference["instructions_per_request"]
            c["syscalls_vs_first"] = c["syscalls_per_request"] / reference["syscalls_per_request"]
        lines += [
            f"## {workload}",
            "",
            "| server | instructions/request | vs first | system calls/request | vs first "
            "| receive | send | epoll_wait | futex | connections | sleep | other |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in cells:
            g = c["syscalls_by_group_per_request"]
            lines.append(
                f"| {c['server']} | {c['instructions_per_request']:,.0f} | {c['instructions_vs_first']:.2f}x "
                f"| {c['syscalls_per_request']:.3f} | {c['syscalls_vs_first']:.2f}x "
                f"| {g['receive']:.3f} | {g['send']:.3f} | {g['epoll_wait']:.3f} | {g['futex']:.3f} "
                f"| {g['connections']:.3f} | {g['sleep']:.3f} | {g['other']:.3f} |"
            )
        lines.append("")
    (results / "instructions.md").write_text("\n".join(lines))
    (results / "instructions.json").write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
