package io.cdcsink.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.CatalogManager;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Option;
import scala.Tuple3;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * The SQL table-valued function {@code table_changes(table, start [, end])}: a cdc_sink table's
 * change feed, with Delta's argument semantics. {@code table} is a string: a table name as SQL
 * names it ({@code cat.db.orders}, resolved through the session's catalogs: a
 * {@link CdcSinkCatalog} table, or a session-catalog table created {@code USING cdc_sink}) or
 * the table's path or URL (it holds a {@code /}). {@code start} and {@code end} (default: the
 * latest version) are both inclusive: an integer is a version, a string or a timestamp a time
 * (the first version committed at or after the start, the last at or before the end). It is
 * the read {@code spark.read.format("cdc_sink").option("readChangeFeed", "true")} makes, with
 * {@code startingVersion}/{@code startingTimestamp} and {@code endingVersion}/
 * {@code endingTimestamp}, through {@link CdcSinkProvider}.
 */
final class TableChanges extends AbstractFunction1<Seq<Expression>, LogicalPlan> {
  /** The function's name. */
  static final String NAME = "table_changes";

  private static final String USAGE = "_FUNC_(table, start[, end]) - the change feed of the"
      + " cdc_sink table `table` (a name or a path) from `start` to `end` (default: the latest"
      + " version), both inclusive: an integer is a version, a string or timestamp a time.";

  /** What {@code SparkSessionExtensions.injectTableFunction} takes. */
  static Tuple3<FunctionIdentifier, ExpressionInfo, scala.Function1<Seq<Expression>, LogicalPlan>>
      description() {
    ExpressionInfo info = new ExpressionInfo(TableChanges.class.getName(), null, NAME, USAGE, "");
    return new Tuple3<>(FunctionIdentifier.apply(NAME), info, new TableChanges());
  }

  @Override
  public LogicalPlan apply(Seq<Expression> arguments) {
    List<Expression> args = CollectionConverters.asJava(arguments);
    if (args.size() < 2 || args.size() > 3) {
      throw new IllegalArgumentException("cdc_sink: " + NAME + " takes a table (a name or a path),"
          + " a start and an optional end (versions or timestamps, both inclusive), not "
          + args.size() + " argument(s)");
    }
    Object table = constant(args.get(0), "table");
    if (!(args.get(0).dataType() instanceof StringType)) {
      throw new IllegalArgumentException("cdc_sink: " + NAME + "'s table is a string (a name or a"
          + " path), not " + args.get(0).dataType().simpleString());
    }
    Map<String, String> options = new HashMap<>(location(table.toString()));
    options.put("readChangeFeed", "true");
    bound(args.get(1), "starting", options);
    if (args.size() == 3) {
      bound(args.get(2), "ending", options);
    }
    return relation(options, Option.empty(), Option.empty());
  }

  /** The read options naming {@code table}'s location: its URI and its Hadoop settings. */
  static Map<String, String> locationOf(CdcSinkTable table) {
    Map<String, String> out = new HashMap<>();
    table.readOptions().hadoop.forEach((k, v) -> out.put("spark.hadoop." + k, v));
    out.put("path", table.plan().tableUri());
    return out;
  }

  /** The change feed {@code options} name, as a relation: read through {@link CdcSinkProvider}. */
  static DataSourceV2Relation relation(Map<String, String> options, Option<CatalogPlugin> catalog,
                                       Option<Identifier> ident) {
    CaseInsensitiveStringMap map = new CaseInsensitiveStringMap(options);
    CdcSinkProvider provider = new CdcSinkProvider();
    StructType schema = provider.inferSchema(map);
    Table t = provider.getTable(schema, new Transform[0], options);
    return DataSourceV2Relation.create(t, catalog, ident, map, Option.empty());
  }

