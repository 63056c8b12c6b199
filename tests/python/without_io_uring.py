"""Runs a program with io_uring refused, as Docker's default seccomp profile
refuses it: `python3 without_io_uring.py PROGRAM ARGS...`.

Installs a seccomp filter that fails `io_uring_setup` with EPERM and allows
every other system call, then executes PROGRAM in this process (same PID).
"""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
# io_uring_setup has the same number on every architecture Linux added it to.
NR_IO_URING_SETUP = 425
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


def refuse_io_uring() -> None:
    program = [
        SockFilter(BPF_LD_W_ABS, 0, 0, 0),  # the system call's number
        SockFilter(BPF_JEQ_K, 0, 1, NR_IO_URING_SETUP),
        SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    filters = (SockFilter * len(program))(*program)
    fprog = SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        sys.exit(f"without_io_uring: PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        sys.exit(f"without_io_uring: PR_SET_SECCOMP: {os.strerror(ctypes.get_errno())}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: without_io_uring.py PROGRAM [ARGS...]")
    refuse_io_uring()
    os.execv(sys.argv[1], sys.argv[1:])
