package io.cdcsink.spark;

import java.util.List;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Creates the readers of the buckets on the executors: columnar, Arrow vectors as they are. A
 * bucket is one of a version ({@link BucketPartition}: its live rows) or of a change feed
 * ({@link ChangeFeedPartition}: its change records; no count column, no filters).
 */
final class BucketReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final Broadcast<SerializableConfiguration> conf;
  private final List<String> columns;
  private final String countBy;
  private final List<io.cdcsink.format.Filter> filters;

  BucketReaderFactory(Broadcast<SerializableConfiguration> conf, List<String> columns, String countBy,
                      List<io.cdcsink.format.Filter> filters) {
    this.conf = conf;
    this.columns = List.copyOf(columns);
    this.countBy = countBy;
    this.filters = List.copyOf(filters);
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    if (partition instanceof ChangeFeedPartition changes) {
      return new BucketBatchReader(changes, conf.value().value(), columns);
    }
    BucketPartition p = (BucketPartition) partition;
    return new BucketBatchReader(p, conf.value().value(), columns, countBy, filters);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new RowReader(createColumnarReader(partition));
  }

  /** The rows of a columnar reader (for a plan that asks for rows). */
  private static final class RowReader implements PartitionReader<InternalRow> {
    private final PartitionReader<ColumnarBatch> batches;
    private java.util.Iterator<InternalRow> rows = java.util.Collections.emptyIterator();
    private InternalRow row;

    RowReader(PartitionReader<ColumnarBatch> batches) {
      this.batches = batches;
    }

    @Override
    public boolean next() throws java.io.IOException {
      while (!rows.hasNext()) {
        if (!batches.next()) {
          return false;
        }
        rows = batches.get().rowIterator();
      }
      row = rows.next();
      return true;
    }

    @Override
    public InternalRow get() {
      return row;
    }

    @Override
    public void close() throws java.io.IOException {
      batches.close();
    }
  }
}
