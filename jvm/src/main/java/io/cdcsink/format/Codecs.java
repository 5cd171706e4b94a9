package io.cdcsink.format;

import org.apache.arrow.compression.ZstdCompressionCodec;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.compression.AbstractCompressionCodec;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;

/**
 * Arrow IPC buffer codecs (§5.3): ZSTD through arrow-compression's zstd-jni codec, LZ4_FRAME
 * by the frame decoder below (arrow-compression's commons-compress LZ4 decoder is an order of
 * magnitude slower).
 */
final class Codecs implements CompressionCodec.Factory {
  static final Codecs INSTANCE = new Codecs();

  private Codecs() {}

  @Override
  public CompressionCodec createCodec(CompressionUtil.CodecType type) {
    switch (type) {
      case LZ4_FRAME:
        return new Lz4Frame();
      case ZSTD:
        return new Zstd();
      case NO_COMPRESSION:
        return NoCompressionCodec.INSTANCE;
      default:
        throw new IllegalArgumentException("unsupported IPC buffer codec " + type);
    }
  }

  @Override
  public CompressionCodec createCodec(CompressionUtil.CodecType type, int level) {
    return createCodec(type);
  }

  /**
   * A buffer's claimed decompressed length, refused (as damage, before any allocation) above
   * max(64 MiB, 4096 x its compressed length): the bound of §5.3, applied per buffer.
   */
  static void checkClaim(ArrowBuf compressed, long claimed) {
    long stored = compressed.writerIndex() - CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
    if (claimed > Math.max(64L << 20, 4096L * stored)) {
      throw new IllegalArgumentException("a compressed buffer of " + stored + " bytes claims " + claimed
          + " bytes decompressed");
    }
  }

  /** ZSTD through arrow-compression, with the size bound. */
  static final class Zstd extends ZstdCompressionCodec {
    @Override
    public ArrowBuf decompress(BufferAllocator allocator, ArrowBuf compressed) {
      if (compressed.writerIndex() >= CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH) {
        checkClaim(compressed, readUncompressedLength(compressed));
      }
      return super.decompress(allocator, compressed);
    }
  }

  /** LZ4 frame decompression (read-only: this reader never compresses). */
  static final class Lz4Frame extends AbstractCompressionCodec {
    @Override
    protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf uncompressed) {
      throw new UnsupportedOperationException("the cdc_sink reader does not write LZ4");
    }

    @Override
    protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf compressed) {
      long n = readUncompressedLength(compressed);
      if (n < 0 || n > Integer.MAX_VALUE - 16) throw new IllegalArgumentException("bad LZ4 buffer length " + n);
      checkClaim(compressed, n);
      long inLen = compressed.writerIndex() - CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      byte[] in = new byte[(int) inLen];
      compressed.getBytes(CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH, in);
      byte[] out = new byte[(int) n];
      int got;
      try {
        got = decodeFrames(in, out);
      } catch (IndexOutOfBoundsException e) {
        throw new IllegalArgumentException("bad LZ4 frame: a block runs past its bounds", e);
      }
      if (got != n) throw new IllegalArgumentException("LZ4 buffer decompresses to " + got + " bytes, not " + n);
      ArrowBuf buf = allocator.buffer(n);
      buf.setBytes(0, out);
      return buf;
    }

    /**
     * Decodes LZ4 frames (https://github.com/lz4/lz4/blob/dev/doc/lz4_Frame_format.md), linked or
     * independent blocks alike (lz4-java's frame reader refuses linked blocks, which pyarrow
     * writes): every block is decoded into one output array, so a match may reach back into the
     * blocks before it. Checksums are skipped (the page's CRC32C covers the blob).
     */
    static int decodeFrames(byte[] src, byte[] dst) {
      int sp = 0;
      int dp = 0;
      while (sp < src.length) {
        int magic = le32(src, sp);
        sp += 4;
        if ((magic & 0xFFFFFFF0) == 0x184D2A50) { // skippable frame
          sp += 4 + le32(src, sp);
          continue;
        }
        if (magic != 0x184D2204) throw new IllegalArgumentException("not an LZ4 frame");
        int flg = src[sp] & 0xff;
        sp += 2; // FLG, BD
        if ((flg >>> 6) != 1) throw new IllegalArgumentException("unknown LZ4 frame version");
        if ((flg & 0x08) != 0) sp += 8; // content size
        if ((flg & 0x01) != 0) sp += 4; // dictionary id
        sp += 1; // header checksum
        boolean blockChecksum = (flg & 0x10) != 0;
        while (true) {
          int size = le32(src, sp);
          sp += 4;
          if (size == 0) break;
          boolean raw = (size & 0x80000000) != 0;
          size &= 0x7FFFFFFF;
          if (raw) {
            System.arraycopy(src, sp, dst, dp, size);
            dp += size;
          } else {
            dp = decodeBlock(src, sp, sp + size, dst, dp);
          }
          sp += size;
          if (blockChecksum) sp += 4;
        }
        if ((flg & 0x04) != 0) sp += 4; // content checksum
      }
      return dp;
    }

    private static int le32(byte[] b, int p) {
      return (b[p] & 0xff) | (b[p + 1] & 0xff) << 8 | (b[p + 2] & 0xff) << 16 | (b[p + 3] & 0xff) << 24;
    }

    /** One LZ4 block of src[sp, end) written at dst[dp...]; matches may reach before dp. */
    static int decodeBlock(byte[] src, int sp, int end, byte[] dst, int dp) {
      while (sp < end) {
        int token = src[sp++] & 0xff;
        int lit = token >>> 4;
        if (lit == 15) {
          int b;
          do {
            b = src[sp++] & 0xff;
            lit += b;
          } while (b == 255);
        }
        System.arraycopy(src, sp, dst, dp, lit);
        sp += lit;
        dp += lit;
        if (sp >= end) break; // the last sequence holds literals only
        int offset = (src[sp] & 0xff) | (src[sp + 1] & 0xff) << 8;
        sp += 2;
        int len = token & 15;
        if (len == 15) {
          int b;
          do {
            b = src[sp++] & 0xff;
            len += b;
          } while (b == 255);
        }
        len += 4;
        int mp = dp - offset;
        if (offset == 0 || mp < 0) throw new IllegalArgumentException("bad LZ4 match offset");
        if (offset >= len) {
          System.arraycopy(dst, mp, dst, dp, len);
          dp += len;
        } else {
          for (int k = 0; k < len; k++) dst[dp++] = dst[mp++];
        }
      }
      return dp;
    }

    @Override
    public CompressionUtil.CodecType getCodecType() {
      return CompressionUtil.CodecType.LZ4_FRAME;
    }
  }
}
