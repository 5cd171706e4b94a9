package io.cdcsink.format;

import java.util.List;

/** What one bucket of a version consists of: its snapshot and the segments after it (§14.2). */
public final class BucketPlan implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
  private final String tableUri;
  private final int bucket;
  private final long version;
  private final TableSchema schema;
  private final String snapshotPath;
  private final List<String> segmentPaths;
  private final long[] segmentVersions;
  private final long oldestReadable;

  BucketPlan(String tableUri, int bucket, long version, TableSchema schema, String snapshotPath,
             List<String> segmentPaths, long[] segmentVersions, long oldestReadable) {
    this.tableUri = tableUri;
    this.bucket = bucket;
    this.version = version;
    this.schema = schema;
    this.snapshotPath = snapshotPath;
    this.segmentPaths = List.copyOf(segmentPaths);
    this.segmentVersions = segmentVersions.clone();
    this.oldestReadable = oldestReadable;
  }

  public String tableUri() { return tableUri; }
  public int bucket() { return bucket; }
  public long version() { return version; }
  /** S_v. */
  public TableSchema schema() { return schema; }
  /** The snapshot's manifest path (relative to the table), or null: the bucket starts empty. */
  public String snapshotPath() { return snapshotPath; }
  /** The version of the snapshot, or -1. */
  public long snapshotVersion() { return snapshotPath == null ? -1 : Json.versionOf(snapshotPath); }
  /** The segments of (s, v], ascending by version. */
  public List<String> segmentPaths() { return segmentPaths; }
  public long segmentVersion(int i) { return segmentVersions[i]; }
  long oldestReadable() { return oldestReadable; }

  @Override
  public String toString() {
    return "bucket " + bucket + " at v" + version + ": " + snapshotPath + " + " + segmentPaths;
  }
}
