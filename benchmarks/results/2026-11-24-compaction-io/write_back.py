# A 4 KiB pwrite + fdatasync loop next to one other disk operation; see results.txt.
import os, time, threading, sys, ctypes
libc = ctypes.CDLL(None, use_errno=True)
W, WB, WA = 2, 1, 4
def sfr(fd, off, n, flags):
    r = libc.sync_file_range(ctypes.c_int(fd), ctypes.c_longlong(off), ctypes.c_longlong(n), ctypes.c_uint(flags))
    assert r == 0, ctypes.get_errno()
chunk = int(sys.argv[1]) if len(sys.argv) > 1 else 0   # 0: one big write+fsync; else sync_file_range chunks
d = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'larder-io-check'); os.makedirs(d, exist_ok=True)
log = os.open(d + '/log', os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
os.posix_fallocate(log, 0, 64 << 20)
os.pwrite(log, b'\0' * (8 << 20), 0); os.fdatasync(log)
stop = False; lats = []
def logger():
    off = 0
    while not stop:
        os.pwrite(log, b'x' * 4096, off); off = (off + 4096) % (8 << 20)
        t = time.perf_counter(); os.fdatasync(log); lats.append(time.perf_counter() - t)
th = threading.Thread(target=logger); th.start()
time.sleep(0.5)
big = os.open(d + '/big', os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
buf = os.urandom(1 << 20)
t0 = time.perf_counter()
for i in range(16):
    os.pwrite(big, buf, i << 20)
    if chunk:
        sfr(big, i << 20, 1 << 20, W)
        if i > 0:
            sfr(big, (i - 1) << 20, 1 << 20, WB | W | WA)
os.fdatasync(big)
t1 = time.perf_counter()
time.sleep(0.3); stop = True; th.join()
lats.sort()
print(f"chunk={chunk}: 16MB write+sync {1000*(t1-t0):.1f} ms; log fdatasync n={len(lats)} p50 {1e6*lats[len(lats)//2]:.0f} us max {1e6*lats[-1]:.0f} us")
os.unlink(d + '/big'); os.unlink(d + '/log')
