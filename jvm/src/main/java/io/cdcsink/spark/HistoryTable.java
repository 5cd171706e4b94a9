package io.cdcsink.spark;

import io.cdcsink.format.VersionInfo;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A table's history as a table, DESCRIBE HISTORY's rows: one row per retained version,
 * newest first ({@code version}, {@code timestamp}, {@code operation}, {@code app_id},
 * {@code batch_id}). The catalog names it {@code cat.db.table.history} or
 * {@code cat.db.`table$history`}.
 */
final class HistoryTable implements SupportsRead {
  static final StructType SCHEMA = new StructType()
      .add("version", DataTypes.LongType, false)
      .add("timestamp", DataTypes.TimestampType, false)
      .add("operation", DataTypes.StringType, true)
      .add("app_id", DataTypes.StringType, true)
      .add("batch_id", DataTypes.LongType, true);

  private final String name;
  private final List<VersionInfo> history;

  HistoryTable(String name, List<VersionInfo> history) {
    this.name = name;
    this.history = new ArrayList<>(history);
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return SCHEMA;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return () -> new HistoryScan(history);
  }

  private static final class HistoryScan implements Scan, Batch {
    private final List<VersionInfo> history;

    HistoryScan(List<VersionInfo> history) {
      this.history = history;
    }

    @Override
    public StructType readSchema() {
      return SCHEMA;
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      return new InputPartition[] {new Rows(new ArrayList<>(history))};
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return partition -> new RowsReader(((Rows) partition).history);
    }
  }

  private static final class Rows implements InputPartition, Serializable {
    private static final long serialVersionUID = 1L;
    final ArrayList<VersionInfo> history;

    Rows(ArrayList<VersionInfo> history) {
      this.history = history;
    }
  }

  private static final class RowsReader implements PartitionReader<InternalRow> {
    private final List<VersionInfo> history;
    private int i;

    RowsReader(List<VersionInfo> history) {
      this.history = history;
      this.i = history.size(); // newest first
    }

    @Override
    public boolean next() {
      return --i >= 0;
    }

    @Override
    public InternalRow get() {
      VersionInfo v = history.get(i);
      return new GenericInternalRow(new Object[] {
          v.version(),
          v.commitTimeMs() * 1000L,
          v.operation() == null ? null : UTF8String.fromString(v.operation()),
          v.appId() == null ? null : UTF8String.fromString(v.appId()),
          v.batchId()});
    }

    @Override
    public void close() {}
  }
}
