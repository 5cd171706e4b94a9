package io.cdcsink.format;

/** XXH64 (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md), as §13's bucket function uses it. */
final class XxHash64 {
  private XxHash64() {}

  private static final long P1 = 0x9E3779B185EBCA87L;
  private static final long P2 = 0xC2B2AE3D27D4EB4FL;
  private static final long P3 = 0x165667B19E3779F9L;
  private static final long P4 = 0x85EBCA77C2B2AE63L;
  private static final long P5 = 0x27D4EB2F165667C5L;

  static long hashInt(int v, long seed) {
    byte[] b = {(byte) v, (byte) (v >>> 8), (byte) (v >>> 16), (byte) (v >>> 24)};
    return hash(b, 0, 4, seed);
  }

  static long hashLong(long v, long seed) {
    byte[] b = new byte[8];
    for (int i = 0; i < 8; i++) b[i] = (byte) (v >>> (8 * i));
    return hash(b, 0, 8, seed);
  }

  private static long round(long acc, long lane) {
    acc += lane * P2;
    acc = Long.rotateLeft(acc, 31);
    return acc * P1;
  }

  private static long merge(long h, long v) {
    h ^= round(0, v);
    return h * P1 + P4;
  }

  private static long u64(byte[] b, int p) {
    long r = 0;
    for (int i = 7; i >= 0; i--) r = (r << 8) | (b[p + i] & 0xffL);
    return r;
  }

  private static long u32(byte[] b, int p) {
    return (b[p] & 0xffL) | (b[p + 1] & 0xffL) << 8 | (b[p + 2] & 0xffL) << 16 | (b[p + 3] & 0xffL) << 24;
  }

  static long hash(byte[] b, int off, int len, long seed) {
    int p = off;
    int end = off + len;
    long h;
    if (len >= 32) {
      long v1 = seed + P1 + P2;
      long v2 = seed + P2;
      long v3 = seed;
      long v4 = seed - P1;
      while (p <= end - 32) {
        v1 = round(v1, u64(b, p));
        v2 = round(v2, u64(b, p + 8));
        v3 = round(v3, u64(b, p + 16));
        v4 = round(v4, u64(b, p + 24));
        p += 32;
      }
      h = Long.rotateLeft(v1, 1) + Long.rotateLeft(v2, 7) + Long.rotateLeft(v3, 12) + Long.rotateLeft(v4, 18);
      h = merge(h, v1);
      h = merge(h, v2);
      h = merge(h, v3);
      h = merge(h, v4);
    } else {
      h = seed + P5;
    }
    h += len;
    while (p <= end - 8) {
      h ^= round(0, u64(b, p));
      h = Long.rotateLeft(h, 27) * P1 + P4;
      p += 8;
    }
    if (p <= end - 4) {
      h ^= u32(b, p) * P1;
      h = Long.rotateLeft(h, 23) * P2 + P3;
      p += 4;
    }
    while (p < end) {
      h ^= (b[p] & 0xffL) * P5;
      h = Long.rotateLeft(h, 11) * P1;
      p++;
    }
    h ^= h >>> 33;
    h *= P2;
    h ^= h >>> 29;
    h *= P3;
    h ^= h >>> 32;
    return h;
  }
}
