package io.cdcsink.spark;

import io.cdcsink.format.ReadPlan;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * Builds the scan of one table version, reading only the columns the query needs; its filters
 * let the readers skip pages and buckets (Spark still evaluates every one after the scan).
 */
final class CdcSinkScanBuilder
    implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
  private final ReadPlan plan;
  private final ReadOptions options;
  private StructType schema;
  private Filter[] pushed = new Filter[0];
  private final List<io.cdcsink.format.Filter> filters = new ArrayList<>();

  CdcSinkScanBuilder(ReadPlan plan, ReadOptions options, StructType schema) {
    this.plan = plan;
    this.options = options;
    this.schema = schema;
  }

  @Override
  public void pruneColumns(StructType required) {
    this.schema = CdcSinkTable.select(schema, required, plan.version());
  }

  /** Keeps what translates for the readers; returns every filter, to be evaluated again. */
  @Override
  public Filter[] pushFilters(Filter[] given) {
    List<Filter> used = new ArrayList<>();
    for (Filter f : given) {
      List<io.cdcsink.format.Filter> t = PushedFilters.translate(f);
      if (!t.isEmpty()) {
        filters.addAll(t);
        used.add(f);
      }
    }
    pushed = used.toArray(new Filter[0]);
    return given;
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed;
  }

  @Override
  public Scan build() {
    return new CdcSinkScan(plan, options, schema, filters);
  }
}
