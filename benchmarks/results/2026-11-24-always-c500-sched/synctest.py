import os, threading, time, sys
n_threads = int(sys.argv[1]); size = int(sys.argv[2]); dur = 4.0
path = os.environ.get("WORK", "/tmp/larder-sched") + "/synctest.bin"
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.pwrite(fd, b"\0" * (256 << 20), 0); os.fsync(fd)
pos = [0]; lock = threading.Lock(); counts = [0]*n_threads; lat = [0.0]*n_threads
def run(i):
    end = time.time() + dur
    buf = b"x" * size
    while time.time() < end:
        with lock:
            off = pos[0]; pos[0] += size
        os.pwrite(fd, buf, off)
        t = time.perf_counter(); os.fdatasync(fd); lat[i] += time.perf_counter() - t
        counts[i] += 1
ts = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
[t.start() for t in ts]; [t.join() for t in ts]
c = sum(counts)
print(f"threads {n_threads} size {size}: {c/dur:.0f} syncs/s, mean sync {1e6*sum(lat)/c:.0f} us")
os.unlink(path)
