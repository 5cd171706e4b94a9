package io.cdcsink.format;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

class FramingTest {
  private static byte[] record(String payload) {
    byte[] p = payload.getBytes(StandardCharsets.UTF_8);
    ByteBuffer b = ByteBuffer.allocate(8 + p.length).order(ByteOrder.LITTLE_ENDIAN);
    b.putInt(p.length);
    byte[] len = Arrays.copyOf(b.array(), 4);
    java.util.zip.CRC32C c = new java.util.zip.CRC32C();
    c.update(len);
    c.update(p);
    b.putInt((int) c.getValue());
    b.put(p);
    return b.array();
  }

  private static byte[] file(byte[] magic, String... payloads) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.writeBytes(magic);
    for (String p : payloads) out.writeBytes(record(p));
    return out.toByteArray();
  }

  @Test
  void crc32cCheckValue() {
    byte[] d = "123456789".getBytes(StandardCharsets.US_ASCII);
    assertEquals(0xE3069283, Framing.crc32c(d, 0, d.length));
  }

  @Test
  void logEntryExampleOfTheSpecHasItsCrc() {
    String payload = "{\"app_id\":null,\"batch_id\":null,\"buckets\":{},\"commit_time_ms\":1700000000000,"
        + "\"kind\":\"create\",\"schema_id\":0,\"stats\":{},\"version\":0}";
    byte[] f = file(Framing.LOG, payload);
    assertEquals(144, f.length);
    assertEquals(0x6f52a165, Framing.u32(f, 12));
  }

  @Test
  void completeFileReadsEveryRecord() throws Exception {
    byte[] f = file(Framing.WAL, "{}", "body");
    Framing.Result r = Framing.read(f, "x.wal", Framing.WAL, false);
    assertEquals(2, r.records.size());
    assertFalse(r.tornTail);
    assertEquals("body", new String(f, r.records.get(1).payloadOffset, r.records.get(1).length, StandardCharsets.UTF_8));
  }

  @Test
  void fileEndingInsideARecordIsATornTail() throws Exception {
    byte[] f = file(Framing.LOG, "first", "second record");
    byte[] cut = Arrays.copyOf(f, f.length - 3);
    Framing.Result r = Framing.read(cut, "e.json", Framing.LOG, true);
    assertTrue(r.tornTail);
    assertEquals(1, r.records.size());
    assertThrows(CdcSinkFormatException.class, () -> Framing.read(cut, "e.json", Framing.LOG, false));
  }

  @Test
  void zeroTailAndMagicPrefixAreTorn() throws Exception {
    byte[] f = file(Framing.LOG, "first");
    byte[] zeros = Arrays.copyOf(f, f.length + 40);
    assertTrue(Framing.read(zeros, "e", Framing.LOG, true).tornTail);
    assertTrue(Framing.read(Arrays.copyOf(Framing.LOG, 5), "e", Framing.LOG, true).tornTail);
    assertTrue(Framing.read(new byte[12], "e", Framing.LOG, true).tornTail);
  }

  @Test
  void damageBeforeAValidRecordIsCorruptionNamingFileAndOffset() {
    byte[] f = file(Framing.WAL, "header", "body bytes");
    f[8 + 8 + 2] ^= 1; // inside the first payload
    CdcSinkFormatException e =
        assertThrows(CdcSinkFormatException.class, () -> Framing.read(f, "_wal/0/x.wal", Framing.WAL, true));
    assertTrue(e.getMessage().contains("_wal/0/x.wal"), e.getMessage());
    assertTrue(e.getMessage().contains("offset 8"), e.getMessage());
    assertTrue(e.getMessage().contains("a valid record follows"), e.getMessage());
  }

  @Test
  void badMagicIsCorruption() {
    byte[] f = file(Framing.SNAPSHOT, "{}");
    assertThrows(CdcSinkFormatException.class, () -> Framing.read(f, "m", Framing.LOG, true));
  }

  @Test
  void unfinishedEntryIsOnlyOneWithoutACompleteRecord() {
    byte[] f = file(Framing.LOG, "{\"version\":1}");
    assertFalse(ReadPlan.LogState.unfinished(f));
    assertTrue(ReadPlan.LogState.unfinished(Arrays.copyOf(f, f.length - 1)));
    assertTrue(ReadPlan.LogState.unfinished(new byte[30]));
    byte[] flipped = f.clone();
    flipped[20] ^= 1; // complete record failing its CRC: corruption, not unfinished
    assertFalse(ReadPlan.LogState.unfinished(flipped));
  }

  @Test
  void byteSplitUntransposes() {
    int n = 3;
    long[] values = {0x0102030405060708L, -2L, 0x7f00ff00aa5511eeL};
    ByteBuffer plain = ByteBuffer.allocate(n * 8).order(ByteOrder.LITTLE_ENDIAN);
    for (long v : values) plain.putLong(v);
    byte[] p = plain.array();
    byte[] split = new byte[n * 8];
    for (int i = 0; i < n; i++) for (int j = 0; j < 8; j++) split[j * n + i] = p[i * 8 + j];
    assertArrayEquals(p, Vectors.untranspose(split, n, 8));
    byte[] two = {1, 3, 5, 2, 4, 6}; // values 0x0201, 0x0403, 0x0605 split
    assertArrayEquals(new byte[] {1, 2, 3, 4, 5, 6}, Vectors.untranspose(two, 3, 2));
  }

  @Test
  void byteSplitUntransposesEveryWidthAndLength() {
    java.util.Random rnd = new java.util.Random(7);
    for (int w : new int[] {2, 4, 8}) {
      for (int n : new int[] {0, 1, 7, 8, 9, 16, 63, 1000}) {
        byte[] p = new byte[n * w];
        rnd.nextBytes(p);
        byte[] split = new byte[n * w];
        for (int i = 0; i < n; i++) for (int j = 0; j < w; j++) split[j * n + i] = p[i * w + j];
        assertArrayEquals(p, Vectors.untranspose(split, n, w), "w=" + w + " n=" + n);
      }
    }
  }

  @Test
  void typeNamesAcceptTheSpellingsOfTheSpec() {
    assertEquals("timestamp[us, UTC]", Types.canonical("Timestamp[US, tz=UTC]"));
    assertEquals("timestamp[us, UTC]", Types.canonical("timestamp"));
    assertEquals("decimal128(20, 2)", Types.canonical("decimal(20,2)"));
    assertEquals("float64", Types.canonical("double"));
    assertEquals("date32", Types.canonical("date"));
    assertEquals(null, Types.canonical("decimal128(39, 2)"));
  }

  @Test
  void pathKindsRefuseEscapes() {
    assertTrue(Json.SEGMENT.matcher("_wal/3/00000000000000000005-1c0e4b7a9d21.wal").matches());
    assertFalse(Json.SEGMENT.matcher("_wal/../00000000000000000005-1c0e4b7a9d21.wal").matches());
    assertFalse(Json.PAGES.matcher("/etc/00000000000000000005-1c0e4b7a9d21.pages").matches());
  }
}
