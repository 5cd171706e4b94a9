package io.cdcsink.format;

import java.util.List;
import org.apache.hadoop.conf.Configuration;

/** A resolved read of one table version: everything an executor needs, serializable. */
public final class ReadPlan implements java.io.Serializable {
  private static final long serialVersionUID = 1L;

  public static ReadPlan resolve(String tableUri, Configuration conf, Long versionAsOf, Long timestampAsOfMs)
      throws CdcSinkFormatException {
    throw new UnsupportedOperationException("not yet");
  }

  public String tableUri() { throw new UnsupportedOperationException(); }
  public long version() { throw new UnsupportedOperationException(); }
  public long commitTimeMs() { throw new UnsupportedOperationException(); }
  public TableSchema schema() { throw new UnsupportedOperationException(); }
  public int numBuckets() { throw new UnsupportedOperationException(); }
  public BucketPlan bucket(int b) { throw new UnsupportedOperationException(); }
  public List<VersionInfo> history() { throw new UnsupportedOperationException(); }
}
