package io.cdcsink.spark;

import io.cdcsink.format.CdcSinkFormatException;
import io.cdcsink.format.ChangePlan;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;

/**
 * The options of a change-feed read ({@code readChangeFeed=true}), parsed as the Python source
 * (cdc_sink/spark/change_feed.py) parses them, with its error messages.
 *
 * <p>{@code startingVersion} or {@code startingTimestamp} (required) and {@code endingVersion}
 * or {@code endingTimestamp} (default: the latest version) name an inclusive range, as in
 * Delta: versions 5..9 are the changes of (4, 9]. A timestamp (ISO-8601, a naive one read as
 * UTC, or epoch milliseconds) starts at the first version committed at or after it and ends
 * at the last one committed at or before it. {@code columns}: comma-separated value columns
 * (the keys always come); {@code setColumnsOnly}: only the cells each version wrote, with a
 * {@code _set_<column>} mask per value column. The path and the Hadoop settings are those of
 * {@link ReadOptions}.
 */
public final class ChangeFeedOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The table (path and Hadoop settings). */
  public final ReadOptions table;
  /** {@code startingVersion}, or null. */
  public final Long startingVersion;
  /** {@code startingTimestamp} in epoch ms, or null. */
  public final Long startingTimestampMs;
  /** {@code endingVersion}, or null. */
  public final Long endingVersion;
  /** {@code endingTimestamp} in epoch ms, or null. */
  public final Long endingTimestampMs;
  /** The value columns asked for, or null (all). */
  public final List<String> columns;
  /** {@code setColumnsOnly}. */
  public final boolean setColumnsOnly;

  private ChangeFeedOptions(ReadOptions table, Long[] bounds, List<String> columns, boolean only) {
    this.table = table;
    this.startingVersion = bounds[0];
    this.startingTimestampMs = bounds[1];
    this.endingVersion = bounds[2];
    this.endingTimestampMs = bounds[3];
    this.columns = columns;
    this.setColumnsOnly = only;
  }

  /** Whether the options ask for the change feed. @throws IllegalArgumentException not a boolean */
  public static boolean wanted(Map<String, String> options) {
    return flag(ReadOptions.lower(options), "readChangeFeed");
  }

  /**
   * Parses a change-feed read's options (any case).
   *
   * @throws IllegalArgumentException no path, no starting version or timestamp, or a malformed
   *     option (the Python source's messages)
   */
  public static ChangeFeedOptions parse(Map<String, String> options) {
    return parse(options, null);
  }

  /** {@link #parse(Map)} with {@code columns} instead of the {@code columns} option (non-null). */
  static ChangeFeedOptions parse(Map<String, String> options, List<String> columns) {
    Map<String, String> table = new HashMap<>(options);
    table.keySet().removeIf(k -> {
      String l = k.toLowerCase(Locale.ROOT);
      return l.equals("columns") || l.equals("versionasof") || l.equals("timestampasof");
    });
    ReadOptions read = ReadOptions.parse(table);
    Map<String, String> o = ReadOptions.lower(options);
    Long[] bounds = new Long[4];
    bound(o, "starting", bounds, 0);
    if (bounds[0] == null && bounds[1] == null) {
      throw new IllegalArgumentException(
          "cdc_sink: readChangeFeed needs startingVersion or startingTimestamp");
    }
    bound(o, "ending", bounds, 2);
    List<String> cols = columns;
    String raw = ReadOptions.given(o.get("columns"));
    if (cols == null && raw != null) {
      cols = new ArrayList<>();
      for (String c : raw.split(",", -1)) {
        cols.add(c.strip());
      }
    }
    boolean only = flag(o, "setColumnsOnly");
    return new ChangeFeedOptions(read, bounds,
        cols == null ? null : Collections.unmodifiableList(new ArrayList<>(cols)), only);
  }

  /**
   * Fixes the range on the driver and checks it and the columns ({@link ChangePlan#resolve}):
   * {@code (first - 1, last]} of the inclusive versions the options name.
   *
   * @throws CdcSinkFormatException a version not retained (the message names the oldest
   *     readable one), an end before the start, a column the schema at the end lacks
   */
  public ChangePlan resolve(Configuration base) throws CdcSinkFormatException {
    Configuration conf = table.hadoopConf(base);
    String uri = table.path;
    long first = startingVersion != null ? startingVersion
        : ChangePlan.versionAtOrAfter(uri, conf, startingTimestampMs);
    long end;
    if (endingVersion != null) {
      end = endingVersion;
    } else if (endingTimestampMs != null) {
      end = ChangePlan.versionAtOrBefore(uri, conf, endingTimestampMs);
    } else {
      end = ChangePlan.latestVersion(uri, conf);
    }
    return ChangePlan.resolve(uri, conf, Math.max(first - 1, 0), end, columns, setColumnsOnly);
  }

  /** These options with {@code columns} as the value columns read. */
  ChangeFeedOptions withColumns(List<String> cols) {
    return new ChangeFeedOptions(table,
        new Long[] {startingVersion, startingTimestampMs, endingVersion, endingTimestampMs},
        Collections.unmodifiableList(new ArrayList<>(cols)), setColumnsOnly);
  }

  private static void bound(Map<String, String> o, String which, Long[] out, int at) {
    String name = which + "Version";
    String v = ReadOptions.given(o.get(name.toLowerCase(Locale.ROOT)));
    Long version = null;
    if (v != null) {
      try {
        version = Long.parseLong(v);
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException(
            "cdc_sink: " + name + " must be an integer, got " + repr(v));
      }
    }
    String t = ReadOptions.given(o.get((which + "Timestamp").toLowerCase(Locale.ROOT)));
    if (version != null && t != null) {
      throw new IllegalArgumentException(
          "cdc_sink: give " + which + "Version or " + which + "Timestamp, not both");
    }
    Long ms = null;
    if (t != null) {
      try {
        ms = ReadOptions.parseTimestampMs(t);
      } catch (IllegalArgumentException | ArithmeticException e) {
        throw new IllegalArgumentException(
            "cdc_sink: " + which + "Timestamp is no timestamp: " + repr(t));
      }
    }
    out[at] = version;
    out[at + 1] = ms;
  }

  private static boolean flag(Map<String, String> lowered, String name) {
    String raw = ReadOptions.given(lowered.get(name.toLowerCase(Locale.ROOT)));
    String v = raw == null ? "false" : raw.toLowerCase(Locale.ROOT);
    if (!v.equals("true") && !v.equals("false")) {
      throw new IllegalArgumentException(
          "cdc_sink: " + name + " must be true or false, got " + repr(v));
    }
    return v.equals("true");
  }

  /** A string as Python's repr() shows it (the Python source's messages use it). */
  static String repr(String s) {
    if (s.contains("'") && !s.contains("\"")) {
      return "\"" + s + "\"";
    }
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'";
  }

  @Override
  public String toString() {
    return "ChangeFeedOptions(" + table.path + ", starting " + startingVersion + "/"
        + startingTimestampMs + ", ending " + endingVersion + "/" + endingTimestampMs
        + ", columns=" + (columns == null ? "all" : columns) + ", setColumnsOnly="
        + setColumnsOnly + ", hadoop=" + table.hadoop.keySet() + ")";
  }
}
