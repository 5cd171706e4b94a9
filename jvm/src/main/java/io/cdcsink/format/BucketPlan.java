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
  /** With a snapshot and no segment after it: the snapshot pages [pageFrom, pageTo) only; -1: all. */
  private final int pageFrom;
  private final int pageTo;

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
    this.pageFrom = -1;
    this.pageTo = -1;
  }

  private BucketPlan(BucketPlan whole, int pageFrom, int pageTo) {
    this.tableUri = whole.tableUri;
    this.bucket = whole.bucket;
    this.version = whole.version;
    this.schema = whole.schema;
    this.snapshotPath = whole.snapshotPath;
    this.segmentPaths = whole.segmentPaths;
    this.segmentVersions = whole.segmentVersions;
    this.oldestReadable = whole.oldestReadable;
    this.pageFrom = pageFrom;
    this.pageTo = pageTo;
  }

  /** The first snapshot page this plan reads, or -1: the whole bucket. */
  public int pageFrom() { return pageFrom; }
  /** The snapshot page after the last one this plan reads, or -1: the whole bucket. */
  public int pageTo() { return pageTo; }

  /**
   * This bucket as plans of consecutive snapshot page ranges whose pages of {@code columns} (an
   * empty list: the first key column, what a count reads) hold at most {@code maxBytes} stored
   * bytes each (a page larger than that is a range of its own), so that one large bucket is read
   * by several tasks. Only a bucket read page by page splits (a snapshot, no segment after it,
   * every value column read stored on every page): otherwise, and for a bucket of one range, the
   * list holds this plan alone. Reads the snapshot's manifest.
   */
  public List<BucketPlan> split(org.apache.hadoop.conf.Configuration conf, List<String> columns, long maxBytes)
      throws CdcSinkFormatException {
    if (snapshotPath == null || !segmentPaths.isEmpty() || pageFrom >= 0 || maxBytes <= 0) return List.of(this);
    Manifest m = Manifest.parse(new Fs(tableUri, conf).read(snapshotPath), snapshotPath);
    List<Column> read = new java.util.ArrayList<>();
    for (String c : columns) read.add(schema.column(c));
    if (read.isEmpty()) read.add(schema.keyColumns().get(0));
    if (!BucketReader.pageByPage(m, schema, read)) return List.of(this);
    int pages = (int) ((m.rowCount + m.pageRows - 1) / m.pageRows);
    List<BucketPlan> out = new java.util.ArrayList<>();
    int from = 0;
    long bytes = 0;
    for (int p = 0; p < pages; p++) {
      long size = 0;
      for (Column c : read) size += BucketReader.pageLoc(m, schema, c, p).length;
      if (p > from && bytes + size > maxBytes) {
        out.add(new BucketPlan(this, from, p));
        from = p;
        bytes = 0;
      }
      bytes += size;
    }
    if (out.isEmpty()) return List.of(this);
    out.add(new BucketPlan(this, from, pages));
    return out;
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
    return "bucket " + bucket + " at v" + version + ": " + snapshotPath + " + " + segmentPaths
        + (pageFrom < 0 ? "" : " pages " + pageFrom + ".." + (pageTo - 1));
  }
}
