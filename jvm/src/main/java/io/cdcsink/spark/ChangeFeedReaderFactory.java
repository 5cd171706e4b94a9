package io.cdcsink.spark;

import java.util.List;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

/** Creates the readers of a change feed's buckets on the executors, columnar. */
final class ChangeFeedReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final Broadcast<SerializableConfiguration> conf;
  private final List<String> columns;

  ChangeFeedReaderFactory(Broadcast<SerializableConfiguration> conf, List<String> columns) {
    this.conf = conf;
    this.columns = List.copyOf(columns);
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new BucketBatchReader((ChangeFeedPartition) partition, conf.value().value(), columns);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new BucketReaderFactory.RowReader(createColumnarReader(partition));
  }
}
