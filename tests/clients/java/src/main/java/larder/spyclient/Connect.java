package larder.spyclient;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.MemcachedClient;

/** Opening and closing clients. */
final class Connect {
  private Connect() {}

  /**
   * A client (spymemcached's default connection factory: text protocol) on
   * a server that has answered "version"; null, after saying why on stderr,
   * when none answers within about ten seconds.
   */
  static MemcachedClient open(InetSocketAddress addr) {
    MemcachedClient c;
    try {
      c = new MemcachedClient(addr);
    } catch (IOException e) {
      System.err.println("FAIL connect: expected a client for " + addr + " got " + e);
      return null;
    }
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (System.nanoTime() < deadline) {
      if (!c.getVersions().isEmpty()) {
        return c;
      }
    }
    System.err.println("FAIL connect: expected " + addr + " to answer version got no reply in 10 s");
    close(c);
    return null;
  }

  static void close(MemcachedClient c) {
    try {
      c.shutdown(2, TimeUnit.SECONDS);
    } catch (RuntimeException e) {
      // Nothing more to do: the JVM exits soon after.
    }
  }
}
