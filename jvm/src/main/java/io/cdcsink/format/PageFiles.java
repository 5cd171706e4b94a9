package io.cdcsink.format;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.roaringbitmap.RoaringBitmap;

/** The blobs of a snapshot's page files (§10.2-10.3), CRC-checked, the files kept open. */
final class PageFiles implements AutoCloseable {
  private final Fs fs;
  private final BufferAllocator allocator;
  private final Map<String, Fs.Ranged> files = new HashMap<>();

  PageFiles(Fs fs, BufferAllocator allocator) {
    this.fs = fs;
    this.allocator = allocator;
  }

  /** The bytes of a blob, checked against its CRC32C. */
  byte[] blob(Manifest.Loc l) throws CdcSinkFormatException {
    Fs.Ranged f = files.get(l.file);
    if (f == null) {
      f = fs.openRanged(l.file);
      files.put(l.file, f);
    }
    byte[] b = f.read(l.offset, l.length);
    if (Framing.crc32c(b, 0, b.length) != l.crc) {
      throw new CdcSinkFormatException(l.file + ": offset " + l.offset + ": page of " + l.length
          + " bytes fails its CRC32C (corruption)");
    }
    return b;
  }

  /** A page as a vector of the column's type (a column of S_v: widened as §7.1 says). */
  FieldVector page(Manifest.Loc l, Column c) throws CdcSinkFormatException {
    String where = l.file + ": offset " + l.offset;
    FieldVector v = Vectors.readPage(blob(l), allocator, where);
    if (v.getValueCount() != l.rows) {
      long n = v.getValueCount();
      v.close();
      throw new CdcSinkFormatException(where + ": page holds " + n + " rows, its location says " + l.rows);
    }
    return Vectors.cast(v, TableSchema.field(c), allocator, where);
  }

  /** The snapshot's deletion vector (empty without one). */
  RoaringBitmap dv(Manifest m) throws CdcSinkFormatException {
    if (m == null || m.dv == null) return new RoaringBitmap();
    byte[] b = blob(m.dv);
    RoaringBitmap bm = new RoaringBitmap();
    try {
      bm.deserialize(ByteBuffer.wrap(b));
    } catch (Exception e) {
      throw new CdcSinkFormatException(m.dv.file + ": offset " + m.dv.offset + ": deletion vector is not a Roaring bitmap");
    }
    if (bm.getLongCardinality() != m.dv.rows) {
      throw new CdcSinkFormatException(m.dv.file + ": offset " + m.dv.offset + ": deletion vector holds "
          + bm.getLongCardinality() + " rows, its location says " + m.dv.rows);
    }
    return bm;
  }

  @Override
  public void close() {
    for (Fs.Ranged f : files.values()) f.close();
    files.clear();
  }
}
