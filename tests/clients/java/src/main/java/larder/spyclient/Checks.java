package larder.spyclient;

import static larder.spyclient.Expect.await;
import static larder.spyclient.Expect.eq;
import static larder.spyclient.Expect.fail;
import static larder.spyclient.Expect.isTrue;
import static larder.spyclient.Expect.throwsEx;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.internal.BulkFuture;
import net.spy.memcached.internal.GetFuture;
import net.spy.memcached.internal.OperationFuture;
import net.spy.memcached.ops.OperationErrorType;
import net.spy.memcached.ops.OperationException;
import net.spy.memcached.ops.StatusCode;
import net.spy.memcached.transcoders.SerializingTranscoder;

/**
 * The checks: each group goes through spymemcached's own API and asserts
 * exactly what memcached answers (booleans of futures and their status
 * lines, CASResponse values, null on a miss, the flags each transcoder
 * chose). Keys carry a per-run random prefix.
 *
 * <p>The same groups run on either protocol. Where the binary protocol
 * answers otherwise, or the client does more with it, a group asserts the
 * binary answer instead, and says why: its statuses are codes (the text
 * that comes with them is free-form, so not asserted), keys may hold any
 * bytes, an expiry is unsigned, and get-and-touch, incr with a default and
 * a cas on append, prepend and delete are the client's on binary only.
 */
final class Checks {
  /**
   * What a store, delete or touch answers: the text protocol's reply line,
   * which spymemcached gives as the status message, and the binary
   * protocol's status code. Where the text protocol says NOT_STORED the
   * binary one says why.
   */
  private record Reply(String text, StatusCode binary) {}

  private static final Reply STORED = new Reply("STORED", StatusCode.SUCCESS);
  private static final Reply DELETED = new Reply("DELETED", StatusCode.SUCCESS);
  private static final Reply TOUCHED = new Reply("TOUCHED", StatusCode.SUCCESS);
  private static final Reply NOT_FOUND = new Reply("NOT_FOUND", StatusCode.ERR_NOT_FOUND);
  /** An add over an existing key. */
  private static final Reply ADD_EXISTS = new Reply("NOT_STORED", StatusCode.ERR_EXISTS);
  /** A replace of a missing key. */
  private static final Reply REPLACE_MISSING = new Reply("NOT_STORED", StatusCode.ERR_NOT_FOUND);
  /** An append or prepend to a missing key. */
  private static final Reply CONCAT_MISSING = new Reply("NOT_STORED", StatusCode.ERR_NOT_STORED);
  /**
   * A write with a cas that is not the key's, where only the binary
   * protocol carries one (append, prepend, delete): its text is unused.
   */
  private static final Reply CAS_STALE = new Reply("EXISTS", StatusCode.ERR_EXISTS);

  /** SerializingTranscoder's flag bits (see its source). */
  private static final int SERIALIZED = 1;
  private static final int COMPRESSED = 2;
  private static final int SPECIAL_BOOLEAN = 1 << 8;
  private static final int SPECIAL_INT = 2 << 8;
  private static final int SPECIAL_LONG = 3 << 8;
  private static final int SPECIAL_DATE = 4 << 8;
  private static final int SPECIAL_BYTE = 5 << 8;
  private static final int SPECIAL_FLOAT = 6 << 8;
  private static final int SPECIAL_DOUBLE = 7 << 8;
  private static final int SPECIAL_BYTEARRAY = 8 << 8;

  private static final int MIB = 1024 * 1024;

  private final InetSocketAddress addr;
  /** Through spymemcached's BinaryConnectionFactory, not its default (text) one. */
  private final boolean binary;
  private final String p;
  private final SplittableRandom random = new SplittableRandom();
  /** Never compresses, so a value near the item limit stays near it. */
  private final SerializingTranscoder uncompressed = new SerializingTranscoder();
  private MemcachedClient c;
  private int passed;
  private int failed;
  private long expirySetAtNanos;
  private String versionSeen;

  Checks(InetSocketAddress addr, boolean binary) {
    this.addr = addr;
    this.binary = binary;
    this.p = String.format("jc%08x:", random.nextInt());
    uncompressed.setCompressionThreshold(Integer.MAX_VALUE);
  }

  int run() {
    c = Connect.open(addr, binary);
    if (c == null) {
      return 1;
    }
    try {
      check("flush_all empties the server", this::flushAll);
      check("expiry: set with exp 2, touch to 2 and to 0, negative and absolute exp"
          + (binary ? ", getAndTouch to 2 and to 0" : ""), this::expirySetup);
      check("version", this::version);
      check("stats, stats settings, stats items", this::stats);
      check("String round trip", this::stringRoundTrip);
      check("byte[] round trip (default transcoder)", this::bytesRoundTrip);
      check("miss is null (get, gets, asyncGet, asyncGets, getBulk)", this::missing);
      check("every byte value and \\r\\n inside a value", this::allByteValues);
      check("empty value", this::emptyValue);
      check("value near 1 MiB, uncompressed", this::nearLimit);
      check("compressed values (default transcoder) keep their flags", this::compressed);
      check("typed values keep their flags", this::typedValues);
      check("value over the item size limit is refused", this::overLimit);
      check(binary
          ? "key of 250 bytes works, longer is refused by the client, any bytes go in a binary key"
          : "key of 250 bytes works, longer or with spaces is refused by the client",
          this::keyLimits);
      check("keys with tab, control and UTF-8 bytes", this::unusualKeys);
      check("add", this::add);
      check("replace", this::replace);
      check("append and prepend", this::appendPrepend);
      check("gets and cas (OK, EXISTS, NOT_FOUND)", this::casResponses);
      if (binary) {
        check("append, prepend and delete with a cas (binary protocol only)", this::casOnConcat);
      }
      check("cas unique changes on every write, not on get or touch", this::casUnique);
      check("incr and decr", this::incrDecr);
      check("incr and decr with a default value" + (binary ? " (the server's own default)" : ""),
          this::incrDecrDefault);
      check("incr on a non-numeric value", this::incrNonNumeric);
      check("delete", this::delete);
      check("touch", this::touch);
      check(binary ? "getAndTouch and asyncGetAndTouch (binary protocol only)"
          : "getAndTouch is refused by the client on the text protocol", this::getAndTouch);
      check("getBulk of 200 keys, some missing", this::bulk200);
      check("async operations and listeners", this::async);
      check("a second connection sees the same data", this::secondConnection);
      check("concurrency: 8 threads x 500 mixed ops on one client", this::concurrency);
      check("expiry: expired keys are gone after 3.5 s", this::expiryAfter);
      check(binary ? "flush with a delay (which the client drops on binary: at once)"
          : "flush_all with a delay", this::delayedFlush);
    } finally {
      Connect.close(c);
    }
    if (failed == 0) {
      System.out.println("ok " + passed + " checks");
      return 0;
    }
    System.err.println("FAIL " + failed + " of " + (passed + failed) + " checks failed");
    return 1;
  }

