package io.cdcsink.format;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.util.TransferPair;

/** Arrow helpers: IPC streams, byte-split pages (§10.2), widening casts (§7.1), defaults. */
final class Vectors {
  private Vectors() {}

  /** The record batches of an IPC stream, each root's vectors transferred to the allocator. */
  static List<VectorSchemaRoot> readStream(byte[] blob, BufferAllocator allocator, String where)
      throws CdcSinkFormatException {
    List<VectorSchemaRoot> out = new ArrayList<>();
    try (ArrowStreamReader r = new ArrowStreamReader(new ByteArrayInputStream(blob), allocator,
        Codecs.INSTANCE)) {
      VectorSchemaRoot root = r.getVectorSchemaRoot();
      while (r.loadNextBatch()) {
        List<FieldVector> vs = new ArrayList<>();
        for (FieldVector v : root.getFieldVectors()) {
          TransferPair tp = v.getTransferPair(allocator);
          tp.transfer();
          vs.add((FieldVector) tp.getTo());
        }
        List<Field> fields = root.getSchema().getFields();
        VectorSchemaRoot copy = new VectorSchemaRoot(fields, vs, root.getRowCount());
        out.add(copy);
      }
    } catch (IOException | RuntimeException e) {
      for (VectorSchemaRoot x : out) x.close();
      throw new CdcSinkFormatException(where + ": not a readable Arrow IPC stream: " + e.getMessage(), e);
    }
    return out;
  }

  /** A page blob (§10.2) as one vector of the page's own type, byte-split undone. */
  static FieldVector readPage(byte[] blob, BufferAllocator allocator, String where) throws CdcSinkFormatException {
    List<VectorSchemaRoot> roots = readStream(blob, allocator, where);
    if (roots.size() != 1 || roots.get(0).getFieldVectors().size() != 1) {
      for (VectorSchemaRoot x : roots) x.close();
      throw new CdcSinkFormatException(where + ": a page holds " + roots.size() + " batches, not one of one field");
    }
    VectorSchemaRoot root = roots.get(0);
    FieldVector v = root.getVector(0);
    Map<String, String> md = root.getSchema().getFields().get(0).getMetadata();
    String split = md == null ? null : md.get("cdc_sink.split");
    if (split == null) return v;
    try {
      int w;
      try {
        w = Integer.parseInt(split);
      } catch (NumberFormatException e) {
        w = -1;
      }
      if (!(v instanceof BaseFixedWidthVector) || (w != 2 && w != 4 && w != 8)
          || ((BaseFixedWidthVector) v).getTypeWidth() != w || v instanceof BitVector) {
        throw new CdcSinkFormatException(where + ": byte-split width " + split + " does not fit the page's type");
      }
      untranspose(v.getDataBuffer(), v.getValueCount(), w);
      String dec = md.get("cdc_sink.decimal");
      if (dec == null) return v;
      String[] ps = dec.split(",");
      if (!(v instanceof BigIntVector) || ps.length != 2) {
        throw new CdcSinkFormatException(where + ": a narrowed decimal page is not Int64");
      }
      int p = Integer.parseInt(ps[0].trim());
      int s = Integer.parseInt(ps[1].trim());
      return widenNarrowDecimal((BigIntVector) v, p, s, allocator);
    } catch (CdcSinkFormatException | RuntimeException e) {
      v.close();
      if (e instanceof CdcSinkFormatException) throw (CdcSinkFormatException) e;
      throw new CdcSinkFormatException(where + ": bad byte-split page: " + e.getMessage(), e);
    }
  }

  private static final java.lang.invoke.VarHandle LONGS =
      java.lang.invoke.MethodHandles.byteArrayViewVarHandle(long[].class, java.nio.ByteOrder.LITTLE_ENDIAN);

  /** A reused copy of the page being un-transposed (per thread: pages decode in parallel). */
  private static final ThreadLocal<byte[]> SCRATCH = ThreadLocal.withInitial(() -> new byte[0]);

  /**
   * Byte j of value i is stored at j*n + i; puts value i's bytes back at i*w .. i*w+w-1, in
   * place: the page is copied once into a reused array and written back value by value (no
   * array per page: the garbage of a scan).
   */
  static void untranspose(ArrowBuf buf, int n, int w) {
    int len = n * w;
    if (buf.capacity() < len) {
      throw new IllegalArgumentException("a byte-split buffer of " + buf.capacity() + " bytes holds no "
          + n + " values of width " + w);
    }
    byte[] s = SCRATCH.get();
    if (s.length < len) {
      s = new byte[len];
      SCRATCH.set(s);
    }
    buf.getBytes(0, s, 0, len);
    untransposeTo(s, n, w, buf.memoryAddress());
  }

