package larder.spyclient;

import java.util.Arrays;

/** A value exactly as stored on the server: its flags and its raw bytes. */
final class Blob {
  final int flags;
  final byte[] data;

  Blob(int flags, byte[] data) {
    this.flags = flags;
    this.data = data;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof Blob b && b.flags == flags && Arrays.equals(b.data, data);
  }

  @Override
  public int hashCode() {
    return 31 * flags + Arrays.hashCode(data);
  }

  @Override
  public String toString() {
    return "Blob(flags=" + Integer.toUnsignedString(flags) + ", " + Expect.show(data) + ")";
  }
}