  private void check(String name, Expect.ThrowingRunnable body) {
    try {
      body.run();
      passed++;
      System.out.println("ok  " + name);
    } catch (CheckFailed e) {
      failed++;
      System.err.println("FAIL " + name + ": " + e.getMessage());
    } catch (Throwable t) {
      failed++;
      System.err.println("FAIL " + name + ": expected no exception got " + t);
      StackTraceElement[] st = t.getStackTrace();
      for (int i = 0; i < Math.min(6, st.length); i++) {
        System.err.println("    at " + st[i]);
      }
    }
    System.out.flush();
    System.err.flush();
  }

  // --------------------------------------------------------------- support

  private String k(String name) {
    return p + name;
  }

  private byte[] randomBytes(int n) {
    byte[] b = new byte[n];
    for (int i = 0; i < n; i++) {
      b[i] = (byte) random.nextInt(256);
    }
    return b;
  }

  /**
   * A store's future must give {@code expected}, with the server's status
   * line (text protocol) or status code (binary protocol) that {@code reply}
   * names.
   */
  private void stored(String what, OperationFuture<Boolean> f, boolean expected, Reply reply) {
    eq(what, expected, await(what, f));
    eq(what + (binary ? " (status code)" : " (status line)"), expected(reply), replyOf(f));
  }

  /** The reply a finished future's status shows: its line (text) or its code (binary). */
  private Object replyOf(OperationFuture<?> f) {
    return binary ? f.getStatus().getStatusCode() : f.getStatus().getMessage();
  }

  /** What {@link #replyOf} must give for {@code reply} on this run's protocol. */
  private Object expected(Reply reply) {
    return binary ? reply.binary() : reply.text();
  }

  private void set(String key, Object value) {
    stored("set " + key, c.set(key, 0, value), true, STORED);
  }

  private Blob raw(String key) {
    return c.get(key, BlobTranscoder.INSTANCE);
  }

  private long casOf(String key) {
    CASValue<Object> v = c.gets(key);
    if (v == null) {
      fail("gets " + key + ": expected a value got null");
    }
    return v.getCas();
  }

  private static Map<String, String> one(Map<SocketAddress, Map<String, String>> all,
      String what) {
    eq(what + ": servers answering", 1, all.size());
    return all.values().iterator().next();
  }

  private static long stat(Map<String, String> s, String name) {
    String v = s.get(name);
    if (v == null) {
      fail("stats: expected a " + name + " line got none among " + new TreeMap<>(s).keySet());
    }
    try {
      return Long.parseLong(v.trim());
    } catch (NumberFormatException e) {
      fail("stats " + name + ": expected a number got " + Expect.show(v));
      return 0;
    }
  }