  /** The un-transposed bytes of n values of width w (a copy; the page reader works in place). */
  static byte[] untranspose(byte[] src, int n, int w) {
    java.nio.ByteBuffer out = java.nio.ByteBuffer.allocateDirect(Math.max(1, n * w));
    untransposeTo(src, n, w, MemoryUtil.getByteBufferAddress(out));
    byte[] dst = new byte[n * w];
    out.get(dst);
    return dst;
  }

  private static final boolean LITTLE = java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN;

  /** Stores {@code v} at {@code addr} little-endian (the values' order in Arrow's buffers). */
  private static void putLE(long addr, long v) {
    MemoryUtil.putLong(addr, LITTLE ? v : Long.reverseBytes(v));
  }

  /**
   * Writes the un-transposed bytes of {@code src} (n values of width w) at memory address
   * {@code dst}: eight values at a time, the w streams' next eight bytes are an 8x8 byte matrix,
   * transposed in registers.
   */
  private static void untransposeTo(byte[] src, int n, int w, long dst) {
    int i = 0;
    if (w == 8 || w == 4) {
      for (; i + 8 <= n; i += 8) {
        long r0 = (long) LONGS.get(src, i);
        long r1 = (long) LONGS.get(src, n + i);
        long r2 = (long) LONGS.get(src, 2 * n + i);
        long r3 = (long) LONGS.get(src, 3 * n + i);
        long r4 = 0, r5 = 0, r6 = 0, r7 = 0;
        if (w == 8) {
          r4 = (long) LONGS.get(src, 4 * n + i);
          r5 = (long) LONGS.get(src, 5 * n + i);
          r6 = (long) LONGS.get(src, 6 * n + i);
          r7 = (long) LONGS.get(src, 7 * n + i);
        }
        long t;
        final long m1 = 0x00FF00FF00FF00FFL;
        t = ((r0 >>> 8) ^ r1) & m1; r1 ^= t; r0 ^= t << 8;
        t = ((r2 >>> 8) ^ r3) & m1; r3 ^= t; r2 ^= t << 8;
        t = ((r4 >>> 8) ^ r5) & m1; r5 ^= t; r4 ^= t << 8;
        t = ((r6 >>> 8) ^ r7) & m1; r7 ^= t; r6 ^= t << 8;
        final long m2 = 0x0000FFFF0000FFFFL;
        t = ((r0 >>> 16) ^ r2) & m2; r2 ^= t; r0 ^= t << 16;
        t = ((r1 >>> 16) ^ r3) & m2; r3 ^= t; r1 ^= t << 16;
        t = ((r4 >>> 16) ^ r6) & m2; r6 ^= t; r4 ^= t << 16;
        t = ((r5 >>> 16) ^ r7) & m2; r7 ^= t; r5 ^= t << 16;
        final long m4 = 0x00000000FFFFFFFFL;
        t = ((r0 >>> 32) ^ r4) & m4; r4 ^= t; r0 ^= t << 32;
        t = ((r1 >>> 32) ^ r5) & m4; r5 ^= t; r1 ^= t << 32;
        t = ((r2 >>> 32) ^ r6) & m4; r6 ^= t; r2 ^= t << 32;
        t = ((r3 >>> 32) ^ r7) & m4; r7 ^= t; r3 ^= t << 32;
        if (w == 8) {
          long o = dst + i * 8L;
          putLE(o, r0);
          putLE(o + 8, r1);
          putLE(o + 16, r2);
          putLE(o + 24, r3);
          putLE(o + 32, r4);
          putLE(o + 40, r5);
          putLE(o + 48, r6);
          putLE(o + 56, r7);
        } else {
          long o = dst + i * 4L;
          putLE(o, (r0 & m4) | (r1 << 32));
          putLE(o + 8, (r2 & m4) | (r3 << 32));
          putLE(o + 16, (r4 & m4) | (r5 << 32));
          putLE(o + 24, (r6 & m4) | (r7 << 32));
        }
      }
    }
    for (long o = dst + (long) i * w; i < n; i++) {
      for (int j = 0; j < w; j++) MemoryUtil.putByte(o++, src[j * n + i]);
    }
  }

  private static DecimalVector widenNarrowDecimal(BigIntVector v, int p, int s, BufferAllocator allocator) {
    int n = v.getValueCount();
    DecimalVector d = new DecimalVector(v.getName(), FieldType.nullable(new ArrowType.Decimal(p, s, 128)), allocator);
    d.allocateNew(n);
    ArrowBuf src = v.getDataBuffer();
    ArrowBuf dst = d.getDataBuffer();
    for (int i = 0; i < n; i++) {
      long lo = src.getLong((long) i * 8);
      dst.setLong((long) i * 16, lo);
      dst.setLong((long) i * 16 + 8, lo >> 63);
    }
    d.getValidityBuffer().setBytes(0, v.getValidityBuffer(), 0, (n + 7) / 8);
    d.setValueCount(n);
    v.close();
    return d;
  }

