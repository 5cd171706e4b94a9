package io.cdcsink.format;

import com.fasterxml.jackson.databind.JsonNode;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.LocalDate;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import org.apache.arrow.vector.types.pojo.ArrowType;

/**
 * One predicate of a conjunctive filter a {@link BucketReader} may use to skip snapshot pages by
 * their statistics (docs/format.md §10.4, §14.6) and {@link #buckets} to skip whole buckets by a key
 * lookup (§13). A reader given filters may still return rows that do not match (apply the filter
 * again), never drops a row that matches.
 *
 * <p>{@code op} is one of {@code = != < <= > >= in is_null is_not_null}. {@code value} is a Java
 * value of the column's type: {@code Long/Integer/Short/Byte} (integers), {@code Double/Float},
 * {@code Boolean}, {@code String}, {@code byte[]}, {@link BigDecimal}, {@link LocalDate} or the
 * days since the epoch as an integer (date32), the microseconds since the epoch as an integer or an
 * {@link Instant} (timestamps); for {@code in} a {@link Collection} of such values; none (null) for
 * {@code is_null} / {@code is_not_null}. A value of another kind, or a null value of a comparison,
 * never skips anything.
 */
public record Filter(String column, String op, Object value) implements java.io.Serializable {
  /** The operators a filter may use. */
  public static final Set<String> OPS = Set.of("=", "!=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null");

  public Filter {
    if (column == null) throw new IllegalArgumentException("a filter needs a column");
    if (!OPS.contains(op)) throw new IllegalArgumentException("filter op " + op + " is not one of " + OPS);
    if (op.equals("in") && !(value instanceof Collection)) {
      throw new IllegalArgumentException("filter op in needs a collection of values");
    }
  }

  // ------------------------------------------------------------------ physical values (§5.4)

  /**
   * A value in the comparable physical form of a column of type {@code type}: integers, dates,
   * timestamps and decimals (unscaled) as BigInteger, floats as Double, bools as Boolean, strings
   * and binaries as byte[]; null when it is not a value of the type (then it cannot skip).
   */
  static Object physical(Object v, String type) {
    if (v == null) return null;
    try {
      switch (type) {
        case "int8": case "int16": case "int32": case "int64":
          return integral(v);
        case "float32":
          if (v instanceof Float) return ((Float) v).doubleValue();
          if (v instanceof Double) { // exact as a float32 only (the column's type decides)
            double d = (Double) v;
            return (double) (float) d == d || Double.isNaN(d) ? d : null;
          }
          return null;
        case "float64":
          return v instanceof Double || v instanceof Float ? ((Number) v).doubleValue() : null;
        case "bool":
          return v instanceof Boolean ? v : null;
        case "string":
          return v instanceof String ? ((String) v).getBytes(StandardCharsets.UTF_8) : null;
        case "binary":
          return v instanceof byte[] ? v : null;
        case "date32":
          return v instanceof LocalDate ? BigInteger.valueOf(((LocalDate) v).toEpochDay()) : integral(v);
        case "timestamp[us, UTC]":
          if (v instanceof Instant) {
            Instant i = (Instant) v;
            return BigInteger.valueOf(ChronoUnit.MICROS.between(Instant.EPOCH, i));
          }
          return integral(v);
        default:
          ArrowType t = Types.arrow(type);
          if (!(t instanceof ArrowType.Decimal)) return null;
          BigDecimal d = v instanceof BigDecimal ? (BigDecimal) v : v instanceof Number ? new BigDecimal(v.toString())
              : null;
          if (d == null) return null;
          return d.setScale(((ArrowType.Decimal) t).getScale()).unscaledValue(); // inexact: throws
      }
    } catch (ArithmeticException | IllegalArgumentException e) {
      return null;
    }
  }

