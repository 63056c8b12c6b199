# A 4 KiB pwrite + fdatasync loop next to one other disk operation; see results.txt.
# Usage: python3 release.py STEP_MIB PAUSE_MS (0 0: the file deleted at once)
import os, time, threading, sys
d = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'larder-io-check'); os.makedirs(d, exist_ok=True)
log = os.open(d + '/log', os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
os.pwrite(log, b'\0' * (8 << 20), 0); os.fdatasync(log)
big = os.open(d + '/big', os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
buf = os.urandom(1 << 20)
for i in range(64): os.pwrite(big, buf, i << 20)
os.fdatasync(big); os.close(big)
time.sleep(1)
stop = False; lats = []
def logger():
    off = 0
    while not stop:
        os.pwrite(log, b'x' * 4096, off); off = (off + 4096) % (8 << 20)
        t = time.perf_counter(); os.fdatasync(log); lats.append((time.perf_counter() - t, t))
th = threading.Thread(target=logger); th.start()
time.sleep(0.5)
t0 = time.perf_counter()
STEP = int(sys.argv[1]) << 20; PAUSE = float(sys.argv[2]) / 1000  # STEP 0: delete at once
f = os.open(d + '/big', os.O_WRONLY); size = 64 << 20
while STEP and size > 0:
    size = max(0, size - STEP); os.ftruncate(f, size)
    if PAUSE: time.sleep(PAUSE)
os.close(f); os.unlink(d + '/big'); t1 = time.perf_counter()
fd = os.open(d, os.O_RDONLY); os.fsync(fd); t2 = time.perf_counter()
time.sleep(0.5); stop = True; th.join()
worst = sorted(lats)[-3:]
print(f"unlink 64MB {1000*(t1-t0):.1f} ms, dir fsync {1000*(t2-t1):.1f} ms; log fdatasync n={len(lats)} p50 {1e6*sorted(lats)[len(lats)//2][0]:.0f} us worst {[round(1e3*w[0],1) for w in worst]} ms at {[round(1e3*(w[1]-t0),1) for w in worst]} ms after unlink")
os.unlink(d + '/log')
