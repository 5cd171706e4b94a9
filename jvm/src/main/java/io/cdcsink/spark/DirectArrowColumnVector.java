package io.cdcsink.spark;

import java.math.BigDecimal;
import java.math.BigInteger;
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
import org.apache.arrow.vector.TimeStampMicroVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A {@link ColumnVector} that reads an Arrow vector's values straight from its buffers'
 * memory, as Spark's own off-heap vectors do: no bounds or null checks per value (Spark's
 * {@link ArrowColumnVector} goes through Arrow's checked getters). Strings are zero-copy
 * {@link UTF8String}s over the data buffer. The Arrow vector is owned by its batch's root
 * and must stay open while this vector is read; {@link #close()} closes it, as
 * {@link ArrowColumnVector#close()} does.
 *
 * <p>Use {@link #of(FieldVector)}: it falls back to {@link ArrowColumnVector} for the types
 * this class does not read.
 */
final class DirectArrowColumnVector extends ColumnVector {
  private enum Kind { BYTE, SHORT, INT, LONG, FLOAT, DOUBLE, BOOLEAN, DECIMAL, STRING, BINARY }

  private final FieldVector vector;
  private final Kind kind;
  private final int nullCount;
  private final long validity;
  private final long data;
  private final long offsets;
  private final int decimalPrecision;
  private final int decimalScale;

  private DirectArrowColumnVector(FieldVector vector, Kind kind) {
    super(ArrowUtils.fromArrowField(vector.getField()));
    this.vector = vector;
    this.kind = kind;
    this.nullCount = vector.getNullCount();
    this.validity = nullCount == 0 ? 0L : vector.getValidityBufferAddress();
    this.data = vector.getDataBufferAddress();
    this.offsets = kind == Kind.STRING || kind == Kind.BINARY ? vector.getOffsetBufferAddress() : 0L;
    if (vector instanceof DecimalVector) {
      this.decimalPrecision = ((DecimalVector) vector).getPrecision();
      this.decimalScale = ((DecimalVector) vector).getScale();
    } else {
      this.decimalPrecision = 0;
      this.decimalScale = 0;
    }
  }

  /**
   * A column vector over {@code vector}: a direct one for the types the connector produces,
   * Spark's {@link ArrowColumnVector} for any other.
   *
   * @param vector the Arrow vector; the returned column closes it on {@link #close()}
   * @return the column vector
   */
  static ColumnVector of(FieldVector vector) {
    Kind kind = kindOf(vector);
    return kind == null ? new ArrowColumnVector(vector) : new DirectArrowColumnVector(vector, kind);
  }

  private static Kind kindOf(FieldVector v) {
    if (v instanceof TinyIntVector) return Kind.BYTE;
    if (v instanceof SmallIntVector) return Kind.SHORT;
    if (v instanceof IntVector || v instanceof DateDayVector) return Kind.INT;
    if (v instanceof BigIntVector || v instanceof TimeStampMicroTZVector
        || v instanceof TimeStampMicroVector) {
      return Kind.LONG;
    }
    if (v instanceof Float4Vector) return Kind.FLOAT;
    if (v instanceof Float8Vector) return Kind.DOUBLE;
    if (v instanceof BitVector) return Kind.BOOLEAN;
    if (v instanceof DecimalVector) return Kind.DECIMAL;
    if (v instanceof VarCharVector) return Kind.STRING;
    if (v instanceof VarBinaryVector) return Kind.BINARY;
    return null;
  }

  @Override
  public void close() {
    vector.close();
  }

  @Override
  public boolean hasNull() {
    return nullCount > 0;
  }

  @Override
  public int numNulls() {
    return nullCount;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return nullCount != 0
        && ((Platform.getByte(null, validity + (rowId >> 3)) >> (rowId & 7)) & 1) == 0;
  }

  @Override
  public boolean getBoolean(int rowId) {
    return ((Platform.getByte(null, data + (rowId >> 3)) >> (rowId & 7)) & 1) != 0;
  }

  @Override
  public byte getByte(int rowId) {
    return Platform.getByte(null, data + rowId);
  }

  @Override
  public short getShort(int rowId) {
    return Platform.getShort(null, data + 2L * rowId);
  }

  @Override
  public int getInt(int rowId) {
    return Platform.getInt(null, data + 4L * rowId);
  }

  @Override
  public long getLong(int rowId) {
    return Platform.getLong(null, data + 8L * rowId);
  }

  @Override
  public float getFloat(int rowId) {
    return Platform.getFloat(null, data + 4L * rowId);
  }

  @Override
  public double getDouble(int rowId) {
    return Platform.getDouble(null, data + 8L * rowId);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    if (isNullAt(rowId)) return null;
    long at = data + 16L * rowId; // 128-bit little-endian two's complement
    if (decimalPrecision <= Decimal.MAX_LONG_DIGITS()) {
      return Decimal.createUnsafe(Platform.getLong(null, at), precision, scale);
    }
    byte[] big = new byte[16];
    for (int i = 0; i < 16; i++) {
      big[i] = Platform.getByte(null, at + 15 - i);
    }
    return Decimal.apply(new BigDecimal(new BigInteger(big), decimalScale), precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    if (isNullAt(rowId)) return null;
    int start = Platform.getInt(null, offsets + 4L * rowId);
    int end = Platform.getInt(null, offsets + 4L * rowId + 4);
    return UTF8String.fromAddress(null, data + start, end - start);
  }

  @Override
  public byte[] getBinary(int rowId) {
    if (isNullAt(rowId)) return null;
    int start = Platform.getInt(null, offsets + 4L * rowId);
    int end = Platform.getInt(null, offsets + 4L * rowId + 4);
    byte[] bytes = new byte[end - start];
    Platform.copyMemory(null, data + start, bytes, Platform.BYTE_ARRAY_OFFSET, bytes.length);
    return bytes;
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw new UnsupportedOperationException("cdc_sink: not an array column: " + kind);
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    throw new UnsupportedOperationException("cdc_sink: not a map column: " + kind);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw new UnsupportedOperationException("cdc_sink: not a struct column: " + kind);
  }
}
