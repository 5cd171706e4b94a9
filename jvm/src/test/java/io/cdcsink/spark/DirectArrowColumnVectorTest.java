package io.cdcsink.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

class DirectArrowColumnVectorTest {
  private static final int N = 37; // not a multiple of 8: the last validity byte is partial

  private static boolean isNull(int i) {
    return i % 3 == 1;
  }

  /** Every value, null flag and null count of {@code v} read directly equals Spark's reading. */
  private static void assertSameAsSpark(FieldVector v) {
    ColumnVector direct = DirectArrowColumnVector.of(v);
    assertInstanceOf(DirectArrowColumnVector.class, direct, v.getClass().getSimpleName());
    ColumnVector spark = new ArrowColumnVector(v);
    assertEquals(spark.dataType(), direct.dataType());
    assertEquals(spark.numNulls(), direct.numNulls());
    assertEquals(spark.hasNull(), direct.hasNull());
    for (int i = 0; i < v.getValueCount(); i++) {
      assertEquals(spark.isNullAt(i), direct.isNullAt(i), "null at " + i);
      if (spark.isNullAt(i)) {
        continue;
      }
      if (v instanceof TinyIntVector) assertEquals(spark.getByte(i), direct.getByte(i));
      else if (v instanceof SmallIntVector) assertEquals(spark.getShort(i), direct.getShort(i));
      else if (v instanceof IntVector || v instanceof DateDayVector) {
        assertEquals(spark.getInt(i), direct.getInt(i));
      } else if (v instanceof BigIntVector || v instanceof TimeStampMicroTZVector) {
        assertEquals(spark.getLong(i), direct.getLong(i));
      } else if (v instanceof Float4Vector) assertEquals(spark.getFloat(i), direct.getFloat(i));
      else if (v instanceof Float8Vector) assertEquals(spark.getDouble(i), direct.getDouble(i));
      else if (v instanceof BitVector) assertEquals(spark.getBoolean(i), direct.getBoolean(i));
      else if (v instanceof DecimalVector) {
        DecimalType t = (DecimalType) spark.dataType();
        assertEquals(spark.getDecimal(i, t.precision(), t.scale()),
            direct.getDecimal(i, t.precision(), t.scale()));
      } else if (v instanceof VarCharVector) {
        assertEquals(spark.getUTF8String(i), direct.getUTF8String(i));
      } else if (v instanceof VarBinaryVector) {
        assertArrayEquals(spark.getBinary(i), direct.getBinary(i));
      }
    }
  }

  private static List<FieldVector> vectors(BufferAllocator a, boolean nulls) {
    List<FieldVector> vs = new ArrayList<>();
    TinyIntVector i8 = new TinyIntVector("i8", a);
    SmallIntVector i16 = new SmallIntVector("i16", a);
    IntVector i32 = new IntVector("i32", a);
    BigIntVector i64 = new BigIntVector("i64", a);
    Float4Vector f32 = new Float4Vector("f32", a);
    Float8Vector f64 = new Float8Vector("f64", a);
    BitVector b = new BitVector("b", a);
    DateDayVector d = new DateDayVector("d", a);
    TimeStampMicroTZVector ts = new TimeStampMicroTZVector("ts", a, "UTC");
    DecimalVector dec = new DecimalVector("dec", FieldType.nullable(new ArrowType.Decimal(18, 4, 128)), a);
    DecimalVector big = new DecimalVector("big", FieldType.nullable(new ArrowType.Decimal(38, 6, 128)), a);
    VarCharVector s = new VarCharVector("s", a);
    VarBinaryVector bin = new VarBinaryVector("bin", a);
    vs.addAll(List.of(i8, i16, i32, i64, f32, f64, b, d, ts, dec, big, s, bin));
    for (FieldVector v : vs) {
      v.allocateNew();
    }
    for (int i = 0; i < N; i++) {
      if (nulls && isNull(i)) {
        for (FieldVector v : vs) {
          v.setNull(i);
        }
        continue;
      }
      int sign = i % 2 == 0 ? 1 : -1;
      i8.setSafe(i, (byte) (sign * i));
      i16.setSafe(i, (short) (sign * i * 300));
      i32.setSafe(i, sign * i * 100_000);
      i64.setSafe(i, sign * (long) i * 10_000_000_000L);
      f32.setSafe(i, sign * i * 1.5f);
      f64.setSafe(i, sign * i * 2.25);
      b.setSafe(i, i % 5 == 0 ? 1 : 0);
      d.setSafe(i, sign * i * 1000);
      ts.setSafe(i, sign * (long) i * 86_400_000_000L);
      dec.setSafe(i, new BigDecimal(sign * (long) i * 123_456_789L).movePointLeft(4));
      big.setSafe(i, new BigDecimal("12345678901234567890123456789").multiply(BigDecimal.valueOf(sign * i))
          .movePointLeft(6));
      s.setSafe(i, ("s" + i + "é").repeat(i % 4).getBytes(StandardCharsets.UTF_8));
      bin.setSafe(i, new byte[] {(byte) i, (byte) -i, 0});
    }
    for (FieldVector v : vs) {
      v.setValueCount(N);
    }
    return vs;
  }

  @Test
  void everyTypeReadsAsSparksArrowColumnVectorDoes() {
    for (boolean nulls : new boolean[] {true, false}) {
      try (BufferAllocator a = new RootAllocator()) {
        List<FieldVector> vs = vectors(a, nulls);
        for (FieldVector v : vs) {
          assertSameAsSpark(v);
          assertEquals(nulls, v.getNullCount() > 0);
        }
        vs.forEach(FieldVector::close);
      }
    }
  }

  @Test
  void stringsAreZeroCopyViewsOfTheArrowBuffer() {
    try (BufferAllocator a = new RootAllocator(); VarCharVector s = new VarCharVector("s", a)) {
      s.allocateNew();
      s.setSafe(0, "abc".getBytes(StandardCharsets.UTF_8));
      s.setValueCount(1);
      UTF8String u = DirectArrowColumnVector.of(s).getUTF8String(0);
      assertEquals(s.getDataBufferAddress(), u.getBaseOffset());
      assertEquals("abc", u.toString());
    }
  }

  @Test
  void otherTypesFallBackToSparksVectorAndCloseClosesTheArrowVector() {
    try (BufferAllocator a = new RootAllocator()) {
      org.apache.arrow.vector.LargeVarCharVector u = new org.apache.arrow.vector.LargeVarCharVector("u", a);
      assertInstanceOf(ArrowColumnVector.class, DirectArrowColumnVector.of(u));
      IntVector i = new IntVector("i", a);
      i.allocateNew(4);
      for (int k = 0; k < 4; k++) {
        i.set(k, k);
      }
      i.setValueCount(4);
      assertTrue(a.getAllocatedMemory() > 0);
      ColumnVector c = DirectArrowColumnVector.of(i);
      assertFalse(c.hasNull());
      c.close();
      u.close();
      assertEquals(0, a.getAllocatedMemory());
    }
  }
}
