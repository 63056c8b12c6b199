import os, time, sys
size = int(sys.argv[1]); mode = sys.argv[2]; dur = 4.0
STEP = 256 << 10; AHEAD = 8 << 20
path = os.environ.get("WORK", "/tmp/larder-sched") + "/synctest.bin"
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
end = 0; reserved = 0; n = 0; tot = 0.0; worst = 0.0; big = 0
zeros = b"\0" * STEP
buf = b"x" * size
if mode == "pre":   # whole segment reserved and synced up front
    os.posix_fallocate(fd, 0, 64 << 20); os.pwrite(fd, b"\0" * (64 << 20), 0); os.fsync(fd); reserved = 64 << 20
t_end = time.time() + dur
while time.time() < t_end and end + size < (64 << 20):
    if mode == "step" and reserved - end < AHEAD // 2:
        target = reserved + STEP
        os.posix_fallocate(fd, reserved, STEP); os.pwrite(fd, zeros, reserved); reserved = target
    os.pwrite(fd, buf, end); end += size
    t = time.perf_counter(); os.fdatasync(fd); d = time.perf_counter() - t
    tot += d; n += 1; worst = max(worst, d)
print(f"{mode} size {size}: {n/dur:.0f} syncs/s, mean {1e6*tot/n:.0f} us, worst {1e6*worst:.0f} us")
os.unlink(path)
