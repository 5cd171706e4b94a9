package io.cdcsink.spark;

import io.cdcsink.format.ReadPlan;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * One resolved version of a cdc_sink table: its schema (the version's columns, or those a
 * read asked for) and the plan executors read it by. Read-only.
 */
public final class CdcSinkTable implements SupportsRead {
  /** Table property: the version read. */
  public static final String PROP_VERSION = "cdc_sink.version";
  /** Table property: the version's commit time, epoch milliseconds. */
  public static final String PROP_COMMIT_TIME = "cdc_sink.commit_time_ms";
  /** Table property: how many versions the table retains (its history's size). */
  public static final String PROP_HISTORY_SIZE = "cdc_sink.history_size";
  /** Table property: the oldest retained version. */
  public static final String PROP_OLDEST = "cdc_sink.oldest_version";

  private final String name;
  private final ReadPlan plan;
  private final ReadOptions options;
  private final StructType schema;

  CdcSinkTable(String name, ReadPlan plan, ReadOptions options, StructType schema) {
    this.name = name;
    this.plan = plan;
    this.options = options;
    this.schema = schema;
  }

  /** The Spark schema of every column of {@code plan}'s version, in the schema's order. */
  public static StructType fullSchema(ReadPlan plan) {
    return ArrowUtils.fromArrowSchema(plan.schema().arrowSchema());
  }

  /**
   * {@code full} narrowed to {@code wanted}'s columns in {@code wanted}'s order.
   *
   * @throws IllegalArgumentException a column {@code full} lacks, or of another type
   */
  static StructType select(StructType full, StructType wanted, long version) {
    Map<String, StructField> by = new HashMap<>();
    for (StructField f : full.fields()) {
      by.put(f.name(), f);
    }
    StructField[] out = new StructField[wanted.fields().length];
    for (int i = 0; i < out.length; i++) {
      StructField w = wanted.fields()[i];
      StructField have = by.get(w.name());
      if (have == null) {
        throw new IllegalArgumentException("cdc_sink: no column '" + w.name() + "' at version "
            + version + " (columns: " + String.join(", ", full.fieldNames()) + ")");
      }
      if (!have.dataType().sameType(w.dataType())) {
        throw new IllegalArgumentException("cdc_sink: column '" + w.name() + "' is "
            + have.dataType().simpleString() + " at version " + version + ", not "
            + w.dataType().simpleString());
      }
      out[i] = have;
    }
    return new StructType(out);
  }

  /** The options this table was read with (its URI and Hadoop settings). */
  ReadOptions readOptions() {
    return options;
  }

  /** The plan this table reads. */
  public ReadPlan plan() {
    return plan;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Map<String, String> properties() {
    Map<String, String> p = new HashMap<>();
    p.put(PROP_VERSION, Long.toString(plan.version()));
    p.put(PROP_COMMIT_TIME, Long.toString(plan.commitTimeMs()));
    var history = plan.history();
    p.put(PROP_HISTORY_SIZE, Integer.toString(history.size()));
    if (!history.isEmpty()) {
      p.put(PROP_OLDEST, Long.toString(history.get(0).version()));
    }
    p.put("location", plan.tableUri());
    p.put("provider", CdcSinkProvider.SHORT_NAME);
    return p;
  }

  @Override
  public Set<TableCapability> capabilities() {
    // MICRO_BATCH_READ only to say what a stream of the table is (CdcSinkScan.toMicroBatchStream)
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
    return new CdcSinkScanBuilder(plan, options, schema);
  }
}
