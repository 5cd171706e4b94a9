package io.cdcsink.spark;

import io.cdcsink.format.ChangePlan;
import io.cdcsink.format.ReadPlan;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code spark.read.format("cdc_sink")}: a version of a cdc_sink table, read by this JVM
 * connector (column pruning, columnar batches, time travel with {@code versionAsOf} /
 * {@code timestampAsOf}), or with {@code readChangeFeed=true} its change feed
 * ({@link ChangeFeedOptions}, {@link ChangeFeedTable}).
 *
 * <p>What the connector does not read itself it hands to cdc_sink's Python data source,
 * registered as {@value #PYTHON_SOURCE} by {@code cdc_sink.spark.register(spark)}: a stream of
 * the change feed ({@code spark.readStream} with {@code readChangeFeed}), and tables on a file
 * system Hadoop has no implementation of in this JVM (an {@code s3://} table without S3A on the
 * classpath). Each read logs which reader it took.
 */
public final class CdcSinkProvider implements TableProvider, DataSourceRegister {
  /** The format's short name. */
  public static final String SHORT_NAME = "cdc_sink";
  /** The name cdc_sink's Python data source is registered under beside this connector. */
  public static final String PYTHON_SOURCE = "cdc_sink_python";

  private static final Logger LOG = LoggerFactory.getLogger(CdcSinkProvider.class);

  private PythonDataSourceV2 python;
  private ReadPlan plan;
  private ReadOptions planOptions;
  private ChangePlan feed;
  private Map<String, String> feedOptions;

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    if (delegates(options)) {
      return python().inferSchema(options);
    }
    if (ChangeFeedOptions.wanted(options)) {
      return ChangeFeedTable.schemaOf(feed(options));
    }
    ReadOptions o = ReadOptions.parse(options);
    ReadPlan p = plan(o);
    StructType full = CdcSinkTable.fullSchema(p);
    if (o.columns == null) {
      return full;
    }
    StructType wanted = new StructType();
    for (String c : o.columns) {
      if (!full.getFieldIndex(c).isDefined()) {
        throw new IllegalArgumentException("cdc_sink: no column '" + c + "' at version "
            + p.version() + " (columns: " + String.join(", ", full.fieldNames()) + ")");
      }
      wanted = wanted.add(full.apply(c));
    }
    return wanted;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(properties);
    if (delegates(options)) {
      return python().getTable(schema, partitioning, properties);
    }
    if (ChangeFeedOptions.wanted(options)) {
      ChangeFeedTable t = ChangeFeedTable.withGivenSchema(feed(options), ChangeFeedOptions.parse(options),
          schema, SparkHadoop.sessionConf());
      LOG.info("cdc_sink: reading the changes of {} versions {}..{} through the JVM connector",
          t.tableUri(), t.plan().start() + 1, t.plan().end());
      return t;
    }
    ReadOptions o = ReadOptions.parse(options);
    ReadPlan p = plan(o);
    StructType read = CdcSinkTable.select(CdcSinkTable.fullSchema(p), schema, p.version());
    LOG.info("cdc_sink: reading {} version {} through the JVM connector", p.tableUri(), p.version());
    return new CdcSinkTable(p.tableUri(), p, o, read);
  }

  /** The plan of {@code o}, resolved once per instance (Spark asks for the schema first). */
  private ReadPlan plan(ReadOptions o) {
    if (plan == null || !o.toString().equals(planOptions.toString())) {
      plan = SparkHadoop.resolve(o, SparkHadoop.sessionConf());
      planOptions = o;
    }
    return plan;
  }

  /** The change-feed plan of {@code options}, resolved once per instance. */
  private ChangePlan feed(CaseInsensitiveStringMap options) {
    Map<String, String> given = options.asCaseSensitiveMap();
    if (feed == null || !given.equals(feedOptions)) {
      feed = ChangeFeedTable.resolve(ChangeFeedOptions.parse(options), SparkHadoop.sessionConf());
      feedOptions = Map.copyOf(given);
    }
    return feed;
  }

  /** Whether the Python data source reads this (and logs why). */
  private boolean delegates(CaseInsensitiveStringMap options) {
    String why = null;
    boolean changes = ChangeFeedOptions.wanted(options);
    if (changes && streaming()) {
      why = "a stream of the change feed";
    } else {
      ReadOptions o = changes ? ChangeFeedOptions.parse(options).table : ReadOptions.parse(options);
      Configuration conf = o.hadoopConf(SparkHadoop.sessionConf());
      if (!o.readableByHadoop(conf)) {
        why = "no Hadoop file system for " + o.path.substring(0, Math.max(0, o.path.indexOf(':')))
            + ":// in this JVM";
      }
    }
    if (why != null && python == null) {
      LOG.info("cdc_sink: reading through the Python data source {} ({})", PYTHON_SOURCE, why);
    }
    return why != null;
  }

  /**
   * Whether Spark asks for the table of a stream ({@code spark.readStream}): a provider is not
   * told, so the caller is looked for on this thread's stack.
   */
  private static boolean streaming() {
    return StackWalker.getInstance().walk(frames -> frames.anyMatch(
        f -> f.getClassName().endsWith(".DataStreamReader")));
  }

  private PythonDataSourceV2 python() {
    if (python == null) {
      var active = org.apache.spark.sql.SparkSession.active();
      if (active instanceof org.apache.spark.sql.classic.SparkSession classic
          && !classic.sessionState().dataSourceManager().dataSourceExists(PYTHON_SOURCE)) {
        throw new IllegalStateException("cdc_sink: this read needs cdc_sink's Python data source"
            + " (a stream of the change feed, or a file system this JVM has no Hadoop implementation of):"
            + " call cdc_sink.spark.register(spark) first");
      }
      python = new PythonDataSourceV2();
      python.setShortName(PYTHON_SOURCE);
    }
    return python;
  }
}
