package io.cdcsink.format;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;

/**
 * A resolved change-feed read of versions (start, end]: serializable, made on the driver. The
 * records are those of the Python {@code Table.changes(start, end, columns, set_columns_only)}
 * (cdc_sink/changefeed/feed.py): per bucket, the versions of the range that may change it (its
 * WAL segments, its bulk loads, and, without {@code setColumnsOnly}, the schema changes adding an
 * output column with a non-null default), each bucket's plan naming the snapshots, segments and
 * stored pre-images (docs/format.md §12) {@link ChangeReader} needs, so executors never read the
 * log.
 */
public final class ChangePlan implements java.io.Serializable {
  private static final long serialVersionUID = 1L;

  /** Version kinds of a bucket's plan. */
  static final byte DATA = 0;
  static final byte BULK = 1;
  static final byte SCHEMA = 2;

  private final long start;
  private final long end;
  private final List<Column> columns;
  private final int nkeys;
  private final boolean setColumnsOnly;
  private final ChangeBucketPlan[] buckets;

  private ChangePlan(long start, long end, List<Column> columns, int nkeys, boolean setColumnsOnly,
                     ChangeBucketPlan[] buckets) {
    this.start = start;
    this.end = end;
    this.columns = columns;
    this.nkeys = nkeys;
    this.setColumnsOnly = setColumnsOnly;
    this.buckets = buckets;
  }

  /** The message of a range that needs a version not readable (feed.py's {@code _not_retained}). */
  static String notRetained(String root, long start, long end, long oldest, long latest) {
    return root + ": the changes of versions " + (start + 1) + ".." + end + " need version " + start
        + ", which is not readable: the oldest readable version is " + oldest + " (the changes of versions "
        + (oldest + 1) + ".." + latest + " can be read)";
  }

  /**
   * Checks the range as plan_feed does (start > end, start older than the oldest readable
   * version, end newer than the latest: VersionNotRetainedException / CdcSinkFormatException)
   * and fixes the output columns: those of the schema at {@code end}, keys first,
   * {@code columns} (null = all value columns) named as at {@code end}.
   */
  public static ChangePlan resolve(String tableUri, Configuration conf, long start, long end, List<String> columns,
                                   boolean setColumnsOnly) throws CdcSinkFormatException {
    Fs fs = new Fs(tableUri, conf);
    if (start > end) throw new CdcSinkFormatException("changes: start " + start + " is after end " + end);
    ReadPlan.checkProtocol(fs);
    ReadPlan.LogState log = ReadPlan.LogState.load(fs);
    if (start < log.oldestReadable || end > log.latest) {
      throw new VersionNotRetainedException(notRetained(fs.root, start, end, log.oldestReadable, log.latest),
          log.oldestReadable);
    }
    log.readEntries(fs, start, end);
    Map<Integer, TableSchema> schemas = new HashMap<>();
    int[] schemaIds = new int[(int) (end - start + 1)];
    long[] commitMs = new long[schemaIds.length];
    for (long u = start; u <= end; u++) {
      LogEntry e = log.entry(u);
      schemaIds[(int) (u - start)] = e.schemaId;
      commitMs[(int) (u - start)] = e.commitTimeMs;
      if (!schemas.containsKey(e.schemaId)) schemas.put(e.schemaId, ReadPlan.loadSchema(fs, e.schemaId));
    }
    TableSchema se = schemas.get(schemaIds[schemaIds.length - 1]);
    List<String> names = new ArrayList<>();
    if (columns == null) {
      for (Column c : se.columns()) names.add(c.name());
    } else {
      names.addAll(columns);
    }
    List<String> missing = new ArrayList<>();
    for (String n : names) if (se.column(n) == null) missing.add(n);
    if (!missing.isEmpty()) {
      List<String> have = new ArrayList<>();
      for (Column c : se.columns()) have.add(c.name());
      throw new CdcSinkFormatException("changes: no column(s) " + pyList(missing) + " in the schema at version "
          + end + " (columns: " + pyList(have) + "; a dropped column is absent from the feed)");
    }
    List<Column> out = new ArrayList<>(se.keyColumns());
    for (String n : new LinkedHashSet<>(names)) if (!se.primaryKey().contains(n)) out.add(se.column(n));
    int nkeys = se.primaryKey().size();

    // The schema changes of (start, end] that add an output column with a non-null default.
    List<Long> schemaVersions = new ArrayList<>();
    if (!setColumnsOnly) {
      for (long u = Math.max(start + 1, 1); u <= end; u++) {
        int now = schemaIds[(int) (u - start)];
        int before = schemaIds[(int) (u - 1 - start)];
        if (now == before) continue;
        TableSchema sb = schemas.get(before);
        TableSchema sn = schemas.get(now);
        for (Column c : out.subList(nkeys, out.size())) {
          Column at = sn.columnById(c.id());
          if (sb.columnById(c.id()) == null && at != null && at.defaultValue() != null) {
            schemaVersions.add(u);
            break;
          }
        }
      }
    }
    ChangeBucketPlan[] plans = new ChangeBucketPlan[se.numBuckets()];
    for (int b = 0; b < plans.length; b++) {
      TreeMap<Long, Byte> kinds = new TreeMap<>();
      Map<Long, String> images = new HashMap<>();
      TreeMap<Long, String> bulk = new TreeMap<>();
      for (long u = start + 1; u <= end; u++) {
        LogEntry e = log.entry(u);
        String seg = e.segments.get(b);
        String snap = e.snapshots.get(b);
        if (seg != null) {
          kinds.put(u, DATA);
          String img = e.images.get(b);
          if (img != null) images.put(u, img);
        } else if (snap != null && Json.versionOf(snap) == u && "data".equals(e.kind)) {
          kinds.put(u, BULK);
          bulk.put(u, snap);
        }
      }
      for (long u : schemaVersions) kinds.putIfAbsent(u, SCHEMA);
      // The snapshots and segments the reader may load: from the newest snapshot at or
      // below start up to end.
      TreeMap<Long, String> snaps = new TreeMap<>();
      TreeMap<Long, String> segs = new TreeMap<>();
      if (!kinds.isEmpty()) {
        TreeMap<Long, String> all = log.snapshots.getOrDefault(b, new TreeMap<>());
        Map.Entry<Long, String> first = all.floorEntry(start);
        long from = first == null ? -1 : first.getKey();
        snaps.putAll(all.subMap(from, true, end, true));
        segs.putAll(log.segments.getOrDefault(b, new TreeMap<>()).subMap(from, false, end, true));
      }
      plans[b] = new ChangeBucketPlan(fs.root, b, start, end, out, nkeys, setColumnsOnly, schemas, schemaIds,
          commitMs, kinds, images, bulk.keySet(), snaps, segs);
    }
    return new ChangePlan(start, end, List.copyOf(out), nkeys, setColumnsOnly, plans);
  }