  private static BigInteger integral(Object v) {
    if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
      return BigInteger.valueOf(((Number) v).longValue());
    }
    if (v instanceof BigInteger) return (BigInteger) v;
    return null;
  }

  /** A page statistic (JSON, stats_format 1 or 2) in physical form; null when unknown. */
  static Object stat(JsonNode n, String type) {
    if (n == null || n.isNull()) return null;
    try {
      if (n.isObject()) {
        if (n.has("b64")) return Base64.getDecoder().decode(n.get("b64").asText());
        if (n.has("date")) return BigInteger.valueOf(LocalDate.parse(n.get("date").asText()).toEpochDay());
        if (n.has("ts")) {
          Instant i = java.time.OffsetDateTime.parse(n.get("ts").asText()).toInstant();
          return physical(i, type);
        }
        if (n.has("dec")) return physical(new BigDecimal(n.get("dec").asText()), type);
        return null;
      }
      if (n.isBoolean()) return type.equals("bool") ? n.booleanValue() : null;
      if (n.isTextual()) return type.equals("string") ? n.textValue().getBytes(StandardCharsets.UTF_8) : null;
      if (n.isIntegralNumber()) {
        return type.startsWith("float") ? (Object) n.doubleValue() : n.bigIntegerValue();
      }
      if (n.isNumber()) return type.startsWith("float") ? n.doubleValue() : null;
    } catch (RuntimeException e) {
      return null;
    }
    return null;
  }

  /** Compares two physical values; null when they are not comparable. */
  static Integer compare(Object a, Object b) {
    if (a instanceof BigInteger && b instanceof BigInteger) return ((BigInteger) a).compareTo((BigInteger) b);
    if (a instanceof Double && b instanceof Double) {
      double x = (Double) a;
      double y = (Double) b;
      if (Double.isNaN(x) || Double.isNaN(y)) return null;
      return x < y ? -1 : x > y ? 1 : 0; // -0.0 == 0.0
    }
    if (a instanceof Boolean && b instanceof Boolean) return Boolean.compare((Boolean) a, (Boolean) b);
    if (a instanceof byte[] && b instanceof byte[]) return java.util.Arrays.compareUnsigned((byte[]) a, (byte[]) b);
    return null;
  }

  /**
   * False only when a page's statistics (min and max over its non-null values, null when unknown;
   * its rows and nulls) prove no row of it satisfies this filter on a column of {@code type}.
   */
  boolean mayMatch(JsonNode min, JsonNode max, long rows, long nullCount, String type) {
    long nonNull = rows - nullCount;
    if (op.equals("is_null")) return nullCount > 0;
    if (op.equals("is_not_null")) return nonNull > 0;
    if (nonNull == 0) return false; // a comparison never matches a null
    Object lo = stat(min, type);
    Object hi = stat(max, type);
    if (op.equals("in")) {
      for (Object x : (Collection<?>) value) {
        Object v = physical(x, type);
        if (x != null && (v == null || inRange(lo, hi, v))) return true;
      }
      return false;
    }
    Object v = physical(value, type);
    if (v == null) return true;
    Integer cl = lo == null ? null : compare(lo, v); // lo vs v
    Integer ch = hi == null ? null : compare(hi, v); // hi vs v
    switch (op) {
      case "=": return inRange(lo, hi, v);
      case "<": return cl == null || cl < 0;
      case "<=": return cl == null || cl <= 0;
      case ">": return ch == null || ch > 0;
      case ">=": return ch == null || ch >= 0;
      case "!=": return cl == null || ch == null || cl != 0 || ch != 0;
      default: return true;
    }
  }

  private static boolean inRange(Object lo, Object hi, Object v) {
    Integer cl = lo == null ? null : compare(lo, v);
    Integer ch = hi == null ? null : compare(hi, v);
    return (cl == null || cl <= 0) && (ch == null || ch >= 0);
  }

  // ------------------------------------------------------------------ buckets (§13)

  /**
   * The buckets that may hold a row matching every filter: those of the keys an equality or
   * {@code in} filter on every primary key column names (at most 4096 combinations), else every
   * bucket. Ascending.
   */
  public static int[] buckets(TableSchema schema, List<Filter> filters) {
    int n = schema.numBuckets();
    int[] all = new int[n];
    for (int b = 0; b < n; b++) all[b] = b;
    if (filters == null || filters.isEmpty()) return all;
    List<Column> keys = schema.keyColumns();
    List<List<Object>> choices = new ArrayList<>();
    long combos = 1;
    for (Column k : keys) {
      List<Object> vals = null;
      for (Filter f : filters) {
        if (!f.column.equals(k.name())) continue;
        List<Object> these = new ArrayList<>();
        if (f.op.equals("=")) {
          Object p = physical(f.value, k.type());
          if (p == null) return all;
          these.add(p);
        } else if (f.op.equals("in")) {
          for (Object x : (Collection<?>) f.value) {
            if (x == null) continue;
            Object p = physical(x, k.type());
            if (p == null) return all;
            these.add(p);
          }
        } else {
          continue;
        }
        if (vals == null) vals = these;
        else vals = intersect(vals, these);
      }
      if (vals == null) return all;
      combos *= Math.max(1, vals.size());
      if (combos > 4096) return all;
      choices.add(vals);
    }
    java.util.TreeSet<Integer> out = new java.util.TreeSet<>();
    addBuckets(schema, keys, choices, 0, 42L, out);
    return out.stream().mapToInt(Integer::intValue).toArray();
  }

  private static List<Object> intersect(List<Object> a, List<Object> b) {
    List<Object> out = new ArrayList<>();
    for (Object x : a) {
      for (Object y : b) {
        Integer c = compare(x, y);
        if (c != null && c == 0) {
          out.add(x);
          break;
        }
      }
    }
    return out;
  }

  private static void addBuckets(TableSchema schema, List<Column> keys, List<List<Object>> choices, int i, long seed,
                                 java.util.Set<Integer> out) {
    if (i == keys.size()) {
      int n = schema.numBuckets();
      out.add((int) (((seed % n) + n) % n));
      return;
    }
    for (Object v : choices.get(i)) addBuckets(schema, keys, choices, i + 1, hashValue(v, keys.get(i).type(), seed), out);
  }

  /** §13: the XXH64 of one key value (physical form) of a column of {@code type}, with {@code seed}. */
  static long hashValue(Object v, String type, long seed) {
    switch (type) {
      case "bool":
        return XxHash64.hashInt((Boolean) v ? 1 : 0, seed);
      case "int8": case "int16": case "int32": case "date32":
        return XxHash64.hashInt(((BigInteger) v).intValue(), seed);
      case "int64": case "timestamp[us, UTC]":
        return XxHash64.hashLong(((BigInteger) v).longValue(), seed);
      case "float32": {
        float f = ((Double) v).floatValue();
        int bits = Float.isNaN(f) ? 0x7FC00000 : f == 0.0f ? 0 : Float.floatToRawIntBits(f);
        return XxHash64.hashInt(bits, seed);
      }
      case "float64": {
        double d = (Double) v;
        long bits = Double.isNaN(d) ? 0x7FF8000000000000L : d == 0.0 ? 0L : Double.doubleToRawLongBits(d);
        return XxHash64.hashLong(bits, seed);
      }
      case "string": case "binary": {
        byte[] b = (byte[]) v;
        return XxHash64.hash(b, 0, b.length, seed);
      }
      default: {
        ArrowType.Decimal t = (ArrowType.Decimal) Types.arrow(type);
        BigInteger u = (BigInteger) v;
        if (t.getPrecision() <= 18) return XxHash64.hashLong(u.longValue(), seed);
        byte[] b = u.toByteArray();
        return XxHash64.hash(b, 0, b.length, seed);
      }
    }
  }
}
