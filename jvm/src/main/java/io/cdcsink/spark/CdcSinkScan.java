package io.cdcsink.spark;

import io.cdcsink.format.BucketPlan;
import io.cdcsink.format.CdcSinkFormatException;
import io.cdcsink.format.Column;
import io.cdcsink.format.ReadPlan;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/** The scan of one table version: one input partition per bucket, or per page range of a large one. */
final class CdcSinkScan implements Scan, Batch {
  private final ReadPlan plan;
  private final ReadOptions options;
  private final StructType schema;
  private final List<io.cdcsink.format.Filter> filters;

  CdcSinkScan(ReadPlan plan, ReadOptions options, StructType schema,
              List<io.cdcsink.format.Filter> filters) {
    this.plan = plan;
    this.options = options;
    this.schema = schema;
    this.filters = List.copyOf(filters);
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "cdc_sink " + plan.tableUri() + " version " + plan.version() + " columns "
        + Arrays.toString(schema.fieldNames()) + (filters.isEmpty() ? "" : " skipping by "
        + filters.stream().map(f -> f.column() + " " + f.op() + (f.value() == null ? "" : " " + f.value()))
            .toList());
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  /**
   * A stream of a table is its change feed, which the Python source reads: refused here
   * with the option to add.
   */
  @Override
  public org.apache.spark.sql.connector.read.streaming.MicroBatchStream toMicroBatchStream(
      String checkpointLocation) {
    throw new IllegalArgumentException("cdc_sink: a stream of a cdc_sink table is its change"
        + " feed: add .option(\"readChangeFeed\", \"true\") to"
        + " spark.readStream.format(\"cdc_sink\") (each micro-batch is then the changes of the"
        + " next committed versions)");
  }

  /**
   * The partitions of the buckets that may hold a matching row (a key equality names one): a
   * bucket read page by page whose pages of the columns read hold more stored bytes than
   * {@code spark.sql.files.maxPartitionBytes} is read as ranges of its pages, one partition each
   * ({@link BucketPlan#split}, as Spark splits a large Parquet file); any other bucket is one
   * partition.
   */
  @Override
  public InputPartition[] planInputPartitions() {
    int[] buckets = io.cdcsink.format.Filter.buckets(plan.schema(), filters);
    long maxBytes = SparkSession.active().sessionState().conf().filesMaxPartitionBytes();
    Configuration conf = options.hadoopConf(SparkHadoop.sessionConf());
    List<String> read = readColumns();
    List<InputPartition> parts = new ArrayList<>();
    for (int b : buckets) {
      for (BucketPlan bp : split(plan.bucket(b), conf, read, maxBytes)) {
        parts.add(new BucketPartition(b, bp));
      }
    }
    return parts.toArray(new InputPartition[0]);
  }

  /** The page ranges of {@code bp}, or {@code bp} whole when its manifest cannot be read here
   * (the task that reads the bucket then reports why). */
  private static List<BucketPlan> split(BucketPlan bp, Configuration conf, List<String> read, long maxBytes) {
    try {
      return bp.split(conf, read, maxBytes);
    } catch (CdcSinkFormatException e) {
      return List.of(bp);
    }
  }

  /** The columns the bucket readers read: the schema's, or for a count the column it counts by. */
  private List<String> readColumns() {
    List<String> columns = new ArrayList<>(Arrays.asList(schema.fieldNames()));
    String countBy = columns.isEmpty() ? countColumn() : null;
    return countBy == null ? columns : List.of(countBy);
  }

  /** The column a count reads: a key column, whose pages a read needs anyway. */
  private String countColumn() {
    for (Column c : plan.schema().columns()) {
      if (c.isKey()) {
        return c.name();
      }
    }
    return plan.schema().columns().get(0).name();
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    Broadcast<SerializableConfiguration> conf = SerializableConfiguration.broadcast(
        SparkSession.active().sparkContext(), options.hadoopConf(SparkHadoop.sessionConf()));
    List<String> columns = new ArrayList<>(Arrays.asList(schema.fieldNames()));
    String countBy = columns.isEmpty() ? countColumn() : null; // count(*)
    return new BucketReaderFactory(conf, columns, countBy, filters);
  }
}
