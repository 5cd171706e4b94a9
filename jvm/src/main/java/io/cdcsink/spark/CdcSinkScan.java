package io.cdcsink.spark;

import io.cdcsink.format.Column;
import io.cdcsink.format.ReadPlan;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/** The scan of one table version: one input partition per bucket. */
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

  /** One partition per bucket that may hold a matching row (a key equality names one). */
  @Override
  public InputPartition[] planInputPartitions() {
    int[] buckets = io.cdcsink.format.Filter.buckets(plan.schema(), filters);
    InputPartition[] parts = new InputPartition[buckets.length];
    for (int i = 0; i < parts.length; i++) {
      parts[i] = new BucketPartition(buckets[i], plan.bucket(buckets[i]));
    }
    return parts;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    Broadcast<SerializableConfiguration> conf = SerializableConfiguration.broadcast(
        SparkSession.active().sparkContext(), options.hadoopConf(SparkHadoop.sessionConf()));
    List<String> columns = new ArrayList<>(Arrays.asList(schema.fieldNames()));
    String countBy = null;
    if (columns.isEmpty()) { // count(*): the rows of a key column, whose pages a read needs anyway
      for (Column c : plan.schema().columns()) {
        if (c.isKey()) {
          countBy = c.name();
          break;
        }
      }
      if (countBy == null) {
        countBy = plan.schema().columns().get(0).name();
      }
    }
    return new BucketReaderFactory(conf, columns, countBy, filters);
  }
}