  /**
   * What a future came to, for checks that provoke an error reply: "true",
   * "false (STATUS)", or "error TYPE: message" when the client turned the
   * reply into an exception.
   */
  private static String outcome(Future<?> f) {
    try {
      Object v = f.get(Expect.FUTURE_TIMEOUT_S, TimeUnit.SECONDS);
      String status = f instanceof OperationFuture<?> of && of.getStatus() != null
          ? " (" + of.getStatus().getMessage() + ")" : "";
      return v + status;
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof OperationException oe) {
        return "error " + oe.getType() + ": " + oe.getMessage();
      }
      return "error " + cause;
    } catch (Exception e) {
      return "error " + e;
    }
  }

  private MemcachedClient otherClient() {
    try {
      return Connect.client(addr, binary);
    } catch (IOException e) {
      fail("second client: expected a connection got " + e);
      return null;
    }
  }

  private static void sleepUntil(long deadlineNanos) throws InterruptedException {
    long left = deadlineNanos - System.nanoTime();
    if (left > 0) {
      TimeUnit.NANOSECONDS.sleep(left);
    }
  }

  // ----------------------------------------------------------------- checks

  private void flushAll() {
    String key = k("flush");
    set(key, "v");
    eq("get before flush_all", "v", c.get(key));
    eq("flush()", true, await("flush()", c.flush()));
    eq("get after flush_all", null, c.get(key));
  }

  private void version() {
    Map<SocketAddress, String> v = c.getVersions();
    eq("getVersions(): servers answering", 1, v.size());
    String ver = v.values().iterator().next();
    isTrue("version looks like N.N.N", ver != null && ver.matches("\\d+\\.\\d+\\.\\d+\\S*"), ver);
    versionSeen = ver;
  }

  private void stats() {
    Map<String, String> before = one(c.getStats(), "getStats()");
    for (String name : List.of("pid", "uptime", "time", "curr_connections", "total_connections",
        "curr_items", "total_items", "bytes", "cmd_get", "cmd_set", "get_hits", "get_misses",
        "limit_maxbytes", "threads")) {
      isTrue("stats " + name + " >= 0", stat(before, name) >= 0, before.get(name));
    }
    isTrue("stats curr_connections >= 1", stat(before, "curr_connections") >= 1,
        before.get("curr_connections"));
    if (versionSeen != null) {
      eq("stats version equals the version command's", versionSeen, before.get("version"));
    }
    String key = k("stats");
    set(key, "v");
    eq("get", "v", c.get(key));
    eq("get of a missing key", null, c.get(k("stats-missing")));
    Map<String, String> after = one(c.getStats(), "getStats()");
    isTrue("get_hits grew", stat(after, "get_hits") >= stat(before, "get_hits") + 1,
        before.get("get_hits") + " -> " + after.get("get_hits"));
    isTrue("get_misses grew", stat(after, "get_misses") >= stat(before, "get_misses") + 1,
        before.get("get_misses") + " -> " + after.get("get_misses"));
    isTrue("cmd_set grew", stat(after, "cmd_set") >= stat(before, "cmd_set") + 1,
        before.get("cmd_set") + " -> " + after.get("cmd_set"));
    isTrue("cmd_get grew by the two gets", stat(after, "cmd_get") >= stat(before, "cmd_get") + 2,
        before.get("cmd_get") + " -> " + after.get("cmd_get"));
    isTrue("curr_items >= 1 with a key just set", stat(after, "curr_items") >= 1,
        after.get("curr_items"));

    Map<String, String> settings = one(c.getStats("settings"), "getStats(\"settings\")");
    isTrue("stats settings item_size_max >= 1 MiB", stat(settings, "item_size_max") >= MIB,
        settings.get("item_size_max"));

    Map<String, String> items = one(c.getStats("items"), "getStats(\"items\")");
    long counted = 0;
    for (Map.Entry<String, String> e : items.entrySet()) {
      if (e.getKey().matches("items:\\d+:number")) {
        counted += Long.parseLong(e.getValue().trim());
      }
    }
    isTrue("stats items: items:N:number adds up to >= 1", counted >= 1, items);
  }

  private void stringRoundTrip() {
    String[] values = {
      "hello",
      "h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c\u8a9e",
      "line one\r\nEND\r\nVALUE x 0 1\r\nline two",
      "  spaces around  ",
    };
    for (int i = 0; i < values.length; i++) {
      String key = k("str" + i);
      set(key, values[i]);
      eq("get String " + i, values[i], c.get(key));
      eq("String " + i + " as stored (flags 0, UTF-8)",
          new Blob(0, values[i].getBytes(StandardCharsets.UTF_8)), raw(key));
    }
  }

  private void bytesRoundTrip() {
    String key = k("bytes");
    byte[] b = randomBytes(1000);
    set(key, b);
    eq("get byte[]", b, c.get(key));
    eq("byte[] as stored (SerializingTranscoder's byte[] flag)", new Blob(SPECIAL_BYTEARRAY, b),
        raw(key));
  }

  private void missing() {
    String key = k("never-set");
    eq("get", null, c.get(key));
    eq("get with the raw transcoder", null, raw(key));
    eq("gets", null, c.gets(key));
    eq("asyncGet", null, await("asyncGet", c.asyncGet(key)));
    eq("asyncGets", null, await("asyncGets", c.asyncGets(key)));
    eq("getBulk", Map.of(), c.getBulk(key));
  }

  private void allByteValues() throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (int v = 0; v < 256; v++) {
      out.write(v);
    }
    out.write("\r\n".getBytes(StandardCharsets.US_ASCII));
    out.write("\r\nEND\r\nVALUE x 0 5\r\nhello\r\n".getBytes(StandardCharsets.US_ASCII));
    for (int v = 255; v >= 0; v--) {
      out.write(v);
    }
    out.write(new byte[] {0, 0, '\r', '\n'});
    Blob value = new Blob(0xBEEF, out.toByteArray());
    String key = k("allbytes");
    stored("set", c.set(key, 0, value, BlobTranscoder.INSTANCE), true, STORED);
    eq("get", value, raw(key));
    eq("getBulk", Map.of(key, value), c.getBulk(List.of(key), BlobTranscoder.INSTANCE));
    CASValue<Blob> g = c.gets(key, BlobTranscoder.INSTANCE);
    eq("gets", value, g == null ? null : g.getValue());

    String key2 = k("allbytes-default");
    set(key2, out.toByteArray());
    eq("get (default transcoder)", out.toByteArray(), c.get(key2));
  }

  private void emptyValue() {
    String key = k("empty");
    Blob empty = new Blob(7, new byte[0]);
    stored("set empty", c.set(key, 0, empty, BlobTranscoder.INSTANCE), true, STORED);
    eq("get empty (not a miss)", empty, raw(key));
    eq("getBulk empty", Map.of(key, empty), c.getBulk(List.of(key), BlobTranscoder.INSTANCE));

    set(k("empty-string"), "");
    eq("get empty String", "", c.get(k("empty-string")));
    set(k("empty-bytes"), new byte[0]);
    eq("get empty byte[]", new byte[0], c.get(k("empty-bytes")));
  }

  private void nearLimit() {
    String key = k("near-limit");
    byte[] big = randomBytes(MIB - 1024);
    stored("set " + big.length + " bytes", c.set(key, 0, big, uncompressed), true, STORED);
    eq("get " + big.length + " bytes", big, c.get(key, uncompressed));
    eq("as stored (byte[] flag, not compressed)", new Blob(SPECIAL_BYTEARRAY, big), raw(key));

    String key2 = k("near-limit-raw");
    Blob blob = new Blob(0x7fff_ffff, randomBytes(MIB - 2048));
    stored("set raw " + blob.data.length + " bytes", c.set(key2, 0, blob, BlobTranscoder.INSTANCE),
        true, STORED);
    eq("get raw", blob, raw(key2));
  }

  private void compressed() {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; sb.length() < 200 * 1024; i++) {
      sb.append("Larder keeps what it acknowledged, line ").append(i).append(".\n");
    }
    String text = sb.toString();
    String key = k("compressed-string");
    set(key, text);
    Blob stored = raw(key);
    isTrue("a 200 KiB String is stored compressed (flag 2)",
        stored != null && stored.flags == COMPRESSED, stored);
    isTrue("compressed String is smaller on the server", stored.data.length < text.length() / 4,
        stored.data.length + " bytes");
    eq("get decompresses the String", text, c.get(key));

    byte[] bytes = new byte[64 * 1024];
    for (int i = 0; i < bytes.length; i++) {
      bytes[i] = (byte) (i % 7);
    }
    String key2 = k("compressed-bytes");
    set(key2, bytes);
    Blob stored2 = raw(key2);
    isTrue("a 64 KiB byte[] is stored compressed (flags byte[] | 2)",
        stored2 != null && stored2.flags == (SPECIAL_BYTEARRAY | COMPRESSED), stored2);
    eq("get decompresses the byte[]", bytes, c.get(key2));
  }

  private void typedValues() {
    HashMap<String, Integer> map = new HashMap<>();
    map.put("one", 1);
    map.put("two", 2);
    Object[] values = {42, 1234567890123L, true, new Date(1700000000000L), 3.25d, 1.5f,
        (byte) 7, map};
    int[] flags = {SPECIAL_INT, SPECIAL_LONG, SPECIAL_BOOLEAN, SPECIAL_DATE, SPECIAL_DOUBLE,
        SPECIAL_FLOAT, SPECIAL_BYTE, SERIALIZED};
    for (int i = 0; i < values.length; i++) {
      String key = k("typed" + i);
      String what = values[i].getClass().getSimpleName();
      set(key, values[i]);
      eq("get " + what, values[i], c.get(key));
      Blob b = raw(key);
      eq(what + " flags as stored", flags[i], b == null ? null : b.flags);
    }
  }

  private void overLimit() {
    String key = k("too-large");
    set(key, "old");
    byte[] huge = randomBytes(2 * MIB);
    if (binary) {
      // The binary protocol answers status E2BIG (0x0003), which the client
      // gives as a false result and keeps its connection: one client does it.
      OperationFuture<Boolean> f = c.set(key, 0, new Blob(0, huge), BlobTranscoder.INSTANCE);
      eq("set of 2 MiB", false, await("set", f));
      eq("set of 2 MiB: status code", StatusCode.ERR_2BIG, f.getStatus().getStatusCode());
      // memcached unlinks the old item when a set is refused.
      eq("get after the refused set", null, c.get(key));
      // ... but not when a replace is.
      set(key, "old again");
      OperationFuture<Boolean> r = c.replace(key, 0, new Blob(0, huge), BlobTranscoder.INSTANCE);
      eq("replace with 2 MiB", false, await("replace", r));
      eq("replace with 2 MiB: status code", StatusCode.ERR_2BIG, r.getStatus().getStatusCode());
      eq("get after the refused replace", "old again", c.get(key));
      return;
    }
    MemcachedClient other = otherClient();
    String got;
    try {
      got = outcome(other.set(key, 0, new Blob(0, huge), BlobTranscoder.INSTANCE));
    } finally {
      Connect.close(other);
    }
    // memcached answers SERVER_ERROR object too large for cache, which the
    // client raises as an OperationException of type SERVER.
    isTrue("set of 2 MiB: expected error " + OperationErrorType.SERVER + ": SERVER_ERROR ...",
        got.startsWith("error " + OperationErrorType.SERVER + ": SERVER_ERROR"), got);
    // memcached also unlinks the old item when a set is refused.
    eq("get after the refused set", null, c.get(key));
    eq("get the same key raw after the refused set", null, raw(key));
  }

  private void keyLimits() {
    String k250 = p + "k" + "x".repeat(250 - p.length() - 1);
    eq("key length", 250, k250.getBytes(StandardCharsets.UTF_8).length);
    set(k250, "long key");
    eq("get 250-byte key", "long key", c.get(k250));
    eq("getBulk 250-byte key", Map.of(k250, "long key"), c.getBulk(k250));
    stored("delete 250-byte key", c.delete(k250), true, DELETED);

    int rest = 250 - p.length() - 1;
    String u250 = p + "u" + (rest % 2 == 1 ? "x" : "") + "\u00e9".repeat(rest / 2);
    eq("UTF-8 key length in bytes", 250, u250.getBytes(StandardCharsets.UTF_8).length);
    set(u250, "utf8 long key");
    eq("get 250-byte UTF-8 key", "utf8 long key", c.get(u250));

    String k251 = k250 + "x";
    String u252 = u250 + "\u00e9";
    String space = k("with space");
    String crlf = k("with\r\nnewline");
    String lf = k("with\nnewline");
    String nul = k("with\0nul");
    List<String> unusual = List.of(space, crlf, lf, nul);
    List<String> refused = new ArrayList<>(List.of(k251, u252, ""));
    if (!binary) {
      refused.addAll(unusual);
    }
    for (String bad : refused) {
      String what = "key " + Expect.show(bad.length() > 40 ? bad.substring(bad.length() - 12)
          : bad) + " (" + bad.getBytes(StandardCharsets.UTF_8).length + " bytes)";
      throwsEx("set with " + what, IllegalArgumentException.class, () -> c.set(bad, 0, "v"));
      throwsEx("get with " + what, IllegalArgumentException.class, () -> c.get(bad));
      throwsEx("getBulk with " + what, IllegalArgumentException.class,
          () -> c.getBulk(List.of(k("fine"), bad)));
      throwsEx("delete with " + what, IllegalArgumentException.class, () -> c.delete(bad));
      throwsEx("incr with " + what, IllegalArgumentException.class, () -> c.incr(bad, 1));
    }
    // Nothing was sent: the connection still answers in order.
    eq("get 250-byte UTF-8 key afterwards", "utf8 long key", c.get(u250));
    if (!binary) {
      return;
    }
    // A binary request gives its key's length in its header, so a key may
    // hold any bytes: the client checks only the length, and the server
    // keeps such keys apart from each other and from their prefixes.
    for (int i = 0; i < unusual.size(); i++) {
      set(unusual.get(i), String.valueOf(40 + i));
    }
    set(k("with"), "prefix");
    for (int i = 0; i < unusual.size(); i++) {
      String key = unusual.get(i);
      String what = "key " + Expect.show(key);
      eq("get with " + what, String.valueOf(40 + i), c.get(key));
      eq("getBulk with " + what, Map.of(key, String.valueOf(40 + i)),
          c.getBulk(List.of(key, k("fine-missing"))));
      eq("incr with " + what, 41L + i, c.incr(key, 1));
      CASValue<Object> g = c.gets(key);
      eq("gets with " + what, String.valueOf(41 + i), g == null ? null : g.getValue());
      stored("delete with " + what, c.delete(key), true, DELETED);
      eq("get after delete with " + what, null, c.get(key));
    }
    eq("the keys' common prefix, set on its own", "prefix", c.get(k("with")));
  }

  private void unusualKeys() {
    Map<String, Object> want = new LinkedHashMap<>();
    want.put(k("tab\there"), "tab");
    want.put(k("ctl\u0001\u007fbytes"), "control");
    want.put(k("\u043a\u043b\u044e\u0447-\u65e5\u672c"), "utf-8");
    for (Map.Entry<String, Object> e : want.entrySet()) {
      set(e.getKey(), e.getValue());
      eq("get " + Expect.show(e.getKey()), e.getValue(), c.get(e.getKey()));
    }
    eq("getBulk of all three", want, c.getBulk(want.keySet()));
    for (String key : want.keySet()) {
      CASValue<Object> g = c.gets(key);
      eq("gets " + Expect.show(key), want.get(key), g == null ? null : g.getValue());
      stored("delete " + Expect.show(key), c.delete(key), true, DELETED);
      eq("get after delete " + Expect.show(key), null, c.get(key));
    }
  }

  private void add() {
    String key = k("add");
    stored("add of a new key", c.add(key, 0, "first"), true, STORED);
    eq("get after add", "first", c.get(key));
    stored("add of an existing key", c.add(key, 0, "second"), false, ADD_EXISTS);
    eq("get after refused add", "first", c.get(key));
  }

  private void replace() {
    String key = k("replace");
    stored("replace of a missing key", c.replace(key, 0, "x"), false, REPLACE_MISSING);
    eq("get after refused replace", null, c.get(key));
    set(key, "a");
    stored("replace of an existing key", c.replace(key, 0, "b"), true, STORED);
    eq("get after replace", "b", c.get(key));
  }

  private void appendPrepend() {
    String key = k("cat");
    Blob mid = new Blob(0x1234, "mid".getBytes(StandardCharsets.US_ASCII));
    stored("set", c.set(key, 0, mid, BlobTranscoder.INSTANCE), true, STORED);
    stored("append", c.append(key, new Blob(0x9999, "-end".getBytes(StandardCharsets.US_ASCII)),
        BlobTranscoder.INSTANCE), true, STORED);
    stored("prepend", c.prepend(key,
        new Blob(0x9999, "start-".getBytes(StandardCharsets.US_ASCII)), BlobTranscoder.INSTANCE),
        true, STORED);
    eq("value after append and prepend keeps the first flags",
        new Blob(0x1234, "start-mid-end".getBytes(StandardCharsets.US_ASCII)), raw(key));

    String key2 = k("cat-string");
    set(key2, "b");
    stored("append String", c.append(key2, "c"), true, STORED);
    stored("prepend String", c.prepend(key2, "a"), true, STORED);
    stored("append with cas 0", c.append(0L, key2, "d"), true, STORED);
    stored("prepend with cas 0", c.prepend(0L, key2, "_"), true, STORED);
    eq("get after appends and prepends", "_abcd", c.get(key2));

    String gone = k("cat-missing");
    stored("append to a missing key", c.append(gone, "x"), false, CONCAT_MISSING);
    stored("prepend to a missing key", c.prepend(gone, "x"), false, CONCAT_MISSING);
    stored("append with cas 0 to a missing key", c.append(0L, gone, "x"), false, CONCAT_MISSING);
    stored("prepend with cas 0 to a missing key", c.prepend(0L, gone, "x"), false, CONCAT_MISSING);
    eq("get after refused appends", null, c.get(gone));
  }

  private void casResponses() {
    String key = k("cas");
    set(key, "v1");
    CASValue<Object> g1 = c.gets(key);
    eq("gets value", "v1", g1 == null ? null : g1.getValue());
    eq("cas with the current unique", CASResponse.OK, c.cas(key, g1.getCas(), "v2"));
    eq("get after cas", "v2", c.get(key));
    eq("cas with a stale unique", CASResponse.EXISTS, c.cas(key, g1.getCas(), "v3"));
    eq("get after stale cas", "v2", c.get(key));
    CASValue<Object> g2 = c.gets(key);
    isTrue("unique changed after cas", g2 != null && g2.getCas() != g1.getCas(), g2);
    eq("cas with an expiry", CASResponse.OK, c.cas(key, g2.getCas(), 3600, "v4"));
    CASValue<Object> g3 = await("asyncGets", c.asyncGets(key));
    eq("asyncGets value", "v4", g3 == null ? null : g3.getValue());
    eq("asyncCAS", CASResponse.OK, await("asyncCAS", c.asyncCAS(key, g3.getCas(), "v5")));
    eq("asyncCAS with a stale unique", CASResponse.EXISTS,
        await("asyncCAS", c.asyncCAS(key, g3.getCas(), "v6")));
    long current = casOf(key);
    stored("delete", c.delete(key), true, DELETED);
    eq("cas on a deleted key", CASResponse.NOT_FOUND, c.cas(key, current, "v7"));
    eq("get after cas on a deleted key", null, c.get(key));
    eq("cas on a key never set", CASResponse.NOT_FOUND, c.cas(k("cas-never"), 12345L, "x"));
    eq("get after cas on a key never set", null, c.get(k("cas-never")));
  }

  /**
   * The binary protocol's append, prepend and delete carry a cas, which
   * the client passes on there (on the text protocol it has nowhere to put
   * it): a stale one refuses the write with EXISTS.
   */
  private void casOnConcat() {
    String key = k("cas-cat");
    set(key, "mid");
    long unique = casOf(key);
    stored("append with a stale cas", c.append(unique + 1, key, "-x"), false, CAS_STALE);
    stored("prepend with a stale cas", c.prepend(unique + 1, key, "x-"), false, CAS_STALE);
    eq("value after the refused append and prepend", "mid", c.get(key));
    eq("unique after the refused append and prepend", unique, casOf(key));
    stored("append with the current cas", c.append(unique, key, "-end"), true, STORED);
    long afterAppend = casOf(key);
    isTrue("unique changed by the append", afterAppend != unique, afterAppend);
    stored("prepend with the cas before the append", c.prepend(unique, key, "x-"), false,
        CAS_STALE);
    stored("prepend with the current cas", c.prepend(afterAppend, key, "start-"), true, STORED);
    eq("value after append and prepend with a cas", "start-mid-end", c.get(key));
    String gone = k("cas-cat-missing");
    stored("append with a cas to a missing key", c.append(12345L, gone, "x"), false,
        CONCAT_MISSING);
    stored("prepend with a cas to a missing key", c.prepend(12345L, gone, "x"), false,
        CONCAT_MISSING);

    long current = casOf(key);
    stored("delete with a stale cas", c.delete(key, current + 1), false, CAS_STALE);
    eq("value after the refused delete", "start-mid-end", c.get(key));
    stored("delete with the current cas", c.delete(key, current), true, DELETED);
    eq("get after delete with a cas", null, c.get(key));
    stored("delete with a cas of a missing key", c.delete(key, current), false, NOT_FOUND);
  }

  private void casUnique() {
    String key = k("unique");
    set(key, "1");
    long c1 = casOf(key);
    eq("get", "1", c.get(key));
    eq("unique after a get", c1, casOf(key));
    stored("touch", c.touch(key, 3600), true, TOUCHED);
    eq("unique after a touch", c1, casOf(key));
    stored("append", c.append(key, "0"), true, STORED);
    long c2 = casOf(key);
    stored("prepend", c.prepend(key, "1"), true, STORED);
    long c3 = casOf(key);
    eq("incr", 111L, c.incr(key, 1));
    long c4 = casOf(key);
    stored("replace", c.replace(key, 0, "5"), true, STORED);
    long c5 = casOf(key);
    set(key, "6");
    long c6 = casOf(key);
    Set<Long> seen = new HashSet<>(List.of(c1, c2, c3, c4, c5, c6));
    eq("distinct uniques after set, append, prepend, incr, replace, set", 6, seen.size());
  }

  private void incrDecr() {
    String key = k("ctr");
    eq("incr of a missing key", -1L, c.incr(key, 1));
    eq("decr of a missing key", -1L, c.decr(key, 1));
    eq("get after incr/decr of a missing key", null, c.get(key));

    set(key, "10");
    eq("incr 5", 15L, c.incr(key, 5));
    eq("decr 3", 12L, c.decr(key, 3));
    eq("get", "12", c.get(key));
    eq("decr below zero stays 0", 0L, c.decr(key, 100));
    // memcached rewrites a counter in place, padding with spaces.
    eq("get after decr to 0", "0 ", c.get(key));
    eq("incr by 0", 0L, c.incr(key, 0));

    set(key, "99");
    eq("incr to three digits", 100L, c.incr(key, 1));
    eq("get after growing", "100", c.get(key));

    set(key, "9223372036854775806");
    eq("incr to Long.MAX_VALUE", Long.MAX_VALUE, c.incr(key, 1));

    set(key, "18446744073709551615");
    eq("incr wraps at 2^64", 0L, c.incr(key, 1));
    eq("get after wrapping", "0" + " ".repeat(19), c.get(key));

    set(key, "7");
    eq("asyncIncr", 9L, await("asyncIncr", c.asyncIncr(key, 2)));
    eq("asyncDecr", 4L, await("asyncDecr", c.asyncDecr(key, 5)));
    eq("asyncDecr below zero", 0L, await("asyncDecr", c.asyncDecr(key, 50)));
    // incr() and decr() give -1 for any refusal; the futures' status tells
    // NOT_FOUND from an error reply (on binary, its code).
    OperationFuture<Long> incrMissing = c.asyncIncr(k("ctr-none"), 1);
    eq("asyncIncr of a missing key", -1L, await("asyncIncr", incrMissing));
    eq("asyncIncr of a missing key: reply", expected(NOT_FOUND), replyOf(incrMissing));
    OperationFuture<Long> decrMissing = c.asyncDecr(k("ctr-none"), 1);
    eq("asyncDecr of a missing key", -1L, await("asyncDecr", decrMissing));
    eq("asyncDecr of a missing key: reply", expected(NOT_FOUND), replyOf(decrMissing));
    if (!binary) {
      throwsEx("asyncIncr with a default (binary protocol only)",
          UnsupportedOperationException.class, () -> c.asyncIncr(key, 1, 5));
      return;
    }
    // The binary protocol's incr and decr carry a default (and an expiry):
    // the server stores the default when the key is missing.
    eq("asyncIncr with a default of an existing key", 1L,
        await("asyncIncr", c.asyncIncr(key, 1, 5)));
    String fresh = k("ctr-async-default");
    eq("asyncIncr with a default of a missing key gives the default", 5L,
        await("asyncIncr", c.asyncIncr(fresh, 1, 5)));
    eq("get of the default", "5", c.get(fresh));
    eq("asyncDecr with a default of the key now there", 3L,
        await("asyncDecr", c.asyncDecr(fresh, 2, 50)));
    String fresh2 = k("ctr-async-default-decr");
    eq("asyncDecr with a default of a missing key gives the default", 50L,
        await("asyncDecr", c.asyncDecr(fresh2, 2, 50)));
    eq("get of the decr's default", "50", c.get(fresh2));
  }

  private void incrDecrDefault() {
    String key = k("ctr-default");
    eq("incr with default on a missing key gives the default", 100L, c.incr(key, 5, 100));
    eq("get after the default was stored", "100", c.get(key));
    eq("incr with default on an existing key", 105L, c.incr(key, 5, 100));
    eq("get", "105", c.get(key));

    String key2 = k("ctr-default-decr");
    eq("decr with default on a missing key gives the default", 7L, c.decr(key2, 3, 7));
    eq("decr with default on an existing key", 4L, c.decr(key2, 3, 7));
    eq("decr with default below zero", 0L, c.decr(key2, 10, 7));

    String key3 = k("ctr-default-exp");
    eq("incr with default and expiry", 1L, c.incr(key3, 1, 1, 3600));
    eq("incr with default and expiry again", 2L, c.incr(key3, 1, 1, 3600));
    eq("get", "2", c.get(key3));
  }

  private void incrNonNumeric() {
    String key = k("not-a-number");
    set(key, "abc");
    if (binary) {
      // The binary protocol answers a status code (DELTA_BADVAL, 0x0006)
      // that the client gives as a failed status, keeping its connection:
      // one client does it all.
      OperationFuture<Long> incr = c.asyncIncr(key, 1);
      eq("asyncIncr of \"abc\"", -1L, await("asyncIncr", incr));
      eq("asyncIncr of \"abc\": status code", StatusCode.ERR_DELTA_BADVAL,
          incr.getStatus().getStatusCode());
      OperationFuture<Long> decr = c.asyncDecr(key, 1);
      eq("asyncDecr of \"abc\"", -1L, await("asyncDecr", decr));
      eq("asyncDecr of \"abc\": status code", StatusCode.ERR_DELTA_BADVAL,
          decr.getStatus().getStatusCode());
      OperationFuture<Long> withDefault = c.asyncIncr(key, 1, 5);
      eq("asyncIncr with a default of \"abc\" (no default stored over it)", -1L,
          await("asyncIncr", withDefault));
      eq("asyncIncr with a default of \"abc\": status code", StatusCode.ERR_DELTA_BADVAL,
          withDefault.getStatus().getStatusCode());
      eq("incr() of \"abc\" (the client reports failure as -1)", -1L, c.incr(key, 1));
      eq("value after the refused incrs", "abc", c.get(key));
      return;
    }
    // memcached answers CLIENT_ERROR cannot increment or decrement non-numeric
    // value; spymemcached then drops and reopens the connection, so each
    // attempt uses a client of its own.
    MemcachedClient other = otherClient();
    String got;
    try {
      got = outcome(other.asyncIncr(key, 1));
    } finally {
      Connect.close(other);
    }
    isTrue("asyncIncr of \"abc\": expected error " + OperationErrorType.CLIENT
        + ": CLIENT_ERROR ...", got.startsWith("error " + OperationErrorType.CLIENT
        + ": CLIENT_ERROR"), got);

    MemcachedClient third = otherClient();
    long sync;
    try {
      sync = third.incr(key, 1);
    } finally {
      Connect.close(third);
    }
    eq("incr() of \"abc\" (the client reports failure as -1)", -1L, sync);
    eq("value after the refused incr", "abc", c.get(key));
  }

  private void delete() {
    String key = k("delete");
    set(key, "v");
    stored("delete of an existing key", c.delete(key), true, DELETED);
    eq("get after delete", null, c.get(key));
    stored("delete of a missing key", c.delete(key), false, NOT_FOUND);
    stored("add after delete", c.add(key, 0, "again"), true, STORED);
    eq("get after add", "again", c.get(key));
  }

  private void touch() {
    String key = k("touch");
    set(key, "t");
    stored("touch of an existing key", c.touch(key, 3600), true, TOUCHED);
    eq("get after touch", "t", c.get(key));
    stored("touch of a missing key", c.touch(k("touch-missing"), 3600), false, NOT_FOUND);
    eq("get of the missing key after touch", null, c.get(k("touch-missing")));
  }

  private void getAndTouch() {
    String key = k("gat");
    set(key, "g");
    if (binary) {
      getAndTouchBinary(key);
      return;
    }
    throwsEx("getAndTouch", UnsupportedOperationException.class, () -> c.getAndTouch(key, 10));
    throwsEx("asyncGetAndTouch", UnsupportedOperationException.class,
        () -> c.asyncGetAndTouch(key, 10));
    eq("get afterwards", "g", c.get(key));
  }

  /** The binary protocol's get-and-touch (GAT), which the client offers there. */
  private void getAndTouchBinary(String key) {
    long unique = casOf(key);
    CASValue<Object> g = c.getAndTouch(key, 3600);
    eq("getAndTouch value", "g", g == null ? null : g.getValue());
    eq("getAndTouch unique equals gets'", unique, g.getCas());
    eq("unique after getAndTouch", unique, casOf(key));
    OperationFuture<CASValue<Object>> ag = c.asyncGetAndTouch(key, 0);
    CASValue<Object> av = await("asyncGetAndTouch", ag);
    eq("asyncGetAndTouch value", "g", av == null ? null : av.getValue());
    eq("asyncGetAndTouch status code", StatusCode.SUCCESS, ag.getStatus().getStatusCode());
    Blob b = new Blob(0xCAFE, new byte[] {0, '\r', '\n', (byte) 0xff});
    stored("set raw", c.set(key, 0, b, BlobTranscoder.INSTANCE), true, STORED);
    CASValue<Blob> gb = c.getAndTouch(key, 3600, BlobTranscoder.INSTANCE);
    eq("getAndTouch with the raw transcoder keeps the flags and bytes", b,
        gb == null ? null : gb.getValue());

    String missing = k("gat-missing");
    eq("getAndTouch of a missing key", null, c.getAndTouch(missing, 10));
    OperationFuture<CASValue<Object>> miss = c.asyncGetAndTouch(missing, 10);
    eq("asyncGetAndTouch of a missing key", null, await("asyncGetAndTouch", miss));
    eq("asyncGetAndTouch of a missing key: status code", StatusCode.ERR_NOT_FOUND,
        miss.getStatus().getStatusCode());
    eq("get of the missing key afterwards", null, c.get(missing));
    eq("get afterwards", b, raw(key));
  }

  private void expirySetup() {
    long now = System.currentTimeMillis() / 1000;
    stored("set with exp 2", c.set(k("exp2"), 2, "short"), true, STORED);
    eq("get at once", "short", c.get(k("exp2")));

    set(k("exp-touched-short"), "t");
    stored("touch to exp 2", c.touch(k("exp-touched-short"), 2), true, TOUCHED);
    eq("get after touch", "t", c.get(k("exp-touched-short")));

    stored("set with exp 2 (to be touched to 0)", c.set(k("exp-touched-never"), 2, "keep"), true,
        STORED);
    stored("touch to exp 0", c.touch(k("exp-touched-never"), 0), true, TOUCHED);

    if (binary) {
      set(k("exp-gat-short"), "gat");
      CASValue<Object> g2 = c.getAndTouch(k("exp-gat-short"), 2);
      eq("getAndTouch to exp 2", "gat", g2 == null ? null : g2.getValue());
      stored("set with exp 2 (to be got and touched to 0)", c.set(k("exp-gat-never"), 2, "kept"),
          true, STORED);
      CASValue<Object> g0 = c.getAndTouch(k("exp-gat-never"), 0);
      eq("getAndTouch to exp 0", "kept", g0 == null ? null : g0.getValue());
    }

    eq("incr with default and exp 2", 5L, c.incr(k("exp-counter"), 1, 5, 2));
    // The wait in expiryAfter counts from the last store with exp 2.
    expirySetAtNanos = System.nanoTime();
    eq("get counter", "5", c.get(k("exp-counter")));

    stored("set with exp -1", c.set(k("exp-negative"), -1, "gone"), true, STORED);
    if (binary) {
      // The binary protocol carries an expiry as an unsigned 32-bit number:
      // -1 arrives as 4294967295, an absolute time in 2106, so the key stays.
      eq("get after exp -1 (2^32-1 on the binary protocol, far ahead)", "gone",
          c.get(k("exp-negative")));
    } else {
      eq("get after exp -1 (expired at once)", null, c.get(k("exp-negative")));
    }

    stored("set with absolute exp an hour ahead", c.set(k("exp-abs-future"), (int) (now + 3600),
        "later"), true, STORED);
    eq("get with absolute exp ahead", "later", c.get(k("exp-abs-future")));
    stored("set with absolute exp an hour ago", c.set(k("exp-abs-past"), (int) (now - 3600),
        "past"), true, STORED);
    eq("get with absolute exp in the past", null, c.get(k("exp-abs-past")));
  }

  private void expiryAfter() throws InterruptedException {
    if (expirySetAtNanos == 0) {
      fail("the expiry setup did not run");
    }
    sleepUntil(expirySetAtNanos + TimeUnit.MILLISECONDS.toNanos(3500));
    eq("exp 2 after 3.5 s", null, c.get(k("exp2")));
    eq("exp 2 after 3.5 s (gets)", null, c.gets(k("exp2")));
    eq("touched to exp 2 after 3.5 s", null, c.get(k("exp-touched-short")));
    eq("touched to exp 0 after 3.5 s", "keep", c.get(k("exp-touched-never")));
    if (binary) {
      eq("got and touched to exp 2 after 3.5 s", null, c.get(k("exp-gat-short")));
      eq("got and touched to exp 0 after 3.5 s", "kept", c.get(k("exp-gat-never")));
      eq("getAndTouch of an expired key", null, c.getAndTouch(k("exp2"), 100));
      eq("exp -1 (far ahead on the binary protocol) after 3.5 s", "gone",
          c.get(k("exp-negative")));
    }
    eq("counter with exp 2 after 3.5 s", null, c.get(k("exp-counter")));
    OperationFuture<Long> incrExpired = c.asyncIncr(k("exp-counter"), 1);
    eq("incr of the expired counter", -1L, await("asyncIncr", incrExpired));
    eq("incr of the expired counter: reply", expected(NOT_FOUND), replyOf(incrExpired));
    eq("absolute exp an hour ahead", "later", c.get(k("exp-abs-future")));
    eq("getBulk of expired and live keys", Map.of(k("exp-abs-future"), "later"),
        c.getBulk(k("exp2"), k("exp-touched-short"), k("exp-abs-future")));
    stored("touch of an expired key", c.touch(k("exp2"), 100), false, NOT_FOUND);
    stored("replace of an expired key", c.replace(k("exp2"), 0, "x"), false, REPLACE_MISSING);
    stored("add over an expired key", c.add(k("exp2"), 0, "again"), true, STORED);
    eq("get after add", "again", c.get(k("exp2")));
  }

  private void bulk200() {
    List<String> keys = new ArrayList<>();
    Map<String, Object> want = new HashMap<>();
    List<OperationFuture<Boolean>> sets = new ArrayList<>();
    for (int i = 0; i < 200; i++) {
      String key = k("bulk" + i);
      keys.add(key);
      if (i % 4 == 3) {
        continue;
      }
      Object value = i % 5 == 0 ? Integer.valueOf(i) : "bulk-" + i + "-" + "x".repeat(i % 60);
      want.put(key, value);
      sets.add(c.set(key, 0, value));
    }
    for (OperationFuture<Boolean> f : sets) {
      eq("set for getBulk", true, await("set", f));
    }
    eq("getBulk(Collection) of 200", want, c.getBulk(keys));
    eq("getBulk(Iterator) of 200", want, c.getBulk(keys.iterator()));
    Map<String, Object> three = new HashMap<>();
    three.put(keys.get(0), want.get(keys.get(0)));
    three.put(keys.get(1), want.get(keys.get(1)));
    eq("getBulk(String...) with one missing", three,
        c.getBulk(keys.get(0), keys.get(1), keys.get(3)));
    BulkFuture<Map<String, Object>> bf = c.asyncGetBulk(keys);
    eq("asyncGetBulk of 200", want, await("asyncGetBulk", bf));
    isTrue("asyncGetBulk status is success", bf.getStatus().isSuccess(), bf.getStatus());
    BulkFuture<Map<String, Object>> bf2 = c.asyncGetBulk(keys);
    Map<String, Object> some;
    try {
      some = bf2.getSome(Expect.FUTURE_TIMEOUT_S, TimeUnit.SECONDS);
    } catch (Exception e) {
      fail("asyncGetBulk getSome: expected a map got " + e);
      return;
    }
    eq("asyncGetBulk getSome of 200", want, some);
    List<String> missingOnly = new ArrayList<>();
    for (int i = 3; i < 200; i += 4) {
      missingOnly.add(keys.get(i));
    }
    eq("getBulk of only missing keys", Map.of(), c.getBulk(missingOnly));
  }

  private void async() throws InterruptedException {
    String key = k("async");
    set(key, "v");
    GetFuture<Object> gf = c.asyncGet(key);
    eq("asyncGet", "v", await("asyncGet", gf));
    isTrue("asyncGet status is success", gf.getStatus().isSuccess(), gf.getStatus());
    GetFuture<Object> miss = c.asyncGet(k("async-missing"));
    eq("asyncGet of a missing key", null, await("asyncGet", miss));
    isTrue("asyncGet of a missing key has a failed status", !miss.getStatus().isSuccess(),
        miss.getStatus());

    CASValue<Object> g = await("asyncGets", c.asyncGets(key));
    eq("asyncGets value", "v", g == null ? null : g.getValue());
    eq("asyncGets unique equals gets'", casOf(key), g.getCas());

    CountDownLatch done = new CountDownLatch(2);
    AtomicReference<Object> fromSet = new AtomicReference<>();
    AtomicReference<Object> fromGet = new AtomicReference<>();
    c.set(k("async-listened"), 0, "heard").addListener(f -> {
      fromSet.set(f.get() + " " + replyOf(f));
      done.countDown();
    });
    c.asyncGet(key).addListener(f -> {
      fromGet.set(f.get());
      done.countDown();
    });
    isTrue("listeners ran", done.await(Expect.FUTURE_TIMEOUT_S, TimeUnit.SECONDS),
        done.getCount() + " not run");
    eq("set listener saw", "true " + expected(STORED), fromSet.get());
    eq("get listener saw", "v", fromGet.get());
    eq("get after listened set", "heard", c.get(k("async-listened")));

    List<OperationFuture<Boolean>> sets = new ArrayList<>();
    for (int i = 0; i < 100; i++) {
      sets.add(c.set(k("pipe" + i), 0, "p" + i));
    }
    List<GetFuture<Object>> gets = new ArrayList<>();
    for (int i = 0; i < 100; i++) {
      gets.add(c.asyncGet(k("pipe" + i)));
    }
    for (int i = 0; i < 100; i++) {
      eq("pipelined set " + i, true, await("set", sets.get(i)));
      eq("pipelined get " + i, "p" + i, await("get", gets.get(i)));
    }
    isTrue("waitForQueues", c.waitForQueues(Expect.FUTURE_TIMEOUT_S, TimeUnit.SECONDS), false);
  }

  private void secondConnection() {
    MemcachedClient other = otherClient();
    try {
      String key = k("shared");
      set(key, "from first");
      eq("second client reads the first's write", "from first", other.get(key));
      stored("second client writes", other.set(key, 0, "from second"), true, STORED);
      eq("first client reads the second's write", "from second", c.get(key));
      long unique = casOf(key);
      stored("second client overwrites", other.set(key, 0, "again"), true, STORED);
      eq("cas with the unique from before the other client's write", CASResponse.EXISTS,
          c.cas(key, unique, "lost"));
      eq("value", "again", other.get(key));
    } finally {
      Connect.close(other);
    }
  }

  private void concurrency() throws Exception {
    int threads = 8;
    int ops = 500;
    String shared = k("conc-shared");
    String casKey = k("conc-cas");
    set(shared, "0");
    set(casKey, "0");
    ConcurrentLinkedQueue<String> problems = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<Long> incrResults = new ConcurrentLinkedQueue<>();
    AtomicInteger casDone = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    List<Future<?>> running = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      int id = t;
      running.add(pool.submit(() -> {
        try {
          worker(id, ops, shared, casKey, incrResults, casDone);
        } catch (CheckFailed e) {
          problems.add("thread " + id + ": " + e.getMessage());
        } catch (RuntimeException e) {
          problems.add("thread " + id + ": unexpected " + e);
        }
      }));
    }
    pool.shutdown();
    if (!pool.awaitTermination(30, TimeUnit.SECONDS)) {
      pool.shutdownNow();
      fail("threads: expected all to finish within 30 s got some still running");
    }
    for (Future<?> f : running) {
      f.get();
    }
    if (!problems.isEmpty()) {
      List<String> first = new ArrayList<>(problems);
      fail(first.size() + " threads failed, first: " + first.subList(0, Math.min(3, first.size())));
    }
    List<Long> got = new ArrayList<>(incrResults);
    got.sort(null);
    List<Long> want = new ArrayList<>();
    for (long i = 1; i <= got.size(); i++) {
      want.add(i);
    }
    isTrue("shared counter: each incr returned a distinct value 1..n", got.equals(want),
        "n=" + got.size() + ", first values " + got.subList(0, Math.min(10, got.size())));
    Object sharedValue = c.get(shared);
    eq("shared counter value", String.valueOf(got.size()),
        sharedValue == null ? null : sharedValue.toString().trim());
    eq("cas-incremented key value", String.valueOf(casDone.get()), c.get(casKey));
  }

  /** One thread's share: its own keys against a model, plus two shared counters. */
  private void worker(int t, int ops, String shared, String casKey,
      ConcurrentLinkedQueue<Long> incrResults, AtomicInteger casDone) {
    SplittableRandom r = new SplittableRandom(7919L * t + 17);
    String[] keys = new String[12];
    for (int j = 0; j < keys.length; j++) {
      keys[j] = k("conc-" + t + "-" + j);
    }
    String counter = k("conc-" + t + "-ctr");
    long counterValue = 0;
    Map<String, String> model = new HashMap<>();
    set(counter, "0");
    for (int i = 0; i < ops; i++) {
      String key = keys[r.nextInt(keys.length)];
      String had = model.get(key);
      String value = "t" + t + "-" + i;
      String at = "op " + i + " on " + key + ": ";
      switch (r.nextInt(13)) {
        case 0, 1 -> {
          eq(at + "set", true, await("set", c.set(key, 0, value)));
          model.put(key, value);
        }
        case 2, 3 -> eq(at + "get", had, c.get(key));
        case 4 -> {
          eq(at + "add", had == null, await("add", c.add(key, 0, value)));
          if (had == null) {
            model.put(key, value);
          }
        }
        case 5 -> {
          eq(at + "replace", had != null, await("replace", c.replace(key, 0, value)));
          if (had != null) {
            model.put(key, value);
          }
        }
        case 6 -> {
          eq(at + "delete", had != null, await("delete", c.delete(key)));
          model.remove(key);
        }
        case 7 -> {
          eq(at + "append", had != null, await("append", c.append(key, "+a")));
          if (had != null) {
            model.put(key, had + "+a");
          }
        }
        case 8 -> {
          int by = 1 + r.nextInt(5);
          counterValue += by;
          eq(at + "incr own counter", counterValue, c.incr(counter, by));
        }
        case 9 -> {
          long v = c.incr(shared, 1);
          isTrue(at + "incr shared counter", v > 0, v);
          incrResults.add(v);
        }
        case 10 -> {
          boolean done = false;
          for (int attempt = 0; attempt < 1000 && !done; attempt++) {
            CASValue<Object> g = c.gets(casKey);
            if (g == null) {
              fail(at + "gets of the cas key: expected a value got null");
            }
            long n = Long.parseLong(g.getValue().toString());
            CASResponse res = c.cas(casKey, g.getCas(), String.valueOf(n + 1));
            if (res == CASResponse.OK) {
              done = true;
            } else if (res != CASResponse.EXISTS) {
              fail(at + "cas on the shared key: expected OK or EXISTS got " + res);
            }
          }
          isTrue(at + "cas increment went through within 1000 tries", done, "never OK");
          casDone.incrementAndGet();
        }
        case 11 -> {
          Map<String, Object> want = new HashMap<>(model);
          want.put(counter, String.valueOf(counterValue));
          List<String> all = new ArrayList<>(Arrays.asList(keys));
          all.add(counter);
          eq(at + "getBulk of own keys", want, c.getBulk(all));
        }
        default -> {
          List<GetFuture<Object>> fs = new ArrayList<>();
          for (String kk : keys) {
            fs.add(c.asyncGet(kk));
          }
          for (int j = 0; j < keys.length; j++) {
            eq(at + "pipelined asyncGet " + keys[j], model.get(keys[j]),
                await("asyncGet", fs.get(j)));
          }
        }
      }
    }
  }

  private void delayedFlush() throws InterruptedException {
    String key = k("delayed-flush");
    set(key, "before");
    if (binary) {
      // spymemcached 2.12.3's BinaryOperationFactory.flush(delay, callback)
      // builds its flush without the delay, so the request carries 0 and
      // the server flushes at once.
      eq("flush(3)", true, await("flush(3)", c.flush(3)));
      eq("get right after flush(3), sent without its delay", null, c.get(key));
      set(key, "after");
      eq("get of a value set after the flush", "after", c.get(key));
      return;
    }
    long at = System.nanoTime();
    eq("flush(3)", true, await("flush(3)", c.flush(3)));
    eq("get right after flush_all 3", "before", c.get(key));
    sleepUntil(at + TimeUnit.MILLISECONDS.toNanos(3500));
    eq("get 3.5 s after flush_all 3", null, c.get(key));
    set(key, "after");
    eq("get of a value set after the flush", "after", c.get(key));
  }
}
