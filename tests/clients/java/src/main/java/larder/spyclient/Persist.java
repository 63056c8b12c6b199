package larder.spyclient;

import java.net.InetSocketAddress;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.internal.OperationFuture;

/**
 * Writes N keys "persist:&lt;i&gt;" whose flags and bytes follow from SEED and
 * i alone, and reads them back later (for instance after the server was
 * killed and restarted) to check that every one is there, exactly.
 */
final class Persist {
  private static final int WINDOW = 200;
  private static final int BATCH = 100;
  private static final long WAIT_S = 60;
  private static final int SHOW = 8;

  private final InetSocketAddress addr;
  private final int n;
  private final long seed;
  private final boolean binary;

  Persist(InetSocketAddress addr, int n, long seed, boolean binary) {
    this.addr = addr;
    this.n = n;
    this.seed = seed;
    this.binary = binary;
  }

  static String key(int i) {
    return "persist:" + i;
  }

  /**
   * The value of key i: 1 to 4000 bytes covering every byte value across the
   * set, many with "\r\n" (and some with a whole "\r\nEND\r\n") inside, and
   * flags anywhere in 0..2^31-1 (spymemcached keeps flags in a signed int).
   */
  static Blob value(long seed, int i) {
    SplittableRandom r = new SplittableRandom(seed * 0x9E3779B97F4A7C15L + i);
    int len = 1 + r.nextInt(4000);
    byte[] b = new byte[len];
    for (int j = 0; j < len; j++) {
      b[j] = (byte) r.nextInt(256);
    }
    if (i % 13 == 0 && len >= 256) {
      int at = r.nextInt(len - 255);
      for (int v = 0; v < 256; v++) {
        b[at + v] = (byte) v;
      }
    }
    if (i % 3 == 0 && len >= 2) {
      int at = r.nextInt(len - 1);
      b[at] = '\r';
      b[at + 1] = '\n';
    }
    if (i % 7 == 0 && len >= 7) {
      byte[] end = {'\r', '\n', 'E', 'N', 'D', '\r', '\n'};
      System.arraycopy(end, 0, b, r.nextInt(len - 6), end.length);
    }
    int flags = i % 5 == 0 ? 0 : r.nextInt() & 0x7fffffff;
    return new Blob(flags, b);
  }

  int write() {
    MemcachedClient c = Connect.open(addr, binary);
    if (c == null) {
      return 1;
    }
    int failed = 0;
    List<String> shown = new ArrayList<>();
    try {
      Deque<Map.Entry<Integer, OperationFuture<Boolean>>> pending = new ArrayDeque<>();
      for (int i = 0; i < n; i++) {
        pending.add(Map.entry(i, c.set(key(i), 0, value(seed, i), BlobTranscoder.INSTANCE)));
        while (pending.size() >= WINDOW || (i == n - 1 && !pending.isEmpty())) {
          Map.Entry<Integer, OperationFuture<Boolean>> e = pending.poll();
          String problem = outcome(e.getValue());
          if (problem != null) {
            failed++;
            if (shown.size() < SHOW) {
              shown.add(key(e.getKey()) + ": expected true got " + problem);
            }
          }
        }
      }
    } finally {
      Connect.close(c);
    }
    if (failed > 0) {
      for (String s : shown) {
        System.err.println("FAIL write " + s);
      }
      System.err.println("FAIL write: expected " + n + " stored got " + (n - failed)
          + " (" + failed + " failed)");
      return 1;
    }
    System.out.println("ok  wrote " + n + " keys (seed " + seed + ")");
    return 0;
  }

  /** Null when the store returned true, else what it returned. */
  private static String outcome(OperationFuture<Boolean> f) {
    try {
      Boolean ok = f.get(WAIT_S, TimeUnit.SECONDS);
      if (Boolean.TRUE.equals(ok)) {
        return null;
      }
      return ok + " (" + f.getStatus().getMessage() + ")";
    } catch (Exception e) {
      return e.toString();
    }
  }

  int verify() {
    MemcachedClient c = Connect.open(addr, binary);
    if (c == null) {
      return 1;
    }
    int missing = 0;
    int wrong = 0;
    int failedBatches = 0;
    List<String> shown = new ArrayList<>();
    try {
      for (int start = 0; start < n; start += BATCH) {
        List<String> keys = new ArrayList<>();
        for (int i = start; i < Math.min(n, start + BATCH); i++) {
          keys.add(key(i));
        }
        Map<String, Blob> got;
        try {
          got = c.asyncGetBulk(keys, BlobTranscoder.INSTANCE).get(WAIT_S, TimeUnit.SECONDS);
        } catch (Exception e) {
          failedBatches++;
          missing += keys.size();
          if (shown.size() < SHOW) {
            shown.add("getBulk of " + keys.get(0) + ".." + keys.get(keys.size() - 1)
                + ": expected values got " + e);
          }
          continue;
        }
        for (int i = start; i < Math.min(n, start + BATCH); i++) {
          Blob want = value(seed, i);
          Blob have = got.get(key(i));
          String problem = null;
          if (have == null) {
            missing++;
            problem = "missing";
          } else if (!want.equals(have)) {
            wrong++;
            if (want.flags != have.flags) {
              problem = "flags " + Integer.toUnsignedString(have.flags) + " instead of "
                  + Integer.toUnsignedString(want.flags);
            } else {
              problem = "expected " + want.data.length + " bytes got " + have.data.length
                  + ", first difference at byte " + Expect.firstDifference(want.data, have.data);
            }
          }
          if (problem != null && shown.size() < SHOW) {
            shown.add(key(i) + ": " + problem);
          }
        }
        for (String k : got.keySet()) {
          if (!keys.contains(k)) {
            wrong++;
            if (shown.size() < SHOW) {
              shown.add(k + ": returned though not asked for");
            }
          }
        }
      }
    } finally {
      Connect.close(c);
    }
    if (missing + wrong > 0) {
      for (String s : shown) {
        System.err.println("FAIL verify " + s);
      }
      System.err.println("FAIL verify: expected " + n + " keys intact got " + missing
          + " missing and " + wrong + " wrong" + (failedBatches > 0
              ? " (" + failedBatches + " getBulk calls failed)" : ""));
      return 1;
    }
    System.out.println("ok  verified " + n + " keys (seed " + seed + ")");
    return 0;
  }

}
