package io.cdcsink.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.IsNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * Spark's filters as the format reader's ({@link io.cdcsink.format.Filter}): what lets a
 * bucket reader skip snapshot pages by their statistics and the scan skip the buckets no key of
 * an equality on the whole key can be in. The reader may still return rows that do not match,
 * so Spark evaluates every filter again after the scan.
 */
final class PushedFilters {
  private PushedFilters() {}

  /** The format filters of {@code f} (a conjunction; none when it translates to none). */
  static List<io.cdcsink.format.Filter> translate(Filter f) {
    List<io.cdcsink.format.Filter> out = new ArrayList<>();
    add(f, out);
    return out;
  }

  private static void add(Filter f, List<io.cdcsink.format.Filter> out) {
    if (f instanceof And a) {
      add(a.left(), out);
      add(a.right(), out);
    } else if (f instanceof EqualTo e) {
      compare(e.attribute(), "=", e.value(), out);
    } else if (f instanceof EqualNullSafe e && e.value() != null) {
      compare(e.attribute(), "=", e.value(), out);
    } else if (f instanceof GreaterThan g) {
      compare(g.attribute(), ">", g.value(), out);
    } else if (f instanceof GreaterThanOrEqual g) {
      compare(g.attribute(), ">=", g.value(), out);
    } else if (f instanceof LessThan l) {
      compare(l.attribute(), "<", l.value(), out);
    } else if (f instanceof LessThanOrEqual l) {
      compare(l.attribute(), "<=", l.value(), out);
    } else if (f instanceof In in && top(in.attribute())) {
      List<Object> values = new ArrayList<>();
      Arrays.stream(in.values()).filter(Objects::nonNull).map(PushedFilters::value).forEach(values::add);
      out.add(new io.cdcsink.format.Filter(in.attribute(), "in", values));
    } else if (f instanceof IsNull n && top(n.attribute())) {
      out.add(new io.cdcsink.format.Filter(n.attribute(), "is_null", null));
    } else if (f instanceof IsNotNull n && top(n.attribute())) {
      out.add(new io.cdcsink.format.Filter(n.attribute(), "is_not_null", null));
    }
  }

  private static void compare(String column, String op, Object v, List<io.cdcsink.format.Filter> out) {
    if (v != null && top(column)) {
      out.add(new io.cdcsink.format.Filter(column, op, value(v)));
    }
  }

  /** A top-level column (Spark quotes a nested one's path with dots). */
  private static boolean top(String attribute) {
    return !attribute.contains(".") && !attribute.contains("`");
  }

  /** A Spark literal as the format's filters take it (dates and timestamps as java.time). */
  private static Object value(Object v) {
    if (v instanceof java.sql.Date d) {
      return d.toLocalDate();
    }
    if (v instanceof java.sql.Timestamp t) {
      return t.toInstant();
    }
    return v; // numbers, strings, byte[], BigDecimal, LocalDate, Instant: as they are
  }
}
