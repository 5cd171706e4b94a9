package io.cdcsink.format;

import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;

/** Column type names (docs/format.md §5.4) and their Arrow types. */
public final class Types {
  private Types() {}

  private static final Pattern TS = Pattern.compile("timestamp\\[\\s*us\\s*,\\s*(tz\\s*=\\s*)?utc\\s*\\]");
  private static final Pattern DEC = Pattern.compile("decimal(?:128)?\\(\\s*(\\d+)\\s*,\\s*(\\d+)\\s*\\)");

  /** The canonical (as written) spelling of a type name, or null when it is not a type. */
  public static String canonical(String text) {
    String t = text.trim().toLowerCase(Locale.ROOT);
    switch (t) {
      case "int8": case "int16": case "int32": case "int64": case "binary":
        return t;
      case "float32": case "float": return "float32";
      case "float64": case "double": return "float64";
      case "bool": case "boolean": return "bool";
      case "string": case "utf8": return "string";
      case "date32": case "date": return "date32";
      case "timestamp": return "timestamp[us, UTC]";
      default:
        break;
    }
    if (TS.matcher(t).matches()) return "timestamp[us, UTC]";
    Matcher m = DEC.matcher(t);
    if (m.matches()) {
      int p = Integer.parseInt(m.group(1));
      int s = Integer.parseInt(m.group(2));
      if (p < 1 || p > 38 || s > p) return null;
      return "decimal128(" + p + ", " + s + ")";
    }
    return null;
  }

  /** The Arrow type of a canonical type name. */
  public static ArrowType arrow(String canonical) {
    switch (canonical) {
      case "int8": return new ArrowType.Int(8, true);
      case "int16": return new ArrowType.Int(16, true);
      case "int32": return new ArrowType.Int(32, true);
      case "int64": return new ArrowType.Int(64, true);
      case "float32": return new ArrowType.FloatingPoint(FloatingPointPrecision.SINGLE);
      case "float64": return new ArrowType.FloatingPoint(FloatingPointPrecision.DOUBLE);
      case "bool": return ArrowType.Bool.INSTANCE;
      case "string": return ArrowType.Utf8.INSTANCE;
      case "binary": return ArrowType.Binary.INSTANCE;
      case "date32": return new ArrowType.Date(DateUnit.DAY);
      case "timestamp[us, UTC]": return new ArrowType.Timestamp(TimeUnit.MICROSECOND, "UTC");
      default:
        Matcher m = DEC.matcher(canonical);
        if (m.matches()) {
          return new ArrowType.Decimal(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), 128);
        }
        throw new IllegalArgumentException("not a column type: " + canonical);
    }
  }

  static boolean isInt(ArrowType t) {
    return t instanceof ArrowType.Int;
  }
}
