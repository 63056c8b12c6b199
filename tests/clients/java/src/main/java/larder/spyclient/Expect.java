package larder.spyclient;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/** Assertions that describe the difference when they fail. */
final class Expect {
  private Expect() {}

  /** How long any single future may take before the check fails. */
  static final long FUTURE_TIMEOUT_S = 10;

  static void eq(String what, Object expected, Object actual) {
    if (!same(expected, actual)) {
      throw new CheckFailed(what + ": expected " + show(expected) + " got " + show(actual));
    }
  }

  static void isTrue(String what, boolean cond, Object actual) {
    if (!cond) {
      throw new CheckFailed(what + ": got " + show(actual));
    }
  }

  static void fail(String message) {
    throw new CheckFailed(message);
  }

  /** Runs {@code body} and requires it to throw {@code type}; returns the throwable. */
  static <T extends Throwable> T throwsEx(String what, Class<T> type, ThrowingRunnable body) {
    try {
      body.run();
    } catch (Throwable t) {
      if (type.isInstance(t)) {
        return type.cast(t);
      }
      throw new CheckFailed(what + ": expected " + type.getSimpleName() + " got " + t);
    }
    throw new CheckFailed(what + ": expected " + type.getSimpleName() + " got no exception");
  }

  /** The future's value; a failure (with its cause) if it errs or does not finish in time. */
  static <T> T await(String what, Future<T> f) {
    try {
      return f.get(FUTURE_TIMEOUT_S, TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      throw new CheckFailed(what + ": expected a result got " + e.getCause());
    } catch (Exception e) {
      throw new CheckFailed(what + ": expected a result got " + e);
    }
  }

  static boolean same(Object a, Object b) {
    if (a instanceof byte[] x && b instanceof byte[] y) {
      return Arrays.equals(x, y);
    }
    if (a instanceof Map<?, ?> x && b instanceof Map<?, ?> y) {
      if (x.size() != y.size()) {
        return false;
      }
      for (Map.Entry<?, ?> e : x.entrySet()) {
        if (!y.containsKey(e.getKey()) || !same(e.getValue(), y.get(e.getKey()))) {
          return false;
        }
      }
      return true;
    }
    return Objects.equals(a, b);
  }

  static String show(Object o) {
    if (o == null) {
      return "null";
    }
    if (o instanceof String s) {
      return quote(s.getBytes(StandardCharsets.UTF_8), 160);
    }
    if (o instanceof byte[] b) {
      return "byte[" + b.length + "] " + quote(b, 48);
    }
    if (o instanceof Map<?, ?> m) {
      Map<String, String> shown = new TreeMap<>();
      int n = 0;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        if (n++ == 6) {
          break;
        }
        shown.put(String.valueOf(e.getKey()), show(e.getValue()));
      }
      return "map of " + m.size() + (m.size() > 6 ? " (first 6) " : " ") + shown;
    }
    return String.valueOf(o);
  }

  /** Printable ASCII as is, everything else as \xNN; cut after {@code max} bytes. */
  static String quote(byte[] b, int max) {
    StringBuilder sb = new StringBuilder("\"");
    for (int i = 0; i < Math.min(b.length, max); i++) {
      int c = b[i] & 0xff;
      if (c == '\r') {
        sb.append("\\r");
      } else if (c == '\n') {
        sb.append("\\n");
      } else if (c == '"' || c == '\\') {
        sb.append('\\').append((char) c);
      } else if (c >= 0x20 && c < 0x7f) {
        sb.append((char) c);
      } else {
        sb.append(String.format("\\x%02x", c));
      }
    }
    sb.append('"');
    if (b.length > max) {
      sb.append("...");
    }
    return sb.toString();
  }

  /** Index of the first byte where two arrays differ, or -1. */
  static int firstDifference(byte[] a, byte[] b) {
    int n = Math.min(a.length, b.length);
    for (int i = 0; i < n; i++) {
      if (a[i] != b[i]) {
        return i;
      }
    }
    return a.length == b.length ? -1 : n;
  }

  @FunctionalInterface
  interface ThrowingRunnable {
    void run() throws Exception;
  }
}
