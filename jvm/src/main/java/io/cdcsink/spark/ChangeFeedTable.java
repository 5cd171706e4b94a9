package io.cdcsink.spark;

import io.cdcsink.format.CdcSinkFormatException;
import io.cdcsink.format.ChangePlan;
import io.cdcsink.format.Column;
import io.cdcsink.format.ReadPlan;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.util.SerializableConfiguration;

/**
 * A change-feed read ({@code readChangeFeed=true}) of a cdc_sink table: the change records of a
 * range fixed on the driver ({@link ChangePlan}), one columnar partition per bucket. The
 * records and their schema are {@code Table.changes}': the columns (keys first), the
 * {@code _set_<column>} masks of a {@code setColumnsOnly} read, then {@code _change_type},
 * {@code _commit_version} and {@code _commit_timestamp}.
 */
public final class ChangeFeedTable implements SupportsRead {
  /** The columns every change record carries after the table's. */
  static final List<String> META_COLUMNS =
      List.of("_change_type", "_commit_version", "_commit_timestamp");

  private final ChangePlan plan;
  private final ChangeFeedOptions options;
  private final StructType schema;
  /** Why a scan of this table is refused (a given schema that is not the feed's), or null. */
  private String refusal;

  ChangeFeedTable(ChangePlan plan, ChangeFeedOptions options, StructType schema) {
    this.plan = plan;
    this.options = options;
    this.schema = schema;
  }

  /** The Spark schema of {@code plan}'s records. */
  public static StructType schemaOf(ChangePlan plan) {
    return ArrowUtils.fromArrowSchema(plan.arrowSchema());
  }

  /**
   * The read of {@code options} with the schema a user gave to {@code spark.read}, as the
   * Python source's {@code resolve_given_feed}: without the {@code columns} option the given
   * schema's value columns are read; the schema must otherwise be the change feed's.
   *
   * <p>Schemas that differ are refused when a query plans its scan (an
   * {@link IllegalArgumentException} naming every field that differs), as the Python source
   * refuses them.
   */
  static ChangeFeedTable withGivenSchema(ChangePlan plan, ChangeFeedOptions options, StructType given,
                                         Configuration base) {
    StructType feed = schemaOf(plan);
    if (given.equals(feed)) {
      return new ChangeFeedTable(plan, options, feed);
    }
    ChangePlan read = plan;
    ChangeFeedOptions used = options;
    if (options.columns == null) {
      used = options.withColumns(givenColumns(plan, options, given, base));
      read = resolve(used, base);
      feed = schemaOf(read);
    }
    List<String> diffs = differences(given, feed);
    ChangeFeedTable table = new ChangeFeedTable(read, used, given); // nullability as declared
    if (!diffs.isEmpty()) { // refused when a query plans its scan, as the Python source does
      table.refusal = "cdc_sink: the schema given to spark.read is not the"
          + " change feed's of " + options.table.path + " (versions " + (read.start() + 1) + ".."
          + read.end() + ", columns " + (used.columns == null ? "all" : pyList(used.columns))
          + (used.setColumnsOnly ? ", setColumnsOnly" : "") + "): " + String.join("; ", diffs)
          + ". The change feed's schema: " + feed.simpleString();
    }
    return table;
  }

  /** {@code options}' plan; a format error as an unchecked exception. */
  static ChangePlan resolve(ChangeFeedOptions options, Configuration base) {
    try {
      return options.resolve(base);
    } catch (CdcSinkFormatException e) {
      throw SparkHadoop.unchecked(e);
    }
  }

  /** The value columns a given schema names: neither key, mask nor metadata, in its order. */
  private static List<String> givenColumns(ChangePlan plan, ChangeFeedOptions options,
                                           StructType given, Configuration base) {
    ReadPlan at = SparkHadoop.resolveAt(options.table, base, plan.end(), null);
    Set<String> names = new HashSet<>();
    Set<String> skip = new HashSet<>(META_COLUMNS);
    for (Column c : at.schema().columns()) {
      names.add(c.name());
      if (c.isKey()) {
        skip.add(c.name());
      }
    }
    List<String> out = new ArrayList<>();
    for (String n : given.fieldNames()) {
      boolean mask = options.setColumnsOnly && n.startsWith("_set_")
          && names.contains(n.substring("_set_".length()));
      if (!skip.contains(n) && names.contains(n) && !mask) {
        out.add(n);
      }
    }
    return out;
  }

