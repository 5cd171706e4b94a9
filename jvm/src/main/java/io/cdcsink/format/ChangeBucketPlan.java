package io.cdcsink.format;

import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * What one executor needs to read one bucket's changes of a {@link ChangePlan}: the versions of
 * the range that may change the bucket with their kind, the schemas and commit times of the
 * range, and the snapshots, segments and stored pre-images the reader may open.
 */
public final class ChangeBucketPlan implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
  final String tableUri;
  final int bucket;
  final long start;
  final long end;
  final List<Column> columns;
  final int nkeys;
  final boolean setColumnsOnly;
  final Map<Integer, TableSchema> schemas;
  private final int[] schemaIds;
  private final long[] commitMs;
  /** version -> ChangePlan.DATA / BULK / SCHEMA, ascending */
  final TreeMap<Long, Byte> versions;
  /** version -> pre-images path */
  final Map<Long, String> images;
  final TreeSet<Long> bulk;
  /** snapshot version -> manifest path, from the newest at or below start */
  final TreeMap<Long, String> snapshots;
  /** version -> segment path, after the first of {@link #snapshots} */
  final TreeMap<Long, String> segments;

  ChangeBucketPlan(String tableUri, int bucket, long start, long end, List<Column> columns, int nkeys,
                   boolean setColumnsOnly, Map<Integer, TableSchema> schemas, int[] schemaIds, long[] commitMs,
                   TreeMap<Long, Byte> versions, Map<Long, String> images, Set<Long> bulk,
                   NavigableMap<Long, String> snapshots, NavigableMap<Long, String> segments) {
    this.tableUri = tableUri;
    this.bucket = bucket;
    this.start = start;
    this.end = end;
    this.columns = List.copyOf(columns);
    this.nkeys = nkeys;
    this.setColumnsOnly = setColumnsOnly;
    this.schemas = Map.copyOf(schemas);
    this.schemaIds = schemaIds.clone();
    this.commitMs = commitMs.clone();
    this.versions = new TreeMap<>(versions);
    this.images = Map.copyOf(images);
    this.bulk = new TreeSet<>(bulk);
    this.snapshots = new TreeMap<>(snapshots);
    this.segments = new TreeMap<>(segments);
  }

  public int bucket() { return bucket; }

  /** The schema at version u of [start, end]. */
  TableSchema schemaAt(long u) {
    return schemas.get(schemaIds[(int) (u - start)]);
  }

  long commitMs(long u) {
    return commitMs[(int) (u - start)];
  }

  @Override
  public String toString() {
    return "changes of bucket " + bucket + " in (" + start + ", " + end + "]: " + versions;
  }
}