  /** The first version committed at or after {@code timestampMs} (the oldest readable one when
   *  none was committed before it; the latest plus one when none was committed at or after it). */
  public static long versionAtOrAfter(String tableUri, Configuration conf, long timestampMs)
      throws CdcSinkFormatException {
    try {
      return versionAtOrBefore(tableUri, conf, timestampMs - 1) + 1;
    } catch (VersionNotRetainedException e) {
      return e.oldestReadable();
    }
  }

  /** The last version committed at or before {@code timestampMs} (VersionNotRetainedException
   *  naming the oldest readable version when every retained version is newer). */
  public static long versionAtOrBefore(String tableUri, Configuration conf, long timestampMs)
      throws CdcSinkFormatException {
    return ReadPlan.resolve(tableUri, conf, null, timestampMs).version();
  }

  /** The newest committed version. */
  public static long latestVersion(String tableUri, Configuration conf) throws CdcSinkFormatException {
    Fs fs = new Fs(tableUri, conf);
    ReadPlan.checkProtocol(fs);
    return ReadPlan.LogState.load(fs).latest;
  }

  public long start() { return start; }
  public long end() { return end; }
  public int numBuckets() { return buckets.length; }
  /** The output columns (of the schema at {@code end}, keys first). */
  public List<Column> columns() { return columns; }
  public boolean setColumnsOnly() { return setColumnsOnly; }

  /** The records' Arrow schema (FeedPlan.arrow_schema's). */
  public Schema arrowSchema() {
    return arrowSchema(columns, nkeys, setColumnsOnly);
  }

  static Schema arrowSchema(List<Column> columns, int nkeys, boolean setColumnsOnly) {
    List<Field> fields = new ArrayList<>();
    for (int i = 0; i < columns.size(); i++) {
      Column c = columns.get(i);
      fields.add(new Field(c.name(), new FieldType(i >= nkeys || c.nullable(), Types.arrow(c.type()), null), null));
    }
    if (setColumnsOnly) {
      for (Column c : columns.subList(nkeys, columns.size())) {
        fields.add(new Field("_set_" + c.name(), FieldType.nullable(ArrowType.Bool.INSTANCE), null));
      }
    }
    fields.add(new Field("_change_type", FieldType.notNullable(ArrowType.Utf8.INSTANCE), null));
    fields.add(new Field("_commit_version", FieldType.notNullable(new ArrowType.Int(64, true)), null));
    fields.add(new Field("_commit_timestamp",
        FieldType.notNullable(new ArrowType.Timestamp(TimeUnit.MICROSECOND, "UTC")), null));
    return new Schema(fields);
  }

  /** Serializable: what an executor needs to read one bucket's changes. */
  public ChangeBucketPlan bucket(int b) { return buckets[b]; }

  /** Names as the Python reader's messages show a list of them: {@code ['a', 'b']}. */
  private static String pyList(List<String> names) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < names.size(); i++) {
      if (i > 0) b.append(", ");
      b.append('\'').append(names.get(i).replace("\\", "\\\\").replace("'", "\\'")).append('\'');
    }
    return b.append(']').toString();
  }
}