  /** What differs between a given schema and the feed's, field by field (the Python source's words). */
  static List<String> differences(StructType given, StructType feed) {
    Map<String, StructField> have = new HashMap<>();
    for (StructField f : given.fields()) {
      have.put(f.name(), f);
    }
    Set<String> want = new HashSet<>(Arrays.asList(feed.fieldNames()));
    List<String> out = new ArrayList<>();
    for (String n : feed.fieldNames()) {
      if (!have.containsKey(n)) {
        out.add(ChangeFeedOptions.repr(n) + " is missing");
      }
    }
    for (String n : given.fieldNames()) {
      if (!want.contains(n)) {
        out.add(ChangeFeedOptions.repr(n) + " is not in the change feed");
      }
    }
    for (StructField f : feed.fields()) {
      StructField g = have.get(f.name());
      if (g == null) {
        continue;
      }
      if (!g.dataType().equals(f.dataType())) {
        out.add(ChangeFeedOptions.repr(f.name()) + " is " + g.dataType().simpleString()
            + ", the feed's is " + f.dataType().simpleString());
      } else if (f.nullable() && !g.nullable()) {
        out.add(ChangeFeedOptions.repr(f.name()) + " is declared not null, the feed's is nullable");
      }
    }
    if (out.isEmpty() && !Arrays.equals(given.fieldNames(), feed.fieldNames())) {
      out.add("the fields are in another order (the feed's: " + pyList(Arrays.asList(feed.fieldNames())) + ")");
    }
    return out;
  }

  private static String pyList(List<String> names) {
    return names.stream().map(ChangeFeedOptions::repr).collect(Collectors.joining(", ", "[", "]"));
  }

  /** The URI of the table whose changes these are. */
  public String tableUri() {
    return options.table.path;
  }

  /** The plan this table reads. */
  public ChangePlan plan() {
    return plan;
  }

  @Override
  public String name() {
    return "cdc_sink changes of " + options.table.path;
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Map<String, String> properties() {
    return Map.of("location", options.table.path, "provider", CdcSinkProvider.SHORT_NAME,
        "cdc_sink.changes.start", Long.toString(plan.start()),
        "cdc_sink.changes.end", Long.toString(plan.end()));
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
    if (refusal != null) {
      throw new IllegalArgumentException(refusal);
    }
    return new Builder();
  }

  /** Hands Spark only the columns a query needs (the records are those of all the columns). */
  private final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns {
    private StructType read = schema;

    @Override
    public void pruneColumns(StructType required) {
      Set<String> wanted = new HashSet<>(Arrays.asList(required.fieldNames()));
      StructType out = new StructType();
      for (StructField f : schema.fields()) {
        if (wanted.contains(f.name())) {
          out = out.add(f);
        }
      }
      read = out;
    }

    @Override
    public Scan build() {
      return new ChangeFeedScan(read);
    }
  }

  private final class ChangeFeedScan implements Scan, Batch {
    private final StructType read;

    ChangeFeedScan(StructType read) {
      this.read = read;
    }

    @Override
    public StructType readSchema() {
      return read;
    }

    @Override
    public String description() {
      return "cdc_sink changes of " + options.table.path + " versions " + (plan.start() + 1)
          + ".." + plan.end() + (options.setColumnsOnly ? " setColumnsOnly" : "") + " columns "
          + Arrays.toString(read.fieldNames());
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      InputPartition[] parts = new InputPartition[plan.numBuckets()];
      for (int b = 0; b < parts.length; b++) {
        parts[b] = new ChangeFeedPartition(plan.bucket(b));
      }
      return parts;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      Broadcast<SerializableConfiguration> conf = SerializableConfiguration.broadcast(
          SparkSession.active().sparkContext(), options.table.hadoopConf(SparkHadoop.sessionConf()));
      return new BucketReaderFactory(conf, Arrays.asList(read.fieldNames()), null, List.of());
    }
  }
}
