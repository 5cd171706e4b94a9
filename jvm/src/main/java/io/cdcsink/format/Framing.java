package io.cdcsink.format;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32C;

/** Framed files (docs/format.md §5.1): magic, then records of (len, crc32c, payload). */
public final class Framing {
  private Framing() {}

  public static final int RECORD_HEADER = 8;
  /** The search for a valid record after damage is bounded, as the reference does. */
  static final long SCAN_BUDGET_BYTES = 64L << 20;

  public static final byte[] LOG = magic("CDCLOG");
  public static final byte[] CHECKPOINT = magic("CDCCKP");
  public static final byte[] POINTER = magic("CDCLCP");
  public static final byte[] SNAPSHOT = magic("CDCSNP");
  public static final byte[] WAL = magic("CDCWAL");

  private static byte[] magic(String letters) {
    byte[] m = new byte[8];
    System.arraycopy(letters.getBytes(StandardCharsets.US_ASCII), 0, m, 0, 6);
    m[7] = 1;
    return m;
  }

  /** One record of a framed file: where its payload is in the file's bytes. */
  public static final class Record {
    public final int offset; // of the record header
    public final int payloadOffset;
    public final int length;

    Record(int offset, int payloadOffset, int length) {
      this.offset = offset;
      this.payloadOffset = payloadOffset;
      this.length = length;
    }
  }

  /** The good records of a file, where they end, and whether a torn tail follows. */
  public static final class Result {
    public final List<Record> records;
    public final int goodEnd;
    public final boolean tornTail;
    public final String tornWhat;

    Result(List<Record> records, int goodEnd, boolean tornTail, String tornWhat) {
      this.records = records;
      this.goodEnd = goodEnd;
      this.tornTail = tornTail;
      this.tornWhat = tornWhat;
    }
  }

  /** CRC32C of bytes [off, off+len). */
  public static int crc32c(byte[] data, int off, int len) {
    CRC32C c = new CRC32C();
    c.update(data, off, len);
    return (int) c.getValue();
  }

  static int u32(byte[] d, int p) {
    return (d[p] & 0xff) | (d[p + 1] & 0xff) << 8 | (d[p + 2] & 0xff) << 16 | (d[p + 3] & 0xff) << 24;
  }

  private static boolean recordValidAt(byte[] d, int pos) {
    long len = u32(d, pos) & 0xffffffffL;
    if (len > (long) d.length - pos - RECORD_HEADER) return false;
    CRC32C c = new CRC32C();
    c.update(d, pos, 4);
    c.update(d, pos + RECORD_HEADER, (int) len);
    return (int) c.getValue() == u32(d, pos + 4);
  }

  /** First offset >= start where a complete, CRC-valid record begins, or -1 (none, or budget spent). */
  static int validRecordAfter(byte[] d, int start) {
    int last = d.length - RECORD_HEADER;
    long budget = SCAN_BUDGET_BYTES;
    int emptyCrc = emptyRecordCrc();
    for (int pos = start; pos <= last; pos++) {
      long len = u32(d, pos) & 0xffffffffL;
      if (len > (long) last - pos) continue;
      if (len == 0 && u32(d, pos + 4) != emptyCrc) continue;
      budget -= len + 64;
      if (budget < 0) return -1;
      if (recordValidAt(d, pos)) return pos;
    }
    return -1;
  }

  private static int emptyRecordCrc() {
    CRC32C c = new CRC32C();
    c.update(new byte[4], 0, 4);
    return (int) c.getValue();
  }

  private static boolean isPrefixOrZero(byte[] d, byte[] magic) {
    boolean prefix = d.length < magic.length;
    for (int i = 0; i < d.length && i < magic.length && prefix; i++) prefix = d[i] == magic[i];
    if (prefix) return true;
    for (byte b : d) if (b != 0) return false;
    return true;
  }

  /**
   * Parses a framed file, verifying the magic and every record's CRC.
   *
   * @throws CdcSinkFormatException corruption, or a torn tail when {@code allowTornTail} is false
   */
  public static Result read(byte[] d, String path, byte[] magic, boolean allowTornTail)
      throws CdcSinkFormatException {
    List<Record> records = new ArrayList<>();
    int n = d.length;
    int h = magic.length;
    boolean headOk = n >= h;
    for (int i = 0; i < h && headOk; i++) headOk = d[i] == magic[i];
    if (!headOk) {
      if (isPrefixOrZero(d, magic)) return tail(records, 0, "incomplete file header", path, allowTornTail);
      throw new CdcSinkFormatException(path + ": offset 0: bad file header: not the expected magic "
          + new String(magic, 0, 6, StandardCharsets.US_ASCII));
    }
    int pos = h;
    while (pos < n) {
      String what;
      if (n - pos < RECORD_HEADER) {
        what = "file ends inside a record header";
      } else {
        long len = u32(d, pos) & 0xffffffffL;
        long end = (long) pos + RECORD_HEADER + len;
        if (end > n) {
          what = "record length " + len + " runs past the end of the file (" + n + " bytes)";
        } else if (recordValidAt(d, pos)) {
          records.add(new Record(pos, pos + RECORD_HEADER, (int) len));
          pos = (int) end;
          continue;
        } else {
          what = "record of " + len + " bytes fails its CRC32C";
        }
      }
      int following = validRecordAfter(d, pos + 1);
      if (following < 0) return tail(records, pos, what, path, allowTornTail);
      throw new CdcSinkFormatException(path + ": offset " + pos + ": " + what
          + "; a valid record follows at offset " + following + " (corruption)");
    }
    return new Result(records, n, false, null);
  }

  private static Result tail(List<Record> records, int offset, String what, String path, boolean allow)
      throws CdcSinkFormatException {
    if (!allow) {
      throw new CdcSinkFormatException(path + ": offset " + offset + ": torn tail: " + what);
    }
    return new Result(records, offset, true, what);
  }

  /** Reads a file that must hold exactly {@code count} complete records. */
  public static List<Record> readExactly(byte[] d, String path, byte[] magic, int count)
      throws CdcSinkFormatException {
    Result r = read(d, path, magic, false);
    if (r.records.size() != count) {
      throw new CdcSinkFormatException(path + ": holds " + r.records.size() + " records, expected " + count);
    }
    return r.records;
  }
}
