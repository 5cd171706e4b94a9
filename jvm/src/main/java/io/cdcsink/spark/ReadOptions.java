package io.cdcsink.spark;

import io.cdcsink.format.CdcSinkFormatException;
import io.cdcsink.format.ReadPlan;
import java.io.Serializable;
import java.net.URI;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;

/**
 * The options of a read, parsed: the table's URI, the version or timestamp asked for, the
 * columns, and the Hadoop settings the options add.
 *
 * <p>Options (case-insensitive): {@code path} (or {@code location}, what the session catalog
 * passes), {@code versionAsOf} (an integer), {@code timestampAsOf} (an ISO-8601 timestamp, a
 * naive one read as UTC, or epoch milliseconds: the newest version committed at or before it),
 * {@code columns} (comma-separated names), {@code fs.*} / {@code spark.hadoop.*} (Hadoop
 * settings of this read) and {@code storage.*} (the Python reader's storage options, mapped to
 * S3A's settings for an {@code s3://} table, which is read as {@code s3a://}).
 */
public final class ReadOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The table's URI as Hadoop reads it. */
  public final String path;
  /** The version asked for, or null. */
  public final Long versionAsOf;
  /** The timestamp asked for (epoch ms), or null. */
  public final Long timestampAsOfMs;
  /** The columns asked for by the {@code columns} option, or null (all). */
  public final List<String> columns;
  /** Hadoop settings the options add. */
  public final Map<String, String> hadoop;

  private ReadOptions(String path, Long version, Long timestampMs, List<String> columns,
                      Map<String, String> hadoop) {
    this.path = path;
    this.versionAsOf = version;
    this.timestampAsOfMs = timestampMs;
    this.columns = columns;
    this.hadoop = hadoop;
  }

  /** Parses {@code options} (any case). @throws IllegalArgumentException on a bad option. */
  public static ReadOptions parse(Map<String, String> options) {
    Map<String, String> o = lower(options);
    String raw = given(o.get("path"));
    if (raw == null) {
      raw = given(o.get("location"));
    }
    if (raw == null) {
      throw new IllegalArgumentException(
          "cdc_sink: no table path; use spark.read.format(\"cdc_sink\").load(path)");
    }
    Long version = null;
    String v = given(o.get("versionasof"));
    if (v != null) {
      try {
        version = Long.parseLong(v);
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("cdc_sink: versionAsOf must be an integer, got '" + v + "'");
      }
    }
    String t = given(o.get("timestampasof"));
    Long ts = t == null ? null : parseTimestampMs(t);
    if (version != null && ts != null) {
      throw new IllegalArgumentException("cdc_sink: give versionAsOf or timestampAsOf, not both");
    }
    List<String> columns = null;
    String c = given(o.get("columns"));
    if (c != null) {
      columns = new ArrayList<>();
      for (String name : c.split(",", -1)) {
        String n = name.strip();
        if (n.isEmpty() || columns.contains(n)) {
          throw new IllegalArgumentException(
              "cdc_sink: columns must be distinct names separated by commas, got '" + c + "'");
        }
        columns.add(n);
      }
      columns = Collections.unmodifiableList(columns);
    }
    Map<String, String> hadoop = new HashMap<>();
    String path = tableUri(raw, options, hadoop);
    return new ReadOptions(path, version, ts, columns, hadoop);
  }

  /**
   * Epoch milliseconds of an ISO-8601 timestamp (a naive one read as UTC, a date as its
   * midnight UTC) or of a string of digits (already milliseconds).
   */
  public static long parseTimestampMs(String text) {
    String s = text.strip();
    if (s.matches("[+-]?\\d+")) {
      return Long.parseLong(s);
    }
    String iso = s.replace(' ', 'T');
    try {
      return OffsetDateTime.parse(iso).toInstant().toEpochMilli();
    } catch (DateTimeParseException ignored) {
      // not zoned: below
    }
    try {
      return Instant.parse(iso).toEpochMilli();
    } catch (DateTimeParseException ignored) {
      // not an instant: below
    }
    try {
      return LocalDateTime.parse(iso).toInstant(ZoneOffset.UTC).toEpochMilli();
    } catch (DateTimeParseException ignored) {
      // not a naive date-time: below
    }
    try {
      return LocalDate.parse(iso).atStartOfDay().toInstant(ZoneOffset.UTC).toEpochMilli();
    } catch (DateTimeParseException e) {
      throw new IllegalArgumentException(
          "cdc_sink: timestampAsOf must be an ISO-8601 timestamp or epoch milliseconds, got '"
              + text + "'");
    }
  }

  /** A Hadoop configuration: {@code base} with this read's settings on top. */
  public Configuration hadoopConf(Configuration base) {
    Configuration conf = new Configuration(base);
    hadoop.forEach(conf::set);
    return conf;
  }

  /** Resolves the version this read asks for (§14.1 of docs/format.md). */
  public ReadPlan resolve(Configuration base) throws CdcSinkFormatException {
    return ReadPlan.resolve(path, hadoopConf(base), versionAsOf, timestampAsOfMs);
  }

  /**
   * Whether Hadoop has a file system for this table's scheme in this JVM (S3A needs
   * hadoop-aws on the classpath); when not, the Python data source reads the table.
   */
  public boolean readableByHadoop(Configuration base) {
    String scheme = URI.create(path).getScheme();
    if (scheme == null) {
      return true;
    }
    try {
      FileSystem.getFileSystemClass(scheme, hadoopConf(base));
      return true;
    } catch (Exception | LinkageError e) {
      return false;
    }
  }

  private static String tableUri(String raw, Map<String, String> options, Map<String, String> hadoop) {
    URI uri;
    try {
      uri = URI.create(raw);
    } catch (IllegalArgumentException e) {
      return raw; // a local path with characters a URI does not take: Hadoop reads it as is
    }
    for (Map.Entry<String, String> e : options.entrySet()) {
      String k = e.getKey();
      String lk = k.toLowerCase(Locale.ROOT);
      if (lk.startsWith("fs.")) {
        hadoop.put(k, e.getValue());
      } else if (lk.startsWith("spark.hadoop.")) {
        hadoop.put(k.substring("spark.hadoop.".length()), e.getValue());
      }
    }
    String scheme = uri.getScheme();
    if (scheme == null || !scheme.equalsIgnoreCase("s3")) {
      return raw;
    }
    String bucket = uri.getHost();
    String prefix = "fs.s3a.bucket." + bucket + ".";
    Map<String, String> o = lower(options);
    Map<String, String> keys = Map.of(
        "storage.endpoint", "endpoint",
        "storage.region", "endpoint.region",
        "storage.access_key_id", "access.key",
        "storage.secret_access_key", "secret.key",
        "storage.session_token", "session.token");
    keys.forEach((opt, s3a) -> {
      String value = given(o.get(opt));
      if (value != null) {
        hadoop.put(prefix + s3a, value);
      }
    });
    if (given(o.get("storage.endpoint")) != null) {
      hadoop.put(prefix + "path.style.access", "true");
      if (o.get("storage.endpoint").strip().startsWith("http://")) {
        hadoop.put(prefix + "connection.ssl.enabled", "false");
      }
    }
    if (given(o.get("storage.access_key_id")) != null) {
      hadoop.put(prefix + "aws.credentials.provider",
          "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider");
    }
    return "s3a" + raw.substring(scheme.length());
  }

  /** {@code raw} stripped, or null when absent or blank. */
  static String given(String raw) {
    return raw == null || raw.strip().isEmpty() ? null : raw.strip();
  }

  /** {@code options} with lower-case keys. */
  static Map<String, String> lower(Map<String, String> options) {
    Map<String, String> out = new HashMap<>();
    options.forEach((k, v) -> out.put(k.toLowerCase(Locale.ROOT), v));
    return out;
  }

  @Override
  public String toString() {
    return "ReadOptions(" + path + ", versionAsOf=" + versionAsOf + ", timestampAsOfMs="
        + timestampAsOfMs + ", columns=" + (columns == null ? "all" : Arrays.toString(columns.toArray())) + ")";
  }
}
