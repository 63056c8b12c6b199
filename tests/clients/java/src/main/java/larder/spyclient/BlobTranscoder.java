package larder.spyclient;

import net.spy.memcached.CachedData;
import net.spy.memcached.transcoders.Transcoder;

/**
 * Stores a {@link Blob}'s bytes as they are, under the Blob's own flags: no
 * serialization, no compression. Decoding returns whatever the server sent,
 * so it also shows how another transcoder laid a value out.
 */
final class BlobTranscoder implements Transcoder<Blob> {
  static final BlobTranscoder INSTANCE = new BlobTranscoder();

  @Override
  public boolean asyncDecode(CachedData d) {
    return false;
  }

  @Override
  public CachedData encode(Blob b) {
    return new CachedData(b.flags, b.data, getMaxSize());
  }

  @Override
  public Blob decode(CachedData d) {
    return new Blob(d.getFlags(), d.getData());
  }

  /** Well above any server's item limit, so that the server decides. */
  @Override
  public int getMaxSize() {
    return CachedData.MAX_SIZE;
  }
}
