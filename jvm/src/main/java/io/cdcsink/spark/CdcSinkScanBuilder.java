package io.cdcsink.spark;

import io.cdcsink.format.ReadPlan;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;

/** Builds the scan of one table version, reading only the columns the query needs. */
final class CdcSinkScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns {
  private final ReadPlan plan;
  private final ReadOptions options;
  private StructType schema;

  CdcSinkScanBuilder(ReadPlan plan, ReadOptions options, StructType schema) {
    this.plan = plan;
    this.options = options;
    this.schema = schema;
  }

  @Override
  public void pruneColumns(StructType required) {
    this.schema = CdcSinkTable.select(schema, required, plan.version());
  }

  @Override
  public Scan build() {
    return new CdcSinkScan(plan, options, schema);
  }
}
