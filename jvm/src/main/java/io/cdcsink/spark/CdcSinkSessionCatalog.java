package io.cdcsink.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.CatalogUtils;
import org.apache.spark.sql.connector.catalog.DelegatingCatalogExtension;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.V1Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark's session catalog with time travel on cdc_sink tables: {@code CREATE TABLE orders USING
 * cdc_sink LOCATION '…'}, then {@code SELECT … FROM orders VERSION AS OF 42} (or {@code TIMESTAMP
 * AS OF}). Spark's own session catalog refuses time travel on every table of a data source; set
 * {@code spark.sql.catalog.spark_catalog=io.cdcsink.spark.CdcSinkSessionCatalog} to have this
 * one answer it, as Delta's {@code DeltaCatalog} does for Delta tables. Every other table, and
 * every other operation, is the session catalog's: this class only resolves the tables whose
 * provider is {@code cdc_sink} through {@link CdcSinkProvider}, at the latest version or the one
 * asked for. (One session catalog extension can be configured: a session that needs Delta's
 * there reads cdc_sink tables by name through {@link CdcSinkCatalog} instead.)
 */
public final class CdcSinkSessionCatalog extends DelegatingCatalogExtension {
  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    Table t = super.loadTable(ident);
    CatalogTable ct = cdcSinkTable(t);
    return ct == null ? t : resolve(ct, Map.of());
  }

  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    CatalogTable ct = cdcSinkTable(super.loadTable(ident));
    if (ct == null) {
      return super.loadTable(ident, version);
    }
    return resolve(ct, Map.of("versionAsOf", version.strip()));
  }

  @Override
  public Table loadTable(Identifier ident, long timestampMicros) throws NoSuchTableException {
    CatalogTable ct = cdcSinkTable(super.loadTable(ident));
    if (ct == null) {
      return super.loadTable(ident, timestampMicros);
    }
    long ms = Math.floorDiv(timestampMicros, 1000L);
    return resolve(ct, Map.of("timestampAsOf", Long.toString(ms)));
  }

  /** The catalog entry of {@code t} when it is a cdc_sink table the session catalog holds. */
  private static CatalogTable cdcSinkTable(Table t) {
    if (!(t instanceof V1Table)) {
      return null;
    }
    CatalogTable ct = ((V1Table) t).v1Table();
    boolean ours = ct.provider().isDefined()
        && CdcSinkProvider.SHORT_NAME.equalsIgnoreCase(ct.provider().get());
    return ours ? ct : null;
  }

  /**
   * The table {@code ct} names read through the connector: its options are the table's
   * properties and storage properties, its location the path (as Spark's session catalog gives
   * a data source), and {@code extra} (the version or timestamp asked for).
   */
  private static Table resolve(CatalogTable ct, Map<String, String> extra) {
    Map<String, String> opts = new HashMap<>();
    opts.putAll(scala.jdk.javaapi.CollectionConverters.asJava(ct.storage().properties()));
    opts.putAll(scala.jdk.javaapi.CollectionConverters.asJava(ct.properties()));
    if (ct.storage().locationUri().isDefined()) {
      opts.put("path", CatalogUtils.URIToString(ct.storage().locationUri().get()));
    }
    opts.putAll(extra);
    CdcSinkProvider provider = new CdcSinkProvider();
    StructType schema = provider.inferSchema(new CaseInsensitiveStringMap(opts));
    return provider.getTable(schema, new Transform[0], opts);
  }
}