  /** The value of a constant argument. */
  private static Object constant(Expression e, String what) {
    if (!e.foldable()) {
      throw new IllegalArgumentException("cdc_sink: " + NAME + "'s " + what
          + " must be a constant, not " + e.sql());
    }
    Object v = e.eval(null);
    if (v == null) {
      throw new IllegalArgumentException("cdc_sink: " + NAME + "'s " + what + " is null");
    }
    return v;
  }

  /** Sets the {@code which}Version or {@code which}Timestamp option an argument names. */
  private static void bound(Expression e, String which, Map<String, String> options) {
    Object v = constant(e, which.equals("starting") ? "start" : "end");
    DataType t = e.dataType();
    if (t instanceof IntegerType || t instanceof LongType || t instanceof ShortType
        || t instanceof ByteType) {
      options.put(which + "Version", Long.toString(((Number) v).longValue()));
    } else if (t instanceof StringType) {
      options.put(which + "Timestamp", v.toString());
    } else if (t instanceof TimestampType || t instanceof TimestampNTZType) { // micros, UTC
      options.put(which + "Timestamp", Long.toString(Math.floorDiv((Long) v, 1000L)));
    } else {
      throw new IllegalArgumentException("cdc_sink: " + NAME + "'s "
          + (which.equals("starting") ? "start" : "end") + " is a version (an integer) or a time"
          + " (a string or a timestamp), not " + t.simpleString());
    }
  }

  /**
   * The read options naming {@code table}'s location: a path as it is, a name's table as its
   * catalog reads it (its URI and the catalog's Hadoop settings).
   */
  private static Map<String, String> location(String table) {
    if (table.contains("/")) {
      return Map.of("path", table);
    }
    var active = SparkSession.active();
    if (!(active instanceof org.apache.spark.sql.classic.SparkSession classic)) {
      throw new IllegalStateException("cdc_sink: " + NAME + " needs a classic Spark session");
    }
    List<String> parts;
    try {
      parts = new ArrayList<>(CollectionConverters.asJava(
          classic.sessionState().sqlParser().parseMultipartIdentifier(table)));
    } catch (Exception e) {
      throw new IllegalArgumentException("cdc_sink: " + NAME + ": '" + table
          + "' is neither a table name nor a path (" + e.getMessage() + ")", e);
    }
    CatalogManager catalogs = classic.sessionState().catalogManager();
    CatalogPlugin catalog;
    if (parts.size() > 1 && catalogs.isCatalogRegistered(parts.get(0))) {
      catalog = catalogs.catalog(parts.remove(0));
    } else {
      catalog = catalogs.currentCatalog();
    }
    String[] namespace = parts.size() == 1 ? catalogs.currentNamespace()
        : parts.subList(0, parts.size() - 1).toArray(new String[0]);
    Identifier ident = Identifier.of(namespace, parts.get(parts.size() - 1));
    if (!(catalog instanceof TableCatalog tables)) {
      throw new IllegalArgumentException("cdc_sink: " + NAME + ": catalog " + catalog.name()
          + " has no tables");
    }
    Table t;
    try {
      t = tables.loadTable(ident);
    } catch (NoSuchTableException e) {
      throw new IllegalArgumentException("cdc_sink: " + NAME + ": no table " + table
          + " (in catalog " + catalog.name() + ", namespace "
          + String.join(".", Arrays.asList(namespace)) + ")", e);
    }
    if (t instanceof CdcSinkTable cdc) {
      return locationOf(cdc);
    }
    Map<String, String> props = t.properties();
    String provider = props.get(TableCatalog.PROP_PROVIDER);
    String where = props.get(TableCatalog.PROP_LOCATION);
    if (provider != null && where != null
        && provider.toLowerCase(Locale.ROOT).equals(CdcSinkProvider.SHORT_NAME)) {
      return Map.of("path", where);
    }
    throw new IllegalArgumentException("cdc_sink: " + NAME + ": " + table
        + " is not a cdc_sink table (provider " + provider + ")");
  }
}
