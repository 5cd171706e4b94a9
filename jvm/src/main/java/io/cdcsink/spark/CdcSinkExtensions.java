package io.cdcsink.spark;

import org.apache.spark.sql.SparkSessionExtensions;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * cdc_sink's SQL extensions: the table-valued function {@code table_changes(table, start [,
 * end])} ({@link TableChanges}), a table's change feed in SQL.
 *
 * <pre>
 * spark.sql.extensions=io.cdcsink.spark.CdcSinkExtensions
 * SELECT * FROM table_changes('cdc.inventory.orders', 5, 9)          -- versions 5..9
 * SELECT * FROM table_changes('/lake/inventory.orders', '2026-12-06 10:00:00')
 * </pre>
 */
public final class CdcSinkExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectTableFunction(TableChanges.description());
    return BoxedUnit.UNIT;
  }
}
