package io.cdcsink.format;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.ByteArrayOutputStream;
import java.util.Arrays;
import java.util.Random;
import net.jpountz.lz4.LZ4FrameOutputStream;
import org.junit.jupiter.api.Test;

class CodecsTest {
  private static byte[] frame(byte[] data) throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (LZ4FrameOutputStream s = new LZ4FrameOutputStream(out, LZ4FrameOutputStream.BLOCKSIZE.SIZE_64KB,
        data.length, LZ4FrameOutputStream.FLG.Bits.BLOCK_INDEPENDENCE, LZ4FrameOutputStream.FLG.Bits.CONTENT_SIZE,
        LZ4FrameOutputStream.FLG.Bits.CONTENT_CHECKSUM, LZ4FrameOutputStream.FLG.Bits.BLOCK_CHECKSUM)) {
      s.write(data);
    }
    return out.toByteArray();
  }

  @Test
  void lz4FramesDecodeAcrossBlocksWithOverlappingMatchesAndRawBlocks() throws Exception {
    Random rnd = new Random(3);
    byte[] data = new byte[300_000];
    for (int i = 0; i < data.length; i++) data[i] = (byte) (i % 7 == 0 ? rnd.nextInt() : (i / 3) % 5);
    byte[] noise = new byte[70_000]; // incompressible: stored as raw blocks
    rnd.nextBytes(noise);
    for (byte[] d : new byte[][] {data, noise, new byte[0], "a".getBytes()}) {
      byte[] out = new byte[d.length];
      assertEquals(d.length, Codecs.Lz4Frame.decodeFrames(frame(d), out));
      assertArrayEquals(d, out);
    }
  }

  @Test
  void damagedLz4FrameIsRefused() throws Exception {
    byte[] f = frame(new byte[1000]);
    byte[] bad = Arrays.copyOf(f, f.length);
    bad[0] ^= 1;
    assertThrows(IllegalArgumentException.class, () -> Codecs.Lz4Frame.decodeFrames(bad, new byte[1000]));
    assertThrows(RuntimeException.class,
        () -> Codecs.Lz4Frame.decodeFrames(Arrays.copyOf(f, f.length - 9), new byte[1000]));
  }
}
