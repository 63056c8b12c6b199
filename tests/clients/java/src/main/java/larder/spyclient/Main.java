package larder.spyclient;

import java.net.InetSocketAddress;
import java.util.Arrays;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Drives spymemcached, with its default (text protocol) connection factory,
 * or with --binary its BinaryConnectionFactory (binary protocol), against
 * one memcached-compatible server.
 *
 * <pre>
 *   java -jar larder-spymemcached-check.jar [--binary] HOST:PORT checks
 *   java -jar larder-spymemcached-check.jar [--binary] HOST:PORT write N SEED
 *   java -jar larder-spymemcached-check.jar [--binary] HOST:PORT verify N SEED
 * </pre>
 *
 * Exit status: 0 when everything held, 1 when a check failed, 2 on bad
 * arguments, 3 when the overall time limit ran out.
 */
public final class Main {
  private Main() {}

  /**
   * Parent of every spymemcached logger. Held here because java.util.logging
   * keeps loggers only weakly: the level set below would otherwise be lost.
   */
  private static Logger spyLog;

  public static void main(String[] args) {
    quietLogging();
    boolean binary = args.length > 0 && args[0].equals("--binary");
    if (binary) {
      args = Arrays.copyOfRange(args, 1, args.length);
    }
    if (args.length < 2) {
      usage("missing arguments");
    }
    InetSocketAddress addr = parseAddress(args[0]);
    String mode = args[1];
    int code;
    switch (mode) {
      case "checks" -> {
        if (args.length != 2) {
          usage("checks takes no further arguments");
        }
        startWatchdog(60, "checks");
        code = new Checks(addr, binary).run();
      }
      case "write", "verify" -> {
        if (args.length != 4) {
          usage(mode + " needs N and SEED");
        }
        int n = parseInt(args[2], "N");
        long seed = parseLong(args[3], "SEED");
        if (n < 0) {
          usage("N must not be negative");
        }
        startWatchdog(120 + n / 50, mode);
        Persist p = new Persist(addr, n, seed, binary);
        code = mode.equals("write") ? p.write() : p.verify();
      }
      default -> {
        usage("unknown mode " + mode);
        code = 2;
      }
    }
    System.out.flush();
    System.err.flush();
    System.exit(code);
  }

  /**
   * Sends spymemcached's logging through java.util.logging and keeps only
   * what is above WARNING: the client logs every reconnect, and the error
   * replies that some checks provoke on purpose, at WARNING and above, so
   * those stay quiet too unless LARDER_SPY_LOG names a level (e.g. INFO).
   */
  private static void quietLogging() {
    System.setProperty("net.spy.log.LoggerImpl", "net.spy.memcached.compat.log.SunLogger");
    String wanted = System.getenv("LARDER_SPY_LOG");
    Level level = Level.OFF;
    if (wanted != null && !wanted.isEmpty()) {
      try {
        level = Level.parse(wanted.toUpperCase());
      } catch (IllegalArgumentException e) {
        level = Level.WARNING;
      }
    }
    spyLog = Logger.getLogger("net.spy");
    spyLog.setLevel(level);
  }

  /** Ends the JVM if the whole run takes longer than {@code seconds}. */
  private static void startWatchdog(long seconds, String what) {
    Thread t = new Thread(() -> {
      try {
        Thread.sleep(seconds * 1000);
      } catch (InterruptedException e) {
        return;
      }
      System.out.flush();
      System.err.println("FAIL timeout: expected " + what + " to finish within " + seconds
          + " s got still running");
      System.err.flush();
      Runtime.getRuntime().halt(3);
    }, "watchdog");
    t.setDaemon(true);
    t.start();
  }

  private static InetSocketAddress parseAddress(String s) {
    int colon = s.lastIndexOf(':');
    if (colon <= 0 || colon == s.length() - 1) {
      usage("address must be HOST:PORT, got " + s);
    }
    String host = s.substring(0, colon);
    if (host.startsWith("[") && host.endsWith("]")) {
      host = host.substring(1, host.length() - 1);
    }
    return new InetSocketAddress(host, parseInt(s.substring(colon + 1), "PORT"));
  }

  private static int parseInt(String s, String what) {
    long value = parseLong(s, what);
    if (value != (int) value) {
      usage(what + " must be an integer of 32 bits, got " + s);
    }
    return (int) value;
  }

  private static long parseLong(String s, String what) {
    try {
      return Long.parseLong(s);
    } catch (NumberFormatException e) {
      usage(what + " must be an integer, got " + s);
      return 0;
    }
  }

  private static void usage(String problem) {
    System.err.println(problem);
    System.err.println("usage: java -jar larder-spymemcached-check.jar [--binary] HOST:PORT checks");
    System.err.println("       java -jar larder-spymemcached-check.jar [--binary] HOST:PORT write N SEED");
    System.err.println("       java -jar larder-spymemcached-check.jar [--binary] HOST:PORT verify N SEED");
    System.exit(2);
  }
}