  /** The vector cast to a (wider or equal) type, §7.1; the input is consumed. */
  static FieldVector cast(FieldVector v, Field target, BufferAllocator allocator, String where)
      throws CdcSinkFormatException {
    ArrowType from = v.getField().getType();
    ArrowType to = target.getType();
    if (from.equals(to)) return v;
    int n = v.getValueCount();
    FieldVector out = target.createVector(allocator);
    try {
      if (from instanceof ArrowType.Int && to instanceof ArrowType.Int) {
        BaseIntVector src = (BaseIntVector) v;
        BaseIntVector dst = (BaseIntVector) out;
        out.setInitialCapacity(n);
        out.allocateNew();
        for (int i = 0; i < n; i++) {
          if (v.isNull(i)) out.setNull(i);
          else dst.setWithPossibleTruncate(i, src.getValueAsLong(i));
        }
      } else if (from instanceof ArrowType.FloatingPoint && out instanceof Float8Vector && v instanceof Float4Vector) {
        Float4Vector src = (Float4Vector) v;
        Float8Vector dst = (Float8Vector) out;
        dst.allocateNew(n);
        for (int i = 0; i < n; i++) {
          if (src.isNull(i)) dst.setNull(i);
          else dst.set(i, (double) src.get(i));
        }
      } else if (from instanceof ArrowType.Decimal && to instanceof ArrowType.Decimal
          && ((ArrowType.Decimal) from).getScale() == ((ArrowType.Decimal) to).getScale()) {
        DecimalVector dst = (DecimalVector) out;
        dst.allocateNew(n);
        dst.getDataBuffer().setBytes(0, v.getDataBuffer(), 0, (long) n * 16);
        dst.getValidityBuffer().setBytes(0, v.getValidityBuffer(), 0, (n + 7) / 8);
      } else {
        throw new CdcSinkFormatException(where + ": a column stored as " + from + " cannot be read as " + to);
      }
      out.setValueCount(n);
      v.close();
      return out;
    } catch (CdcSinkFormatException | RuntimeException e) {
      out.close();
      v.close();
      throw e;
    }
  }

  /** A one-row vector holding a column's default (or null). */
  static FieldVector defaultVector(Column c, BufferAllocator allocator) {
    Field f = new Field(c.name(), FieldType.nullable(Types.arrow(c.type())), null);
    FieldVector v = f.createVector(allocator);
    v.setInitialCapacity(1);
    v.allocateNew();
    Object d = c.defaultValue();
    if (d == null) {
      v.setNull(0);
    } else if (v instanceof BaseIntVector && !(v instanceof TimeStampMicroTZVector)) {
      ((BaseIntVector) v).setWithPossibleTruncate(0, ((Number) d).longValue());
    } else if (v instanceof TimeStampMicroTZVector) {
      ((TimeStampMicroTZVector) v).set(0, ((Number) d).longValue());
    } else if (v instanceof DateDayVector) {
      ((DateDayVector) v).set(0, ((Number) d).intValue());
    } else if (v instanceof Float4Vector) {
      ((Float4Vector) v).set(0, ((Number) d).floatValue());
    } else if (v instanceof Float8Vector) {
      ((Float8Vector) v).set(0, ((Number) d).doubleValue());
    } else if (v instanceof BitVector) {
      ((BitVector) v).set(0, ((Boolean) d) ? 1 : 0);
    } else if (v instanceof VarCharVector) {
      ((VarCharVector) v).setSafe(0, ((String) d).getBytes(StandardCharsets.UTF_8));
    } else if (v instanceof VarBinaryVector) {
      ((VarBinaryVector) v).setSafe(0, (byte[]) d);
    } else if (v instanceof DecimalVector) {
      ((DecimalVector) v).set(0, (BigDecimal) d);
    } else {
      v.setNull(0);
    }
    v.setValueCount(1);
    return v;
  }

  /** Whether a stored type reads as the wanted type: equal, or a widening of §7.1. */
  static boolean canCastTo(ArrowType from, ArrowType to) {
    if (from.equals(to)) return true;
    if (from instanceof ArrowType.Int && to instanceof ArrowType.Int) {
      return ((ArrowType.Int) from).getBitWidth() <= ((ArrowType.Int) to).getBitWidth();
    }
    if (from instanceof ArrowType.FloatingPoint && to instanceof ArrowType.FloatingPoint) return true;
    if (from instanceof ArrowType.Decimal && to instanceof ArrowType.Decimal) {
      return ((ArrowType.Decimal) from).getScale() == ((ArrowType.Decimal) to).getScale();
    }
    return false;
  }
}
