package io.cdcsink.format;

import java.util.List;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.hadoop.conf.Configuration;

/** A resolved change-feed read of versions (start, end]: serializable, made on the driver. */
public final class ChangePlan implements java.io.Serializable {
  private static final long serialVersionUID = 1L;

  private ChangePlan() {}

  /**
   * Checks the range as plan_feed does (start > end, start older than the oldest readable
   * version, end newer than the latest: VersionNotRetainedException / CdcSinkFormatException)
   * and fixes the output columns: those of the schema at {@code end}, keys first,
   * {@code columns} (null = all value columns) named as at {@code end}.
   */
  public static ChangePlan resolve(String tableUri, Configuration conf, long start, long end, List<String> columns,
                                   boolean setColumnsOnly) throws CdcSinkFormatException {
    throw new UnsupportedOperationException("not yet");
  }

  /** The first version committed at or after {@code timestampMs}. */
  public static long versionAtOrAfter(String tableUri, Configuration conf, long timestampMs)
      throws CdcSinkFormatException {
    throw new UnsupportedOperationException("not yet");
  }

  /** The last version committed at or before {@code timestampMs}. */
  public static long versionAtOrBefore(String tableUri, Configuration conf, long timestampMs)
      throws CdcSinkFormatException {
    throw new UnsupportedOperationException("not yet");
  }

  /** The newest committed version. */
  public static long latestVersion(String tableUri, Configuration conf) throws CdcSinkFormatException {
    throw new UnsupportedOperationException("not yet");
  }

  public long start() { throw new UnsupportedOperationException("not yet"); }
  public long end() { throw new UnsupportedOperationException("not yet"); }
  public int numBuckets() { throw new UnsupportedOperationException("not yet"); }

  /** The records' Arrow schema (FeedPlan.arrow_schema's). */
  public Schema arrowSchema() { throw new UnsupportedOperationException("not yet"); }

  /** Serializable: what an executor needs to read one bucket's changes. */
  public ChangeBucketPlan bucket(int b) { throw new UnsupportedOperationException("not yet"); }
}
