package larder.spyclient;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.BinaryConnectionFactory;
import net.spy.memcached.ConnectionFactory;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.MemcachedClient;

/** Opening and closing clients. */
final class Connect {
  private Connect() {}

  /**
   * How long an operation may wait, in its queue and for its reply. The
   * client's default, 2.5 s, is short for a busy machine with writes that
   * wait for fdatasync; spymemcached also drops a queued write that has
   * waited longer without sending it.
   */
  static final long OP_TIMEOUT_MS = 10_000;

  /**
   * A new client: spymemcached's default connection factory settings
   * (text protocol), or with {@code binary} its BinaryConnectionFactory's
   * (binary protocol), but for the operation timeout ({@link #OP_TIMEOUT_MS}).
   */
  static MemcachedClient client(InetSocketAddress addr, boolean binary) throws IOException {
    ConnectionFactory factory = binary
        ? new BinaryConnectionFactory() {
            @Override
            public long getOperationTimeout() {
              return OP_TIMEOUT_MS;
            }
          }
        : new ConnectionFactoryBuilder().setOpTimeout(OP_TIMEOUT_MS).build();
    return new MemcachedClient(factory, List.of(addr));
  }

  /**
   * A client ({@link #client}) on
   * a server that has answered "version"; null, after saying why on stderr,
   * when none answers within about ten seconds.
   */
  static MemcachedClient open(InetSocketAddress addr, boolean binary) {
    MemcachedClient c;
    try {
      c = client(addr, binary);
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
